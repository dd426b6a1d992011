"""Grafana alerting webhooks, as the webhook API forwards them once verified: on the decision
bus, source `decision-router.webhooks`, detail-type `Grafana Alerting Webhook`, the detail
Grafana's whole POST (`receiver, status, alerts[], groupKey, commonLabels, ...`). One POST
carries every alert of a notification group, firing and resolved together.

By default (`correlate_by: alert` in the policy's `grafana` table) each alert is an incident of
its own, keyed by its `fingerprint` (stable for the alert's label set): a firing alert opens or
updates it, a resolved one resolves it. With `correlate_by: group`, the group is one incident,
keyed by `groupKey`: firing while any alert fires, resolved when the POST says the whole group
is (`status: resolved`). The table maps the alerts' `severity` label.

The webhook API's half (`WEBHOOK`, Grafana 12.0+ with HMAC signing configured on the webhook
contact point): `X-Grafana-Alerting-Signature`, lowercase-hex HMAC-SHA256 of
"<unix seconds>:<body>", the time in X-Grafana-Alerting-Signature-Timestamp (set it as the
contact point's timestamp header), checked like any other signed time. A request without that
header is refused (401) even when its signature of the body alone is right: such a signature
carries no time, so a captured request would verify for ever, and once the delivery record's
row has expired it would be forwarded again (a stale "resolved" resolving a reopened incident).
An unsigned Grafana request is refused like any other: configure the HMAC secret.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal, Mapping

from pydantic import Field

from ..evidence import GrafanaEvidence
from ..severity import SeverityTable
from .events import (
    Envelope,
    EventBridgeSource,
    Opened,
    Resolved,
    SourceModel,
    SourceOutcome,
    build_evidence,
    build_incident,
    incident_id,
    text,
)
from .webhook import FORWARDED_SOURCE, IncidentWebhook, Unauthorized, check_time, header, hmac_sha256, same, unix_time

SOURCE = "grafana"
DETAIL_TYPE = "Grafana Alerting Webhook"
GRAFANA_SIGNATURE = "X-Grafana-Alerting-Signature"
GRAFANA_TIMESTAMP = "X-Grafana-Alerting-Signature-Timestamp"


#: Labels that name the failing service, in the order tried (else the alert's name).
SERVICE_LABELS = ("service", "service_name", "app", "job", "namespace")


class Alert(SourceModel):
    status: Literal["firing", "resolved"]
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    startsAt: datetime
    endsAt: datetime | None = None
    fingerprint: str = Field(min_length=1)
    generatorURL: str | None = None
    values: dict[str, float] | None = None


class Notification(SourceModel):
    receiver: str = ""
    status: Literal["firing", "resolved"]
    alerts: list[Alert] = Field(min_length=1)
    groupKey: str = Field(min_length=1)
    commonLabels: dict[str, str] = {}
    externalURL: str | None = None
    title: str | None = None


def key_of(fingerprint: str) -> str:
    return f"grafana:{fingerprint}"


def _labels(labels: dict[str, str]) -> str | None:
    return ", ".join(f"{k}={v}" for k, v in sorted(labels.items())) or None


def _service(labels: dict[str, str]) -> str:
    return next((labels[n] for n in SERVICE_LABELS if labels.get(n)), labels.get("alertname") or "grafana")[:200]


def _alert(alert: Alert, envelope: Envelope[Notification], table: SeverityTable) -> SourceOutcome:
    key = key_of(alert.fingerprint)
    name = alert.labels.get("alertname") or "Grafana alert"
    if alert.status == "resolved":
        return Resolved(key, SOURCE, f"Grafana alert {name} ({alert.fingerprint}) is resolved")
    label = alert.labels.get("severity")
    values = ", ".join(f"{k}={v:g}" for k, v in (alert.values or {}).items())
    incident = build_incident(
        envelope, incident_id=incident_id(key),
        title=(alert.annotations.get("summary") or f"Grafana alert {name} is firing")[:300],
        description=text(alert.annotations.get("description"), alert.annotations.get("summary"),
                         f"Alert {name}: {_labels(alert.labels)}", f"Values {values}" if values else None,
                         f"Runbook {alert.annotations['runbook_url']}" if alert.annotations.get("runbook_url") else None),
        service=_service(alert.labels),
        severity=table.severity(label),
        source=SOURCE,
        reported_at=alert.startsAt,
        evidence=build_evidence(
            GrafanaEvidence, envelope, source_ref=key, source_url=alert.generatorURL or None, source_severity=label,
            alertname=name, labels=_labels(alert.labels), group_key=envelope.detail.groupKey[:1000],
            receiver=envelope.detail.receiver or None),
    )
    return Opened(key, incident)


def _group(envelope: Envelope[Notification], table: SeverityTable) -> SourceOutcome:
    group = envelope.detail
    key = f"grafana-group:{group.groupKey}"
    common = group.commonLabels
    firing = [a for a in group.alerts if a.status == "firing"]
    name = common.get("alertname") or group.title or "Grafana alert group"
    if group.status == "resolved" or not firing:
        return Resolved(key, SOURCE, f"every alert of Grafana group {group.groupKey} is resolved")
    # The group's common severity, else the worst of its firing alerts'.
    label = common.get("severity") or min((a.labels.get("severity") for a in firing),
                                          key=lambda name: table.severity(name))
    incident = build_incident(
        envelope, incident_id=incident_id(key),
        title=(group.title or f"Grafana: {len(firing)} alert(s) of {name} firing").strip()[:300],
        description=text(*(f"{a.labels.get('alertname', 'alert')}: {a.annotations.get('summary') or _labels(a.labels)}"
                           for a in firing[:20])),
        service=_service(common) if common else _service(firing[0].labels),
        severity=table.severity(label),
        source=SOURCE,
        reported_at=min(a.startsAt for a in firing),
        evidence=build_evidence(
            GrafanaEvidence, envelope, source_ref=key[:200], source_url=group.externalURL or None,
            source_severity=label, alertname=common.get("alertname"), labels=_labels(common),
            group_key=group.groupKey[:1000], receiver=group.receiver or None, alerts=len(group.alerts)),
    )
    return Opened(key, incident)


class GrafanaAlerts(EventBridgeSource[Notification]):
    """Grafana alerting's webhook notifications, forwarded to the bus."""

    name = SOURCE
    event_source = FORWARDED_SOURCE
    detail_type = DETAIL_TYPE
    detail = Notification
    evidence = GrafanaEvidence

    def adapt(self, envelope: Envelope[Notification], table: SeverityTable) -> list[SourceOutcome]:
        if table.correlate_by == "group":
            return [_group(envelope, table)]
        return [_alert(alert, envelope, table) for alert in envelope.detail.alerts]


INCIDENT_SOURCE = GrafanaAlerts()


# ------------------------------------------------------------------ the webhook API's half
class GrafanaWebhook(IncidentWebhook):
    """Grafana alerting's contact point, forwarded to the bus."""

    name = SOURCE
    detail_type = DETAIL_TYPE

    def verify(self, headers: Mapping[str, str], body: bytes, payload: Any, key: bytes, now: datetime,
               max_skew: int) -> bytes:
        signature = header(headers, GRAFANA_SIGNATURE)
        lowered = {k.lower(): v for k, v in headers.items()}
        stamp = str(lowered.get(GRAFANA_TIMESTAMP.lower(), "")).strip()
        if not stamp:
            # A signature of the body alone has no time window: a captured request replays for ever.
            raise Unauthorized(f"missing {GRAFANA_TIMESTAMP} header: a signature without a signed time cannot rule out "
                               "a replay (set it as the contact point's timestamp header)")
        signed = stamp.encode() + b":" + body
        if not same(hmac_sha256(key, signed).hexdigest(), signature):
            raise Unauthorized(f"{GRAFANA_SIGNATURE} does not match the timestamp and body")
        if not stamp.isdigit():
            raise Unauthorized(f"{GRAFANA_TIMESTAMP} is not unix seconds")
        check_time(unix_time(stamp, GRAFANA_TIMESTAMP), now, max_skew)
        return signed

    def sign(self, body: bytes, key: bytes, at: float) -> dict[str, str]:
        """As Grafana signs with a timestamp header configured (the demo's and tests' senders)."""
        stamp = str(int(at))
        return {GRAFANA_SIGNATURE: hmac_sha256(key, stamp.encode() + b":" + body).hexdigest(), GRAFANA_TIMESTAMP: stamp}

    def skipped(self, payload: Any) -> str | None:
        """A notification without alerts is nothing to route."""
        alerts = payload.get("alerts") if isinstance(payload, Mapping) else None
        if not isinstance(alerts, list) or not alerts:
            return "Grafana notification without alerts: nothing to forward"
        return None


WEBHOOK = GrafanaWebhook()
