"""Walking the scenario JSON Schema: values it allows, and what it allows at a path.

The schema is the one ``simdist schema`` prints (pydantic ``$defs``/``$ref``, ``oneOf`` over
the algorithms, ``anyOf`` for optional fields), with every nested ``$defs`` hoisted to the
top and ``workload.model``/``workload.dataset`` narrowed to the mlp and synthetic option
schemas, so that a walked scenario can run. :func:`generate` walks it, making each choice
through a :class:`Draw` (seeded ``random`` for the benchmark, hypothesis in tests) and
keeping numbers in ranges a tiny run finishes with. :func:`schema_at` and :func:`admits`
answer "is this value certainly invalid here" for the mutations.

hypothesis-jsonschema copes with this schema, but draws about 4 documents a second on this
machine and fills them with lone surrogates and 10-digit counts; it is used by one property
test (``tests/test_fuzz_schema.py``), while this walk feeds the 10,000-case benchmark.
"""

from __future__ import annotations

import copy
import functools
import math
import random
from typing import Any, Callable, Sequence

__all__ = ["Draw", "RandomDraw", "HypothesisDraw", "scenario_schema", "resolve", "branches", "schema_at",
           "allowed_types", "closed_object", "admits", "unit_field", "generate", "UNIT_FIELDS"]


# -- where choices come from -------------------------------------------------------------

class Draw:
    """The choices a generator makes; simplest first, so that hypothesis shrinks toward it."""

    def integer(self, lo: int, hi: int) -> int:
        raise NotImplementedError

    def real(self, lo: float, hi: float) -> float:
        raise NotImplementedError

    def choice(self, options: Sequence[Any]) -> Any:
        return options[self.integer(0, len(options) - 1)]

    def chance(self, p: float) -> bool:
        """True with probability about ``p`` (False is the simpler answer)."""
        return self.integer(0, 999) >= round(1000 * (1 - p))

    def log_real(self, lo: float, hi: float) -> float:
        """Log-uniform in [lo, hi] (lo > 0)."""
        return min(hi, max(lo, 10 ** self.real(math.log10(lo), math.log10(hi))))


class RandomDraw(Draw):
    """Choices from a seeded :class:`random.Random`."""

    def __init__(self, rng: random.Random):
        self.rng = rng

    def integer(self, lo: int, hi: int) -> int:
        return self.rng.randint(lo, hi)

    def real(self, lo: float, hi: float) -> float:
        return self.rng.uniform(lo, hi)


class HypothesisDraw(Draw):
    """Choices drawn by hypothesis (the ``draw`` of an ``@st.composite`` or of ``st.data()``)."""

    def __init__(self, draw: Callable[[Any], Any]):
        from hypothesis import strategies as st

        self.draw, self.st = draw, st

    def integer(self, lo: int, hi: int) -> int:
        return self.draw(self.st.integers(lo, hi))

    def real(self, lo: float, hi: float) -> float:
        return self.draw(self.st.floats(lo, hi, allow_nan=False, allow_infinity=False))


# -- the schema and what it allows at a path ----------------------------------------------

@functools.cache
def scenario_schema() -> dict:
    """``simdist schema``, ``$defs`` hoisted, model and dataset narrowed to mlp and synthetic."""
    from simdist.scenario import scenario_json_schema
    from simdist.training.datasets import DATASETS
    from simdist.training.models import MODELS

    schema = copy.deepcopy(scenario_json_schema())
    defs: dict[str, Any] = {}

    def hoist(node: Any) -> None:
        if isinstance(node, dict):
            defs.update(node.pop("$defs", {}))
            for value in node.values():
                hoist(value)
        elif isinstance(node, list):
            for value in node:
                hoist(value)

    hoist(schema)
    for name in list(defs):
        hoist(defs[name])
    schema["$defs"] = defs

    def named(const: str, config: Any) -> dict:  # the flattened form {name: mlp, hidden: [...]}
        options = config.model_json_schema()
        return {"type": "object", "title": f"{const} options", "additionalProperties": False, "required": ["name"],
                "properties": {"name": {"const": const, "type": "string"}, **options.get("properties", {})}}

    workload = defs["WorkloadConfig"]["properties"]
    workload["model"] = named("mlp", MODELS.entry("mlp").config)
    workload["dataset"] = named("synthetic", DATASETS.entry("synthetic").config)
    platform = schema["properties"]["platform"]["anyOf"][1]
    platform.setdefault("properties", {})["preset"] = {"type": "string", "enum": ["laptop-cpu"]}
    return schema


def resolve(node: Any) -> Any:
    while isinstance(node, dict) and "$ref" in node:
        node = scenario_schema()["$defs"][node["$ref"].rsplit("/", 1)[-1]]
    return node


def branches(node: dict) -> list[dict]:
    """The alternatives of ``node`` (anyOf/oneOf flattened, references resolved)."""
    node = resolve(node)
    alternatives = node.get("anyOf") or node.get("oneOf")
    if not alternatives:
        return [node]
    return [leaf for branch in alternatives for leaf in branches(branch)]


def schema_at(doc: Any, path: Sequence[Any], root: dict | None = None) -> dict | None:
    """The schema of ``doc`` at ``path`` (keys and list indexes), or None where it is free-form."""
    node: Any = root if root is not None else scenario_schema()
    value = doc
    for key in path:
        candidates = [b for b in branches(node) if b.get("type") in ("object", "array") or "properties" in b]
        if isinstance(key, int):
            arrays = [b for b in candidates if b.get("type") == "array"]
            if not arrays:
                return None
            prefix = arrays[0].get("prefixItems")
            node = prefix[key] if prefix and key < len(prefix) else arrays[0].get("items", {})
        else:
            objects = [b for b in candidates if b.get("type") == "object" or "properties" in b]
            if len(objects) > 1 and isinstance(value, dict) and "name" in value:  # oneOf over the algorithms
                named = [b for b in objects if b.get("properties", {}).get("name", {}).get("const") == value["name"]]
                objects = named or objects
            if not objects:
                return None
            props = objects[0].get("properties", {})
            if key in props:
                node = props[key]
            elif isinstance(objects[0].get("additionalProperties"), dict):
                node = objects[0]["additionalProperties"]
            else:
                return None
        value = value[key] if _has(value, key) else None
        if node == {} or node is True:
            return None
    return resolve(node)


def _has(container: Any, key: Any) -> bool:
    if isinstance(container, dict):
        return key in container
    return isinstance(container, list) and isinstance(key, int) and key < len(container)


def allowed_types(node: dict) -> set[str]:
    """JSON types the schema allows ({'any'} where it allows everything)."""
    types: set[str] = set()
    for branch in branches(node):
        if "const" in branch or "enum" in branch:
            values = [branch["const"]] if "const" in branch else branch["enum"]
            types.update(_json_type(v) for v in values)
        elif "type" in branch:
            types.update(branch["type"] if isinstance(branch["type"], list) else [branch["type"]])
        else:
            return {"any"}
    return types


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    return {float: "number", str: "string", list: "array", dict: "object"}[type(value)]


def closed_object(node: dict) -> bool:
    """An object that forbids keys it does not list."""
    objects = [b for b in branches(node) if b.get("type") == "object"]
    return bool(objects) and all(b.get("additionalProperties") is False for b in objects)


# Quantities with units ('2ms', '10Gbps', '25MiB' as well as numbers): never negative.
SECONDS = {"latency", "virtual_time", "every_time", "max_wall_time", "kernel_overhead_s", "duration", "start",
           "every", "at", "mean_interval"}
UNIT_FIELDS = SECONDS | {"bandwidth", "peak_flops", "bucket_bytes"}


def unit_field(owner: str, key: Any) -> bool:
    """Whether field ``key`` of the object titled ``owner`` takes a unit (a loss curve's start does not)."""
    return key in UNIT_FIELDS and owner != "LossCurveConfig"


def admits(node: dict, value: float, *, unit: str | None = None) -> bool:
    """Whether a number is allowed by the field's schema (bounds, integrality); ``unit`` names a
    quantity with units (never negative; a bandwidth or peak never zero)."""
    if not math.isfinite(value) or unit and value < 0 or unit in ("bandwidth", "peak_flops") and value <= 0:
        return False
    for branch in branches(node):
        kind = branch.get("type")
        if kind not in ("integer", "number") or kind == "integer" and value != int(value):
            continue
        if value < branch.get("minimum", -math.inf) or value <= branch.get("exclusiveMinimum", -math.inf):
            continue
        if value > branch.get("maximum", math.inf) or value >= branch.get("exclusiveMaximum", math.inf):
            continue
        return True
    return False


# -- walking the schema ------------------------------------------------------------------------

_SEC_RANGE = {"latency": (1e-7, 1e-4), "virtual_time": (2e-4, 5e-3), "every_time": (5e-5, 2e-3),
              "max_wall_time": (0.5, 2.0), "kernel_overhead_s": (1e-7, 1e-4), "duration": (1e-5, 2e-3),
              "start": (1e-6, 2e-3), "every": (2e-4, 2e-3), "at": (1e-5, 3e-3), "mean_interval": (2e-4, 3e-3)}
_NUMBER_RANGE = {"bandwidth": (1e7, 1e12), "peak_flops": (1e10, 1e15), "bucket_bytes": (0, 1e8), "lr": (1e-4, 0.5),
                 "eps": (1e-10, 1e-6), "weight_decay": (0, 0.01), "speed": (0.2, 4), "cpus": (0.2, 4),
                 "cores": (0.5, 4), "factor": (0.3, 4), "oversubscription": (1, 4), "scale": (0.5, 20),
                 "apply_time_per_param": (0, 1e-8), "update_time_per_param": (0, 1e-8), "values": (0.1, 8),
                 "exponent": (0.2, 2), "separation": (0.5, 4), "A": (0.01, 1), "lambda0": (0, 1),
                 "stability_level": (0, 0.2), "end": (0.05, 1)}
_INT_RANGE = {"seed": (0, 2**32), "max_events": (1, 2_000_000), "threads": (1, 2), "hidden": (1, 8),
              "samples": (20, 80), "features": (1, 6), "classes": (2, 3), "clusters_per_class": (1, 2)}
_NAMES = ("fuzz", "a", "fuzz-1.x", "with space", "Ünïcödé", "a/b", "..", "x" * 120)


def _registry_strings(owner: str, key: str) -> list[str] | None:
    from simdist.platform import DEVICE_KINDS, LINK_KINDS
    from simdist.platform.network import NETWORK_MODELS
    from simdist.runtime.collectives import COLLECTIVES

    if key == "kind":
        if owner == "DeviceSpec":
            return ["cpu", *[k for k in DEVICE_KINDS.names() if k != "cpu"]]
        return LINK_KINDS.names()
    if key == "model" and owner == "NetworkConfig":
        return NETWORK_MODELS.names()
    if key == "collective":
        return ["ring", *[c for c in COLLECTIVES.names() if c != "ring"]]
    return None


def generate(d: Draw, node: dict, key: str = "", owner: str = "", optional: float = 0.3) -> Any:
    """A value valid for ``node``, sized small: each optional property appears with probability
    ``optional``, registry names come from the registries, numbers from ranges by field name."""
    node = resolve(node)
    if "const" in node:
        return node["const"]
    if "enum" in node:
        return d.choice(node["enum"])
    alternatives = node.get("anyOf") or node.get("oneOf")
    if alternatives:
        concrete = [b for b in alternatives if resolve(b).get("type") != "null"]
        if len(concrete) < len(alternatives) and d.chance(0.5):
            return None
        return generate(d, d.choice(concrete or alternatives), key, owner, optional)
    kind = node.get("type")
    if kind == "object":
        title = node.get("title", "")
        required = set(node.get("required", []))
        return {name: generate(d, sub, name, title, optional) for name, sub in node.get("properties", {}).items()
                if name in required or "const" in resolve(sub) or d.chance(optional)}
    if kind == "array":
        if "prefixItems" in node:
            return [generate(d, item, key, owner) for item in node["prefixItems"]]
        low = node.get("minItems", 0)
        return [generate(d, node.get("items", {}), key, owner) for _ in range(d.integer(low, low + 2))]
    if kind == "integer":
        return _integer(d, node, key)
    if kind == "number":
        return _number(d, node, key, owner)
    if kind == "string":
        return _string(d, node, key, owner)
    if kind == "boolean":
        return d.chance(0.5)
    return None  # null, or a free-form value


def _integer(d: Draw, node: dict, key: str) -> int:
    low = node.get("minimum", node["exclusiveMinimum"] + 1 if "exclusiveMinimum" in node else 0)
    high = node.get("maximum", low + 3)
    if key in _INT_RANGE:
        low, high = max(low, _INT_RANGE[key][0]), _INT_RANGE[key][1]
    step = int(node.get("multipleOf", 1))  # e.g. outputs.link_usage_bins: even
    first = -(-low // step) * step
    return first + step * d.integer(0, max(0, (max(low, high) - first) // step))


def _number(d: Draw, node: dict, key: str, owner: str) -> float | str:
    unit = unit_field(owner, key)
    low, high = (_SEC_RANGE.get(key) if unit else None) or _NUMBER_RANGE.get(key) or (None, None)
    if low is None:
        low = node.get("minimum", node.get("exclusiveMinimum", 0.0))
        high = node.get("maximum", node.get("exclusiveMaximum", low + 1.0))
    low = max(low, node.get("minimum", low), node.get("exclusiveMinimum", low - 1) + 1e-6)
    high = min(high, node.get("maximum", high), node.get("exclusiveMaximum", high + 1) - 1e-6)
    value = d.log_real(low, high) if low > 0 and high / low > 100 else d.real(low, high)
    if unit and d.chance(0.2):
        if key in SECONDS:
            return f"{value * 1e3:.4g}ms" if value < 1 else f"{value:.4g}s"
        return {"bandwidth": f"{value * 8 / 1e9:.4g}Gbps", "peak_flops": f"{value / 1e12:.4g}TFLOPS"}.get(
            key, f"{value / 2**20:.4g}MiB")
    return value


def _string(d: Draw, node: dict, key: str, owner: str) -> str:
    strings = _registry_strings(owner, key)
    if strings:
        return d.choice(strings)
    if key == "label" or "pattern" in node:
        return d.choice(["a", "v1", "x.y-2", "A_b+c=d"])
    if key == "links":
        return d.choice(["*", "n0.*", "*.up"])
    return d.choice(_NAMES)
