from decision_router.domain.policies import load_policy
from decision_router.domain.rules import RuleHit, apply_rules
from decision_router.items import parse_item
from tests.functions.conftest import policy_files_beside


def test_sev1_is_p1_but_team_is_left_to_the_model(incident_data):
    incident_data["severity"] = "sev1"
    hits = apply_rules(load_policy("incident"), parse_item("incident", incident_data))
    assert hits == {"priority": RuleHit("sev1-is-p1", "priority", "P1")}


def test_guardduty_sev1_is_decided_entirely_by_rules(incident_data):
    incident_data.update(severity="sev1", source="aws.guardduty")
    hits = apply_rules(load_policy("incident"), parse_item("incident", incident_data))
    assert {q: h.option_id for q, h in hits.items()} == {"priority": "P1", "team": "security"}


def test_no_rule_for_ordinary_items(incident_data, ticket_data):
    assert apply_rules(load_policy("incident"), parse_item("incident", incident_data)) == {}
    assert apply_rules(load_policy("support-ticket"), parse_item("ticket", ticket_data)) == {}


def test_billing_portal_ticket_goes_to_billing(ticket_data):
    ticket_data["channel"] = "billing-portal"
    hits = apply_rules(load_policy("support-ticket"), parse_item("ticket", ticket_data))
    assert hits["queue"].option_id == "billing" and hits["queue"].rule_id == "billing-portal-to-billing"


def test_first_matching_rule_wins(tmp_path, ticket_data):
    import json

    from decision_router.domain.policies import POLICY_DIR
    raw = json.loads((POLICY_DIR / "support-ticket.json").read_text())
    raw["rules"].append({"id": "enterprise-sales", "description": "x", "when": [
        {"field": "customer.tier", "in": ["enterprise", "pro"]}], "answers": {"queue": "sales"}})
    path = tmp_path / "p.json"
    path.write_text(json.dumps(raw))
    policy_files_beside(tmp_path)
    policy = load_policy(path)
    ticket_data["channel"] = "billing-portal"
    assert apply_rules(policy, parse_item("ticket", ticket_data))["queue"].rule_id == "billing-portal-to-billing"
    ticket_data["channel"] = "web"
    assert apply_rules(policy, parse_item("ticket", ticket_data))["queue"].rule_id == "enterprise-sales"
