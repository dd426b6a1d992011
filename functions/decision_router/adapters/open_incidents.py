"""The open-incident store (DynamoDB, keyed by the source's correlation key): which native-source
incidents are open, so a re-delivery is routed once, a new event of an open incident updates it
instead of paging again, and a resolution closes it. `OpenIncidents` is every store of the table at
once, one per concern (each implements the port of the same concern, domain/ports/incidents.py):

- `IncidentRowStore` (incident_rows.py): one row per key: status open|resolved, the delivery
  (EventBridge event id) that opened it, whether that opening was routed (and by which execution),
  every delivery seen while open, the update count, the recent openings (`opens`, for flapping) and
  the resolution; the incident's `service`, `reported_at`, `title` and `description` (bounded), so
  a ticket can be linked to it (rows claimed before these were kept have neither and are never
  linked). A flap (ALARM, OK, ALARM) reopens the row as a new incident.
- `IncidentHoldStore` (incident_holds.py): an opening held by a noise control (`held`: grouped,
  flapping, in a maintenance window), and a window's hold released once it ended.
- `IncidentGroupStore` (incident_groups.py): a group of incidents (grouping) has a row of its own,
  keyed `group#<rule>#<digest>`: its leader (the routed incident), its members and those still open.
- `IncidentParentStore` (incident_parents.py): a slot of the dependencies (`parent#...`,
  domain/dependencies.py) has a row of its own: the paged incidents registered in it; an incident
  held under a parent is listed on the parent's row and names it.
- `LinkIndexStore` (link_index.py): the open incidents filed by name and word, read by key.

The stores only keep rows (get, put, conditional put, update, delete, query); the rules over them
(a claim that lost its put, joining and leaving a group) are domain/open_incidents.py's. The open
incidents are read through a sparse, sharded index, never a Scan (incident_table.py). A resolved
row (an incident's or a group's) gets `expires_at` (epoch seconds, `retention_days` on): the
table's TTL removes it then.
"""

from __future__ import annotations

from .incident_groups import IncidentGroupStore
from .incident_holds import IncidentHoldStore
from .incident_parents import IncidentParentStore
from .incident_rows import IncidentRowStore
from .link_index import LinkIndexStore


class OpenIncidents(IncidentRowStore, IncidentHoldStore, IncidentGroupStore, IncidentParentStore, LinkIndexStore):
    """Every store of the open-incident table over one client (port `OpenIncidentStore`)."""
