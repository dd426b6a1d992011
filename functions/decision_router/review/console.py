"""What the review console shows and accepts, as pure functions over the records the workflow
already keeps: pending reviews (the pending-review index's rows), decision records, audit rows and
labelled examples. The handler (functions/review_console) adds HTTP and the reviewer's identity;
the adapters add AWS.

Answers go through `review.complete_review`, as the review function's and the CLI's do: only an
option the pending record offers counts, and its destination comes from that record.
"""

from __future__ import annotations

import base64
import json
from datetime import datetime, timezone
from typing import Annotated, Any, Mapping, Sequence

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from ..domain.linking import LinkedIncident, Suggestion, suggestion
from ..domain.policies import Policy
from ..domain.records import AuditRow, CorrectedRecord, DecisionEntry, DecisionRecord, execution_name
from ..domain.review_sla import SlaStatus, sla_order, sla_status
from ..domain.signatures import cognito_identity
from ..domain.similar import ResolvedItem, SimilarItem, item_terms, nearest
from ..items import parse_item
from .completion import IdentitySigner, InvalidReview, PendingReview, complete_review, labelled_example

#: The claim naming a reviewer for good: Cognito's `sub` never changes and no user can set it.
ID_CLAIM = "sub"
#: The user name (an ID token's `cognito:username`, an access token's `username`); a user cannot change it either.
USERNAME_CLAIMS = ("cognito:username", "username")
GROUPS_CLAIM = "cognito:groups"
#: The execution name of an item's correction derives from its key plus this (never its routing's name).
CORRECTION_KEY_SUFFIX = "#correction"


class NotSignedIn(PermissionError):
    """No verified token claims reached the handler (401)."""


class NotAReviewer(PermissionError):
    """A signed-in user outside the reviewers' group (403)."""


class Conflict(RuntimeError):
    """The item is no longer in the state the request assumes (409): answered, corrected, gone."""


class Reviewer(BaseModel):
    """Who answers, from the verified token: `sub` is what the audit and the labelled examples
    record; the email is kept only while the user pool says it is verified (a user may change an
    unverified one at will)."""

    model_config = ConfigDict(frozen=True)

    sub: str
    username: str
    email: str | None = None

    @property
    def shown(self) -> str:
        """How the console names the reviewer: the verified email, else the user name."""
        return self.email or self.username


class Answer(BaseModel):
    """What the console's page sends: the answers and a note, never who answers (the token says)."""

    model_config = ConfigDict(extra="forbid")

    answers: dict[str, str] = Field(min_length=1)
    note: Annotated[str, StringConstraints(max_length=2000)] = ""


def _text(value: Any) -> str:
    return value.strip() if isinstance(value, str) else ""


def _verified(value: Any) -> bool:
    # API Gateway hands every claim over as text: "true".
    return value is True or (isinstance(value, str) and value.strip().lower() == "true")


def reviewer_from_claims(claims: Mapping[str, Any] | None, group: str) -> Reviewer:
    """Who is answering, from the verified token's claims only (never from the request body)."""
    if not claims:
        raise NotSignedIn("sign in first: the request carries no verified token")
    groups = _groups(claims.get(GROUPS_CLAIM))
    if group not in groups:
        raise NotAReviewer(f"you are signed in but not in the {group!r} group that may review")
    sub = _text(claims.get(ID_CLAIM))
    if not sub:
        raise NotSignedIn(f"the token names nobody (no {ID_CLAIM!r} claim)")
    username = next((_text(claims.get(c)) for c in USERNAME_CLAIMS if _text(claims.get(c))), sub)
    email = _text(claims.get("email")) if _verified(claims.get("email_verified")) else ""
    return Reviewer(sub=sub, username=username, email=email or None)


def _groups(raw: Any) -> list[str]:
    """The token's groups. API Gateway hands a list claim over as text, "[reviewers admins]":
    split on spaces only (a group name has none, but may hold a comma: "a,reviewers" is one group).
    A JSON list is read as one."""
    if isinstance(raw, list):
        return [str(g) for g in raw]
    if isinstance(raw, str):
        text = raw.strip()
        if text.startswith("[\""):
            try:
                parsed = json.loads(text)
            except ValueError:
                parsed = None
            if isinstance(parsed, list):
                return [str(g) for g in parsed]
        return text.removeprefix("[").removesuffix("]").split()
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
    questions: list[str] = Field(description="The questions in doubt, or checked (what the reviewer must look at).")
    check: list[str] = Field(default_factory=list, description=(
        "The questions whose automatic answer this review checks (a sampled check, domain/precision.py); "
        "empty for a review the thresholds asked for."))
    suggested: dict[str, str | None] = Field(description=(
        "Per question, the automatic answer; null where there is none, or where it is withheld (`withheld`)."))
    withheld: list[str] = Field(default_factory=list, description=(
        "The questions whose automatic answer this view withholds: a check's (`blinded`), so its reviewer "
        "answers without seeing what is measured."))
    requested_at: str | None
    age_seconds: float | None
    timeout_seconds: int
    sla: SlaStatus | None = Field(None, description=(
        "The time-to-first-review clock (the policy's review_sla), from when the review was requested; "
        "null when the policy sets no target."))
    linked_incident: LinkedIncident | None = Field(None, description=(
        "The incident a ticket is linked to (its incident's page lists the ticket as in review)."))


def pending_summary(review: PendingReview, policy: Policy, now: datetime) -> PendingSummary:
    record = review.record
    # The clock starts when the review is requested: a held item (noise or dependency holds) has
    # not reached the review state yet, so its hold does not count against its target.
    requested = _parse_time(review.requested_at) or _parse_time(record.decided_at)
    suggested = {d.question: d.option_id for d in record.decisions}
    age = max(0.0, (now - requested).total_seconds()) if requested else None
    status = None
    if policy.review_sla is not None:
        sla = policy.review_sla
        status = sla_status(sla, sla.priority_of(record.item, suggested),
                            suggested.get(policy.routing_question.id), age or 0.0)
    return PendingSummary(
        execution_name=review.execution_name, item_kind=record.item_kind, item_id=record.item_id,
        policy=record.policy.name, headline=headline(record.item, policy), reason=record.route_reason,
        questions=_doubtful(record) or record.checked, check=record.checked, suggested=suggested,
        requested_at=review.requested_at, timeout_seconds=record.review.timeout_seconds,
        age_seconds=age, sla=status, linked_incident=record.linked)


def blinded(summary: PendingSummary, policy: Policy) -> PendingSummary:
    """The summary as a reviewer sees it: a sampled check's automatic answers withheld (its
    `suggested` null, and the review deadline's priority where the policy reads it from a checked
    question), so the reviewer's answer measures the automatic one instead of confirming it. The
    review SLA's sweep reads the summary itself: the deadline still runs on the automatic answer."""
    if not summary.check:
        return summary
    suggested = {question: None if question in summary.check else option for question, option in summary.suggested.items()}
    sla, priority = summary.sla, policy.review_sla.priority if policy.review_sla is not None else None
    if sla is not None and priority is not None and priority.question in summary.check:
        sla = sla.model_copy(update={"priority": None})
    return summary.model_copy(update={"suggested": suggested, "sla": sla, "withheld": list(summary.check)})


def pending_list(summaries: Sequence[PendingSummary], *, kind: str | None = None,
                 question: str | None = None) -> list[PendingSummary]:
    """By breach risk (past due, then at risk, then on track), then the shorter target (the higher
    priority), then oldest first (domain/review_sla.py); `kind` keeps one item kind, `question`
    the reviews where that question is in doubt."""
    kept = [s for s in summaries if (not kind or s.item_kind == kind) and (not question or question in s.questions)]
    return sorted(kept, key=lambda s: (*sla_order(s.sla, s.age_seconds), s.execution_name))


#: The review SLA's metrics (per policy): what waits, what is at risk, what is past due.
SLA_METRICS = {"waiting": "ReviewsWaiting", "at_risk": "ReviewsAtRisk", "breached": "ReviewsBreached"}


def sla_counts(summaries: Sequence[PendingSummary], policies: Sequence[str]) -> dict[str, dict[str, int]]:
    """Per policy (each of `policies`, zero when none waits, so a metric drops back to 0): the
    reviews waiting, at risk and past due their first-review target."""
    counts = {policy: dict.fromkeys(SLA_METRICS, 0) for policy in policies}
    for summary in summaries:
        row = counts.setdefault(summary.policy, dict.fromkeys(SLA_METRICS, 0))
        row["waiting"] += 1
        if summary.sla is not None and summary.sla.risk != "on_track":
            row[summary.sla.risk] += 1
    return counts


def _option_rows(question_options: Sequence[Any], entry: DecisionEntry | None) -> list[dict[str, Any]]:
    probabilities = (entry.probabilities if entry else None) or {}
    letters = (entry.letter_probabilities if entry else None) or {}
    head = (entry.head_probabilities if entry else None) or {}
    return [{"id": option.id, "description": option.description, "target": option.target,
             "escalate": option.escalate, "probability": probabilities.get(option.id),
             "letters": letters.get(option.id), "head": head.get(option.id)} for option in question_options]


def ranked_options(question_options: Sequence[Any], entry: DecisionEntry | None) -> list[str]:
    """The question's option ids best first by the deciding readout's probability (the head's, for a
    question with many options), the policy's order on ties and where nothing was read: what the
    console's option picker lists first."""
    probabilities = (entry.probabilities if entry else None) or {}
    order = sorted(enumerate(question_options), key=lambda pair: (-(probabilities.get(pair[1].id) or 0.0), pair[0]))
    return [option.id for _, option in order]


def decision_view(record: DecisionRecord, policy: Policy, *, blind: Sequence[str] = ()) -> list[dict[str, Any]]:
    """Per question of the policy: the options with the deciding readout's probabilities (and the
    letters' beside the head's), the options ranked best first, the rule that fired, the
    suggestion to preselect, and the decision's reason: in one line (`why`) and in full (`why_detail`).
    A question in `blind` (a sampled check's) shows none of what would tell its automatic answer:
    no suggestion, no probabilities or confidence, the options in the policy's order, no reason."""
    entries = {d.question: d for d in record.decisions}
    rules = {rule.id: rule.description for rule in policy.rules}
    questions = []
    for question in policy.questions:
        entry = entries.get(question.id)
        if question.id in blind:
            questions.append(_blind_question(question, entry))
            continue
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
            "ranked": ranked_options(question.options, entry),
            "why": entry.why.line() if entry and entry.why else None,
            "why_detail": entry.why.model_dump(mode="json") if entry and entry.why else None,
        })
    return questions


def _blind_question(question: Any, entry: DecisionEntry | None) -> dict[str, Any]:
    """A checked question as its reviewer sees it: what it asks and its options, nothing of the
    automatic answer being measured (`decision_view`'s keys, empty)."""
    return {"id": question.id, "question": question.question, "suggested": None, "blind": True,
            "source": entry.source if entry else None, "readout": None, "passed": entry.passed if entry else False,
            "reasons": [], "confidence": None, "min_confidence": None, "rule": None, "rule_description": None,
            "head_skipped": None, "error": None, "options": _option_rows(question.options, None),
            "ranked": [option.id for option in question.options], "why": None, "why_detail": None}


def item_view(review: PendingReview, record: DecisionRecord, policy: Policy, now: datetime) -> dict[str, Any]:
    """One pending item as the item page shows it. `record` is the execution's own input. A
    sampled check is blind (`blinded`): its automatic answers are neither shown nor preselected."""
    summary = blinded(pending_summary(review.model_copy(update={"record": record}), policy, now), policy)
    return {**summary.model_dump(), "item": record.item, "policy_version": record.policy.version,
            "decided_at": record.decided_at, "questions": decision_view(record, policy, blind=summary.withheld),
            "doubtful": summary.questions}


def similar_to(record: DecisionRecord, policy: Policy, resolved: Sequence[ResolvedItem]) -> list[SimilarItem]:
    """The resolved items of the policy nearest to the record's item (never the item itself)."""
    item = parse_item(record.item_kind, record.item)
    return nearest(item_terms(policy, item), resolved, exclude=item.ref)


# ------------------------------------------------------------------------------ linked items
def answered_team(incident_id: str, incident_rows: Sequence[AuditRow], policy: Policy) -> Suggestion | None:
    """What the incident's answered review suggests for a ticket linked to it (asked by `policy`'s
    questions): the team of its latest reviewed audit row; None while it is not answered."""
    reviewed = sorted((row for row in incident_rows if row.outcome == "reviewed"), key=lambda row: row.audited_at)
    if not reviewed:
        return None
    answers = reviewed[-1].detail().get("answers")
    questions = [(question.id, question.option_ids) for question in policy.questions]
    return suggestion(incident_id, answers if isinstance(answers, dict) else None, questions)


def link_view(record: DecisionRecord, incident_rows: Sequence[AuditRow], policy: Policy) -> dict[str, Any] | None:
    """A linked ticket's incident, as its item page shows it ("linked to incident X (service,
    opened at)"), with the team the incident's answered review suggests (`incident_rows`: the
    incident's audit rows); None when the ticket is not linked. The suggestion is shown, never applied."""
    linked = record.linked
    if linked is None:
        return None
    # The rows of that incident alone: another source's item of the same id is another item.
    own = [row for row in incident_rows if row.item_kind == "incident" and linked.names(row.item_ref(), row.item_id)]
    offered = answered_team(linked.incident_id, own, policy)
    return {**linked.model_dump(), "line": linked.line(),
            "suggestion": {**offered.model_dump(), "line": offered.line()} if offered else None}


def linked_tickets(incident_id: str, pending: Sequence[PendingSummary], rows: Sequence[AuditRow], *,
                   incident_ref: str | None = None) -> list[dict[str, Any]]:
    """The tickets linked to the incident, as its item page lists them: those still in review
    (`pending`: the pending-review index's listing) first, then those audited (`rows`: audit rows, whatever their
    outcome); each once, by execution. Given the incident's identity (`incident_ref`), a link to
    another source's incident of the same id is not this incident's."""
    shown: dict[str, dict[str, Any]] = {}
    for review in pending:
        linked = review.linked_incident
        if linked is not None and linked.names(incident_ref, incident_id):
            shown.setdefault(review.execution_name, {
                "execution_name": review.execution_name, "item_id": review.item_id, "state": "in review",
                "why": linked.why})
    for row in sorted(rows, key=lambda row: row.audited_at):
        try:
            linked = row.link()
        except ValueError:
            continue  # a column that does not read as a link: not shown
        if linked is not None and linked.names(incident_ref, incident_id):
            shown.setdefault(row.execution_name, {
                "execution_name": row.execution_name, "item_id": row.item_id, "state": row.outcome, "why": linked.why})
    return list(shown.values())


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


def auto_route(row: AuditRow, policy: Policy, later: Sequence[AuditRow] = ()) -> AutoRoute:
    """An audit row of outcome auto_routed; `later`: the rows of its item id, of which a reviewed
    one of the same item (kind, source and id: another channel's ticket of that id is another
    item) audited afterwards is its correction."""
    detail = row.detail()
    decisions = json.loads(row.decisions or "[]")
    corrected = None
    ref = row.item_ref()
    for other in later:
        if other.outcome == "reviewed" and other.audited_at > row.audited_at and ref is not None and other.item_ref() == ref:
            other_detail = other.detail()
            corrected = {"target": other_detail.get("target"), "reviewer": audited_reviewer(other_detail),
                         "answers": other_detail.get("answers"), "execution_name": other.execution_name}
    return AutoRoute(
        execution_name=row.execution_name, item_kind=row.item_kind, item_id=row.item_id,
        policy=row.policy_name, headline=headline(json.loads(row.item or "{}"), policy),
        target=detail.get("target"), audited_at=row.audited_at,
        decided={d.get("question"): d.get("option_id") for d in decisions},
        decided_by={d.get("question"): d.get("readout") or d.get("source") for d in decisions},
        corrected=corrected)


def correction_name(record: DecisionRecord) -> str:
    """The one execution name an item's correction may have: a second correction is refused by Step Functions."""
    return execution_name(record.item_kind, record.item_id, record.item_key + CORRECTION_KEY_SUFFIX)


def audited_reviewer(detail: Mapping[str, Any]) -> str | None:
    """How an audit row's reviewer is shown. Rows written since reviewers are audited by `sub`
    carry the answer's verified email or user name; older rows named the reviewer by the email the
    token carried then, and are shown as they are."""
    review = detail.get("review")
    if not isinstance(review, Mapping):
        review = {}
    return review.get("reviewer_email") or review.get("reviewer_username") or detail.get("reviewer")


def correction(record: DecisionRecord, original_execution: str, answers: Mapping[str, str], reviewer: Reviewer, *,
               note: str = "", sign: IdentitySigner | None = None) -> CorrectedRecord:
    """The record that re-routes an automatically routed item by a reviewer's answers: checked
    against the record's own policy and choices, and refused when it would change nothing. The
    answer names the reviewer's `sub` as their identity, signed with `sign` (the stack's key)."""
    if record.route != "auto" or record.destination is None:
        raise InvalidReview(f"execution {original_execution!r} was not routed automatically: answer its review instead")
    name = correction_name(record)
    answer = complete_review(record, name, answers, reviewer.sub, note=note, username=reviewer.username,
                             email=reviewer.email, reviewer_id=cognito_identity(reviewer.sub), sign=sign)
    decided = {d.question: d.option_id for d in record.decisions}
    if answer.chosen.answers == decided:
        raise InvalidReview(f"answers: {dict(answers)} is what the item was routed by; choose the right answer")
    chosen = answer.chosen
    reason = (f"correction by {reviewer.shown} of the automatic route to {record.destination.target} "
              f"(execution {original_execution}): now {chosen.destination.target}")
    fields = record.model_dump(exclude={"route", "route_reason", "destination", "escalate"})
    # Escalation comes from the corrected answer alone (the workflow pages when it escalates).
    return CorrectedRecord(**fields, route="correction", route_reason=reason, destination=None, escalate=False,
                           correction=answer)


#: Rows of the labelled-examples table per export page (each a few KB: far below Lambda's 6 MB answer).
EXPORT_PAGE_ROWS = 500
#: The table's key attributes: all a page token may name.
EXPORT_KEY = ("policy_name", "item_key")


def page_token(key: Mapping[str, str]) -> str:
    """The next page's token: the last row's key, as URL-safe base64 JSON."""
    return base64.urlsafe_b64encode(json.dumps(dict(key), separators=(",", ":")).encode()).decode()


def read_page_token(token: str | None) -> dict[str, str] | None:
    """The key a page token names; InvalidReview (400) for anything that is not one we gave out."""
    if not token:
        return None
    try:
        key = json.loads(base64.urlsafe_b64decode(token.encode()))
    except (ValueError, TypeError):
        key = None
    if not (isinstance(key, dict) and set(key) == set(EXPORT_KEY) and all(isinstance(v, str) and v for v in key.values())):
        raise InvalidReview("page: not a page token of this export (use the X-Next-Page header of the page before)")
    return key


def labelled_examples(rows: Sequence[Mapping[str, str]], policy: str | None = None) -> list[dict[str, Any]]:
    """The labelled-examples table's rows as `make fit REVIEWS=` reads them (review_cli export's lines)."""
    examples = [labelled_example(row) for row in rows]
    return [e for e in examples if not policy or e["policy"] == policy]
