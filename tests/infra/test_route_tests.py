"""`make route-test`: the shipped suites hold on the shipped policies, and fail, line by line, when a
rule or a noise control is broken. The real intakes (TicketIntake, IncidentIntake) over
template.yaml's tables in moto; the endpoint's answers come from the suite (no model: that is what
a route test is for) and the workflow is not started (its record is what is checked; the routing
workflow has tests of its own)."""

from __future__ import annotations

import json

import pytest

from decision_router.domain.policies import POLICY_DIR
from local import route_tests
from local.cloudformation import REPO_ROOT

pytestmark = pytest.mark.stack
SUITES = sorted((REPO_ROOT / "events/route-tests").glob("*.yaml"))


def run(capsys, *argv: str) -> tuple[int, str]:
    status = route_tests.main([*argv])
    out = capsys.readouterr()
    return status, out.out + out.err


def changed_incident_policy(tmp_path, change) -> str:
    """A copy of the shipped incident policy, changed, with its head files beside it."""
    import shutil

    raw = json.loads((POLICY_DIR / "incident.json").read_text())
    change(raw)
    shutil.copytree(POLICY_DIR / "heads", tmp_path / "heads")
    path = tmp_path / "incident.json"
    path.write_text(json.dumps(raw))
    return str(path)


def test_the_shipped_suites_pass_and_cover_every_rule_and_noise_control(capsys):
    assert [p.name for p in SUITES] == ["incident.yaml", "support-ticket.yaml"]
    status, out = run(capsys, *map(str, SUITES))
    assert status == 0, out
    assert "FAIL" not in out and out.strip().endswith("route tests passed")
    text = "\n".join(p.read_text() for p in SUITES)
    for name in ("incident", "support-ticket"):
        policy = json.loads((POLICY_DIR / f"{name}.json").read_text())
        for rule in policy.get("rules", []):  # each rule has a case named after it
            assert rule["id"] in text, f"no route test names rule {rule['id']!r}"
        noise = policy.get("noise") or {}
        for window in noise.get("maintenance", []):
            assert f"window: {window['id']}" in text
        if noise.get("grouping"):
            assert "outcome: grouped" in text and "more severe" in text
        if noise.get("flapping"):
            assert "outcome: flapping" in text
        if (policy.get("dependencies") or {}).get("services"):
            assert "outcome: held" in text and "held_under:" in text and "releases: [" in text


def test_a_broken_rule_fails_its_case_with_a_diff(tmp_path, capsys):
    def drop_sev1_rule(raw):
        raw["rules"] = [r for r in raw["rules"] if r["id"] != "sev1-is-p1"]

    status, out = run(capsys, str(REPO_ROOT / "events/route-tests/incident.yaml"),
                      "--policy", changed_incident_policy(tmp_path, drop_sev1_rule))
    assert status == 1
    # without the rule, priority goes to the (given) answers, which do not name it
    assert "FAIL  incident.yaml: sev1-is-p1-and-escalates" in out
    assert "question 'priority' is left open by the rules: give answers.priority" in out


def test_a_moved_maintenance_window_fails_the_cases_it_held(tmp_path, capsys):
    def saturday(raw):
        raw["noise"]["maintenance"][0]["cron"] = "0 2 * * SAT"

    status, out = run(capsys, str(REPO_ROOT / "events/route-tests/incident.yaml"),
                      "--policy", changed_incident_policy(tmp_path, saturday))
    assert status == 1
    failing = [line for line in out.splitlines() if line.startswith("FAIL")]
    assert failing == ["FAIL  incident.yaml: orders-db-alarm-in-sunday-patching-is-suppressed"]
    assert 'outcome: expected "suppressed", got "routed"' in out
    assert 'window: expected "orders-db-sunday-patching", got null' in out


def test_a_dropped_dependency_fails_the_cases_it_held(tmp_path, capsys):
    def no_checkout_dependency(raw):
        raw["dependencies"]["services"]["checkout"] = []

    status, out = run(capsys, str(REPO_ROOT / "events/route-tests/incident.yaml"),
                      "--policy", changed_incident_policy(tmp_path, no_checkout_dependency))
    assert status == 1
    failing = [line for line in out.splitlines() if line.startswith("FAIL")]
    assert failing == ["FAIL  incident.yaml: checkout-held-under-orders-db",
                       "FAIL  incident.yaml: orders-db-recovery-releases-checkout"]
    assert 'outcome: expected "held", got "routed"' in out
    assert "releases: expected [" in out and "got []" in out


def test_a_raised_threshold_sends_a_confident_answer_to_review(tmp_path, capsys):
    def stricter(raw):
        raw["questions"][1]["thresholds"]["min_confidence"] = 0.95  # team

    status, out = run(capsys, str(REPO_ROOT / "events/route-tests/incident.yaml"),
                      "--policy", changed_incident_policy(tmp_path, stricter))
    assert status == 1
    assert 'route: expected "auto", got "review"' in out
    assert "team: confidence" in out  # the reason printed beside the diff


@pytest.mark.parametrize("suite, message", [
    ("cases: []", "cases: List should have at least 1 item"),
    ("cases: [{name: a, item: {ticket_id: X}}]", "cases.0.expect: Field required"),
    ("cases: [{name: a, item: {}, sample: events/x.json, expect: {}}]", "give exactly one of `sample`"),
    ("cases: [{name: a, item: {}, expect: {outcome: paged}}]", "cases.0.expect.outcome"),
    ("cases: [{name: a, item: {}, expect: {grouped_with: b}}]", "names 'b', which is no earlier case"),
    ("cases: [{name: a, item: {}, expect: {releases: [a]}}]", "expect.releases names 'a', which is no earlier case"),
    ("cases: [{name: a, item: {}, answers: {team: {x: 0.8, y: 0.7}}, expect: {}}]", "add up to at most 1"),
])
def test_a_malformed_suite_is_refused_naming_the_field(tmp_path, capsys, suite, message):
    path = tmp_path / "suite.yaml"
    path.write_text(suite)
    status, out = run(capsys, str(path))
    assert status == 2
    assert message in out and str(path) in out


def test_a_case_that_cannot_run_says_why(tmp_path, capsys):
    path = tmp_path / "suite.yaml"
    path.write_text("cases:\n"
                    "  - {name: nothing-it-knows, item: {hello: world}, expect: {}}\n"
                    "  - {name: unknown-option, item: {ticket_id: RT-9, subject: s, body: b, customer: {id: c, tier: pro},\n"
                    "     channel: email, created_at: '2026-11-29T09:00:00Z'}, answers: {queue: {refunds: 0.9}}, expect: {}}\n")
    status, out = run(capsys, str(path))
    assert status == 1
    assert "cannot tell what it is" in out
    assert "answers.queue: refunds not among its options" in out
