"""Shared fixtures of the routing-function tests.

Fake AWS credentials and region are set in tests/conftest.py; moto is imported by the
handler tests themselves."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from decision_contract import DecisionResult, DecisionTiming, ModelInfo, softmax

REPO = Path(__file__).resolve().parents[2]
EVENTS = REPO / "events"

TICKET_TARGETS = ["billing", "account-access", "technical-support", "product-help", "sales"]
INCIDENT_TARGETS = ["platform-oncall", "data-oncall", "security-oncall", "app-oncall"]
ALL_TARGETS = TICKET_TARGETS + INCIDENT_TARGETS

#: SageMaker's answer to a request that reaches an inference component with no copy (scaled to zero).
NO_CAPACITY_MESSAGE = ("Inference Component has no capacity to process this request. ApplicationAutoScaling may be "
                       "in-progress (if configured) or try to increase the capacity by invoking "
                       "UpdateInferenceComponentRuntimeConfig API.")
MODEL_INFO = ModelInfo(file="test.gguf", bytes=1, sha256="0" * 64, context_size=2048, threads=1,
                       gpu_layers=0, llama_cpp_python_version="test")


def make_result(decision_id: str, option_ids: list[str], logits: list[float], *,
                mass: float = 0.9, temperature: float = 1.0) -> DecisionResult:
    """A DecisionResult as the container would send it (for unit tests of the pure routing code)."""
    return DecisionResult(
        id=decision_id, option_ids=option_ids, probabilities=softmax(logits, temperature),
        option_logits=logits, temperature=temperature, input_tokens=100, allowed_token_mass=mass,
        prompt_sha256="f" * 64, prompt_version="test", model=MODEL_INFO,
        timing=DecisionTiming(tokenize_seconds=0.0, prefill_seconds=0.01, total_seconds=0.01),
    )


@pytest.fixture
def ticket_data() -> dict:
    return {
        "ticket_id": "T-1001",
        "subject": "Charged twice for my subscription",
        "body": "Hi, my card was charged twice this month for the Pro plan. Please refund one payment.",
        "customer": {"id": "C-42", "tier": "pro"},
        "channel": "email",
        "created_at": "2026-11-29T12:00:00Z",
        "language": "en",
    }


@pytest.fixture
def incident_data() -> dict:
    return {
        "incident_id": "INC-2001",
        "title": "Checkout API error rate above 20%",
        "description": "5xx responses from checkout-api rose from 0.1% to 23% after the 11:50 deploy.",
        "service": "checkout-api",
        "severity": "sev2",
        "source": "cloudwatch",
        "reported_at": "2026-11-29T12:00:00Z",
    }


class RecordingTracerProvider:
    """Stands in for X-Ray (no daemon here, and the suite runs with POWERTOOLS_TRACE_DISABLED=1):
    records the subsegments Powertools' Tracer opens, in order."""

    def __init__(self):
        self.subsegments: list[str] = []

    @contextlib.contextmanager
    def in_subsegment(self, name: str, **_):
        self.subsegments.append(name)
        yield self

    def put_annotation(self, key, value):
        pass

    def put_metadata(self, key, value, namespace=None):
        pass


@pytest.fixture
def traces(monkeypatch) -> RecordingTracerProvider:
    """Every Tracer of the functions (the handlers' and the library's) records into one provider."""
    import decision_router.adapters.direct_routes
    import decision_router.adapters.endpoint
    import decision_router.adapters.workflow
    import decision_router.intake.pipeline
    from incident_intake import app as incident_app
    from review import app as review_app
    from ticket_intake import app as ticket_app

    recorder = RecordingTracerProvider()
    for module in (ticket_app, incident_app, review_app, decision_router.intake.pipeline,
                   decision_router.adapters.endpoint, decision_router.adapters.workflow,
                   decision_router.adapters.direct_routes):
        assert module.tracer.auto_patch is True  # boto3 calls (InvokeEndpoint, DynamoDB, StartExecution) traced too
        monkeypatch.setattr(module.tracer, "provider", recorder)
    return recorder


def letters_only(policy):
    """A shipped policy as its letters alone decide it: tests of the letter readout and of
    thresholds use this, the heads have tests of their own (test_heads.py)."""
    return policy.model_copy(update={"questions": [question.with_head(None) for question in policy.questions]})


def policy_files_beside(directory: Path) -> None:
    """Copy the shipped head files into `directory`, for a policy written there: a policy's head
    files are resolved beside it."""
    import shutil

    from decision_router.domain.policies import POLICY_DIR

    shutil.copytree(POLICY_DIR / "heads", directory / "heads", dirs_exist_ok=True)


def unsure_ticket(ticket_id: str, *, destinations: dict[str, str]):
    """A ticket's decision record as the routing code writes it when the letters are unsure
    between billing and technical support: sent to review (the review side's tests start there)."""
    from decision_router.domain.judging import build_record, explain, model_entry
    from decision_router.domain.policies import load_policy
    from decision_router.items import parse_item

    policy = letters_only(load_policy("support-ticket"))
    item = parse_item("ticket", {"ticket_id": ticket_id, "subject": "Charged twice", "body": "Two charges of $49.",
                                 "customer": {"id": "C-9", "tier": "pro"}, "channel": "email",
                                 "created_at": "2026-11-29T12:00:00Z"})
    results = [model_entry(q, make_result(q.id, q.option_ids, [2.0, 1.6] + [0.0] * (len(q.option_ids) - 2)))
               for q in policy.questions]
    record = build_record(policy, item, explain(policy, item, results), destinations=destinations,
                          review_timeout_seconds=3600)
    assert record.route == "review"
    return record
