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
