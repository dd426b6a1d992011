"""The questions the engine's batching is measured with (`bench/batch_drift.py`) and tested with
(tests/container/test_engine.py, whose BATCH_TOLERANCE rests on the drift measured on these)."""

from __future__ import annotations

QUEUE_OPTIONS = [
    {"id": "billing", "description": "Billing: charges, refunds, invoices"},
    {"id": "technical", "description": "Technical support: errors, outages, bugs"},
    {"id": "sales", "description": "Sales: pricing, upgrades, new contracts"},
    {"id": "security", "description": "Security: account takeover, leaked credentials"},
]

#: (question, options): four questions of one ticket, batched together.
QUESTIONS = [
    ("Which support queue should handle this ticket?", QUEUE_OPTIONS),
    ("How urgent is this ticket?", [{"id": i, "description": i} for i in ("low", "medium", "high")]),
    ("Is the customer angry?", [{"id": "yes", "description": "yes"}, {"id": "no", "description": "no"}]),
    ("Which language is the ticket in?", [{"id": "en", "description": "English"}, {"id": "de", "description": "German"}]),
]
