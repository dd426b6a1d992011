import copy
import json

import pytest

from decision_contract import DecisionRequest
from decision_router.domain.model_requests import build_decisions, build_state
from decision_router.domain.policies import POLICY_DIR, PolicyError, load_policy
from decision_router.items import parse_item
from tests.functions.conftest import ALL_TARGETS, INCIDENT_TARGETS, TICKET_TARGETS, policy_files_beside


@pytest.fixture(scope="module")
def ticket_raw():
    return json.loads((POLICY_DIR / "support-ticket.json").read_text())


def load_changed(tmp_path, raw, change):
    raw = copy.deepcopy(raw)
    change(raw)
    path = tmp_path / "policy.json"
    path.write_text(json.dumps(raw))
    policy_files_beside(tmp_path)
    return load_policy(path)


def test_shipped_policies_load_against_the_interface_targets():
    ticket = load_policy("support-ticket", known_targets=TICKET_TARGETS)
    incident = load_policy("incident", known_targets=INCIDENT_TARGETS)
    assert ticket.targets == set(TICKET_TARGETS) and incident.targets == set(INCIDENT_TARGETS)
    assert [q.id for q in ticket.questions] == ["queue"]
    assert [q.id for q in incident.questions] == ["priority", "team"]
    assert incident.routing_question.id == "team"
    assert [o.id for o in incident.question("priority").options if o.escalate] == ["P1"]


def test_unknown_policy_name_lists_the_shipped_ones():
    with pytest.raises(PolicyError, match="no shipped policy named 'tickets' \\(shipped: incident, support-ticket\\)"):
        load_policy("tickets")


def test_unknown_target_is_rejected_when_destinations_are_known():
    with pytest.raises(PolicyError, match="unknown target\\(s\\) account-access, billing, .*configured destinations: app-oncall"):
        load_policy("support-ticket", known_targets=INCIDENT_TARGETS)


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda p: p["questions"][0]["options"][1].update(id="billing"), "question 'queue': option id 'billing' appears more than once"),
        (lambda p: p["questions"][0]["thresholds"].update(min_confidence=1.2),
         "questions.0.thresholds.min_confidence: Input should be less than or equal to 1"),
        (lambda p: p["questions"][0]["thresholds"].update(min_margin=-0.1),
         "questions.0.thresholds.min_margin: Input should be greater than or equal to 0"),
        (lambda p: p["questions"][0].update(temperature=0), "questions.0.temperature: Input should be greater than 0"),
        (lambda p: p["questions"][0].update(confidence_formula="max_prob"),
         "questions.0.confidence_formula: Input should be 'normalized_peak' or 'one_minus_normalized_entropy'"),
        (lambda p: p["questions"][0]["options"][2].pop("target"), "options ['technical_fault'] have no target"),
        (lambda p: p["questions"][0]["options"][2].update(target="Tech Support"),
         "questions.0.options.2.target: String should match pattern"),
        (lambda p: p["questions"][0].update(options=p["questions"][0]["options"][:1]),
         "questions.0.options: List should have at least 2 items"),
        (lambda p: p["rules"][0].update(answers={"queue": "refunds"}),
         "rule 'billing-portal-to-billing': answer 'refunds' is not an option of question 'queue'"),
        (lambda p: p["rules"][0].update(answers={"team": "billing"}),
         "rule 'billing-portal-to-billing': answers a question 'team' the policy does not ask"),
        (lambda p: p["rules"][0]["when"][0].update(equals="billing_portal"), "when[0] value 'billing_portal' can never match channel"),
        (lambda p: p["rules"][0]["when"][0].update(field="customer.plan"),
         "when[0].field: ticket has no field 'customer.plan': no field 'plan' (fields here: id, tier)"),
        (lambda p: p["rules"][0]["when"][0].update({"in": ["email"]}), "give exactly one of 'equals' or 'in'"),
        (lambda p: p["rules"].append(dict(p["rules"][0])), "rule id 'billing-portal-to-billing' appears more than once"),
        (lambda p: p["state"].append({"key": "x", "field": "severity"}), "state[4].field: ticket has no field"),
        (lambda p: p.update(item_kind="email"), "item_kind: Input should be 'ticket' or 'incident'"),
        (lambda p: p.update(colour="blue"), "colour: Extra inputs are not permitted"),
    ],
)
def test_invalid_policy_fails_with_a_precise_error(tmp_path, ticket_raw, change, message):
    with pytest.raises(PolicyError) as info:
        load_changed(tmp_path, ticket_raw, change)
    assert message in str(info.value)
    assert "policy.json" in str(info.value)


def test_two_routing_questions_are_rejected(tmp_path):
    raw = json.loads((POLICY_DIR / "incident.json").read_text())
    raw["questions"][0]["options"] = [dict(o, target="platform-oncall") for o in raw["questions"][0]["options"]]
    with pytest.raises(PolicyError, match="exactly one question must carry targets .*found \\['priority', 'team'\\]"):
        load_changed(tmp_path, raw, lambda p: None)


def test_bad_json_and_missing_file(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(PolicyError, match="is not valid JSON"):
        load_policy(bad)
    with pytest.raises(PolicyError, match="cannot read policy file"):
        load_policy(tmp_path / "missing.json")


def test_incident_questions_share_one_state_and_form_one_valid_batch(incident_data):
    policy = load_policy("incident")
    decisions = build_decisions(policy, parse_item("incident", incident_data))
    assert [d.id for d in decisions] == ["priority", "team"]
    assert decisions[0].state == decisions[1].state == {
        "title": incident_data["title"], "description": incident_data["description"],
        "service": "checkout-api", "reported_severity": "sev2", "source": "cloudwatch"}
    assert [o.id for o in decisions[1].options] == ["platform", "data", "security", "application"]
    DecisionRequest(decisions=decisions)  # the wire schema accepts it as one batch


def test_build_decisions_for_a_subset_and_wrong_kind(ticket_data, incident_data):
    policy = load_policy("incident")
    incident = parse_item("incident", incident_data)
    assert [d.id for d in build_decisions(policy, incident, questions=["team"])] == ["team"]
    with pytest.raises(TypeError, match="decides incidents, got a ticket"):
        build_decisions(policy, parse_item("ticket", ticket_data))


def test_state_truncates_long_text_and_skips_absent_fields(ticket_data):
    policy = load_policy("support-ticket")
    ticket_data["body"] = "word " * 2000
    state = build_state(policy, parse_item("ticket", ticket_data))
    assert len(state["message"]) <= 3000 and state["message"].endswith("…[truncated]")
    assert state["customer_tier"] == "pro" and state["channel"] == "email"


def test_all_targets_constant_matches_interfaces():
    assert len(ALL_TARGETS) == 9
