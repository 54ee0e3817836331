"""The base of every configuration block read from a user's file.

Scenario, platform, algorithm, model, dataset, optimizer, fault and straggler blocks all
derive from :class:`UserConfig`. It makes the rules of the input boundary one decision
instead of a dozen:

* frozen (runtime objects trust a validated config and cannot change it) and unknown keys
  refused (a misspelt option is an error, not a silent default);
* strict types: a boolean is not a number, a float is not an integer (``nodes: 1e6`` is an
  error naming the field, not a million nodes), a string is not a number (units such as
  ``"2us"`` are parsed by the fields that take them, in :mod:`simdist.units`);
* finite numbers only: ``inf`` and ``nan`` are refused wherever a number goes.

Integers are still accepted where a float goes (``lr: 1`` is 1.0).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, ValidationError

__all__ = ["UserConfig", "USER_CONFIG", "FROM_LIST", "describe_validation_error"]

USER_CONFIG = ConfigDict(frozen=True, extra="forbid", strict=True, allow_inf_nan=False)


class UserConfig(BaseModel):
    """A frozen, strictly typed configuration block with unknown keys refused."""

    model_config = USER_CONFIG


def _list_to_tuple(value: Any) -> Any:
    """YAML has lists, not tuples: a fixed-shape field (``betas: [0.9, 0.999]``) takes a list."""
    return tuple(value) if isinstance(value, list) else value


FROM_LIST = BeforeValidator(_list_to_tuple)
"""Annotate a tuple field with this so that strict validation accepts a YAML list for it."""


_TYPE_WORDS = {
    "int_type": "an integer",
    "int_from_float": "an integer",
    "float_type": "a number",
    "finite_number": "a finite number",
    "bool_type": "true or false",
    "string_type": "a string",
    "list_type": "a list",
    "dict_type": "a mapping",
    "model_type": "a mapping",
    "tuple_type": "a list",
}
_KINDS = {bool: "a boolean", float: "a float", int: "an integer", str: "a string", list: "a list", dict: "a mapping"}


def _shown(value: Any) -> str:
    """A rejected value as the user wrote it (YAML spelling, shortened) and its type."""
    if isinstance(value, (list, dict)):  # never repr a container: it may stand for millions of values
        return f"a {'list' if isinstance(value, list) else 'mapping'} of {len(value)} items"
    text = ("true" if value else "false") if isinstance(value, bool) else repr(value)[:200]
    text = text if len(text) <= 40 else text[:37] + "..."
    kind = _KINDS.get(type(value))
    return f"{text} ({kind})" if kind else text


def _location(loc: tuple) -> str:
    parts: list[str] = []
    for item in loc:
        if isinstance(item, int):
            parts.append(f"[{item}]")
        elif not str(item).startswith("function-"):
            parts.append(("." if parts else "") + str(item))
    return "".join(parts)


def describe_validation_error(exc: ValidationError) -> tuple[str, str]:
    """``(field path, one-line message)`` of the first error pydantic found.

    Type errors say what the field takes and what it got (``must be an integer, got 1e6 (a
    float)``); unknown keys point at ``simdist schema``.
    """
    error = exc.errors(include_url=False)[0]
    field = _location(tuple(error["loc"]))
    kind = error["type"]
    message = error["msg"].removeprefix("Value error, ")
    if kind in _TYPE_WORDS:
        message = f"must be {_TYPE_WORDS[kind]}, got {_shown(error.get('input'))}"
        if kind.startswith("int") and isinstance(error.get("input"), float):
            message += "; write integers without a decimal point or exponent"
    elif kind == "missing":
        message = "required field is missing"
    elif kind == "extra_forbidden":
        message = "unknown field (check the spelling; 'simdist schema' lists the allowed fields)"
    return field, message
