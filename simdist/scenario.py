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

The sections other than platform and algorithm are in :mod:`simdist.scenario_sections`, the
reading, overriding and platform resolution in :mod:`simdist.scenario_files`; their public
names are re-exported here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from .config import USER_CONFIG
from .errors import InputError
from .faults import FaultsConfig, check_faults
from .inputfile import CAPS
from .platform.spec import PlatformSpec
from .runtime.collectives import COLLECTIVES
from .scenario_files import apply_overrides, format_validation_error, read_yaml_mapping, resolve_platform, set_dotted
from .scenario_sections import (MAX_SWEEP_POINTS, ComparePoint, ComputeConfig, EvaluationConfig, NetworkConfig,
                                OutputConfig, StopConfig, SweepConfig, WorkloadConfig)
from .scenario_sections import NamedSpec  # noqa: F401 - still importable from here

__all__ = ["ComparePoint", "SweepConfig", "read_scenario_file", "set_dotted", "Scenario", "WorkloadConfig", "StopConfig", "EvaluationConfig", "NetworkConfig", "ComputeConfig",
           "OutputConfig", "load_scenario", "scenario_from_dict", "apply_overrides", "format_validation_error",
           "MAX_SCENARIO_BYTES", "MAX_SWEEP_POINTS", "scenario_json_schema"]

MAX_SCENARIO_BYTES = CAPS["scenario"]  # a scenario is a few hundred lines; anything larger is a mistake


class _Config(BaseModel):
    model_config = USER_CONFIG


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
    data["platform"] = resolve_platform(data.get("platform", "laptop-cpu"), base_dir or Path("."), source)
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


def _check_collective(name: str | None, source: str | None, field: str) -> None:
    """A platform's collective algorithm (None: unset) must be one simdist has."""
    if name is not None and name not in COLLECTIVES:
        raise InputError(f"unknown collective algorithm {name!r}; known: {', '.join(COLLECTIVES.names())}",
                         source=source, field=field)


def _check_cross_fields(scenario: Scenario, config: Any, source: str | None) -> None:
    collectives = scenario.platform.collectives
    if collectives is not None:
        _check_collective(collectives.schedule, source, "platform.collectives.schedule")
        for i, table in enumerate(collectives.tables):
            _check_collective(table.algorithm, source, f"platform.collectives.tables[{i}].algorithm")
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
    return read_yaml_mapping(Path(path), "scenario")


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
