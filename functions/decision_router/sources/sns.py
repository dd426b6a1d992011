"""Amazon SNS as a way in: what a Lambda subscription receives (`{"Records": [{"EventSource":
"aws:sns", "Sns": {...}}]}`) and the bare notification an HTTPS or SQS subscriber gets (`{"Type":
"Notification", "TopicArn", "MessageId", "Message", ...}`). The notification's `Message` is a
string; a source that reads SNS (CloudWatch alarms) parses it a second time. Pure code, no AWS.
"""

from __future__ import annotations

from typing import Any


def is_sns_record(record: Any) -> bool:
    return isinstance(record, dict) and record.get("EventSource") == "aws:sns" and isinstance(record.get("Sns"), dict)


def notification(payload: Any) -> dict[str, Any] | None:
    """The SNS notification a payload carries: the one record of a Lambda SNS event, or a bare
    notification; None for anything else (an event of several records is split first: sources.raw_events)."""
    if not isinstance(payload, dict):
        return None
    records = payload.get("Records")
    if isinstance(records, list) and len(records) == 1 and is_sns_record(records[0]):
        return dict(records[0]["Sns"])
    if payload.get("Type") == "Notification" and "TopicArn" in payload and "Message" in payload:
        return payload
    return None
