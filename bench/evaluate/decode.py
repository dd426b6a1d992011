"""Decode comparison: the single-pass readout vs answering the same decision by generating text.

The generated answer sees the very prompt the readout scores (the readout's system instruction
and JSON user payload, through the same chat template), is decoded greedily, and is parsed for
the option letter. Both paths are timed on the same decisions, one request each, interleaved so
that machine noise hits both alike.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

from decision_contract import OPTION_LETTERS, Decision
from evaluation.metrics import summary
from evaluation.runners import RunFailure, Runner

#: Enough for a letter, a JSON answer such as {"answer": "B"}, or a short preamble before it.
GENERATION_MAX_TOKENS = 8

#: Generated answers kept in the report, so a reader sees what "unparsed" means.
EXAMPLES = 5

_KEYWORD = re.compile(r"(?:answer|option|letter|choice)(?:\s+is)?\W{0,3}([A-P])\b", re.IGNORECASE)


def generation_messages(decision: Decision) -> list[dict[str, str]]:
    """The readout's own chat messages (system instruction and user payload)."""
    from decision_server.readout import messages

    return messages(decision)


def parse_letter(text: str, n_options: int) -> int | None:
    """The option index a generated answer names, or None when it names none of the letters.

    Accepted: a bare letter ("B", " B.", "(B) because …"), a JSON object with an answer/option/letter
    field, or "answer: B"-style text. Letters beyond the offered options do not count.
    """
    allowed = OPTION_LETTERS[:n_options]
    stripped = text.strip().lstrip("(\"'*[ ").strip()
    if stripped and stripped[0] in allowed:
        rest = stripped[1:]
        # "B", "B.", "B)" or "B\n…" answer; "A fee …" is the article, not option A.
        if not rest.strip() or rest[0] == "\n" or not (rest[0].isalnum() or rest[0].isspace()):
            return allowed.index(stripped[0])
    try:
        parsed = json.loads(text)
    except ValueError:
        parsed = None
    if isinstance(parsed, dict):
        for key in ("answer", "option", "letter", "choice"):
            value = parsed.get(key)
            if isinstance(value, str) and len(value.strip()) == 1 and value.strip() in allowed:
                return allowed.index(value.strip())
    match = _KEYWORD.search(text)
    if match and match.group(1) in allowed:
        return allowed.index(match.group(1))
    return None


@dataclass(frozen=True)
class DecodePair:
    decision_id: str
    gold_index: int
    readout_index: int | None
    readout_seconds: float | None
    generated_text: str | None
    generated_index: int | None
    generate_seconds: float | None
    completion_tokens: int | None
    error: str | None = None


def compare(
    runner: Runner,
    items: Iterable[tuple[Decision, int]],
    max_tokens: int = GENERATION_MAX_TOKENS,
    progress: Callable[[], None] | None = None,
) -> list[DecodePair]:
    """Score each (decision, gold index) once by readout and once by generation."""
    pairs = []
    for decision, gold in items:
        try:
            scored = runner.decide([decision])
            result = scored.results[0]
            readout = max(range(len(result.probabilities)), key=result.probabilities.__getitem__)
            generated = runner.generate(generation_messages(decision), max_tokens)
            pairs.append(
                DecodePair(
                    decision_id=decision.id,
                    gold_index=gold,
                    readout_index=readout,
                    readout_seconds=scored.seconds,
                    generated_text=generated.text,
                    generated_index=parse_letter(generated.text, len(decision.options)),
                    generate_seconds=generated.seconds,
                    completion_tokens=generated.completion_tokens,
                )
            )
        except RunFailure as exc:
            pairs.append(DecodePair(decision.id, gold, None, None, None, None, None, None, error=str(exc)))
        if progress:
            progress()
    return pairs


def summarise(pairs: Sequence[DecodePair]) -> dict:
    """Accuracy and latency of both paths, and generation/readout latency ratios."""
    done = [p for p in pairs if p.error is None]
    out: dict = {"decisions": len(pairs), "failed": len(pairs) - len(done)}
    if not done:
        return out
    readout = summary([p.readout_seconds for p in done])
    generate = summary([p.generate_seconds for p in done])
    unparsed = sum(p.generated_index is None for p in done)
    tokens = [p.completion_tokens for p in done if p.completion_tokens is not None]
    out.update(
        readout={
            "accuracy": sum(p.readout_index == p.gold_index for p in done) / len(done),
            "latency_seconds": readout,
        },
        generation={
            "accuracy": sum(p.generated_index == p.gold_index for p in done) / len(done),
            "unparsed": unparsed,
            "agrees_with_readout": sum(p.generated_index == p.readout_index for p in done) / len(done),
            "mean_completion_tokens": sum(tokens) / len(tokens) if tokens else None,
            "latency_seconds": generate,
            "examples": [
                {"decision": p.decision_id, "generated": p.generated_text, "parsed": p.generated_index, "gold": p.gold_index}
                for p in done[:EXAMPLES]
            ],
        },
        ratio_median=generate["median"] / readout["median"],
        ratio_p95=generate["p95"] / readout["p95"],
    )
    return out
