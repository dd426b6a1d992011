"""Decision container: a SemIf-compatible SageMaker inference server on llama-cpp-python."""
