"""The request id every response and log line carries: the caller's `X-Request-Id` when it is
safe to echo, a fresh one otherwise. Set by the app's middleware, read by any route."""

from __future__ import annotations

import contextvars
import logging
import re

REQUEST_ID_HEADER = "X-Request-Id"
request_id_var: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="-")
SAFE_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")


class RequestIdFilter(logging.Filter):
    """Puts the current request id on every log record (`%(request_id)s`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = request_id_var.get()
        return True
