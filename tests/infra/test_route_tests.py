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
                       "FAIL  incident.yaml: search-held-under-orders-db",  # through checkout: no longer
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


TICKET = ("{ticket_id: RT-9, subject: s, body: b, customer: {id: c, tier: pro}, channel: email, "
          "created_at: '2026-11-29T09:00:00Z'}")


def test_a_case_that_cannot_run_says_why(tmp_path, capsys):
    path = tmp_path / "suite.yaml"
    path.write_text("cases:\n  - {name: nothing-it-knows, item: {hello: world}, expect: {}}\n")
    status, out = run(capsys, str(path))
    assert status == 1
    assert "cannot tell what it is" in out
    assert "route-test: 1 case(s) FAILED" in out and "(exit status 1; a malformed suite would be 2)" in out


@pytest.mark.parametrize("answers, message", [
    ("{queue: {refunds: 0.9}}", "answers.queue: refunds not among its options in policy 'support-ticket' (billing, "),
    ("{team: {billing: 0.9}}", "answers.team: the ticket policy 'support-ticket' has no question 'team' (its questions: queue)"),
])
def test_an_answer_the_policy_cannot_give_is_a_malformed_suite(tmp_path, capsys, answers, message):
    path = tmp_path / "suite.yaml"
    path.write_text(f"cases:\n  - {{name: unknown-option, item: {TICKET}, answers: {answers}, expect: {{}}}}\n")
    status, out = run(capsys, str(path))
    assert status == 2
    assert f"{path}: case 'unknown-option': {message}" in out
    assert "MALFORMED suite or policy file: nothing was checked (exit status 2" in out
    assert "FAIL" not in out


def test_a_sample_outside_the_repository_and_the_suites_folder_is_refused(tmp_path, capsys):
    secret = tmp_path / "secret" / "token.json"
    secret.parent.mkdir()
    secret.write_text(json.dumps({"registry-token": "s3cr3t-value"}))
    suites = tmp_path / "suites"
    suites.mkdir()
    (suites / "linked.json").symlink_to(secret)
    escape = "../" * (len(REPO_ROOT.parts) + 2) + str(secret).lstrip("/")
    for sample, message in [(str(secret), "an absolute path"), (escape, "leads out of"),
                            ("../secret/token.json", "leads out of"), ("linked.json", "leads out of")]:
        path = suites / "suite.yaml"
        path.write_text(f"cases:\n  - {{name: x, sample: '{sample}', expect: {{outcome: routed}}}}\n")
        status, out = run(capsys, str(path))
        assert status == 2, (sample, out)
        assert message in out and "s3cr3t" not in out and "registry-token" not in out


def test_a_sample_beside_the_suite_is_read(tmp_path, capsys):
    (tmp_path / "ticket.json").write_text((REPO_ROOT / "events/tickets.jsonl").read_text().splitlines()[0])
    path = tmp_path / "suite.yaml"
    path.write_text("cases:\n  - {name: beside, sample: ticket.json, answers: {queue: {billing: 0.95}}, "
                    "expect: {outcome: routed, answers: {queue: billing}}}\n")
    status, out = run(capsys, str(path))
    assert status == 0, out


def test_a_failure_explains_how_the_given_probability_became_the_confidence(tmp_path, capsys):
    """queue has five options: p 0.55 is confidence (5 x 0.55 - 1) / 4 = 0.44 with normalized_peak."""
    path = tmp_path / "suite.yaml"
    path.write_text(f"cases:\n  - {{name: p-055, item: {TICKET}, answers: {{queue: {{billing: 0.55}}}}, "
                    "expect: {route: auto}}\n")
    status, out = run(capsys, str(path))
    assert status == 1
    assert 'route: expected "auto", got "review"' in out
    assert ("(queue: billing has p 0.55 over 5 options, so confidence 0.44 = normalized_peak "
            "clamp((n*max(p) - 1)/(n - 1), 0, 1) (needs ≥ 0.6); margin 0.44 (needs ≥ 0.15))") in out
