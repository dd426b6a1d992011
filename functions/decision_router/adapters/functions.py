"""A Lambda function invoked as its event sources invoke it (asynchronously): the operator's
redrive re-sends a raw source event to the incident intake this way, since an `aws.*` event
cannot be put on a bus again and SNS or an alarm action never went through one."""

from __future__ import annotations

import json
from typing import Any

from . import AwsAdapter


class AsyncFunction(AwsAdapter):
    service = "lambda"

    def __init__(self, name: str, client: Any = None):
        super().__init__(client)
        self.name = name

    def invoke(self, event: Any) -> None:
        response = self.client.invoke(FunctionName=self.name, InvocationType="Event", Payload=json.dumps(event).encode())
        if response.get("StatusCode") != 202 or response.get("FunctionError"):
            raise RuntimeError(f"Lambda refused the invocation of {self.name}: {response.get('StatusCode')} "
                               f"{response.get('FunctionError') or ''}".rstrip())


class FunctionFailed(RuntimeError):
    """The invoked function raised: its error type and message, as Lambda reports them."""


class SyncFunction(AwsAdapter):
    """A Lambda function invoked and waited for (RequestResponse): the reviewer CLI's way to the
    review function, which alone may sign who answered."""

    service = "lambda"

    def __init__(self, name: str, client: Any = None):
        super().__init__(client)
        self.name = name

    def invoke(self, event: Any) -> Any:
        response = self.client.invoke(FunctionName=self.name, InvocationType="RequestResponse",
                                      Payload=json.dumps(event).encode())
        payload = json.loads(response["Payload"].read() or b"null")
        if response.get("FunctionError"):
            error = payload if isinstance(payload, dict) else {}
            raise FunctionFailed(f"{error.get('errorType', 'Error')}: {error.get('errorMessage', payload)}")
        return payload
