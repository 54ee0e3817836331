"""Reading a scenario: its YAML, ``--set`` overrides and the platform it names.

The steps of :func:`~simdist.scenario.load_scenario` before validation: read a file
(size-limited, ``yaml.safe_load`` only) and check it is a mapping (:func:`read_yaml_mapping`);
apply ``--set dotted.key=value`` overrides, values parsed as YAML scalars/lists
(:func:`apply_overrides`); and resolve ``platform`` — a preset name, a platform file path
(relative to the scenario, or a shipped file by name), or a mapping with an optional
``preset:``/``file:`` base, overlay files and overriding fields (:func:`resolve_platform`).
Every failure is an :class:`~simdist.errors.InputError` naming the file and field.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from .config import describe_validation_error
from .errors import InputError
from .inputfile import file_exists, read_input_text
from .platform.presets import PLATFORMS
from .platform.spec import PlatformSpec, merge_platform_fields
from .resources import resolve_reference
from .yamlio import MAX_DEPTH, parse_scalar, safe_load_limited

__all__ = ["format_validation_error", "read_yaml_mapping", "apply_overrides", "set_dotted", "resolve_platform"]


def format_validation_error(exc: ValidationError, *, source: str | None, prefix: str = "") -> InputError:
    """The first pydantic error as a one-line InputError (field path and what is allowed)."""
    field, message = describe_validation_error(exc)
    field = f"{prefix}.{field}" if prefix and field else prefix or field
    return InputError(message, source=source, field=field or None)


def read_yaml_mapping(path: Path, what: str) -> dict[str, Any]:
    src = str(path)
    text = read_input_text(path, what)
    try:
        data = safe_load_limited(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise InputError(f"not valid YAML{where}: {problem}", source=src) from None
    except RecursionError:
        raise InputError("YAML nesting too deep", source=src) from None
    if not isinstance(data, dict):
        raise InputError(f"a {what} file must be a YAML mapping (key: value), got {type(data).__name__}", source=src)
    return data


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``dotted.key=value`` overrides; the value is parsed as YAML (numbers, lists, strings)."""
    for item in overrides:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key or any(not part for part in key.split(".")):
            raise InputError(f"expected dotted.key=value, got {item!r}", source="--set")
        if key.count(".") >= MAX_DEPTH:
            raise InputError(f"a key may have at most {MAX_DEPTH} dotted parts; got {key.count('.') + 1}",
                             source="--set", field=key[:80] + "...")
        try:
            value = parse_scalar(raw)
        except yaml.YAMLError as exc:
            problem = getattr(exc, "problem", None) or "not valid YAML"
            raise InputError(f"cannot parse value {raw!r}: {problem}", source="--set", field=key) from None
        set_dotted(data, key, value)
    return data


def set_dotted(data: dict[str, Any], key: str, value: Any) -> None:
    """Set ``data[a][b][c] = value`` for key ``a.b.c``, creating mappings on the way."""
    node = data
    parts = key.split(".")
    for part in parts[:-1]:
        child = node.get(part)
        if isinstance(child, str) and part in ("platform", "algorithm"):
            child = {"preset": child} if part == "platform" else {"name": child}
        if not isinstance(child, dict):
            child = {}
        node[part] = child
        node = child
    node[parts[-1]] = value


def _merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """A platform layer over the one below (a link overridden field by field keeps its kind)."""
    return merge_platform_fields(base, override)


def _check_reference(path: Path, what: str, source: str | None, field: str) -> None:
    """A file the scenario refers to must exist: a dangling reference names the scenario and field."""
    if not file_exists(path):
        raise InputError(f"{str(path)[:200]}: {what} file not found", source=source, field=field)


def resolve_platform(value: Any, base_dir: Path, source: str | None) -> dict[str, Any]:
    """A platform mapping from a preset name, a file path, or {preset|file, overlays, fields...}.

    Order of precedence, lowest first: the preset or file, each overlay file in turn (e.g. a
    calibrated network fit; its ``provenance`` key is ignored), then fields given inline.
    """
    if isinstance(value, str):
        value = {"file": value} if value.endswith((".yaml", ".yml")) else {"preset": value}
    if not isinstance(value, dict):
        raise InputError("must be a preset name, a platform file path, or a mapping", source=source, field="platform")
    value = dict(value)
    if "preset" in value and "file" in value:
        raise InputError("give preset or file, not both", source=source, field="platform")
    overlays = value.pop("overlays", [])
    if not isinstance(overlays, list) or not all(isinstance(o, str) for o in overlays):
        raise InputError("must be a list of platform overlay file paths", source=source, field="platform.overlays")
    base: dict[str, Any] = {}
    if "preset" in value:
        name = value.pop("preset")
        if not isinstance(name, str) or name not in PLATFORMS:
            raise InputError(f"unknown platform preset {name!r}; known: {', '.join(PLATFORMS.names())}",
                             source=source, field="platform.preset")
        base = PLATFORMS.get(name)()
    elif "file" in value:
        path = resolve_reference(base_dir, str(value.pop("file")))  # or a shipped file by name
        _check_reference(path, "platform", source, "platform.file")
        base = read_yaml_mapping(path, "platform")
        base.pop("provenance", None)
        try:  # a platform file stands alone: its own errors name it, not the scenario
            PlatformSpec.model_validate(base)
        except ValidationError as exc:
            raise format_validation_error(exc, source=str(path)) from None
    for i, overlay in enumerate(overlays):
        path = resolve_reference(base_dir, overlay)  # or a shipped overlay by name
        _check_reference(path, "platform overlay", source, f"platform.overlays[{i}]")
        layer = read_yaml_mapping(path, "platform overlay")
        layer.pop("provenance", None)
        base = _merge(base, layer)
    return _merge(base, value)
