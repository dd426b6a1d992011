"""A policy question with more options than the endpoint has letters, and a head for it: what the
many-option tests route with (a synthetic head: option i reads the word `intentI` and, when bound
to a model, a little of the hidden state)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from decision_router.domain.heads import FORMAT, question_digest

from .conftest import TICKET_TARGETS

STATE = [{"key": "subject", "field": "subject", "max_chars": 300}, {"key": "message", "field": "body", "max_chars": 3000}]
QUESTION = "Which intent does the customer's message express?"


def raw_policy(n: int, head: dict | None = None) -> dict:
    """A ticket policy with one routing question of `n` options (targets cycle over the ticket queues)."""
    question = {
        "id": "intent", "question": QUESTION,
        "options": [{"id": f"intent{i}", "description": f"Intent number {i}", "target": TICKET_TARGETS[i % len(TICKET_TARGETS)]}
                    for i in range(n)],
        "thresholds": {"min_confidence": 0.6, "min_margin": 0.1, "min_allowed_token_mass": 0.5},
    }
    if head is not None:
        question["head"] = head
    return {"name": "many-intents", "version": "1", "item_kind": "ticket", "description": "Intents beyond the letters.",
            "state": STATE, "questions": [question]}


def head_document(n: int, *, model_sha256: str | None = None, hidden_size: int | None = None,
                  prompt_version: str = "direct-options-v1", letters: bool = False) -> dict:
    raw = raw_policy(n)["questions"][0]
    digest = question_digest(QUESTION, [(o["id"], o["description"]) for o in raw["options"]],
                             [f"{s['key']}={s['field']}:{s['max_chars']}" for s in STATE])
    document = {
        "format": FORMAT, "version": f"many-{n}", "question_sha256": digest, "options": [o["id"] for o in raw["options"]],
        "text": {"fields": ["subject", "message"], "terms": [f"w:intent{i}" for i in range(n)], "idf": [1.0] * n,
                 "weights": [[10.0 if j == i else 0.0 for j in range(n)] for i in range(n)]},
        "bias": [0.0] * n, "temperature": 1.0,
        "thresholds": {"min_confidence": 0.9, "min_margin": 0.1},
        "fit": {"examples": 10 * n, "fitted_on": "2026-12-01", "regularisation": 10.0, "folds": 3,
                "cv_accuracy": 0.9, "cv_ece": 0.02},
    }
    if model_sha256 is not None:
        document.update(model_sha256=model_sha256, hidden_size=hidden_size, prompt_version=prompt_version,
                        hidden={"weights": [[1e-5 * ((i + j) % 7 - 3) for j in range(hidden_size or 0)] for i in range(n)]})
    if letters:
        document.update(model_sha256=model_sha256 or "0" * 64, prompt_version=prompt_version,
                        letters={"weights": [[0.0] * n for _ in range(n)]})
    return document


def install(directory: Path, n: int, **head) -> Path:
    """policy.json and heads/intent.json in `directory`; the policy file's path."""
    document = json.dumps(head_document(n, **head)).encode()
    (directory / "heads").mkdir(parents=True, exist_ok=True)
    (directory / "heads" / "intent.json").write_bytes(document)
    policy = raw_policy(n, {"file": "heads/intent.json", "sha256": hashlib.sha256(document).hexdigest()})
    path = directory / "policy.json"
    path.write_text(json.dumps(policy))
    return path
