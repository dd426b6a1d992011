import pytest
from decision_router.items import Incident, InvalidItem, Ticket, parse_item


def test_valid_ticket_round_trips_as_json(ticket_data):
    ticket = parse_item("ticket", ticket_data)
    assert isinstance(ticket, Ticket) and ticket.item_id == "T-1001" and ticket.kind == "ticket"
    assert ticket.model_dump(mode="json") == ticket_data


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
