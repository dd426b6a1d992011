"""Decision Router's Lambda library, shared by the handlers in functions/<function>/app.py.

- `domain`: items, policies, heads, rules, judging, records and routing; pure code.
- `sources`: every source of items, ticket webhooks and native incident sources alike, one
  module each (its event's model, its evidence, its severity mapping), in one declared table.
- `intake`: the flows that take items in (ticket queue, incident bus, webhooks) and route them.
- `review`: completing reviews and the review console's views.
- `adapters`: the only modules that talk to AWS (boto3).
- `config`: the functions' settings from their environment; `severity` (an incident's scale and
  the policy's table that maps a source's label to it) and `validation` (errors in words), which
  the domain and the sources share.
"""
