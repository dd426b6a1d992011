import pytest

from decision_router.items import Incident, InvalidItem, Ticket, parse_item


def test_valid_ticket_round_trips_as_json(ticket_data):
    ticket = parse_item("ticket", ticket_data)
    assert isinstance(ticket, Ticket) and ticket.item_id == "T-1001" and ticket.kind == "ticket"
    assert ticket.model_dump(mode="json") == ticket_data | {"reference": None}  # no reference: not from a webhook


def test_ticket_from_json_text(ticket_data):
    import json
    assert parse_item("ticket", json.dumps(ticket_data)).customer.tier == "pro"


def test_language_is_optional(ticket_data):
    del ticket_data["language"]
    assert parse_item("ticket", ticket_data).language is None


@pytest.mark.parametrize(
    "change, expected",
    [
        ({"subject": "  "}, "subject: String should have at least 1 character"),
        ({"customer": {"id": "C-1", "tier": "gold"}}, "customer.tier: Input should be 'free', 'pro' or 'enterprise'"),
        ({"channel": "fax"}, "channel: Input should be 'email', 'chat', 'web', 'billing-portal' or 'phone'"),
        ({"created_at": "2026-11-29T12:00:00"}, "created_at: Input should have timezone info"),
        ({"created_at": "yesterday"}, "created_at: Input should be a valid datetime"),
        ({"language": "english!"}, "language: String should match pattern"),
        ({"priority": "high"}, "priority: Extra inputs are not permitted"),
    ],
)
def test_bad_ticket_names_the_field(ticket_data, change, expected):
    ticket_data.update(change)
    with pytest.raises(InvalidItem) as info:
        parse_item("ticket", ticket_data)
    assert expected in str(info.value)
    assert info.value.item_id == "T-1001"


def test_missing_fields_are_all_listed(ticket_data):
    del ticket_data["body"], ticket_data["customer"]
    with pytest.raises(InvalidItem) as info:
        parse_item("ticket", ticket_data)
    assert "body: Field required" in str(info.value) and "customer: Field required" in str(info.value)


def test_not_json_is_a_clear_error():
    with pytest.raises(InvalidItem, match="invalid ticket \\(no usable id\\): Invalid JSON"):
        parse_item("ticket", "{not json")


def test_incident_severity_is_checked(incident_data):
    assert isinstance(parse_item("incident", incident_data), Incident)
    incident_data["severity"] = "critical"
    with pytest.raises(InvalidItem, match="severity: Input should be 'sev1', 'sev2', 'sev3' or 'sev4'"):
        parse_item("incident", incident_data)


def test_a_new_kind_is_an_item_model_in_the_registry(monkeypatch):
    """ITEM_MODELS is the one list of kinds: a policy and a decision record accept a kind once its
    model is registered, and name the registered kinds when refusing another."""
    from typing import ClassVar

    from decision_router.domain.judging import build_record, rule_entry
    from decision_router.domain.policies import Policy
    from decision_router.domain.rules import apply_rules
    from decision_router.items import ITEM_MODELS, Item

    class Alarm(Item):
        kind: ClassVar[str] = "alarm"
        id_field: ClassVar[str] = "alarm_id"
        source_field: ClassVar[str] = "source"

        alarm_id: str
        source: str
        text: str

    policy_data = {
        "name": "alarm", "version": "1", "item_kind": "alarm", "description": "Route an alarm.",
        "state": [{"key": "text", "field": "text"}],
        "questions": [{"id": "team", "question": "Which team owns this alarm?",
                       "options": [{"id": "ops", "description": "Operations", "target": "ops"},
                                   {"id": "dev", "description": "Development", "target": "dev"}],
                       "thresholds": {"min_confidence": 0.5, "min_margin": 0.1, "min_allowed_token_mass": 0.5}}],
        "rules": [{"id": "nagios-to-ops", "description": "Nagios alarms are ops'", "answers": {"team": "ops"},
                   "when": [{"field": "source", "equals": "nagios"}]}],
    }
    with pytest.raises(ValueError, match="item_kind\n  Input should be 'ticket' or 'incident'"):
        Policy.model_validate(policy_data)

    monkeypatch.setitem(ITEM_MODELS, "alarm", Alarm)
    policy = Policy.model_validate(policy_data)
    alarm = parse_item("alarm", {"alarm_id": "A-1", "source": "nagios", "text": "disk full"})
    entries = [rule_entry(policy.question(q), hit) for q, hit in apply_rules(policy, alarm).items()]
    record = build_record(policy, alarm, entries, destinations={"ops": "https://q/ops", "dev": "https://q/dev"},
                          review_timeout_seconds=60)
    assert (record.item_kind, record.route, record.destination.target) == ("alarm", "auto", "ops")
    with pytest.raises(ValueError, match="Input should be 'ticket', 'incident' or 'alarm'"):
        Policy.model_validate({**policy_data, "item_kind": "email"})


def test_an_incident_is_complete_on_import_without_the_sources(incident_data):
    """items.py alone validates an incident with a source's evidence: a fresh copy of the library
    (imported under another name, so nothing this session imported counts) parses one without
    decision_router.sources ever being imported."""
    import importlib
    import importlib.util
    import sys
    from pathlib import Path

    import decision_router

    alias = "decision_router_fresh"
    package = Path(decision_router.__file__).parent
    spec = importlib.util.spec_from_file_location(alias, package / "__init__.py", submodule_search_locations=[str(package)])
    assert spec is not None and spec.loader is not None
    sys.modules[alias] = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(sys.modules[alias])
        items = importlib.import_module(f"{alias}.items")
        evidence = {"source_ref": "arn:aws:cloudwatch:eu-west-1:123456789012:alarm:api-5xx", "alarm_kind": "metric",
                    "namespace": "AWS/ApplicationELB"}
        incident = items.parse_item("incident", dict(incident_data, evidence=evidence))
        assert type(incident.evidence).__name__ == "AlarmEvidence" and incident.evidence.namespace == "AWS/ApplicationELB"
        assert items.parse_item("incident", incident_data).evidence is None
        assert not [name for name in sys.modules if name.startswith(f"{alias}.sources")]
    finally:
        for name in [n for n in sys.modules if n == alias or n.startswith(f"{alias}.")]:
            del sys.modules[name]
