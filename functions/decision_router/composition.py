"""A function's composition root (its wiring), written once: the settings and each adapter the
function's flows work with, each made from the environment on first use and then kept for the
execution environment.

A function's `Wiring` subclasses `CompositionRoot` and declares its parts, one `@part` method
each that makes it from `self.settings`. Nothing is made at import or when the root is made (the
settings are read at the first use, so a handler module imports without its environment), and a
part the function never uses (the endpoint, say) never builds its client. A test, or the local
run, hands the root by keyword the parts it replaces (an endpoint in process, its own settings);
the rest are made as in the account. `reset` forgets what was made, for a test that changes the
environment between uses.
"""

from __future__ import annotations

from functools import cached_property
from typing import TypeVar

from .config import Settings

T = TypeVar("T")


class part(cached_property[T]):
    """A part of a composition root: made by the method on first use, then kept. Assigning one
    replaces it (as a part handed in does)."""


class CompositionRoot:
    def __init__(self, settings: Settings | None = None, **given: object) -> None:
        """Each part given here replaces the one the settings would make; one given as None is made as usual."""
        unknown = sorted(set(given) - set(self.parts()))
        if unknown:
            raise TypeError(f"{type(self).__name__} has no part named {', '.join(unknown)}; "
                            f"its parts: {', '.join(self.parts())}")
        self._given = {name: value for name, value in {"settings": settings, **given}.items() if value is not None}
        self.__dict__.update(self._given)  # a part's kept value is read from here first

    @part
    def settings(self) -> Settings:
        """The function's settings, from its environment (ConfigError names a malformed variable)."""
        return Settings.from_env()

    @classmethod
    def parts(cls) -> tuple[str, ...]:
        """The names of the parts this root makes, its own and those it inherits."""
        return tuple(sorted({name for klass in cls.__mro__ for name, member in vars(klass).items()
                             if isinstance(member, part)}))

    def reset(self) -> None:
        """Forget every part made or assigned since the root was made: each is made again on its next
        use, from the environment as it is then. The parts handed to the root stay."""
        for name in self.parts():
            self.__dict__.pop(name, None)
        self.__dict__.update(self._given)
