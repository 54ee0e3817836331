"""The sections of a scenario file, each a pydantic model that documents its fields.

``workload``, ``stop``, ``evaluation``, ``network``, ``compute``, ``outputs``, ``compare`` and
``sweep`` (:class:`~simdist.scenario.Scenario` puts them together with the platform and the
algorithm). Each field says its unit, default and what is allowed; a section checks the rules
between its own fields (a stop criterion, one evaluation interval, one kind of compute
jitter, a sweep of at most :data:`MAX_SWEEP_POINTS` points). Absent optional sections stay
out of the resolved scenario, so that its content hash is as before they existed.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator, model_serializer, model_validator

from .config import USER_CONFIG
from .platform.noise import NoiseSpec
from .platform.spec import Interval, LatencySeconds
from .platform.stragglers import StragglerSpec
from .runtime.collectives import COLLECTIVES
from .training.data_loading import DataLoadingConfig
from .training.epoch_end import CheckpointConfig, ValidationConfig
from .training.loss_curve import LossCurveConfig
from .training.optim import OptimizerConfig

__all__ = ["NamedSpec", "WorkloadConfig", "StopConfig", "EvaluationConfig", "NetworkConfig", "ComputeConfig",
           "OutputConfig", "ComparePoint", "SweepConfig", "MAX_SWEEP_POINTS"]

MAX_SWEEP_POINTS = 10_000  # each point is a run; more is a mistake in the grid, not an experiment


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
    collective: str | None = Field(None, description=(
        "default allreduce algorithm (simdist list collectives); default: the platform's collectives.schedule "
        "(the library it runs on), else ring"))

    @field_validator("model")
    @classmethod
    def _model_known(cls, value: str) -> str:
        from .platform.network import NETWORK_MODELS

        return NETWORK_MODELS.check(value)

    @field_validator("collective")
    @classmethod
    def _collective_known(cls, value: str | None) -> str | None:
        return None if value is None else COLLECTIVES.check(value)


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

    plots: bool = Field(True, description="draw the run's figures into plots/")
    trace: bool = Field(True, description="write trace.json, the Chrome/Perfetto timeline (the timeline figure reads it)")
    parquet: bool = Field(False, description="write every table as Parquet too (needs pyarrow), as run --parquet does")
    link_usage: bool = Field(True, description="keep each link's bytes and flows over time: link_usage.csv and the "
                                                "trace's link counter tracks")
    link_usage_bins: int = Field(200, ge=2, le=100_000, multiple_of=2,
                                 description="time bins per link at most in link_usage.csv (the run ends with "
                                             "between half this and this many, each 1 us x a power of two wide)")


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
