"""The intake flows behind the Lambda handlers: the one every item goes through (`pipeline`:
parse, judge once per item key, start the workflow), the ticket queue's (`tickets`), the
incident bus's (`incidents`) and the ticket webhooks' (`webhooks`). Clients come from the
adapters, built on first use."""
