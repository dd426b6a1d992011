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
