"""Amazon SNS as a way in, read by one model for both intakes: what a Lambda subscription
receives (`{"Records": [{"EventSource": "aws:sns", "Sns": {...}}]}`, the incident intake) and the
bare notification an HTTPS or SQS subscriber gets (`{"Type": "Notification", "TopicArn",
"MessageId", "Message", ...}`, the ticket queue without raw message delivery). The notification's
`Message` is a string the source it carries reads (a ticket, a CloudWatch alarm). Pure code, no AWS.

Only the fields read are declared: the published samples fill the URL and signature fields with
"EXAMPLE", and nothing here checks them (Powertools' `SnsNotificationModel` requires URLs there).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError


class SnsNotification(BaseModel):
    """One SNS notification (the Lambda record's `Sns`, or the bare one)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    Type: Literal["Notification"] = "Notification"
    MessageId: str
    TopicArn: str
    Message: str
    Subject: str | None = None
    Timestamp: str | None = None


def is_sns_record(record: Any) -> bool:
    return isinstance(record, dict) and record.get("EventSource") == "aws:sns" and isinstance(record.get("Sns"), dict)


def carried(payload: Any) -> dict[str, Any] | None:
    """The raw notification a payload carries: the one record of a Lambda SNS event, or a bare
    notification (Type "Notification" with a TopicArn); None for anything else (an event of several
    records is split first: sources.raw_events)."""
    if not isinstance(payload, dict):
        return None
    records = payload.get("Records")
    if isinstance(records, list) and len(records) == 1 and is_sns_record(records[0]):
        return dict(records[0]["Sns"])
    if payload.get("Type") == "Notification" and "TopicArn" in payload:
        return payload
    return None


def notification(payload: Any) -> SnsNotification | None:
    """The SNS notification a payload carries, read; None when it carries none, or when what
    looks like one lacks what SNS always sends (MessageId, TopicArn, Message as text)."""
    raw = carried(payload)
    if raw is None:
        return None
    try:
        return SnsNotification.model_validate(raw)
    except ValidationError:
        return None
