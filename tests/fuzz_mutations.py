"""Breaking a valid input in one place: one field's value, one key, or the YAML text.

Each mutation returns what it did in one line and whether the result is *certainly*
invalid, judged from the schema at the mutated path (:mod:`fuzz_schema_walk`): a number the
field does not admit (non-finite, out of bounds, a fraction for an integer, negative for a
quantity with units), a bool/string/null/mapping/list where the field has no such type, an
unknown key where extra keys are forbidden, a required field removed, duplicate YAML keys,
several documents, a control character, a python tag. Anything else (1e308 where a number
is allowed, 4e9 where an integer is, an alias bomb in a free-form field) may go either way;
a field at its own extreme (``boundary``: the schema's maximum or minimum, or the float just
inside an exclusive bound) is allowed by the schema and must run or be refused, not hang.
"""

from __future__ import annotations

import copy
import io
import math
from typing import Any, Sequence

import yaml

from fuzz_schema_walk import (Draw, admits, allowed_types, branches, closed_object, scenario_schema, schema_at,
                              unit_field)

__all__ = ["dump_yaml", "mutate_value", "mutated_scenario", "yaml_text_mutation", "alias_bomb", "FREE_SECTIONS"]

# Scenario sections whose keys are free-form (validated by 'simdist compare' and 'simdist sweep').
FREE_SECTIONS = ("compare", "sweep")

_GARBAGE_STRINGS = ("ten", "", "  ", "1e3 parsecs", "None", "ü" * 3, "--", "[1", "a\nb", "x" * 300, "\udc80")
_NUMBERS = {"fraction": (2.5, 0.5, 1.000001), "big": (1e6, 4e9, 10**6, 4 * 10**9, 2**63, 10**30),
            "nonfinite": (math.inf, -math.inf, math.nan), "1e308": (1e308, -1e308), "1e-300": (1e-300, 5e-324),
            "negative": (-1, -0.5, -1e9), "zero": (0, 0.0)}
_UNKNOWN_KEYS = ("zz_unknown", "Name", "a.b", " ", "x-y", "devices ", "line\nbreak", "k" * 300)


def dump_yaml(doc: Any) -> str:
    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=False, width=120, default_flow_style=None)


def _paths(doc: Any, prefix: tuple = ()) -> list[tuple]:
    """Every key and list-index path in ``doc`` (not into lists longer than 20)."""
    if isinstance(doc, dict):
        items = list(doc.items())
    elif isinstance(doc, list) and len(doc) <= 20:
        items = list(enumerate(doc))
    else:
        return []
    return [p for key, value in items for p in [prefix + (key,), *_paths(value, prefix + (key,))]]


def _mappings(doc: Any, prefix: tuple = ()) -> list[tuple]:
    """The paths of every mapping in ``doc``, the root's included."""
    paths = [prefix] if isinstance(doc, dict) else []
    items = doc.items() if isinstance(doc, dict) else enumerate(doc[:20]) if isinstance(doc, list) else ()
    return paths + [p for key, value in items for p in _mappings(value, prefix + (key,))]


def _get(doc: Any, path: Sequence[Any]) -> Any:
    for key in path:
        doc = doc[key]
    return doc


def _dotted(path: Sequence[Any]) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".") or "<top>"


def _deep_mapping(depth: int) -> dict:
    value: dict = {"a": 1}
    for _ in range(depth):
        value = {"a": value}
    return value


def _bounds(node: dict | None) -> list[float]:
    """The extreme values a numeric field allows: its maximum and minimum, and the floats just
    inside an exclusive bound (5e-324 above an exclusive 0)."""
    values: list[float] = []
    for branch in branches(node) if node is not None else []:
        if branch.get("type") not in ("integer", "number"):
            continue
        values += [branch[k] for k in ("maximum", "minimum") if k in branch]
        if "exclusiveMinimum" in branch:
            values.append(math.nextafter(branch["exclusiveMinimum"], math.inf))
        if "exclusiveMaximum" in branch:
            values.append(math.nextafter(branch["exclusiveMaximum"], -math.inf))
    return values


def mutate_value(d: Draw, doc: Any, path: tuple, root_schema: dict | None = None,
                 kind: str | None = None) -> tuple[Any, str, bool]:
    """Replace the value at ``path`` in place: (doc, what, certainly invalid)."""
    node = schema_at(doc, path, root_schema)
    parent = schema_at(doc, path[:-1], root_schema) if path[:-1] else (root_schema or scenario_schema())
    key = path[-1]
    unit = key if unit_field((parent or {}).get("title", ""), key) else None
    types = allowed_types(node) if node is not None else {"any"}
    known = "any" not in types
    bounds = _bounds(node)
    kind = kind or d.choice(["bool", "string", *_NUMBERS, "null", "deep-mapping", "huge-list"] +
                            ["boundary"] * (3 if bounds else 0))
    if kind == "boundary":
        value = d.choice(bounds or [1e308])
        invalid = known and not admits(node, value, unit=unit)
    elif kind in _NUMBERS:
        value = d.choice(_NUMBERS[kind])
        invalid = known and not admits(node, value, unit=unit)
    elif kind == "bool":
        value = d.chance(0.5)
        invalid = known and "boolean" not in types
    elif kind == "string":
        value = d.choice(_GARBAGE_STRINGS)
        invalid = known and "string" not in types
    elif kind == "null":
        value = None
        invalid = known and "null" not in types
    elif kind == "deep-mapping":
        value = _deep_mapping(d.choice([3, 60, 300]))
        invalid = known and ("object" not in types or closed_object(node))
    else:
        value = [1] * d.choice([1000, 20_000, 40_000])
        invalid = known and not any(b.get("type") == "array" and b.get("maxItems", math.inf) >= len(value)
                                    for b in branches(node))
    _get(doc, path[:-1])[key] = value
    shown = (f"[1] * {len(value)}" if isinstance(value, list) else "{a: {a: ...}}" if isinstance(value, dict)
             else repr(value))
    return doc, f"{_dotted(path)} <- {kind} {shown[:80]}", invalid


def mutated_scenario(d: Draw, doc: dict) -> tuple[dict, str, bool]:
    """``doc`` (valid) with one field replaced, one removed, or an unknown key added."""
    doc = copy.deepcopy(doc)
    action = d.choice(["replace", "replace", "replace", "remove", "unknown-key", "two-boundaries"])
    if action == "replace":
        return mutate_value(d, doc, d.choice([p for p in _paths(doc) if p[0] not in FREE_SECTIONS]))
    if action == "two-boundaries":  # two fields at their extremes at once (each alone may be fine)
        numeric = [p for p in _paths(doc) if p[0] not in FREE_SECTIONS and _bounds(schema_at(doc, p))]
        if len(numeric) >= 2:
            first, second = d.choice(numeric), d.choice(numeric)
            doc, what, invalid = mutate_value(d, doc, first, kind="boundary")
            doc, also, invalid_too = mutate_value(d, doc, second, kind="boundary")
            return doc, f"{what}; {also}", invalid or invalid_too
        return mutate_value(d, doc, d.choice([p for p in _paths(doc) if p[0] not in FREE_SECTIONS]))
    if action == "remove":
        path = d.choice([p for p in _paths(doc) if isinstance(p[-1], str) and p[0] not in FREE_SECTIONS])
        parent = schema_at(doc, path[:-1]) if len(path) > 1 else scenario_schema()
        required = any(path[-1] in b.get("required", []) for b in branches(parent or {}))
        # without platform a scenario runs on laptop-cpu; algorithm.name has a default in its schema but is required
        required = required and path != ("platform",) or path == ("algorithm", "name")
        _get(doc, path[:-1]).pop(path[-1])
        return doc, f"{_dotted(path)} removed ({'required' if required else 'optional'})", required
    path = d.choice([p for p in _mappings(doc) if not p or p[0] not in FREE_SECTIONS])
    target = _get(doc, path)
    key = d.choice(_UNKNOWN_KEYS)
    key = key if key not in target else "zz_" + key
    target[key] = 1
    node = schema_at(doc, path) if path else scenario_schema()
    return doc, f"{_dotted(path)}: unknown key {key!r}", node is not None and closed_object(node)


# -- YAML text mutations -------------------------------------------------------------------------

_MARK = "@@FUZZ@@"


def alias_bomb(levels: int, width: int) -> str:
    """A flow sequence of ``levels`` anchored lists, each ``width`` aliases of the one before:
    (levels - 1) * width aliases expanding to width ** levels leaves."""
    parts = ["&a0 [" + ", ".join(["1"] * width) + "]"]
    parts += [f"&a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]" for i in range(1, levels)]
    return "[" + ", ".join(parts) + "]"


def _text_with(doc: dict, path: tuple, flow: str) -> str:
    """``doc`` as YAML with the value at ``path`` replaced by the raw text ``flow``."""
    doc = copy.deepcopy(doc)
    _get(doc, path[:-1])[path[-1]] = _MARK
    return dump_yaml(doc).replace(f"'{_MARK}'", flow, 1)


def _duplicate_key_text(d: Draw, doc: dict) -> tuple[str, str]:
    """``doc`` as YAML with one mapping key written twice (PyYAML alone keeps the last)."""
    path = d.choice([p for p in _mappings(doc) if _get(doc, p)])
    key = d.choice(list(_get(doc, path)))
    dumper = yaml.SafeDumper(io.StringIO(), sort_keys=False)
    node = target = dumper.represent_data(copy.deepcopy(doc))
    for step in path:
        target = next(v for k, v in target.value if k.value == step) if isinstance(step, str) else target.value[step]
    key_node, value_node = next((k, v) for k, v in target.value if k.value == key)
    again = copy.deepcopy(value_node) if d.chance(0.5) else dumper.represent_data("duplicate")
    target.value.append((copy.deepcopy(key_node), again))
    return yaml.serialize(node, Dumper=yaml.SafeDumper), f"duplicate key {_dotted(path + (key,))}"


def yaml_text_mutation(d: Draw, doc: dict) -> tuple[str, str, bool]:
    """``doc`` (valid) written as YAML text broken in one way: (text, what, certainly invalid)."""
    kind = d.choice(["duplicate", "alias-bomb", "alias-flood", "deep-nesting", "documents", "control", "tag",
                     "truncate", "tabs", "crlf", "bom"])
    if kind == "duplicate":
        text, what = _duplicate_key_text(d, doc)
        return text, what, True
    if kind in ("alias-bomb", "alias-flood", "deep-nesting"):
        doc = {**doc, "sweep": doc.get("sweep") or {"points": []}}
        leaves = [p for p in _paths(doc) if not isinstance(_get(doc, p), (dict, list)) or p[0] in FREE_SECTIONS]
        path = d.choice(leaves)
        if kind == "alias-bomb":  # few aliases (under the loader's limit), exponential expansion
            levels, width = d.choice([(6, 6), (9, 9), (8, 10)])
            text = _text_with(doc, path, alias_bomb(levels, width))
            return text, f"alias bomb {width}^{levels} at {_dotted(path)}", False
        if kind == "alias-flood":
            return _text_with(doc, path, alias_bomb(20, 20)), f"380 aliases at {_dotted(path)}", True
        depth = d.choice([50, 900, 5000, 100_000])
        flow = "[" * depth + "]" * depth if d.chance(0.5) else "{a: " * depth + "1" + "}" * depth
        return _text_with(doc, path, flow), f"nesting {depth} deep at {_dotted(path)}", False
    text = dump_yaml(doc)
    if kind == "documents":
        return text + "---\n" + text, "two YAML documents", True
    if kind == "control":
        at = d.integer(0, len(text))
        return text[:at] + d.choice(["\x00", "\x07", "\x1b"]) + text[at:], f"control character at offset {at}", True
    if kind == "tag":
        return text + "zz_tag: !!python/object/apply:os.system ['true']\n", "python tag", True
    if kind == "truncate":
        at = d.integer(0, len(text))
        return text[:at], f"cut at byte {at} of {len(text)}", False
    if kind == "tabs":
        return text.replace("  ", "\t"), "tab indentation", False
    if kind == "crlf":
        return text.replace("\n", "\r\n"), "CRLF line ends", False
    return "\ufeff" + text, "byte-order mark", False
