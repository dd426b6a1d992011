"""Function settings from the environment variables that template.yaml sets (README.md,
"Function environment", lists them). Each handler asks only for what it uses."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Mapping


class ConfigError(RuntimeError):
    """A missing or malformed environment variable; raised at cold start, naming the variable."""


@dataclass(frozen=True)
class Settings:
    endpoint_name: str | None = None
    state_machine_arn: str | None = None
    idempotency_table: str | None = None
    destination_queues: Mapping[str, str] = field(default_factory=dict)
    review_queue_url: str | None = None
    review_timeout_seconds: int = 86400
    policy_name: str | None = None
    endpoint_read_timeout_seconds: float = 70.0
    endpoint_max_attempts: int = 4
    audit_table: str | None = None
    labelled_examples_table: str | None = None
    event_bus_name: str | None = None
    dead_letter_queue_url: str | None = None

    _ENV = {
        "endpoint_name": "DECISION_ENDPOINT_NAME",
        "state_machine_arn": "ROUTING_STATE_MACHINE_ARN",
        "idempotency_table": "IDEMPOTENCY_TABLE_NAME",
        "destination_queues": "DESTINATION_QUEUES",
        "review_queue_url": "REVIEW_QUEUE_URL",
        "review_timeout_seconds": "REVIEW_TIMEOUT_SECONDS",
        "policy_name": "POLICY_NAME",
        "endpoint_read_timeout_seconds": "ENDPOINT_READ_TIMEOUT_SECONDS",
        "endpoint_max_attempts": "ENDPOINT_MAX_ATTEMPTS",
        "audit_table": "AUDIT_TABLE_NAME",
        "labelled_examples_table": "LABELLED_EXAMPLES_TABLE_NAME",
        "event_bus_name": "EVENT_BUS_NAME",
        "dead_letter_queue_url": "DEAD_LETTER_QUEUE_URL",
    }

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "Settings":
        env = os.environ if env is None else env
        values: dict = {}
        for name, var in cls._ENV.items():
            raw = env.get(var, "").strip()
            if not raw:
                continue
            if name == "destination_queues":
                values[name] = _queues(raw)
            elif name in ("review_timeout_seconds", "endpoint_max_attempts"):
                values[name] = _number(var, raw, int, minimum=1)
            elif name == "endpoint_read_timeout_seconds":
                values[name] = _number(var, raw, float, minimum=1)
            else:
                values[name] = raw
        return cls(**values)

    def require(self, *names: str) -> "Settings":
        missing = [self._ENV[n] for n in names if not getattr(self, n)]
        if missing:
            raise ConfigError(f"environment variable(s) not set: {', '.join(missing)}")
        return self


def _number(var: str, raw: str, kind: type, minimum: float):
    try:
        value = kind(raw)
    except ValueError:
        raise ConfigError(f"{var}={raw!r}: not a {kind.__name__}") from None
    if value < minimum:
        raise ConfigError(f"{var}={raw!r}: must be at least {minimum}")
    return value


def _queues(raw: str) -> dict[str, str]:
    try:
        queues = json.loads(raw)
    except json.JSONDecodeError as error:
        raise ConfigError(f"DESTINATION_QUEUES is not JSON: {error}") from None
    if not isinstance(queues, dict) or not all(isinstance(k, str) and isinstance(v, str) and v for k, v in queues.items()):
        raise ConfigError("DESTINATION_QUEUES must be a JSON object of target → queue URL (strings)")
    return queues
