"""What the review console shows and accepts, as pure functions over the records the workflow
already keeps: pending reviews (the review queue's messages), decision records, audit rows and
labelled examples. The handler (functions/review_console) adds HTTP and the reviewer's identity;
the adapters add AWS.

Answers go through `review.complete_review`, as the review function's and the CLI's do: only an
option the pending record offers counts, and its destination comes from that record.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Annotated, Any, Mapping, Sequence

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from ..domain.policies import Policy
from ..domain.records import CorrectedRecord, DecisionEntry, DecisionRecord, execution_name
from .completion import InvalidReview, PendingReview, complete_review, labelled_example

#: Claims a reviewer's name is read from, best first (Cognito ID tokens carry all three).
NAME_CLAIMS = ("email", "cognito:username", "username", "sub")
GROUPS_CLAIM = "cognito:groups"
#: The execution name of an item's correction derives from its key plus this (never its routing's name).
CORRECTION_KEY_SUFFIX = "#correction"


class NotSignedIn(PermissionError):
    """No verified token claims reached the handler (401)."""


class NotAReviewer(PermissionError):
    """A signed-in user outside the reviewers' group (403)."""


class Conflict(RuntimeError):
    """The item is no longer in the state the request assumes (409): answered, corrected, gone."""


class Answer(BaseModel):
    """What the console's page sends: the answers and a note, never who answers (the token says)."""

    model_config = ConfigDict(extra="forbid")

    answers: dict[str, str] = Field(min_length=1)
    note: Annotated[str, StringConstraints(max_length=2000)] = ""


def reviewer_from_claims(claims: Mapping[str, Any] | None, group: str) -> str:
    """Who is answering, from the verified token's claims only (never from the request body)."""
    if not claims:
        raise NotSignedIn("sign in first: the request carries no verified token")
    groups = _groups(claims.get(GROUPS_CLAIM))
    if group not in groups:
        raise NotAReviewer(f"you are signed in but not in the {group!r} group that may review")
    for claim in NAME_CLAIMS:
        value = claims.get(claim)
        if isinstance(value, str) and value.strip():
            return value.strip()
    raise NotSignedIn(f"the token names nobody (none of the claims {', '.join(NAME_CLAIMS)})")


def _groups(raw: Any) -> list[str]:
    # API Gateway hands list claims to the function as text: "[reviewers admins]".
    if isinstance(raw, list):
        return [str(g) for g in raw]
    if isinstance(raw, str):
        return raw.strip("[]").replace(",", " ").split()
    return []


def _parse_time(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def headline(record_item: Mapping[str, Any], policy: Policy) -> str:
    """A one-line title for lists: the policy's first evidence field (a ticket's subject, an incident's title)."""
    value: Any = record_item
    for part in policy.state[0].field.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    return str(value) if value is not None else ""


def _doubtful(record: DecisionRecord) -> list[str]:
    return [d.question for d in record.decisions if not d.passed]


class PendingSummary(BaseModel):
    """One row of the pending list."""

    model_config = ConfigDict(frozen=True)

    execution_name: str
    item_kind: str
    item_id: str
    policy: str
    headline: str
    reason: str = Field(description="Why it came to review, e.g. 'queue: confidence 0.41 < 0.80'.")
    questions: list[str] = Field(description="The questions in doubt (what the reviewer must look at).")
    suggested: dict[str, str | None]
    requested_at: str | None
    age_seconds: float | None
    timeout_seconds: int


def pending_summary(review: PendingReview, policy: Policy, now: datetime) -> PendingSummary:
    record = review.record
    requested = _parse_time(review.requested_at) or _parse_time(record.decided_at)
    return PendingSummary(
        execution_name=review.execution_name, item_kind=record.item_kind, item_id=record.item_id,
        policy=record.policy.name, headline=headline(record.item, policy), reason=record.route_reason,
        questions=_doubtful(record), suggested={d.question: d.option_id for d in record.decisions},
        requested_at=review.requested_at, timeout_seconds=record.review.timeout_seconds,
        age_seconds=max(0.0, (now - requested).total_seconds()) if requested else None)


def pending_list(summaries: Sequence[PendingSummary], *, kind: str | None = None,
                 question: str | None = None) -> list[PendingSummary]:
    """Oldest first; `kind` keeps one item kind, `question` the reviews where that question is in doubt."""
    kept = [s for s in summaries if (not kind or s.item_kind == kind) and (not question or question in s.questions)]
    return sorted(kept, key=lambda s: (-(s.age_seconds or 0.0), s.execution_name))


def _option_rows(question_options: Sequence[Any], entry: DecisionEntry | None) -> list[dict[str, Any]]:
    probabilities = (entry.probabilities if entry else None) or {}
    letters = (entry.letter_probabilities if entry else None) or {}
    head = (entry.head_probabilities if entry else None) or {}
    return [{"id": option.id, "description": option.description, "target": option.target,
             "escalate": option.escalate, "probability": probabilities.get(option.id),
             "letters": letters.get(option.id), "head": head.get(option.id)} for option in question_options]


def decision_view(record: DecisionRecord, policy: Policy) -> list[dict[str, Any]]:
    """Per question of the policy: the options with the deciding readout's probabilities (and the
    letters' beside the head's), the rule that fired, and the suggestion to preselect."""
    entries = {d.question: d for d in record.decisions}
    rules = {rule.id: rule.description for rule in policy.rules}
    questions = []
    for question in policy.questions:
        entry = entries.get(question.id)
        questions.append({
            "id": question.id, "question": question.question,
            "suggested": entry.option_id if entry else None,
            "source": entry.source if entry else None, "readout": entry.readout if entry else None,
            "passed": entry.passed if entry else False, "reasons": entry.reasons if entry else [],
            "confidence": entry.confidence if entry else None,
            "min_confidence": entry.thresholds.min_confidence if entry else None,
            "rule": entry.rule if entry else None,
            "rule_description": rules.get(entry.rule) if entry and entry.rule else None,
            "head_skipped": entry.head_skipped if entry else None,
            "error": entry.error.message if entry and entry.error else None,
            "options": _option_rows(question.options, entry),
        })
    return questions


def item_view(review: PendingReview, record: DecisionRecord, policy: Policy, now: datetime) -> dict[str, Any]:
    """One pending item as the item page shows it. `record` is the execution's own input."""
    summary = pending_summary(review.model_copy(update={"record": record}), policy, now)
    return {**summary.model_dump(), "item": record.item, "policy_version": record.policy.version,
            "decided_at": record.decided_at, "questions": decision_view(record, policy),
            "doubtful": summary.questions}


# ------------------------------------------------------------------------------ automatic routes
class AutoRoute(BaseModel):
    """An automatically routed item, from its audit row."""

    execution_name: str
    item_kind: str
    item_id: str
    policy: str
    headline: str
    target: str | None
    decided: dict[str, str | None]
    decided_by: dict[str, str | None]
    audited_at: str
    corrected: dict[str, Any] | None = Field(None, description="The later correction, if one was made.")


def auto_route(row: Mapping[str, str], policy: Policy, later: Sequence[Mapping[str, str]] = ()) -> AutoRoute:
    """An audit row of outcome auto_routed (JSON strings, as the workflow writes them); `later`:
    the item's other audit rows, of which a reviewed one audited afterwards is its correction."""
    detail = json.loads(row.get("outcome_detail") or "{}")
    decisions = json.loads(row.get("decisions") or "[]")
    corrected = None
    for other in later:
        if other.get("outcome") == "reviewed" and other.get("audited_at", "") > row.get("audited_at", ""):
            other_detail = json.loads(other.get("outcome_detail") or "{}")
            corrected = {"target": other_detail.get("target"), "reviewer": other_detail.get("reviewer"),
                         "answers": other_detail.get("answers"), "execution_name": other.get("execution_name")}
    return AutoRoute(
        execution_name=row["execution_name"], item_kind=row.get("item_kind", ""), item_id=row["item_id"],
        policy=row.get("policy_name", ""), headline=headline(json.loads(row.get("item") or "{}"), policy),
        target=detail.get("target"), audited_at=row.get("audited_at", ""),
        decided={d.get("question"): d.get("option_id") for d in decisions},
        decided_by={d.get("question"): d.get("readout") or d.get("source") for d in decisions},
        corrected=corrected)


def correction_name(record: DecisionRecord) -> str:
    """The one execution name an item's correction may have: a second correction is refused by Step Functions."""
    return execution_name(record.item_kind, record.item_id, record.item_key + CORRECTION_KEY_SUFFIX)


def correction(record: DecisionRecord, original_execution: str, answers: Mapping[str, str], reviewer: str, *,
               note: str = "") -> CorrectedRecord:
    """The record that re-routes an automatically routed item by a reviewer's answers: checked
    against the record's own policy and choices, and refused when it would change nothing."""
    if record.route != "auto" or record.destination is None:
        raise InvalidReview(f"execution {original_execution!r} was not routed automatically: answer its review instead")
    name = correction_name(record)
    answer = complete_review(record, name, answers, reviewer, note=note)
    decided = {d.question: d.option_id for d in record.decisions}
    if answer.chosen.answers == decided:
        raise InvalidReview(f"answers: {dict(answers)} is what the item was routed by; choose the right answer")
    chosen = answer.chosen
    reason = (f"correction by {answer.reviewer} of the automatic route to {record.destination.target} "
              f"(execution {original_execution}): now {chosen.destination.target}")
    fields = record.model_dump(exclude={"route", "route_reason", "destination", "escalate"})
    # Escalation comes from the corrected answer alone (the workflow pages when it escalates).
    return CorrectedRecord(**fields, route="correction", route_reason=reason, destination=None, escalate=False,
                           correction=answer)


def labelled_examples(rows: Sequence[Mapping[str, str]], policy: str | None = None) -> list[dict[str, Any]]:
    """The labelled-examples table's rows as `make fit REVIEWS=` reads them (review_cli export's lines)."""
    examples = [labelled_example(row) for row in rows]
    return [e for e in examples if not policy or e["policy"] == policy]
