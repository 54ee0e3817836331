"""Scenario files: platform + workload + algorithm + stop criteria, validated once.

A scenario is YAML (``yaml.safe_load`` only: no tags, no code). Loading it:

1. reads the file (size-limited) and checks it is a mapping;
2. applies ``--set dotted.key=value`` overrides (values parsed as YAML scalars/lists);
3. resolves ``platform`` — a preset name, a platform file path (relative to the scenario),
   or a mapping with an optional ``preset:``/``file:`` base plus overriding fields;
4. validates everything with pydantic, the algorithm's options with the config class its
   registry entry names, and cross-field rules (workers ≤ devices, a stop criterion).

Every failure is an :class:`~simdist.errors.InputError` naming the file, the field path and
what is allowed. After loading, runtime objects trust the configuration.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, Field, ValidationError, field_validator, model_serializer, model_validator

from .config import USER_CONFIG, describe_validation_error
from .errors import InputError
from .faults import FaultsConfig, check_faults
from .platform.noise import NoiseSpec
from .platform.presets import PLATFORMS
from .platform.spec import Interval, LatencySeconds, PlatformSpec, merge_platform_fields
from .platform.stragglers import StragglerSpec
from .runtime.collectives import COLLECTIVES
from .training.data_loading import DataLoadingConfig
from .training.epoch_end import CheckpointConfig, ValidationConfig
from .training.loss_curve import LossCurveConfig
from .training.optim import OptimizerConfig
from .inputfile import CAPS, file_exists, read_input_text
from .resources import resolve_reference
from .yamlio import MAX_DEPTH, parse_scalar, safe_load_limited

__all__ = ["ComparePoint", "SweepConfig", "read_scenario_file", "set_dotted", "Scenario", "WorkloadConfig", "StopConfig", "EvaluationConfig", "NetworkConfig", "ComputeConfig",
           "OutputConfig", "load_scenario", "scenario_from_dict", "apply_overrides", "format_validation_error",
           "MAX_SCENARIO_BYTES", "MAX_SWEEP_POINTS", "scenario_json_schema"]

MAX_SWEEP_POINTS = 10_000  # each point is a run; more is a mistake in the grid, not an experiment
MAX_SCENARIO_BYTES = CAPS["scenario"]  # a scenario is a few hundred lines; anything larger is a mistake


class _Config(BaseModel):
    model_config = USER_CONFIG


class NamedSpec(_Config):
    """A registered component by name plus its options: ``mlp`` or ``{name: mlp, hidden: [64]}``."""

    name: str
    options: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _normalise(cls, value):
        if isinstance(value, str):
            return {"name": value}
        if isinstance(value, dict) and "name" in value:
            if set(value) == {"name", "options"} and isinstance(value["options"], dict):
                return value  # the resolved form (manifest.json) reads back as written
            return {"name": value["name"], "options": {k: v for k, v in value.items() if k != "name"}}
        return value


class WorkloadConfig(_Config):
    """What is trained: model, data, per-worker batch and optimizer."""

    model: NamedSpec = Field(description="model name (simdist list models), 'pkg.mod:factory', or {name, options...}")
    dataset: NamedSpec = Field(NamedSpec(name="digits"), description="dataset name (simdist list datasets) or {name, options...}")
    batch_size: int = Field(32, ge=1, le=2**24, description="samples per worker per step (at most 2**24)")
    optimizer: OptimizerConfig = Field(default_factory=OptimizerConfig)
    timing_only: bool = Field(False, description="no tensors: payload sizes from the parameter count, no accuracy")
    allow_code_import: bool = Field(False, description="allow import paths: model 'pkg.mod:factory', algorithm "
                                    "'pkg.mod:Class' (imports and runs that code)")
    loss_curve: LossCurveConfig | None = Field(
        None, description="timing-only runs: the training loss to report and steer by (per-epoch values or a law)")
    data_loading: DataLoadingConfig | None = Field(
        None, description="what loading a sample costs and how many loader workers hide it (docs/host_costs.md); "
                          "default: the dataset's own figure, or indexing it out of memory, loaded by the rank itself")
    validation_split: float | None = Field(
        None, ge=0, lt=0.5, description="fraction of the training set held out as a validation split, in [0, 0.5): "
        "round(fraction x training samples) samples from the seeded stream 'validation-split', removed from the "
        "training set; nnt chooses its best worker on it, the epoch-end validation pass evaluates it. Default null: "
        "the algorithm's own default (nnt 0.1, every other 0); set it for every algorithm compared with nnt")
    validation: ValidationConfig | None = Field(
        None, description="the job's own validation pass at epoch ends, charged as the ledger's eval "
                          "(simdist.training.epoch_end); default: none")
    checkpoint: CheckpointConfig | None = Field(
        None, description="the job's checkpoint (model + optimizer state) written by worker 0 at epoch ends, "
                          "charged as the ledger's checkpoint; default: none")

    @model_serializer(mode="wrap")
    def _absent_sections_unwritten(self, handler):
        data = handler(self)  # sections left out stay out: the resolved scenario (and its content hash) is as before
        if isinstance(data, dict):
            for section in ("data_loading", "validation_split", "validation", "checkpoint"):
                if getattr(self, section) is None:
                    data.pop(section, None)
        return data


class StopConfig(_Config):
    """When the run ends: the first criterion met (at least one of epochs, steps, virtual_time)."""

    epochs: int | None = Field(None, ge=1, description="epochs of each worker's shard")
    steps: int | None = Field(None, ge=1, description="global model updates")
    virtual_time: Interval | None = Field(None, description="virtual time limit, e.g. '30s' (1 ns .. 1e9 s)")
    target_accuracy: float | None = Field(None, gt=0, le=1, description="test accuracy whose first time is reported")
    stop_at_target: bool = Field(True, description="end the run once target_accuracy is reached")
    max_events: int = Field(20_000_000, ge=1, description="guard: end the run (status event_limit) after this many "
                            "simulation events, so that no scenario can loop forever")
    max_wall_time: Interval | None = Field(None, description="guard: end the run (status wall_time_limit) after this "
                                          "much real time, e.g. '10min' (default: none)")

    @model_validator(mode="after")
    def _some_limit(self):
        if self.epochs is None and self.steps is None and self.virtual_time is None:
            raise ValueError("give at least one of epochs, steps or virtual_time (target_accuracy alone may never be met)")
        if self.virtual_time is not None and self.virtual_time <= 0:
            raise ValueError("virtual_time must be greater than zero")
        if self.max_wall_time is not None and self.max_wall_time <= 0:
            raise ValueError("max_wall_time must be greater than zero")
        return self


class EvaluationConfig(_Config):
    """How often the test set is evaluated (costs no virtual time: it only observes the run)."""

    every_steps: int | None = Field(None, ge=1, description="evaluate every this many global steps (default 50)")
    every_time: Interval | None = Field(None, description="evaluate every this much virtual time, e.g. '0.5s' (at least 1 ns)")
    max_samples: int | None = Field(
        None, ge=1, description="evaluate on at most this many test samples (nnt's own epoch-end evaluations too, "
                                "which cost a forward pass)")

    @model_validator(mode="after")
    def _one_interval(self):
        if self.every_steps is not None and self.every_time is not None:
            raise ValueError("give every_steps or every_time, not both")
        if self.every_time is not None and self.every_time <= 0:
            raise ValueError("every_time must be greater than zero")
        return self


class NetworkConfig(_Config):
    """How communication is modelled."""

    model: str = Field("max-min", description="network model (simdist list network-models)")
    collective_fidelity: Literal["analytic", "flows"] = Field(
        "analytic", description="analytic: closed-form alpha-beta per schedule; flows: every step as flows")
    collective: str = Field("ring", description="default allreduce algorithm (simdist list collectives)")

    @field_validator("model")
    @classmethod
    def _model_known(cls, value: str) -> str:
        from .platform.network import NETWORK_MODELS

        return NETWORK_MODELS.check(value)

    @field_validator("collective")
    @classmethod
    def _collective_known(cls, value: str) -> str:
        return COLLECTIVES.check(value)


class ComputeConfig(_Config):
    """Where compute times come from and how they vary."""

    profiles: list[str] = Field(default_factory=list, description="extra profile files (after calibration/profiles/*.yaml)")
    noise_sigma: float = Field(0.0, ge=0, le=2, description="log-std of lognormal compute jitter (0 = none)")
    efficiency: float = Field(0.4, gt=0, le=1, description="fraction of peak FLOP/s for devices without a measured profile")
    kernel_overhead_s: LatencySeconds = Field(10e-6, description="per-kernel launch cost for devices without a measured profile")
    threads: int = Field(1, ge=1, le=256, description="torch threads used for the real math (1 keeps runs bitwise reproducible)")
    stragglers: list[StragglerSpec] = Field(default_factory=list,
                                            description="ranks slowed by a factor in fixed, periodic or random windows")
    noise: NoiseSpec | None = Field(None, description="correlated compute noise: per-node, per-rank and straggler "
                                    "factors, correlated over steps (docs/noise.md); off when absent")

    @field_validator("noise")
    @classmethod
    def _one_jitter(cls, value: NoiseSpec | None, info):
        if value is not None and value.enabled and info.data.get("noise_sigma", 0.0) > 0:
            raise ValueError("give noise_sigma or noise, not both (noise_sigma: s is noise: {rank_sigma: s} "
                             "without correlation); set noise_sigma to 0 to use a calibrated noise section")
        return value

    @model_serializer(mode="wrap")
    def _absent_noise_unwritten(self, handler):
        data = handler(self)  # no noise section: the resolved scenario (and its content hash) is as before
        if self.noise is None and isinstance(data, dict):
            data.pop("noise", None)
        return data


class OutputConfig(_Config):
    """What a run writes besides the tables."""

    plots: bool = True
    trace: bool = True


class ComparePoint(_Config):
    """One variant of a comparison: a label and the fields it changes (dotted paths or subtrees)."""

    label: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.+=-]*$", description="names the variant's result folder")
    set: dict[str, Any] = Field(default_factory=dict, description="{dotted.key: value}; a mapping value replaces the subtree")


class SweepConfig(_Config):
    """Sweep axes run by 'simdist sweep': every combination of the grid, then each listed point.

    Keys are dotted scenario fields (``workers``, ``algorithm.name``, ``platform.nodes`` ...);
    a mapping value replaces the subtree. A grid key naming several fields joined by commas
    (``"workers,workload.batch_size"``) is one axis whose values are lists of as many values
    (linked fields: strong scaling). Points are validated one by one by :mod:`simdist.sweeps`.
    """

    grid: dict[str, list[Any]] = Field(default_factory=dict,
                                       description="{dotted.key: [values...]}: every combination is a point")
    points: list[dict[str, Any]] = Field(default_factory=list,
                                         description="[{dotted.key: value, ...}]: further points, after the grid's")

    @model_validator(mode="after")
    def _not_too_many(self):
        count = math.prod(len(values) for values in self.grid.values()) if self.grid else 0
        count += len(self.points)
        if count > MAX_SWEEP_POINTS:
            raise ValueError(f"{count:,} points (grid axes multiply); a sweep may have at most "
                             f"{MAX_SWEEP_POINTS:,}: split it or drop values")
        return self

    @field_validator("grid")
    @classmethod
    def _non_empty_axes(cls, value: dict[str, list[Any]]) -> dict[str, list[Any]]:
        for key, values in value.items():
            if not values:
                raise ValueError(f"axis {key!r} has no values")
            fields = key.split(",")
            if len(fields) > 1 and not all(isinstance(v, list) and len(v) == len(fields) for v in values):
                raise ValueError(f"axis {key!r} links {len(fields)} fields: each value must be a list of "
                                 f"{len(fields)} values")
        return value


class Scenario(_Config):
    """A complete, validated scenario."""

    name: str = Field("scenario", description="a short name used in outputs")
    description: str = ""
    seed: int = Field(0, ge=0, description="the one seed every random stream derives from")
    platform: PlatformSpec
    workers: int | None = Field(None, ge=1, description="ranks that train (default: every device)")
    workload: WorkloadConfig
    algorithm: dict[str, Any] = Field(description="{name: sync|..., options...} (simdist list algorithms)")
    stop: StopConfig
    evaluation: EvaluationConfig = Field(default_factory=EvaluationConfig)
    network: NetworkConfig = Field(default_factory=NetworkConfig)
    compute: ComputeConfig = Field(default_factory=ComputeConfig)
    outputs: OutputConfig = Field(default_factory=OutputConfig)
    faults: FaultsConfig = Field(default_factory=FaultsConfig,
                                 description="node crashes and link degradation windows (docs/faults.md)")
    compare: list[ComparePoint] = Field(default_factory=list,
                                        description="variants run side by side by 'simdist compare' (labels unique)")
    sweep: SweepConfig = Field(default_factory=SweepConfig, description="points run by 'simdist sweep' (a grid and/or listed points)")
    source: str | None = Field(None, description="the file this scenario was read from (set by the loader)")

    @property
    def worker_count(self) -> int:
        return self.workers or self.platform.device_count

    @property
    def algorithm_name(self) -> str:
        return self.algorithm["name"]

    @property
    def validation_split(self) -> float:
        """``workload.validation_split``, or where it is null the algorithm's default
        (its config class's ``default_validation_split``, else 0)."""
        if self.workload.validation_split is not None:
            return self.workload.validation_split
        from .algorithms import ALGORITHMS
        config = ALGORITHMS.entry(self.algorithm_name).config
        return float(getattr(config, "default_validation_split", 0.0))

    def algorithm_config(self):
        """The algorithm's validated config object."""
        from .algorithms import ALGORITHMS
        return ALGORITHMS.entry(self.algorithm_name).config.model_validate(self.algorithm)

    def resolved(self) -> dict[str, Any]:
        """The JSON-able resolved scenario (written to the manifest)."""
        return self.model_dump(mode="json", exclude={"source"})


# -- loading -------------------------------------------------------------------------


def format_validation_error(exc: ValidationError, *, source: str | None, prefix: str = "") -> InputError:
    """The first pydantic error as a one-line InputError (field path and what is allowed)."""
    field, message = describe_validation_error(exc)
    field = f"{prefix}.{field}" if prefix and field else prefix or field
    return InputError(message, source=source, field=field or None)


def _read_yaml_mapping(path: Path, what: str) -> dict[str, Any]:
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


def _resolve_platform(value: Any, base_dir: Path, source: str | None) -> dict[str, Any]:
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
        base = _read_yaml_mapping(path, "platform")
        base.pop("provenance", None)
        try:  # a platform file stands alone: its own errors name it, not the scenario
            PlatformSpec.model_validate(base)
        except ValidationError as exc:
            raise format_validation_error(exc, source=str(path)) from None
    for i, overlay in enumerate(overlays):
        path = resolve_reference(base_dir, overlay)  # or a shipped overlay by name
        _check_reference(path, "platform overlay", source, f"platform.overlays[{i}]")
        layer = _read_yaml_mapping(path, "platform overlay")
        layer.pop("provenance", None)
        base = _merge(base, layer)
    return _merge(base, value)


def _import_algorithm(path: str, allowed: bool, source: str | None) -> None:
    """Register the algorithm class at ``path`` ("package.module:Class"), where the scenario allows importing code."""
    from .algorithms.base import register_imported

    if not allowed:
        raise InputError(f"algorithm {path!r} is an import path and importing runs code; the scenario must set "
                         "`workload.allow_code_import: true` to allow it", source=source, field="algorithm.name")
    try:
        register_imported(path)
    except InputError as exc:
        raise exc.at(source=source, field_prefix="algorithm.name") from None


def scenario_from_dict(data: dict[str, Any], *, source: str | None = None, base_dir: Path | None = None,
                       overrides: list[str] | None = None) -> Scenario:
    """Validate a scenario mapping (what :func:`load_scenario` does after reading the file)."""
    from .algorithms import ALGORITHMS  # registry fills on import
    from .training.datasets import dataset_shape, validation_split_size
    from .training.workload import check_workload_options

    data = apply_overrides(dict(data), overrides or [])
    data["platform"] = _resolve_platform(data.get("platform", "laptop-cpu"), base_dir or Path("."), source)
    algorithm = data.get("algorithm")
    if isinstance(algorithm, str):
        data["algorithm"] = algorithm = {"name": algorithm}
    try:
        scenario = Scenario.model_validate({**data, "source": source})
    except ValidationError as exc:
        raise format_validation_error(exc, source=source) from None
    name = scenario.algorithm.get("name")
    if not isinstance(name, str):
        raise InputError(f"needs a name; known: {', '.join(ALGORITHMS.names())}", source=source, field="algorithm.name")
    if ":" in name and name not in ALGORITHMS:
        _import_algorithm(name, scenario.workload.allow_code_import, source)
    if name not in ALGORITHMS:
        raise InputError(f"unknown algorithm {name!r}; known: {', '.join(ALGORITHMS.names())}",
                         source=source, field="algorithm.name")
    try:
        config = ALGORITHMS.entry(name).config.model_validate(scenario.algorithm)
    except ValidationError as exc:
        raise format_validation_error(exc, source=source, prefix="algorithm") from None
    _check_cross_fields(scenario, config, source)
    workload = scenario.workload
    try:
        check_workload_options(workload.model.name, workload.model.options, workload.dataset.name,
                               workload.dataset.options)
    except InputError as exc:
        raise exc.at(source=source) from None
    shape = dataset_shape(workload.dataset.name, workload.dataset.options)
    if shape is not None and shape.train_samples < scenario.worker_count:
        raise InputError(f"{shape.train_samples} training samples cannot be shared by {scenario.worker_count} "
                         "workers; use a larger dataset or fewer workers", source=source, field="workload.dataset")
    if shape is not None:  # the validation split comes out of the training samples
        try:
            validation_split_size(shape.train_samples, scenario.validation_split, scenario.worker_count)
        except InputError as exc:
            raise exc.at(source=source) from None
    labels = [p.label for p in scenario.compare]
    if len(set(labels)) != len(labels):
        duplicate = next(label for label in labels if labels.count(label) > 1)
        raise InputError(f"label {duplicate!r} is used twice; labels name result folders and must be unique",
                         source=source, field="compare")
    return scenario.model_copy(update={"algorithm": config.model_dump(mode="json")})


def _check_cross_fields(scenario: Scenario, config: Any, source: str | None) -> None:
    for i, table in enumerate(scenario.platform.collectives.tables if scenario.platform.collectives else []):
        if table.algorithm is not None and table.algorithm not in COLLECTIVES:
            raise InputError(f"unknown collective algorithm {table.algorithm!r}; known: {', '.join(COLLECTIVES.names())}",
                             source=source, field=f"platform.collectives.tables[{i}].algorithm")
    devices = scenario.platform.device_count
    if scenario.workers is not None and scenario.workers > devices:
        raise InputError(f"{scenario.workers} workers but the platform has only {devices} devices "
                         f"({scenario.platform.nodes} nodes x {scenario.platform.node.devices})",
                         source=source, field="workers")
    for i, straggler in enumerate(scenario.compute.stragglers):
        missing = [r for r in straggler.ranks if r >= devices]
        if missing:
            raise InputError(f"rank {missing[0]} does not exist (the platform has ranks 0..{devices - 1})",
                             source=source, field=f"compute.stragglers[{i}].ranks")
    check_faults(scenario.faults, scenario.platform, source)
    if scenario.workload.timing_only and scenario.stop.target_accuracy is not None:
        raise InputError("timing-only runs compute no accuracy; remove stop.target_accuracy or timing_only",
                         source=source, field="stop.target_accuracy")
    check = getattr(config, "check_scenario", None)
    if check is not None:
        try:
            check(scenario)
        except InputError as exc:
            raise exc.at(source=source) from None


def read_scenario_file(path: str | Path) -> dict[str, Any]:
    """The raw mapping of a scenario file (size-limited, safe YAML), before any validation."""
    return _read_yaml_mapping(Path(path), "scenario")


def load_scenario(path: str | Path, overrides: list[str] | None = None, *, timing_only: bool | None = None) -> Scenario:
    """Read, override, resolve and validate the scenario file at ``path``."""
    path = Path(path)
    data = read_scenario_file(path)
    overrides = list(overrides or [])
    if timing_only:
        overrides.append("workload.timing_only=true")
    return scenario_from_dict(data, source=str(path), base_dir=path.parent, overrides=overrides)


def scenario_json_schema() -> dict[str, Any]:
    """JSON Schema of scenario files, with each registered algorithm's options."""
    from .algorithms import ALGORITHMS

    schema = Scenario.model_json_schema(mode="validation")
    schema["properties"].pop("source", None)
    schema["properties"]["platform"] = {
        "description": "a preset name (simdist list platforms), a platform file path, or a mapping "
                       "{preset|file: ..., overriding fields...}",
        "anyOf": [{"type": "string"}, PlatformSpec.model_json_schema(mode="validation")],
    }
    schema["properties"]["algorithm"] = {
        "description": "the training algorithm and its options",
        "oneOf": [entry.config.model_json_schema(mode="validation") for entry in ALGORITHMS],
    }
    return schema
