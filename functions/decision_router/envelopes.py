"""Envelopes a ticket may arrive in on the ticket queue.

SNS → SQS without raw message delivery wraps every message in an SNS notification (JSON with
Type "Notification", TopicArn, Message, ...): the ticket is the `Message` string inside it. A body
that is not such a notification is the ticket itself."""

from __future__ import annotations

import json

from aws_lambda_powertools.utilities.parser.models import SnsNotificationModel
from pydantic import ValidationError


def unwrap_sns(body: str) -> str:
    """The ticket text of an SQS body: the SNS notification's Message, or the body as it is."""
    try:
        data = json.loads(body)
    except ValueError:
        return body  # not JSON: the ticket's validation says why
    if not (isinstance(data, dict) and data.get("Type") == "Notification" and "TopicArn" in data):
        return body
    try:
        return str(SnsNotificationModel.model_validate(data).Message)
    except ValidationError:
        return body  # looks like a notification but is none: validated (and parked) as a ticket
