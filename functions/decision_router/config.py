"""Function settings from the environment variables that template.yaml sets (the documentation
site's configuration reference is generated from these fields). Each handler asks only for what it uses."""

from __future__ import annotations

import json
from typing import Annotated, Any, Mapping

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, InitSettingsSource, NoDecode, SettingsConfigDict


class ConfigError(RuntimeError):
    """A missing or malformed environment variable; raised at cold start, naming the variable."""


def _env(variable: str, description: str, default: Any = "", **constraints: Any) -> Any:
    return Field(default, validation_alias=variable, description=description, **constraints)


class Settings(BaseSettings):
    """Each field is read from the environment variable named by its alias; a blank one is unset
    (empty text, or the default)."""

    model_config = SettingsConfigDict(frozen=True, extra="ignore", case_sensitive=True, env_ignore_empty=True)

    endpoint_name: str = _env("DECISION_ENDPOINT_NAME", "The SageMaker endpoint that decides.")
    # Set when the stack created a scale-to-zero endpoint: the model is this inference component.
    inference_component_name: str = _env("ENDPOINT_INFERENCE_COMPONENT_NAME",
        "The inference component every request names (EndpointScaleToZero=true); empty otherwise.")
    state_machine_arn: str = _env("ROUTING_STATE_MACHINE_ARN", "The routing workflow the intakes start.")
    idempotency_table: str = _env("IDEMPOTENCY_TABLE_NAME", "Powertools idempotency table: one decision per item key, kept a day.")
    # NoDecode: the validator below parses the JSON, so its errors name the variable.
    destination_queues: Annotated[dict[str, str], NoDecode] = Field(
        default_factory=dict, validation_alias="DESTINATION_QUEUES",
        description="JSON object mapping each policy target to its queue URL.")
    pending_reviews_table: str = _env("PENDING_REVIEWS_TABLE_NAME",
        "The pending-review index: one row per review the workflow waits for (its task token and record), "
        "put by the index writer alone.")
    review_timeout_seconds: int = _env("REVIEW_TIMEOUT_SECONDS",
        "How long a review may wait before the item goes to the escalation queue and pages the on-call.", 86400, ge=1)
    policy_name: str = _env("POLICY_NAME", "The policy a function applies (a shipped policy's name, or a policy file's path).")
    endpoint_read_timeout_seconds: float = _env("ENDPOINT_READ_TIMEOUT_SECONDS", "Endpoint client read timeout, per attempt.", 70.0, ge=1)
    endpoint_max_attempts: int = _env("ENDPOINT_MAX_ATTEMPTS",
        "Endpoint calls per decision, the first included (retries with capped exponential backoff and full jitter).", 4, ge=1)
    audit_table: str = _env("AUDIT_TABLE_NAME", "The audit table: one record per outcome.")
    audit_unsharded_index: str = _env("AUDIT_UNSHARDED_INDEX_NAME",
        "The audit table's index of recent rows by outcome alone, which lists the rows written before "
        "their shard, read beside the sharded one while the stack keeps it (AuditOutcomeIndex); empty: "
        "the sharded index alone.")
    audit_retention_days: int = _env("AUDIT_RETENTION_DAYS",
        "Days an audit row is kept (the table's TTL removes it after): set on each execution the function "
        "starts and on each row it writes; 0 keeps them.", 0, ge=0)
    label_retention_days: int = _env("LABEL_RETENTION_DAYS",
        "Days a labelled example is kept (the labelled-examples table's TTL removes it after, and relearning "
        "drops it from the labels it keeps): set on each execution the function starts.", 365, ge=1)
    labelled_examples_table: str = _env("LABELLED_EXAMPLES_TABLE_NAME",
        "Completed reviews, stored as labelled examples (what make fit and relearning read).")
    event_bus_name: str = _env("EVENT_BUS_NAME",
        "The custom decision bus (incident webhooks are forwarded to it; Item Routed and Item Escalated go on it).")
    dead_letter_queue_url: str = _env("DEAD_LETTER_QUEUE_URL",
        "Where an item no retry can fix is parked at once, with the reason "
        "(ticket intake and webhooks: the ticket DLQ; incident intake: the incident DLQ).")
    # The review console: who may review, and how its page signs people in.
    reviewer_group: str = _env("REVIEWER_GROUP", "Review console: the Cognito group whose members may review (matched whole).", "reviewers")
    reviewer_principals: str = _env("REVIEWER_PRINCIPALS",
        "Review function: the principals of this account whose answers count (the ReviewerPrincipals "
        "parameter: role or user ARNs, comma-separated); empty: every answer through it is refused.")
    user_pool_client_id: str = _env("USER_POOL_CLIENT_ID", "Review console: the page's Cognito app client.")
    console_sign_in: str = _env("CONSOLE_SIGN_IN",
        "Review console sign-in: cognito, or local under make review.", "cognito", pattern="^(cognito|local)$")
    open_incidents_table: str = _env("OPEN_INCIDENTS_TABLE_NAME",
        "Incident intake: the open incidents of the native sources, by source key; ticket intake: the "
        "open incidents a ticket may be linked to (unset: tickets are not linked).")
    open_incident_retention_days: int = _env("OPEN_INCIDENT_RETENTION_DAYS",
        "Incident intake: days a resolved incident's row is kept (the table's TTL removes it after).", 30, ge=1)
    ticket_queue_url: str = _env("TICKET_QUEUE_URL",
        "Webhooks: where tickets go; ticket intake: the queue a ticket waiting for a waking endpoint is hidden in.")
    signing_key_secret_arn: str = _env("SIGNING_KEY_SECRET_ARN",
        "The stack's signing key: who answered a review, and the heads the relearning gate passed.")
    head_signing_key_secret_arn: str = _env("HEAD_SIGNING_KEY_SECRET_ARN",
        "The stack's head signing key: set, a head from the store is used only when its pointer's signature verifies.")
    webhook_secret_arn: str = _env("WEBHOOK_SECRET_ARN", "Webhooks: the secret holding each source's signing key.")
    webhook_max_skew_seconds: int = _env("WEBHOOK_MAX_SKEW_SECONDS", "Webhooks: how far a signed time may be from now.", 300, ge=1)
    webhook_default_tier: str = _env("WEBHOOK_DEFAULT_TIER", "Webhooks: the customer tier when no tier tag or label is present.", "free")
    webhook_deliveries_table: str = _env("WEBHOOK_DELIVERIES_TABLE_NAME",
        "Webhooks: the record of accepted deliveries (a replay or retry is acknowledged once).")
    # The head store (relearning): unset, the heads shipped beside the policies decide.
    head_store_bucket: str = _env("HEAD_STORE_BUCKET",
        "Head store: the versioned S3 bucket of promoted heads; unset, the heads shipped beside the policies decide.")
    head_parameter_prefix: str = _env("HEAD_PARAMETER_PREFIX",
        "Head store: the SSM parameter prefix naming the head in service per policy question.")
    head_history_table: str = _env("HEAD_HISTORY_TABLE_NAME",
        "Head store: the history of promotions, refusals and rollbacks (and each question's change lock).")
    resolved_items_table: str = _env("RESOLVED_ITEMS_TABLE_NAME",
        "Resolved items with their vectors: the review console's similar items (unset: none kept).")
    resolved_items_retention_days: int = _env("RESOLVED_ITEMS_RETENTION_DAYS",
        "Days a resolved item is kept for similar items (the table's TTL removes it after).", 180, ge=1)
    head_refresh_seconds: float = _env("HEAD_REFRESH_SECONDS",
        "How often the routing functions look for a newly promoted head.", 120.0, ge=0)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """The process environment (default), or `env` alone; ConfigError names a bad variable."""
        try:
            if env is None:
                return cls()
            # `env` as the one source: a mapping handed in is never read together with the process environment.
            return cls(_build_sources=((InitSettingsSource(cls, init_kwargs=dict(env)),), {}))
        except ValidationError as error:
            raise ConfigError("; ".join(_describe(e) for e in error.errors(include_url=False))) from None

    @classmethod
    def variable(cls, name: str) -> str:
        alias = cls.model_fields[name].validation_alias
        assert isinstance(alias, str)
        return alias

    def require(self, *names: str) -> Settings:
        missing = [self.variable(n) for n in names if not getattr(self, n)]
        if missing:
            raise ConfigError(f"environment variable(s) not set: {', '.join(missing)}")
        return self

    @model_validator(mode="before")
    @classmethod
    def _blank_is_unset(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        return {k: v.strip() if isinstance(v, str) else v for k, v in data.items()
                if not (isinstance(v, str) and not v.strip())}

    @field_validator("destination_queues", mode="before")
    @classmethod
    def _queues(cls, raw: Any) -> Any:
        if isinstance(raw, str):
            try:
                raw = json.loads(raw)
            except json.JSONDecodeError as error:
                raise ValueError(f"DESTINATION_QUEUES is not JSON: {error}") from None
        if not isinstance(raw, dict) or not all(isinstance(k, str) and isinstance(v, str) and v for k, v in raw.items()):
            raise ValueError("DESTINATION_QUEUES must be a JSON object of target → queue URL (strings)")
        return raw


def _describe(error: Any) -> str:
    """One pydantic error as 'VARIABLE='value': why' (a validator's own message names the variable)."""
    variable = str(error["loc"][0]) if error["loc"] else "settings"
    raw = error.get("input")
    if error["type"] == "value_error":
        return error["msg"].removeprefix("Value error, ")
    if error["type"] in ("int_parsing", "int_from_float", "float_parsing"):
        return f"{variable}={raw!r}: not a {'float' if error['type'] == 'float_parsing' else 'int'}"
    if error["type"] == "greater_than_equal":
        return f"{variable}={raw!r}: must be at least {error['ctx']['ge']:g}"
    return f"{variable}={raw!r}: {error['msg']}"
