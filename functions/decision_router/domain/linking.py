"""Duplicates linked: a ticket that describes an open incident is linked to it.

The rule (`link_ticket`): a ticket links to an open incident created while the incident was open
(from `LEAD` before the incident was reported, since customers often write in before the alarm
fires, until it was resolved; while it is open, without end) when either

- its subject or body **names** the incident's service (the `Incident.service` field: a whole
  word, any case; `payments-api` is one word, so `payments` alone does not name it, nor does
  `payments-api-v2`): the strongest evidence, it wins over any description; or
- its words **describe** the incident: `score` over the incident's words (the service's words
  split out of its id, the policy's aliases of the service, the alarm's title and description)
  reaches `THRESHOLD`, measured on labelled ticket-incident pairs (bench/linking.py).

When several incidents are named, the one reported last wins; when several are described, the
highest score wins, then the one reported last (ties: the greatest incident id, so the answer
never depends on the store's order). A link is a suggestion: it routes nothing.

`suggestion` is the other side: once an incident's review is answered, the team its reviewer
chose is offered on its linked tickets still in review, as a suggestion only (never applied).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Iterable, Mapping, Sequence

from pydantic import BaseModel, ConfigDict, Field

from ..items import Ticket, UtcDatetime, item_ref

#: How long before an incident was reported a ticket about its service still counts as about it.
LEAD = timedelta(minutes=15)
#: Services shorter than this are not matched (a service named `db` or `ui` would link any ticket).
MIN_SERVICE_LENGTH = 3
#: The incident policy's question whose answer is a team.
TEAM_QUESTION = "team"
#: The most of an incident's title and description kept on its open row and read for a score:
#: the words that say what broke come first; the rest would only bloat every open row.
MAX_TITLE = 200
MAX_DESCRIPTION = 600
#: The score from which a ticket describes an incident: the fit half's best F1 on
#: events/linking/pairs.jsonl (`python -m bench.linking` measures it; a test holds the two equal).
THRESHOLD = 0.6
#: A word of the service's own name (split out of its id, or an alias) weighs this much; a word of
#: the alarm's title or description weighs `INCIDENT_WORD` (alarms name metrics customers never say).
SERVICE_WORD = 1.0
INCIDENT_WORD = 0.5
#: Words that say nothing of which outage: English function words, and the words every alarm and
#: every complaint share (a ticket saying "error" describes no incident in particular).
STOP_WORDS = frozenset("""
a about above after again against all am an and any are as at be because been before being below between both
but by can cannot could did do does doing don down during each few for from further had has have having he her
here hers him his how i if in into is it its itself just me more most my no nor not now of off on once only or
other our ours out over own same she should so some such than that the their theirs them then there these they
this those through to too under until up very was we were what when where which while who whom why will with
would you your yours us im ive dont doesnt cant isnt wont hi hello thanks thank please regards team hey since
still again anyone somebody someone get got also just today now minutes minute hour hours ago
api apis svc service services prod production app application server servers system internal aws
alarm alarms alert alerts cloudwatch threshold crossed datapoint datapoints state value greater less than
high low rate ratio percent count sum average avg p99 p95 p50 5xx 4xx 500 502 503 504 error errors http
issue issues problem problems help urgent asap
""".split())
#: Words that report trouble (read before the stop words go): a ticket that uses the
#: outage's words without any of these asks about the product ("how do I change the checkout
#: currency?"), so its weight counts `NO_TROUBLE` times.
TROUBLE = frozenset("""
fail failing failed fails failure error errors broken broke break down outage not cannot cant can't won't wont
doesn't doesnt isn't isnt never nothing stuck slow slowly timeout timing hang hangs hanging spin spinning
delay delayed delays late lag lagging missing gone disappear disappeared unable declined rejected reject
unavailable crash crashed crashing empty 500 502 503 504 5xx
""".split())
NO_TROUBLE = 0.5


class OpenIncident(BaseModel):
    """An incident of the open-incident store, as the matching rule reads it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    key: str = Field(description="The source's correlation key (the store's partition key).")
    incident_id: str
    service: str
    opened_at: UtcDatetime = Field(description="When the incident was reported (its `reported_at`).")
    resolved_at: UtcDatetime | None = None
    source: str | None = Field(None, description="The incident's source (its item's): with its id, which incident it is.")
    title: str | None = Field(None, max_length=MAX_TITLE, description=(
        "The incident's title (a CloudWatch alarm's: its name), cut to MAX_TITLE; None on rows written before it was kept."))
    description: str | None = Field(None, max_length=MAX_DESCRIPTION, description=(
        "The incident's description, cut to MAX_DESCRIPTION; None on rows written before it was kept."))


def bounded(text: str | None, limit: int) -> str | None:
    """`text` cut to `limit` characters at a word's end (None or empty: None), as the open row keeps it."""
    text = (text or "").strip()
    if len(text) <= limit:
        return text or None
    cut = text[:limit]
    return cut.rsplit(None, 1)[0] if " " in cut else cut


class LinkedIncident(BaseModel):
    """The incident a ticket is linked to, and why: kept on the ticket's decision record and audit row."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    incident_key: str
    incident_id: str
    service: str
    opened_at: str = Field(description="When the incident was reported (ISO 8601).")
    why: str = Field(description="Which field named the service, and the time that made it count.")
    source: str | None = Field(None, description=(
        "The incident's source: with its id, which incident it is (None on links made before it was kept)."))

    def ref(self) -> str | None:
        """The incident's identity (`items.item_ref`); None on a link made before its source was kept."""
        return item_ref("incident", self.source, self.incident_id) if self.source else None

    def names(self, incident_ref: str | None, incident_id: str) -> bool:
        """Whether the link is to this incident: its identity when both are known, else its id."""
        mine = self.ref()
        return mine == incident_ref if mine is not None and incident_ref is not None else self.incident_id == incident_id

    def line(self) -> str:
        """One line, as the console shows it."""
        return f"linked to incident {self.incident_id} ({self.service}, opened at {self.opened_at})"

    def reason(self) -> str:
        """The line and why the link was made, as the decision's reason (`why.linked`) keeps it."""
        return f"{self.line()}: {self.why}"


_WORD = re.compile(r"[a-z0-9]+")


def stem(word: str) -> str:
    """A light suffix strip, so "failing", "fails" and "failed" meet "fail", "payments" meets
    "payment" (not a linguist's stemmer: it only has to put a ticket's and an alarm's forms together)."""
    for suffix in ("ing", "ed", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            word = word[: -len(suffix)]
            break
    if len(word) >= 5 and word[-1] == word[-2] and word[-1] not in "aeiou":
        word = word[:-1]  # "stopped" -> "stopp" -> "stop" ("billing" -> "bill" stays)
    return word


def words(text: str) -> list[str]:
    """The words of `text` that can tell one outage from another: lower case, split on anything
    that is not a letter or digit (`checkout-api` -> checkout, api), stop words and numbers left
    out, and words shorter than MIN_SERVICE_LENGTH, each stemmed (`stem`)."""
    found = []
    for word in _WORD.findall(text.lower()):
        if word in STOP_WORDS or word.isdigit() or len(word) < MIN_SERVICE_LENGTH:
            continue
        found.append(stem(word))
    return found


def incident_terms(incident: OpenIncident, aliases: Sequence[str] = ()) -> dict[str, float]:
    """Each word of the incident with its weight: the service's words (split out of its id) and
    its aliases' words at `SERVICE_WORD`, its title's and description's at `INCIDENT_WORD`."""
    terms: dict[str, float] = {}
    for word in words(" ".join([incident.title or "", incident.description or ""])):
        terms[word] = INCIDENT_WORD
    for word in words(" ".join([incident.service, *aliases])):
        terms[word] = SERVICE_WORD
    return terms


@dataclass(frozen=True)
class Score:
    """How well a ticket's words describe an incident: `value` in [0, 1) and the words shared."""

    value: float
    shared: tuple[str, ...]
    trouble: str | None = None

    def line(self, threshold: float) -> str:
        said = ", ".join(repr(word) for word in self.shared[:5])
        trouble = f"; trouble: {self.trouble!r}" if self.trouble else f"; no trouble word: x{NO_TROUBLE}"
        return f"score {self.value:.2f} \u2265 {threshold:.2f}: {said}{trouble}"


def trouble_in(text: str) -> str | None:
    """The first word of `text` that reports trouble (`TROUBLE`), or None."""
    for word in re.findall(r"[a-z0-9']+", text.lower()):
        if word in TROUBLE or stem(word) in TROUBLE:
            return word
    return None


def link_score(ticket_words: Iterable[str], terms: Mapping[str, float], spread: Mapping[str, int] | None = None,
          trouble: str | None = None) -> Score:
    """The weight S of the incident's words the ticket uses (each word once, divided by how many
    of the open incidents use it: `spread`, an IDF over what is open now, so a word two outages
    share tells neither apart; times `NO_TROUBLE` when the ticket reports no `trouble`),
    saturated as S / (S + 1) (BM25's: a second, third word adds less)."""
    used = set(ticket_words)
    shared = sorted((w for w in terms if w in used), key=lambda w: (-terms[w], w))
    total = sum(terms[w] / max(1, (spread or {}).get(w, 1)) for w in shared) * (1.0 if trouble else NO_TROUBLE)
    return Score(value=round(total / (total + 1.0), 2), shared=tuple(shared), trouble=trouble)


def service_pattern(service: str) -> re.Pattern[str] | None:
    """The service's name as a whole word, any case: not inside a longer name (letters, digits,
    `-`, `_` and `.` between words continue a name: `payments-api` is not named by
    `payments-api-v2` nor by `my.payments-api`). None for a name too short to mean anything."""
    name = service.strip()
    if len(name) < MIN_SERVICE_LENGTH:
        return None
    return re.compile(rf"(?<![\w.-]){re.escape(name)}(?![\w-]|\.\w)", re.IGNORECASE)


def _named_in(ticket: Ticket, pattern: re.Pattern[str]) -> str | None:
    for field in ("subject", "body"):
        if pattern.search(getattr(ticket, field)):
            return field
    return None


def _during(created: datetime, incident: OpenIncident) -> bool:
    return incident.opened_at - LEAD <= created and (incident.resolved_at is None or created <= incident.resolved_at)


def link_scores(ticket: Ticket, incidents: Sequence[OpenIncident],
           aliases: Mapping[str, Sequence[str]] | None = None) -> list[Score]:
    """Each incident's `link_score` for `ticket` (in `incidents`' order), the spread of each word
    counted over `incidents`."""
    terms = [incident_terms(incident, (aliases or {}).get(incident.service, ())) for incident in incidents]
    spread = Counter(word for each in terms for word in each)
    text = f"{ticket.subject} {ticket.body}"
    ticket_words, trouble = words(text), trouble_in(text)
    return [link_score(ticket_words, each, spread, trouble) for each in terms]


def link_ticket(ticket: Ticket, incidents: Iterable[OpenIncident], aliases: Mapping[str, Sequence[str]] | None = None,
                *, threshold: float = THRESHOLD) -> LinkedIncident | None:
    """The open incident `ticket` names or describes, or None (see the module's rule); `aliases`:
    the policy's other names of each service (`Policy.service_aliases`)."""
    during = [incident for incident in incidents if _during(ticket.created_at, incident)]
    named: list[tuple[OpenIncident, str]] = []
    for incident in during:
        pattern = service_pattern(incident.service)
        field = _named_in(ticket, pattern) if pattern is not None else None
        if field is not None:
            named.append((incident, field))
    if named:
        incident, field = max(named, key=lambda match: (match[0].opened_at, match[0].incident_id))
        others = f"; the latest of {len(named)} matching incidents" if len(named) > 1 else ""
        return _linked(ticket, incident, f"the ticket's {field} names {incident.service!r}", others)
    described = [(found, incident) for found, incident in zip(link_scores(ticket, during, aliases), during)
                 if found.value >= threshold]
    if not described:
        return None
    found, incident = max(described, key=lambda match: (match[0].value, match[1].opened_at, match[1].incident_id))
    others = f"; the best of {len(described)} described incidents" if len(described) > 1 else ""
    return _linked(ticket, incident, f"the ticket describes it ({found.line(threshold)})", others)


def _linked(ticket: Ticket, incident: OpenIncident, how: str, others: str) -> LinkedIncident:
    opened = incident.opened_at.isoformat().replace("+00:00", "Z")
    window = "before it was reported (within the lead)" if ticket.created_at < incident.opened_at else "while it was open"
    return LinkedIncident(incident_key=incident.key, incident_id=incident.incident_id, service=incident.service,
                          opened_at=opened, source=incident.source, why=f"{how} and it was created {window}{others}")


class Suggestion(BaseModel):
    """A team suggested for a linked ticket in review by its incident's answered review."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    incident_id: str
    team: str = Field(description="The team the incident's reviewer chose.")
    question: str | None = Field(description="The ticket's question offering that team as an option (None: none does).")
    option: str | None = Field(description="That option, to preselect only if the reviewer wants it.")

    def line(self) -> str:
        offered = f" ({self.question}: {self.option})" if self.question else " (no option of the ticket's questions)"
        return f"incident {self.incident_id} was answered with team {self.team}: suggested{offered}, not applied"


def suggestion(incident_id: str, answers: Mapping[str, str] | None,
               questions: Sequence[tuple[str, Sequence[str]]]) -> Suggestion | None:
    """The team the incident's reviewer chose (`answers`: its review's answers), as a suggestion
    for a linked ticket whose policy asks `questions` (id, option ids): the first question that
    offers that team as an option carries it. None when the review gave no team."""
    team = (answers or {}).get(TEAM_QUESTION)
    if not team:
        return None
    for question, options in questions:
        if team in options:
            return Suggestion(incident_id=incident_id, team=team, question=question, option=team)
    return Suggestion(incident_id=incident_id, team=team, question=None, option=None)


# ---------------------------------------------------------------------------------------------------
# The link index: which open incidents a ticket can be linked to, found by key.
#
# An open incident is filed under its service's name and its salient words (`filing_keys`); a ticket
# looks up the names and words it uses, and the services whose aliases it uses (`lookup_keys`); the
# incidents filed under those keys are the only ones `link_ticket` compares it with (`candidates`).
# An incident the rule would link is always filed under a key the ticket looks up, except when it is
# described only in words past its first `MAX_FILED_WORDS`, named in a way no run of the ticket's
# letters, digits, `.`, `-` and `_` spells (a service name with a space), or filed under a key that
# already held `MAX_FILED` open incidents, or when the ticket's words that find it come after its
# first `MAX_LOOKUP_KEYS` keys; past `MAX_CANDIDATES` incidents, the least likely are left.

#: A lookup key's kinds: a service's name (lower case, whole) and a word (`words`: stemmed).
NAME_KEY = "name#"
WORD_KEY = "word#"
#: The most words an incident is filed under: its service's words, then its title's, then its
#: description's, in order (each filing is a write when it opens and another when it resolves).
MAX_FILED_WORDS = 16
#: The most open incidents one key lists (a word shared by more tells none of them apart).
MAX_FILED = 100
#: The most keys one ticket looks up, and the most incidents read for it: one BatchGetItem each.
MAX_LOOKUP_KEYS = 100
MAX_CANDIDATES = 100
_NAME_RUN = re.compile(r"[\w.-]+")


def filing_keys(service: str, title: str | None = None, description: str | None = None) -> list[str]:
    """The lookup keys an open incident is filed under: its service's name (found by a ticket that
    names it or uses one of its aliases), then its first `MAX_FILED_WORDS` words (the service's
    first, then its title's and description's, as `incident_terms` reads them, without the aliases:
    a ticket looks those up by the service's name)."""
    name = service.strip().lower()
    keys = [NAME_KEY + name] if name else []
    # Cut as the open row keeps them: the words filed are the words read back and scored.
    kept = f"{bounded(title, MAX_TITLE) or ''} {bounded(description, MAX_DESCRIPTION) or ''}"
    salient = dict.fromkeys([*words(service), *words(kept)])
    return keys + [WORD_KEY + word for word in list(salient)[:MAX_FILED_WORDS]]


def names_in(text: str) -> set[str]:
    """Every name `service_pattern` could find in `text`, lower case: each run of letters, digits,
    `.`, `-` and `_`, and each of its beginnings that ends before a `.` no letter or digit follows."""
    found = set()
    for run in _NAME_RUN.findall(text.lower()):
        found.add(run)
        found.update(run[:at] for at, char in enumerate(run)
                     if char == "." and at and not (at + 1 < len(run) and (run[at + 1].isalnum() or run[at + 1] == "_")))
    return {name for name in found if len(name) >= MIN_SERVICE_LENGTH}


def lookup_keys(ticket: Ticket, aliases: Mapping[str, Sequence[str]] | None = None) -> list[str]:
    """The lookup keys of `ticket`, at most `MAX_LOOKUP_KEYS`: the name of each service whose
    aliases' words it uses (an alias is the ticket policy's, never filed), the names it could be
    naming that join words (`checkout-api`), its words in order, then the plain names no word
    stands for (a stop word, a number). A plain name that is a word is left to its word's key (a
    service's own words are filed first), so a ticket looks up about as many keys as it has words."""
    text = f"{ticket.subject} {ticket.body}"
    used = list(dict.fromkeys(words(text)))
    aliased = sorted(service.strip().lower() for service, others in (aliases or {}).items()
                     if set(used) & set(words(" ".join(others))))
    names = sorted(name for name in names_in(text) if not (_WORD.fullmatch(name) and words(name)))
    compound = [name for name in names if not _WORD.fullmatch(name)]
    plain = [name for name in names if _WORD.fullmatch(name)]  # a stop word or a number: last
    keys = dict.fromkeys([*(NAME_KEY + name for name in [*aliased, *compound]), *(WORD_KEY + word for word in used),
                          *(NAME_KEY + name for name in plain)])
    return list(keys)[:MAX_LOOKUP_KEYS]


def candidates(ticket: Ticket, filed: Mapping[str, Mapping[str, datetime]], *,
               limit: int = MAX_CANDIDATES) -> list[str]:
    """The keys of the incidents to read for `ticket`, given what its lookup keys list (`filed`: key
    -> {incident key: reported at}): those reported by the ticket's time plus `LEAD`, the ones under
    a name first, then those under more of its keys, then the latest; at most `limit`."""
    named: set[str] = set()
    hits: Counter[str] = Counter()
    reported: dict[str, datetime] = {}
    for key, incidents in filed.items():
        for incident_key, at in incidents.items():
            if at - LEAD > ticket.created_at:
                continue  # reported after the ticket's lead: never linked to it
            reported[incident_key] = at
            hits[incident_key] += 1
            if key.startswith(NAME_KEY):
                named.add(incident_key)
    ranked = sorted(reported, key=lambda k: (k in named, hits[k], reported[k], k), reverse=True)
    return ranked[:limit]
