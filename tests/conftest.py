"""Shared fixtures: small platforms, simulated worlds and a compute profile for scenarios.

Fixtures hand out factories, so each test builds exactly the world it describes:

* ``make_platform(preset, **fields)`` — a :class:`Platform` from a preset with fields
  deep-merged over it (``node={"devices": 3}``);
* ``make_world(n, fidelity=..., t0=..., t1=...)`` — a :class:`SimWorld` of ``n`` CPU ranks on
  ``laptop-cpu`` (or on ``platform=``) whose every device computes ``t0 + t1 · batch``;
* ``run_ranks(world, {rank: generator function})`` — spawn one process per rank and run;
* ``profile_path`` — a compute-profile YAML for model ``mlp`` on ``host-cpu`` (scenarios).

A batch is anything with ``.size``: :class:`Sized` is the smallest such object.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import pytest
import torch

from simdist.platform.compute import ComputeModel, ModelTiming
from simdist.platform.presets import preset
from simdist.platform.spec import PlatformSpec
from simdist.platform.topology import Platform
from simdist.recorder import Recorder
from simdist.runtime.sim import SimWorld

PROFILE_T0_S = 1e-4
PROFILE_T1_S = 1e-5


@dataclass(frozen=True)
class Sized:
    """The smallest batch: only its size matters to the compute model."""

    size: int


def deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in override.items():
        out[key] = deep_merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def build_platform(name: str = "laptop-cpu", **fields: Any) -> Platform:
    return Platform(PlatformSpec.model_validate(deep_merge(preset(name), fields)))


def zero_gradients(rank: int, replica: Any, batch: Any) -> Callable[[], tuple[Any, float | None]]:
    return lambda: (torch.zeros(3), 0.0)


def build_world(n: int = 2, *, fidelity: str = "flows", t0: float = 1e-3, t1: float = 1e-4,
                platform: Platform | None = None, collective: str = "ring",
                gradient_source: Callable = zero_gradients) -> SimWorld:
    platform = platform or build_platform("laptop-cpu", node={"devices": n})
    timing = ModelTiming(t0, t1, None, "test")
    timings = {(kind, "m"): timing for kind in ("host-cpu", "a100", "h100")}
    compute = ComputeModel(platform, timings, model="m", forward_flops_per_sample=1.0, parameter_layers=1, seed=0)
    return SimWorld(platform, compute, Recorder(), gradient_source=gradient_source, fidelity=fidelity,
                    default_collective=collective)


def busy_spans(platform: Platform, starts: dict[int, float], work_s: dict[int, float],
               then_s: dict[int, float] | None = None) -> dict[int, tuple[float, float]]:
    """Each rank of ``starts`` does busy work of ``work_s`` from its start (and ``then_s`` more right
    after, with no gap) on ``platform``'s cores: each rank's (start, end of its last work)."""
    world = build_world(platform.size, platform=platform)
    spans = {}

    def process(rank):
        env = world.env
        yield env.timeout(starts[rank])
        yield world.busy(rank, work_s[rank], "update").event
        if then_s and rank in then_s:
            yield world.busy(rank, then_s[rank], "update").event
        spans[rank] = (starts[rank], env.now)

    for rank in starts:
        world.env.process(process(rank))
    world.env.run()
    return spans


def run_ranks(world: SimWorld, processes: dict[int, Callable]) -> None:
    for rank, process in processes.items():
        world.spawn(rank, process(world.runtime(rank)))
    world.env.run()


@pytest.fixture
def make_platform():
    return build_platform


@pytest.fixture
def make_world():
    return build_world


@pytest.fixture
def run_world():
    return run_ranks


@pytest.fixture(scope="session")
def profile_path(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("profiles") / "host-cpu-test.yaml"
    path.write_text(f"device: host-cpu\nmodels:\n  mlp: {{t0_s: {PROFILE_T0_S}, t1_s: {PROFILE_T1_S}}}\n")
    return str(path.resolve())
