"""Amazon SNS as a way in, read by one model for both intakes: what a Lambda subscription
receives (`{"Records": [{"EventSource": "aws:sns", "Sns": {...}}]}`, the incident intake) and the
bare notification an HTTPS or SQS subscriber gets (`{"Type": "Notification", "TopicArn",
"MessageId", "Message", ...}`, the ticket queue without raw message delivery). The notification's
`Message` is JSON in a string, parsed once as the model of what it carries (`Json[...]`, as
Powertools' `SnsNotificationModel` reads it): a CloudWatch alarm (sources.cloudwatch_sns), a
ticket (decision_router.intake.tickets). Pure code, no AWS.

Only the fields read are declared: the published samples fill the URL and signature fields with
"EXAMPLE", and nothing here checks them (Powertools' `SnsNotificationModel` requires URLs there).
"""

from __future__ import annotations

from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Json, ValidationError

Message = TypeVar("Message")


class SnsNotification(BaseModel, Generic[Message]):
    """One SNS notification (the Lambda record's `Sns`, or the bare one), its `Message` read as
    the JSON of `Message`: a bad one names its field under `Message` (`Message.AlarmArn`)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    Type: Literal["Notification"] = "Notification"
    MessageId: str
    TopicArn: str
    Message: Json[Message]
    Subject: str | None = None
    Timestamp: str | None = None


def is_sns_record(record: Any) -> bool:
    return isinstance(record, dict) and record.get("EventSource") == "aws:sns" and isinstance(record.get("Sns"), dict)


def carried(payload: Any) -> dict[str, Any] | None:
    """The raw notification a payload carries, unread: the one record of a Lambda SNS event, or a
    bare notification (Type "Notification" with a TopicArn); None for anything else (an event of
    several records is split first: sources.raw_events)."""
    if not isinstance(payload, dict):
        return None
    records = payload.get("Records")
    if isinstance(records, list) and len(records) == 1 and is_sns_record(records[0]):
        return dict(records[0]["Sns"])
    if payload.get("Type") == "Notification" and "TopicArn" in payload:
        return payload
    return None


def faults_the_notification(error: ValidationError) -> bool:
    """Whether a failed `SnsNotification` lacks what SNS always sends (MessageId, TopicArn, a
    Message as text), rather than carrying a Message of another shape than the model's."""
    return any(e["loc"][:1] != ("Message",) or (e["loc"] == ("Message",) and e["type"] in ("missing", "json_type"))
               for e in error.errors(include_url=False))
