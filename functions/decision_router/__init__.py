"""Decision Router's Lambda library, shared by the handlers in functions/<function>/app.py.

- `items` and `evidence`: the items the pipeline routes, and what an incident's native source
  says beside it (each source's model, in one union); both stand on the ground floor.
- `domain`: policies, heads, rules, judging, records and routing; pure code.
- `sources`: every source of items, ticket webhooks and native incident sources alike, one
  module each (its event's model, its severity mapping), in one declared table.
- `intake`: the flows that take items in (ticket queue, incident bus, webhooks) and route them.
- `review`: completing reviews and the review console's views.
- `adapters`: the only modules that talk to AWS (boto3).
- `config`: the functions' settings from their environment; `severity` (an incident's scale and
  the policy's table that maps a source's label to it) and `validation` (errors in words), which
  the domain and the sources share.
"""
