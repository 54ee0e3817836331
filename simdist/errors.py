"""Error types that cross module boundaries.

Every error a user can cause (a bad scenario, platform, profile, trace or command-line
argument) is an :class:`InputError`. Its ``str`` is one line naming the file, the field
path and what is allowed; the CLI prints exactly that line and exits with status 2.
"""

from __future__ import annotations

__all__ = ["SimdistError", "InputError", "SimulationError"]


class SimdistError(Exception):
    """Base class of every error simdist raises on purpose."""


class InputError(SimdistError, ValueError):
    """Bad user input: names where (file, field) and what is allowed.

    ``source`` is the file (or ``--set``/``argv``) the input came from, ``field`` the
    dotted path inside it, ``message`` what is wrong and what would be accepted.
    """

    def __init__(self, message: str, *, source: str | None = None, field: str | None = None):
        self.message = " ".join(str(message).split())  # always one line
        self.source = _one_line(source)
        self.field = _one_line(field)
        super().__init__(self.__str__())

    def __str__(self) -> str:
        where = ": ".join(part for part in (self.source, self.field) if part)
        return f"{where}: {self.message}" if where else self.message

    def at(self, *, source: str | None = None, field_prefix: str | None = None) -> "InputError":
        """A copy located in ``source`` with ``field_prefix`` put before the field path."""
        field = self.field
        if field_prefix:
            field = f"{field_prefix}.{field}" if field else field_prefix
        return InputError(self.message, source=source or self.source, field=field)


def _one_line(text: str | None) -> str | None:
    """Control characters (a key or file name may hold a newline) escaped, so the error stays one line."""
    if text is None or text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text)


class SimulationError(SimdistError, RuntimeError):
    """An algorithm or runtime broke one of its own invariants (a bug, not bad input)."""
