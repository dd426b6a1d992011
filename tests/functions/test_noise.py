"""The policy's noise controls as data (decision_router.domain.noise): grouping, flapping and
maintenance windows validate with errors that name the entry, and decide as written (cron
windows in their time zone, across daylight saving; sev1 never held unless the window says so)."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest

from decision_router.domain.noise import Flapping, Grouping, MaintenanceWindow, recent
from decision_router.domain.policies import PolicyError, load_policy
from decision_router.items import parse_item

POLICY = load_policy("incident")


def with_noise(tmp_path, **noise) -> object:
    raw = POLICY.model_dump(mode="json", by_alias=True, exclude_none=True)
    raw["noise"] = {**raw["noise"], **noise}
    path = tmp_path / "incident.json"
    path.write_text(json.dumps(raw))
    from tests.functions.conftest import policy_files_beside

    policy_files_beside(tmp_path)
    return load_policy(path)


def window(**fields) -> dict:
    return {"id": "w", "description": "a window", "when": [], **fields}


@pytest.mark.parametrize("noise, error", [
    ({"grouping": [{"id": "g", "description": "d", "match": ["servce"], "window_minutes": 5}]},
     "noise.grouping 'g' match: incident has no field 'servce'"),
    ({"maintenance": [window(cron="0 2 * * SUN")]}, "a cron window needs duration_minutes"),
    ({"maintenance": [window(cron="0 25 * * *", duration_minutes=60)]}, "cron '0 25 \\* \\* \\*': Bad hour"),
    ({"maintenance": [window(cron="0 2 * *", duration_minutes=60)]}, "Wrong number of fields .5 fields: minute hour"),
    ({"maintenance": [window(start="2026-12-01T02:00", end="2026-12-01T01:00")]}, "an end after its start"),
    ({"maintenance": [window(cron="0 2 * * *", duration_minutes=60, start="2026-12-01T02:00")]},
     "either cron .* or start and end"),
    ({"maintenance": [window(cron="0 2 * * *", duration_minutes=60, time_zone="Mars/Olympus")]},
     "unknown time zone 'Mars/Olympus'"),
    ({"maintenance": [window(cron="0 2 * * *", duration_minutes=60, when=[{"field": "evidence.nope", "equals": 1}])]},
     "noise.maintenance 'w' when: incident has no field"),
    ({"flapping": {"max_opens": 0, "window_minutes": 60}}, "noise.flapping.max_opens"),
    ({"maintenance": [window(cron="0 2 * * *", duration_minutes=60), window(cron="0 3 * * *", duration_minutes=9)]},
     "noise.maintenance id 'w' appears more than once"),
])
def test_a_bad_noise_control_is_refused_naming_the_entry(tmp_path, noise, error):
    with pytest.raises(PolicyError, match=error):
        with_noise(tmp_path, **noise)


def test_noise_controls_are_refused_on_a_ticket_policy(tmp_path):
    raw = load_policy("support-ticket").model_dump(mode="json", by_alias=True, exclude_none=True)
    raw["noise"] = {"flapping": {"max_opens": 2, "window_minutes": 10}}
    path = tmp_path / "support-ticket.json"
    path.write_text(json.dumps(raw))
    from tests.functions.conftest import policy_files_beside

    policy_files_beside(tmp_path)
    with pytest.raises(PolicyError, match="noise: grouping, flapping and maintenance windows apply to incidents only"):
        load_policy(path)


def test_a_cron_window_reads_steps_ranges_names_sunday_as_0_or_7_and_day_or_weekday():
    def active(cron: str, at: datetime) -> bool:
        return MaintenanceWindow.model_validate(window(cron=cron, duration_minutes=1)).active(at.replace(tzinfo=timezone.utc))

    assert active("*/15 9-17 * JAN,MAR MON-FRI", datetime(2026, 1, 7, 9, 45))  # a Wednesday
    assert not active("*/15 9-17 * JAN,MAR MON-FRI", datetime(2026, 1, 7, 9, 50))
    assert not active("*/15 9-17 * JAN,MAR MON-FRI", datetime(2026, 2, 4, 9, 45))  # February
    assert not active("*/15 9-17 * JAN,MAR MON-FRI", datetime(2026, 1, 10, 9, 45))  # a Saturday
    sunday_2am = datetime(2026, 11, 29, 2, 0)
    assert active("0 2 * * SUN", sunday_2am) and active("0 2 * * 0", sunday_2am) and active("0 2 * * 7", sunday_2am)
    assert not active("0 2 * * MON", sunday_2am)
    assert active("0 2 1 * MON", datetime(2026, 11, 30, 2, 0))  # day or weekday, as cron does
    assert active("0 2 1 * MON", datetime(2026, 12, 1, 2, 0))  # a Tuesday, the 1st


def test_a_cron_window_is_active_for_its_duration_in_its_time_zone_across_daylight_saving():
    patching = MaintenanceWindow.model_validate(window(cron="0 2 * * SUN", duration_minutes=120,
                                                       time_zone="Europe/Dublin"))
    utc = timezone.utc
    assert patching.active(datetime(2026, 11, 29, 2, 30, tzinfo=utc))  # winter: Dublin is UTC
    assert not patching.active(datetime(2026, 11, 29, 4, 0, tzinfo=utc))  # its 120 minutes are over
    assert not patching.active(datetime(2026, 11, 29, 1, 59, tzinfo=utc))
    assert patching.active(datetime(2026, 7, 5, 1, 30, tzinfo=utc))  # summer: 02:30 in Dublin (UTC+1)
    assert not patching.active(datetime(2026, 7, 5, 3, 0, tzinfo=utc))  # 04:00 in Dublin


def test_a_one_off_window_without_an_offset_is_in_its_time_zone():
    once = MaintenanceWindow.model_validate(window(start="2026-12-01T22:00", end="2026-12-02T01:00",
                                                   time_zone="America/New_York"))
    assert once.active(datetime(2026, 12, 2, 3, 30, tzinfo=timezone.utc))  # 22:30 in New York
    assert not once.active(datetime(2026, 12, 2, 6, 30, tzinfo=timezone.utc))


def test_a_window_holds_matching_incidents_but_never_a_sev1_unless_it_says_so(incident_data):
    rule = {"when": [{"field": "service", "equals": "checkout-api"}], "cron": "* * * * *", "duration_minutes": 1}
    plain = MaintenanceWindow.model_validate(window(**rule))
    with_sev1 = MaintenanceWindow.model_validate(window(**rule, include_sev1=True))
    incident = parse_item("incident", incident_data)
    sev1 = parse_item("incident", dict(incident_data, severity="sev1"))
    other = parse_item("incident", dict(incident_data, service="search"))
    assert plain.holds(incident) and not plain.holds(other)
    assert not plain.holds(sev1) and with_sev1.holds(sev1)


def test_grouping_keys_incidents_by_their_fields_and_sources(incident_data):
    (rule,) = POLICY.noise.grouping
    alarm = parse_item("incident", dict(incident_data, source="aws.cloudwatch"))
    same = parse_item("incident", dict(incident_data, source="aws.cloudwatch", incident_id="other",
                                       title="Another alarm"))
    other_service = parse_item("incident", dict(incident_data, source="aws.cloudwatch", service="search"))
    assert rule.group_key(alarm) == rule.group_key(same) != rule.group_key(other_service)
    assert rule.group_key(parse_item("incident", incident_data)) is None  # source "cloudwatch" is not grouped


def test_flapping_counts_the_openings_within_its_window():
    at = datetime(2026, 11, 29, 12, 0, tzinfo=timezone.utc)
    times = ["2026-11-29T10:30:00.000+00:00", "2026-11-29T11:10:00.000+00:00", "2026-11-29T11:50:00.000+00:00"]
    assert recent(times, at, 60) == times[1:]


def test_the_shipped_policy_groups_flaps_and_has_a_window():
    noise = POLICY.noise
    assert noise.grouping[0].window_minutes == 10 and noise.flapping is not None
    assert noise.maintenance[0].time_zone == "Europe/Dublin" and noise.maintenance[0].action == "suppress"


def test_grouping_never_holds_a_member_more_severe_than_its_leader_nor_a_sev1():
    rule = Grouping(id="storm", description="d", match=["service"], window_minutes=10)
    assert rule.holds("sev4", "sev2") and rule.holds("sev2", "sev2")
    assert not rule.holds("sev1", "sev4") and not rule.holds("sev2", "sev3")
    assert not rule.holds("sev1", "sev1")  # each critical pages
    assert rule.model_copy(update={"include_sev1": True}).holds("sev1", "sev1")
    # A group row kept before leaders' severity was: the leader ranks as sev1, so no sev1 is held.
    assert rule.holds("sev3", None) and not rule.holds("sev1", None)


def test_flapping_holds_a_sev1_only_where_the_policy_says_so():
    flapping = Flapping(max_opens=3, window_minutes=60)
    assert flapping.applies("sev2") and not flapping.applies("sev1")
    assert Flapping(max_opens=3, window_minutes=60, include_sev1=True).applies("sev1")
