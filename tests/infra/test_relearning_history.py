"""The relearning workflow's history stays under Step Functions' limit. A Standard execution fails
once its history passes 25,000 events, and the shadow loop (WaitForShadowedItems, JudgeShadow,
ShadowJudged, back to the wait) repeats until the shadow period ends: the number of looks must be
bounded whatever RelearningShadowCheckSeconds and RelearningShadowTimeoutSeconds are.

The events each look adds are counted from the definition (`events`), never written down here, so
a state added to the loop, or a higher MAX_SHADOW_LOOKS, fails the budget below. The looks are
counted by running the relearning job's own `shadow` and `judge_shadow` against a clock moved on
by the wait it asks for, at the template's extreme values."""

from __future__ import annotations

import functools
import itertools
import json
import math
from pathlib import Path
from typing import Any, Iterator

import pytest
from aws_lambda_powertools import Logger

from decision_router.domain.shadow import ShadowCounts
from local.template import load_template
from relearning import shadowing
from relearning.job import MAX_SHADOW_LOOKS, MAX_SHADOW_SECONDS, Relearning, shadow_start_key, shadow_wait_seconds
from tests.fakes.head_store import FakeHeadStore

REPO = Path(__file__).resolve().parents[2]
DEFINITION = json.loads((REPO / "statemachine/relearning.asl.json").read_text(encoding="utf-8"))
HISTORY_LIMIT = 25_000
#: Kept free of what the count below leaves out: the collect step's extra rounds (the only other
#: loop; each round resumes where the last stopped), an early Wait, a redrive.
MARGIN = 2_500
#: The longest Wait Step Functions accepts (Seconds / SecondsPath).
MAX_WAIT_SECONDS = 99_999_999
#: Event types a Task adds per attempt: scheduled, started, and how it ended.
TASK_ATTEMPT = ("TaskScheduled", "TaskStarted", "TaskSucceeded|TaskFailed|TaskTimedOut")
#: A callback or .sync integration also records that the request was submitted.
SUBMITTED = "TaskSubmitted"


def events(state: dict[str, Any]) -> int:
    """History events one pass through the state adds at most (AWS's HistoryEvent types):

    - Pass, Wait, Choice, Succeed: <Type>StateEntered and <Type>StateExited, 2.
    - Fail: FailStateEntered, 1 (the ExecutionFailed is the execution's own, see `run_events`).
    - Task: TaskStateEntered and TaskStateExited, and for each attempt TaskScheduled, TaskStarted
      and one of TaskSucceeded / TaskFailed / TaskTimedOut, with TaskSubmitted besides for a
      callback (`.waitForTaskToken`) or `.sync` integration (the Lambda and activity forms add the
      same three under their own names). Attempts at worst: 1 and each retrier's MaxAttempts (3
      when unset). SendTaskHeartbeat adds no event.
    - Parallel, Map: refused: their branches' events would have to be counted too.
    """
    kind = state["Type"]
    if kind in ("Pass", "Wait", "Choice", "Succeed"):
        return 2
    if kind == "Fail":
        return 1
    if kind == "Task":
        attempts = 1 + sum(retrier.get("MaxAttempts", 3) for retrier in state.get("Retry", []))
        resource = str(state.get("Resource", ""))
        per_attempt = len(TASK_ATTEMPT) + (resource.endswith((".waitForTaskToken", ".sync")) and 1)
        return 2 + attempts * per_attempt
    raise AssertionError(f"a {kind} state: count its branches' events before relying on this budget")


def successors(state: dict[str, Any]) -> list[str]:
    found = [state["Next"]] if "Next" in state else []
    found += [rule["Next"] for rule in state.get("Choices", [])]
    found += [state["Default"]] if "Default" in state else []
    return found + [catcher["Next"] for catcher in state.get("Catch", [])]


def cycles(states: dict[str, Any]) -> list[tuple[str, ...]]:
    """Each elementary cycle once, starting at its alphabetically first state."""
    found = []

    def walk(path: tuple[str, ...]) -> Iterator[tuple[str, ...]]:
        for following in successors(states[path[-1]]):
            if following == path[0]:
                yield path
            elif following not in path and following > path[0]:
                yield from walk(path + (following,))

    for start in sorted(states):
        found += list(walk((start,)))
    return found


def longest_path_events(states: dict[str, Any], start: str) -> int:
    """The most events of any path from `start` that visits no state twice."""
    def walk(name: str, seen: frozenset[str]) -> int:
        after = [walk(n, seen | {n}) for n in successors(states[name]) if n not in seen]
        return events(states[name]) + max(after, default=0)
    return walk(start, frozenset({start}))


def shadow_wait_state(states: dict[str, Any]) -> str:
    (wait,) = [name for name, state in states.items() if state["Type"] == "Wait"]
    return wait


def look_events(states: dict[str, Any]) -> int:
    """The most events one look (one trip round a cycle through the shadow's Wait) adds."""
    wait = shadow_wait_state(states)
    looks = [cycle for cycle in cycles(states) if wait in cycle]
    assert looks, f"{wait} is in no loop"
    return max(sum(events(states[name]) for name in cycle) for cycle in looks)


def run_events(states: dict[str, Any], start: str) -> int:
    """The most events an execution can have: ExecutionStarted and its closing event, the longest
    path through the definition (one look included), and MAX_SHADOW_LOOKS - 1 looks more."""
    return 2 + longest_path_events(states, start) + (MAX_SHADOW_LOOKS - 1) * look_events(states)


def test_each_look_is_counted_from_the_definition_and_the_worst_run_fits_the_history():
    states = DEFINITION["States"]
    per_look = look_events(states)
    worst = run_events(states, DEFINITION["StartAt"])
    # Wait (2) + JudgeShadow, a callback Task (6) + ShadowJudged (2) today: 10 a look, 20,066 in all.
    assert worst <= HISTORY_LIMIT - MARGIN, (
        f"{MAX_SHADOW_LOOKS} looks of {per_look} events make a run of up to {worst} events: over "
        f"{HISTORY_LIMIT - MARGIN} ({HISTORY_LIMIT} less {MARGIN} kept free); lower relearning.runs.MAX_SHADOW_LOOKS "
        "or take states out of the loop")
    # The only other loop is the collect step's (it resumes where the last round stopped): the
    # room left holds hundreds of its rounds.
    wait = shadow_wait_state(states)
    others = [set(cycle) for cycle in cycles(states) if wait not in cycle]
    assert others == [{"CollectSignals", "SignalsComplete"}], others
    collect_round = sum(events(states[name]) for name in others[0])
    assert (HISTORY_LIMIT - worst) // collect_round >= 500


def test_the_count_follows_the_definition():
    """A state added to the loop, or a retry on its task, is counted: the budget then fails."""
    states = json.loads(json.dumps(DEFINITION["States"]))
    base = look_events(states)
    states["JudgeShadow"]["Next"] = "Pause"
    states["Pause"] = {"Type": "Pass", "Next": "ShadowJudged"}
    assert look_events(states) == base + 2
    states["JudgeShadow"]["Retry"] = [{"ErrorEquals": ["States.TaskFailed"], "MaxAttempts": 2}]
    assert look_events(states) == base + 2 + 2 * 4
    assert run_events(states, DEFINITION["StartAt"]) > HISTORY_LIMIT - MARGIN


def test_the_wait_between_looks_is_the_shadow_steps_and_the_loop_keeps_it():
    states = DEFINITION["States"]
    wait = states[shadow_wait_state(states)]
    assert wait["SecondsPath"] == "$.shadow.check_seconds"
    assert states["ShadowCandidates"]["ResultPath"] == "$.shadow"
    for cycle in cycles(states):
        for name in cycle:  # nothing in a loop replaces $.shadow (or the whole state)
            result_path = states[name].get("ResultPath", "$" if states[name]["Type"] in ("Task", "Pass") else None)
            assert result_path is None or not (result_path in ("$", "$.shadow") or result_path.startswith("$.shadow.")), name


class _NoItems:
    """A shadow that never answers an item: the loop lasts the whole shadow period."""

    def counts(self, *args: Any) -> ShadowCounts:
        return ShadowCounts()


def looks(check_seconds: int, timeout_seconds: float) -> tuple[int, int]:
    """(looks, seconds between two) of one shadow period as the workflow runs it: the shadow step's
    check_seconds waited before each judge_shadow, until it is ready."""
    now = [1_000_000.0]
    job = Relearning(FakeHeadStore(), labels=None, endpoint=lambda probe: None, shadow_items=200,
                     shadow_timeout_seconds=timeout_seconds, shadow_check_seconds=check_seconds, tally=_NoItems(),
                     precision=object(), clock=lambda: now[0], logger=Logger(service="test"))
    run = "relearn-support-ticket-1"
    wait = job.shadow("support-ticket", run, [])["check_seconds"]
    job.store.put(shadow_start_key(run, "support-ticket"), json.dumps(
        {"started_at": now[0], "questions": [{"question": "queue", "head_version": "v2", "sha256": "ab" * 32}]}).encode())
    for count in itertools.count(1):
        now[0] += wait
        if job.judge_shadow("support-ticket", run)["ready"]:
            return count, wait
        assert count < 10 * MAX_SHADOW_LOOKS, "the shadow never ends"
    raise AssertionError("unreachable")


def _allowed(name: str) -> tuple[float, float]:
    spec = load_template()["Parameters"][name]
    return float(spec["MinValue"]), float(spec["MaxValue"])


def test_no_allowed_value_makes_more_looks_than_the_bound():
    check_min, check_max = _allowed("RelearningShadowCheckSeconds")
    timeout_min, timeout_max = _allowed("RelearningShadowTimeoutSeconds")
    assert check_min >= 1 and timeout_min >= 1 and check_max == timeout_max == MAX_SHADOW_SECONDS
    checks = sorted({int(check_min), 1, 2, 7, 60, 303, 900, 3600, 86400, int(check_max)})
    timeouts = sorted({timeout_min, 1, 2.5, 1999, 2000, 2001, 604800, 1_000_001, timeout_max})
    for check, timeout in itertools.product(checks, timeouts):
        wait = shadow_wait_seconds(check, timeout)
        assert wait >= check and wait <= MAX_WAIT_SECONDS
        assert math.ceil(timeout / wait) <= MAX_SHADOW_LOOKS, (check, timeout, wait)


@pytest.mark.parametrize(("check", "timeout", "expected_looks", "expected_wait"), [
    (900, 604800, 672, 900),                    # the defaults: every 900 s, as configured
    (1, 1999, 1999, 1),                         # just under the bound: as configured
    (60, 604800, 1997, 303),                    # a week looked at each minute: spread to 303 s
    (1, MAX_SHADOW_SECONDS, 2000, 15552),       # the template's extremes
    (MAX_SHADOW_SECONDS, 1, 1, MAX_SHADOW_SECONDS),
])
def test_the_job_waits_longer_rather_than_look_more_often(check, timeout, expected_looks, expected_wait, monkeypatch):
    # the policy read once, not at each of up to 2,000 looks (it validates its heads each time)
    monkeypatch.setattr(shadowing, "shipped_policy", functools.lru_cache(shadowing.shipped_policy))
    assert looks(check, timeout) == (expected_looks, expected_wait)


def test_values_past_the_template_are_refused_naming_both_parameters():
    with pytest.raises(ValueError, match="RelearningShadowTimeoutSeconds .* and RelearningShadowCheckSeconds"):
        Relearning(FakeHeadStore(), labels=None, endpoint=lambda probe: None,
                   shadow_timeout_seconds=MAX_SHADOW_SECONDS + 1, tally=_NoItems(), precision=object())
