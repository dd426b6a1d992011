"""Operator command-line tools over a deployed stack (not shipped in the Lambda functions):
`python -m ops.redrive` re-routes what the dead-letter queues hold, `python -m ops.review_cli`
lists, shows and completes pending reviews and exports labelled examples; `make preflight`,
`make erase`, `make replay`, `make rollback` and `make backfill-audit-shards` run the others.
Each starts and ends as `ops.command` says: parse, resolve, run, exit 0, 1 (work left) or 2 (bad input)."""
