"""The reference generator (docs/gen_reference.py) on its own: what it refuses, without a build."""

from __future__ import annotations

import pytest
from pydantic import Field
from pydantic_settings import BaseSettings

from docs.gen_reference import MissingDescription, parameters_table, settings_table


class Described(BaseSettings):
    knob: int = Field(3, ge=1, validation_alias="KNOB", description="KNOB: how far it turns.")


class Undescribed(BaseSettings):
    knob: int = Field(3, validation_alias="KNOB", description="KNOB: how far it turns.")
    dial: str = Field("", validation_alias="DIAL")


def test_a_settings_field_without_a_description_is_refused_by_name():
    with pytest.raises(MissingDescription, match="test setting 'dial'"):
        settings_table(Undescribed, "test")


def test_a_settings_field_is_one_row_with_its_type_default_and_constraints():
    rows, names = settings_table(Described, "test")
    assert names == {"KNOB"}
    assert rows[2] == '| <a id="KNOB"></a>`KNOB` | <code>int</code> | <code>3</code> | how far it turns. <br>Allowed: ≥ 1 |'


def test_a_parameter_without_a_description_is_refused_by_name():
    template = {"Parameters": {"Fine": {"Type": "String", "Description": "ok"}, "Bare": {"Type": "Number", "Default": 1}}}
    with pytest.raises(MissingDescription, match="t.yaml parameter 'Bare'"):
        parameters_table(template, "t.yaml")


def test_descriptions_are_plain_text_in_the_table():
    template = {"Parameters": {"Bus": {"Type": "String", "Default": "", "AllowedValues": ["", "x"],
                                       "AllowedPattern": "^(a|b)$",
                                       "Description": "aws.partner/<subdomain>-<name>, *.gguf | more"}}}
    row = parameters_table(template, "t.yaml")[2]
    assert row == ('| <a id="Bus"></a>`Bus` | String | <code>""</code> | aws.partner/&lt;subdomain&gt;-&lt;name&gt;, \\*.gguf \\| more '
                   '<br>Allowed: <code>""</code>, <code>x</code>; pattern <code>^(a&#124;b)$</code> |')


def test_the_item_shapes_page_lists_every_field_with_its_allowed_values_and_limits():
    import typing

    from decision_router.items import ITEM_MODELS, Customer
    from docs.gen_reference import items_page

    page = items_page()
    for model in (*ITEM_MODELS.values(), Customer):
        assert f"\n## {model.__name__}\n" in page
        for name, field in model.model_fields.items():
            assert f"| `{name}` |" in page, (model.__name__, name)
            assert field.description and " ".join(field.description.split())[:30] in page, (model.__name__, name)
    assert ("| `tier` | string | required | one of <code>free</code>, <code>pro</code>, <code>enterprise</code> |"
            in page)
    channels = typing.get_args(ITEM_MODELS["ticket"].model_fields["channel"].annotation)
    assert "one of " + ", ".join(f"<code>{c}</code>" for c in channels) in page
    assert "| `ticket_id` | string | required | length ≥ 1; length ≤ 128; surrounding spaces removed first |" in page
    assert "| `created_at` | date-time | required | ISO 8601 with a timezone" in page
    assert "| `language` | string | optional, may be null | pattern " in page
    assert "[AlarmEvidence](#alarmevidence)" in page and "\n## AlarmEvidence\n" in page


def test_an_item_field_without_a_description_is_refused_by_name():
    from docs.gen_reference import item_model_section

    class Shape(BaseSettings):
        colour: str = Field(description="what colour")
        size: int = 3

    with pytest.raises(MissingDescription, match="Shape field 'size'"):
        item_model_section(Shape, "##", True, set())


def test_the_option_id_rule_the_tickets_page_states_is_the_codes():
    """docs/sources/sqs-tickets.md says how labels become option ids and destination keys."""
    from pathlib import Path

    from training.history_policy import option_ids, target_of

    page = (Path(__file__).resolve().parents[2] / "docs/sources/sqs-tickets.md").read_text(encoding="utf-8")
    ids = option_ids(["HR Support", "Billing / Refunds", "hr support", "!!!"])
    assert ids == {"HR Support": "HR_Support", "Billing / Refunds": "Billing_Refunds", "hr support": "hr_support",
                   "!!!": "label"}
    assert [target_of(i) for i in ids.values()] == ["hr-support", "billing-refunds", "hr-support", "label"]
    assert option_ids(["a b", "a-b", "a b!"]) == {"a b": "a_b", "a-b": "a-b", "a b!": "a_b_2"}
    for text in ("`HR Support` is option `HR_Support`, routed to `hr-support`",
                 "`Billing / Refunds` is option\n`Billing_Refunds`, routed to `billing-refunds`",
                 "(`HR_Support`, `hr_support`) but one destination key (`hr-support`)"):
        assert text in page, text
