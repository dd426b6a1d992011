"""Settings from the values given alone: what the container's and the functions'
`Settings.from_env(mapping)` share.

A pydantic-settings class reads the process environment whenever it is validated, so a mapping
handed to `from_env` (a test's, the configuration reference's) would be read together with
whatever the caller's environment sets. `from_values` validates it through a subclass whose one
source is the values given, and hands back the class itself. The contract depends on pydantic
alone: the subclass follows pydantic-settings' hook (`settings_customise_sources`) without
importing it.
"""

from __future__ import annotations

from functools import cache
from typing import Any, Mapping, TypeVar, cast

from pydantic import BaseModel

SettingsModel = TypeVar("SettingsModel", bound=BaseModel)


def from_values(settings: type[SettingsModel], values: Mapping[str, Any]) -> SettingsModel:
    """`settings` (a pydantic-settings class) validated from `values` alone, never from the process
    environment; pydantic's ValidationError names what is wrong."""
    given = _values_only(settings).model_validate(dict(values))
    return settings.model_construct(given.model_fields_set, **dict(given))


@cache
def _values_only(settings: type[BaseModel]) -> type[BaseModel]:
    """`settings` with the values it is validated from as its one source (no environment, no
    dotenv file, no secrets directory)."""

    def values_given(cls: Any, settings_cls: Any, init_settings: Any, **environment: Any) -> tuple[Any, ...]:
        return (init_settings,)

    namespace = {"settings_customise_sources": classmethod(values_given), "__module__": settings.__module__,
                 "__doc__": f"{settings.__name__} from the values given alone."}
    return cast(type[BaseModel], type(settings.__name__, (settings,), namespace))
