"""Duplicates linked: a ticket that describes an open incident is linked to it.

The rule (`link_ticket`): a ticket links to an open incident when its subject or body names the
incident's service (the `Incident.service` field: a whole word, any case; `payments-api` is one
word, so `payments` alone does not name it, nor does `payments-api-v2`) and it was created while
the incident was open: from `LEAD` before the incident was reported (customers often write in
before the alarm fires) until it was resolved (while it is open, without end). When several
incidents match, the one reported last wins (ties: the greatest incident id, so the answer never
depends on the store's order).

`suggestion` is the other side: once an incident's review is answered, the team its reviewer
chose is offered on its linked tickets still in review, as a suggestion only (never applied).
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Iterable, Mapping, Sequence

from pydantic import BaseModel, ConfigDict, Field

from ..items import Ticket, UtcDatetime, item_ref

#: How long before an incident was reported a ticket about its service still counts as about it.
LEAD = timedelta(minutes=15)
#: Services shorter than this are not matched (a service named `db` or `ui` would link any ticket).
MIN_SERVICE_LENGTH = 3
#: The incident policy's question whose answer is a team.
TEAM_QUESTION = "team"


class OpenIncident(BaseModel):
    """An incident of the open-incident store, as the matching rule reads it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    key: str = Field(description="The source's correlation key (the store's partition key).")
    incident_id: str
    service: str
    opened_at: UtcDatetime = Field(description="When the incident was reported (its `reported_at`).")
    resolved_at: UtcDatetime | None = None
    source: str | None = Field(None, description="The incident's source (its item's): with its id, which incident it is.")


class LinkedIncident(BaseModel):
    """The incident a ticket is linked to, and why: kept on the ticket's decision record and audit row."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    incident_key: str
    incident_id: str
    service: str
    opened_at: str = Field(description="When the incident was reported (ISO 8601).")
    why: str = Field(description="Which field named the service, and the time that made it count.")
    source: str | None = Field(None, description=(
        "The incident's source: with its id, which incident it is (None on links made before it was kept)."))

    def ref(self) -> str | None:
        """The incident's identity (`items.item_ref`); None on a link made before its source was kept."""
        return item_ref("incident", self.source, self.incident_id) if self.source else None

    def names(self, incident_ref: str | None, incident_id: str) -> bool:
        """Whether the link is to this incident: its identity when both are known, else its id."""
        mine = self.ref()
        return mine == incident_ref if mine is not None and incident_ref is not None else self.incident_id == incident_id

    def line(self) -> str:
        """One line, as the console and the decision's reason show it."""
        return f"linked to incident {self.incident_id} ({self.service}, opened at {self.opened_at})"


def service_pattern(service: str) -> re.Pattern[str] | None:
    """The service's name as a whole word, any case: not inside a longer name (letters, digits,
    `-`, `_` and `.` between words continue a name: `payments-api` is not named by
    `payments-api-v2` nor by `my.payments-api`). None for a name too short to mean anything."""
    name = service.strip()
    if len(name) < MIN_SERVICE_LENGTH:
        return None
    return re.compile(rf"(?<![\w.-]){re.escape(name)}(?![\w-]|\.\w)", re.IGNORECASE)


def _named_in(ticket: Ticket, pattern: re.Pattern[str]) -> str | None:
    for field in ("subject", "body"):
        if pattern.search(getattr(ticket, field)):
            return field
    return None


def _during(created: datetime, incident: OpenIncident) -> bool:
    return incident.opened_at - LEAD <= created and (incident.resolved_at is None or created <= incident.resolved_at)


def link_ticket(ticket: Ticket, incidents: Iterable[OpenIncident]) -> LinkedIncident | None:
    """The open incident `ticket` describes, or None (see the module's rule)."""
    matches: list[tuple[OpenIncident, str]] = []
    for incident in incidents:
        pattern = service_pattern(incident.service)
        field = _named_in(ticket, pattern) if pattern is not None else None
        if field is not None and _during(ticket.created_at, incident):
            matches.append((incident, field))
    if not matches:
        return None
    incident, field = max(matches, key=lambda match: (match[0].opened_at, match[0].incident_id))
    opened = incident.opened_at.isoformat().replace("+00:00", "Z")
    window = "before it was reported (within the lead)" if ticket.created_at < incident.opened_at else "while it was open"
    others = f"; the latest of {len(matches)} matching incidents" if len(matches) > 1 else ""
    return LinkedIncident(incident_key=incident.key, incident_id=incident.incident_id, service=incident.service,
                          opened_at=opened, source=incident.source,
                          why=f"the ticket's {field} names {incident.service!r} and it was created {window}{others}")


class Suggestion(BaseModel):
    """A team suggested for a linked ticket in review by its incident's answered review."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    incident_id: str
    team: str = Field(description="The team the incident's reviewer chose.")
    question: str | None = Field(description="The ticket's question offering that team as an option (None: none does).")
    option: str | None = Field(description="That option, to preselect only if the reviewer wants it.")

    def line(self) -> str:
        offered = f" ({self.question}: {self.option})" if self.question else " (no option of the ticket's questions)"
        return f"incident {self.incident_id} was answered with team {self.team}: suggested{offered}, not applied"


def suggestion(incident_id: str, answers: Mapping[str, str] | None,
               questions: Sequence[tuple[str, Sequence[str]]]) -> Suggestion | None:
    """The team the incident's reviewer chose (`answers`: its review's answers), as a suggestion
    for a linked ticket whose policy asks `questions` (id, option ids): the first question that
    offers that team as an option carries it. None when the review gave no team."""
    team = (answers or {}).get(TEAM_QUESTION)
    if not team:
        return None
    for question, options in questions:
        if team in options:
            return Suggestion(incident_id=incident_id, team=team, question=question, option=team)
    return Suggestion(incident_id=incident_id, team=team, question=None, option=None)
