"""The relearning job and its Lambda function (a container image: scikit-learn, numpy, scipy)."""
