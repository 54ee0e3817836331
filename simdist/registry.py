"""Named registries: algorithms, collectives, network models, models, datasets, platforms.

Every pluggable component registers under a name with a one-line description (and, for
models of the world, the source it comes from). Lookups of an unknown name fail with the
list of known names, so a typo in a scenario reads "unknown algorithm 'dasso'; known: ...".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Generic, Iterator, TypeVar

from .errors import InputError

__all__ = ["Entry", "Registry"]

T = TypeVar("T")


@dataclass(frozen=True)
class Entry(Generic[T]):
    """One registered component: its factory plus what a user needs to choose it."""

    name: str
    factory: T
    description: str
    citation: str | None = None
    config: Any = None  # pydantic model class validating this component's options, if any


class Registry(Generic[T]):
    """A name → factory map for one kind of component (``kind`` is used in messages)."""

    def __init__(self, kind: str):
        self.kind = kind
        self._entries: dict[str, Entry[T]] = {}

    def register(
        self,
        name: str,
        description: str,
        *,
        citation: str | None = None,
        config: Any = None,
    ) -> Callable[[T], T]:
        """Decorator registering ``factory`` under ``name``; a second use of a name is a bug."""

        def decorate(factory: T) -> T:
            self.add(name, factory, description, citation=citation, config=config)
            return factory

        return decorate

    def add(self, name: str, factory: T, description: str, *, citation: str | None = None, config: Any = None) -> None:
        if name in self._entries:
            raise ValueError(f"{self.kind} {name!r} is registered twice")
        self._entries[name] = Entry(name, factory, " ".join(description.split()), citation, config)

    def entry(self, name: str) -> Entry[T]:
        """The entry for ``name``, or an :class:`InputError` listing the known names."""
        try:
            return self._entries[name]
        except (KeyError, TypeError):
            raise InputError(f"unknown {self.kind} {name!r}; known: {', '.join(self.names())}") from None

    def check(self, name: str) -> str:
        """``name`` if registered, else a ValueError listing the known names (for pydantic validators)."""
        if name not in self._entries:
            raise ValueError(f"unknown {self.kind} {name!r}; known: {', '.join(self.names())}")
        return name

    def get(self, name: str) -> T:
        return self.entry(name).factory

    def names(self) -> list[str]:
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[Entry[T]]:
        return iter(self._entries[n] for n in self.names())

    def __len__(self) -> int:
        return len(self._entries)
