"""Every source of items, in one declared table: the ticket webhooks (Zendesk, Jira, a generic
JSON webhook) and the native incident sources (CloudWatch alarms on EventBridge, through SNS and
as a Lambda alarm action; AWS Health; GuardDuty; Security Hub's ASFF and OCSF feeds; PagerDuty on
its partner bus and by webhook; Grafana alerting by webhook). Pure code, no AWS.

Each source is one module: the models of its event (unknown fields ignored: sources add fields
over time), its evidence (incident sources) and its severity mapping, and one `TICKET_SOURCE` or
`INCIDENT_SOURCE` entry that this table lists. What they share lives in `webhook` (tickets) and
`events` (incidents); an incident source's evidence model stands on the ground floor, in the
incidents' `Evidence` union (decision_router.evidence), so that `Incident` needs no source. A new
source is a module here, a line below, its template rule and a sample event:
docs/sources/add-a-source.md (tests/functions/test_source_registry.py holds every source in the
tables to it).

An incident event of a kind no source maps raises `UnknownEvent`; one that misses a field the
mapping needs raises `InvalidSourceEvent` naming the fields. The intake parks both in its DLQ
with that reason (decision_router.intake.incidents); nothing is dropped.
"""

from __future__ import annotations

from typing import Any

from . import (
    cloudwatch,
    cloudwatch_action,
    cloudwatch_sns,
    generic,
    grafana,
    guardduty,
    health,
    jira,
    pagerduty,
    pagerduty_webhook,
    securityhub,
    securityhub_ocsf,
    sns,
    zendesk,
)
from .events import AnyEnvelope, Envelope, IncidentSource, SourceEvent, UnknownEvent, read_envelope
from .webhook import IncidentWebhook, TicketSource

#: The ticket webhooks, by the name in their route (POST /webhooks/{source}).
TICKET_SOURCES: dict[str, TicketSource] = {s.name: s for s in (zendesk.TICKET_SOURCE, jira.TICKET_SOURCE,
                                                                generic.TICKET_SOURCE)}

#: The incident webhooks on the same route: verified, then forwarded to the bus (not tickets).
INCIDENT_WEBHOOKS: dict[str, IncidentWebhook] = {w.name: w for w in (pagerduty_webhook.WEBHOOK, grafana.WEBHOOK)}

#: The native incident sources, each reading the payloads that are its own (`IncidentSource.read`), in this order.
INCIDENT_SOURCES: tuple[IncidentSource[Any], ...] = (
    cloudwatch.INCIDENT_SOURCE, cloudwatch_sns.INCIDENT_SOURCE, cloudwatch_action.INCIDENT_SOURCE,
    health.INCIDENT_SOURCE, guardduty.INCIDENT_SOURCE, securityhub.INCIDENT_SOURCE, securityhub_ocsf.INCIDENT_SOURCE,
    pagerduty.INCIDENT_SOURCE, pagerduty_webhook.INCIDENT_SOURCE, grafana.INCIDENT_SOURCE,
)


def known_kinds() -> list[str]:
    return [source.kind for source in INCIDENT_SOURCES]


def raw_events(payload: Any) -> list[Any]:
    """The deliveries one invocation carries: each record of a Lambda SNS event as a one-record
    event of its own (each is a notification, parked or routed alone); any other payload as it is."""
    records = payload.get("Records") if isinstance(payload, dict) else None
    if isinstance(records, list) and records and all(sns.is_sns_record(r) for r in records):
        return [{"Records": [record]} for record in records]
    return [payload]


def read_event(event: Any) -> tuple[IncidentSource[Any], SourceEvent] | tuple[None, Envelope[Any]]:
    """The event validated once: as its source's event when a source reads it (an EventBridge
    event by its `source` and `detail-type`; an SNS notification or a Lambda alarm action by its
    shape), else as an envelope whose detail is not read yet (None for the source).
    SourceEventError names what is wrong."""
    for source in INCIDENT_SOURCES:
        read = source.read(event)
        if read is not None:
            return source, read
    return None, read_envelope(AnyEnvelope, event)


def unknown(event: SourceEvent, *also: str) -> UnknownEvent:
    """The refusal of an event no source maps (`also`: the kinds the intake maps itself)."""
    mapped = ", ".join(known_kinds())
    extra = "".join(f", and {kind!r}" for kind in also)
    return UnknownEvent(f"source {event.source!r} detail-type {event.detail_type!r} is not an incident "
                    f"event this intake maps (it maps: {mapped}{extra})")
