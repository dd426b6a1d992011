"""Operator command-line tools over a deployed stack (not shipped in the Lambda functions):
`python -m ops.redrive` re-routes what the dead-letter queues hold, `python -m ops.review_cli`
lists, shows and completes pending reviews and exports labelled examples."""
