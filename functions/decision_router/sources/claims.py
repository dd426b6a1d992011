"""Who may say what about where a ticket comes from. A ticket's `reference.system` is what the
write-back rules act on (template.yaml's ZendeskWriteBackRule writes a note on the Zendesk ticket
`reference.id` names), and its `ticket_id` prefix (`zendesk-`, `jira-`) is how people read where
it came from. So each system belongs to the one webhook source that verifies that system's own
signature; a source that owns none (the generic webhook) may name any other system, but never one
of these. A ticket that claims a system its source does not own is parked with the reason.
"""

from __future__ import annotations

from ..items import Ticket
from . import generic, grafana, jira, pagerduty, zendesk

#: system → the only webhook source whose tickets may name it (as `reference.system` or as the
#: `<system>-` prefix of `ticket_id`).
SYSTEM_OWNERS: dict[str, str] = {
    zendesk.NAME: zendesk.NAME, jira.NAME: jira.NAME,
    pagerduty.SOURCE: pagerduty.SOURCE, grafana.SOURCE: grafana.SOURCE,
}

#: The write-back policy: system → the webhook sources whose routed tickets may be written back
#: to it. The template's write-back rules match `reference.system`, which only the owner can set.
WRITE_BACK: dict[str, tuple[str, ...]] = {zendesk.NAME: (zendesk.NAME,)}
#: The sources that own no system (and so may name none of the above).
UNOWNED = (generic.NAME,)


def claim_problem(source: str, ticket: Ticket) -> str | None:
    """Why the ticket a `source` webhook mapped claims another source's identity, or None."""
    system = ticket.reference.system if ticket.reference is not None else None
    if system is not None:
        owner = SYSTEM_OWNERS.get(system.strip().casefold())
        if owner is not None and owner != source:
            return f"reference.system {system[:40]!r} belongs to the {owner} webhook; the {source} webhook may not name it"
    ticket_id = ticket.ticket_id
    if ticket_id:
        prefix = ticket_id.strip().casefold().partition("-")[0]
        owner = SYSTEM_OWNERS.get(prefix) if "-" in ticket_id else None
        if owner is not None and owner != source:
            return f"ticket_id {ticket_id[:40]!r}: the {prefix}- prefix belongs to the {owner} webhook"
    return None


def may_write_back(source: str, system: str) -> bool:
    return source in WRITE_BACK.get(system, ())
