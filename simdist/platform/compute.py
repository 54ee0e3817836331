"""Compute times: ``t0 + t1 · batch`` per (model, device), scaled and jittered.

The duration of one forward/backward of a rank is

    time = (t0 + t1 · batch) / (speed · cpus) · jitter

* ``t0``, ``t1`` come from a **measured profile** (``calibration/profiles/*.yaml``: real
  kernels timed on the device, fitted by least squares) for the device's profile key. When
  the scenario's model has other options than the profiled one, ``t1`` is scaled by the
  ratio of forward FLOPs per sample.
* Devices that cannot be measured here (A100, H100) without a measured profile fall back to
  a **FLOP-count estimate**: ``t1 = 3 · F / (peak · efficiency)`` (forward plus a backward
  of twice its cost) and ``t0 = kernel_overhead_s · 3 · layers``. ``efficiency`` and
  ``kernel_overhead_s`` are modelling assumptions, set in the scenario's ``compute``
  section; a calibrated profile replaces them.
* ``speed`` is the device's speed factor; ``cpus`` the CPU share of a CPU rank (like
  ``docker --cpus``: a rank at 1.5 CPUs computes 1.5× as fast as one at 1 CPU — the
  profile was measured on one core).
* ``jitter`` is lognormal with mean 1 and log-standard-deviation ``noise_sigma``, drawn
  from the rank's own seeded stream ``compute-noise/rank<r>``; the correlated noise model
  (:mod:`simdist.platform.noise`: per-node, per-rank and straggler factors, correlated over a
  rank's steps, a step being one forward/backward) and straggler windows
  (:mod:`simdist.platform.stragglers`) multiply it further, in that order.

A forward pass alone (an algorithm's own evaluation of its replica) takes one
``PRODUCTS_PER_LAYER``-th of a forward/backward of as many samples: each layer does one
matrix product forward and two backward (input and weight gradients), the ratio the
FLOP-count estimate is built on.

When a node declares ``cores``, its CPU ranks share them (processor sharing): the runtime
runs each forward/backward as ``work_core_s(...)`` core-seconds of work whose rate is the
max-min fair share of the node's cores, capped by the rank's ``cpus``; alone on its node a
rank then takes exactly the time above.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import numpy as np
import yaml

from ..errors import InputError
from ..seeding import numpy_stream
from .noise import NoiseModel, NoiseSpec
from .devices import DEVICE_KINDS
from .op_costs import ops_from_profile
from .stragglers import StragglerSchedule
from .topology import Platform

__all__ = ["ModelTiming", "load_profiles", "load_profile_ops", "default_profile_paths", "ComputeModel", "PRODUCTS_PER_LAYER"]

PRODUCTS_PER_LAYER = 3  # matrix products per layer in a forward/backward: forward, input and weight gradients


@dataclass(frozen=True)
class ModelTiming:
    """Fitted cost of one model on one device."""

    t0_s: float
    t1_s: float  # seconds per sample
    forward_flops_per_sample: float | None
    source: str
    # whether t0_s + t1_s * batch includes the optimizer step (measured training steps and
    # published iteration times do; a FLOP-count estimate of forward/backward does not)
    includes_optimizer_step: bool = True
    optimizer_step_s: float = 0.0  # the step's cost taken out of t0_s (charged by the algorithm instead)


def default_profile_paths() -> list[Path]:
    """The shipped profiles (``calibration/profiles``, in a checkout or an installed wheel:
    :mod:`simdist.resources`)."""
    from ..resources import shipped_profiles

    return shipped_profiles()


def _read_profile(path: Path) -> dict:
    from ..inputfile import read_input_text
    from ..yamlio import safe_load_limited

    text = read_input_text(path, "compute profile")
    try:
        data = safe_load_limited(text)
    except yaml.YAMLError as exc:
        raise InputError(f"not valid YAML ({str(exc).splitlines()[0]})", source=str(path)) from None
    except RecursionError:
        raise InputError("YAML nesting too deep", source=str(path)) from None
    if not isinstance(data, dict) or not isinstance(data.get("device"), str) or not isinstance(data.get("models"), dict):
        raise InputError("a compute profile must be a mapping with 'device' (string) and 'models' (mapping)",
                         source=str(path))
    return data


def load_profiles(paths: Iterable[Path]) -> dict[tuple[str, str], ModelTiming]:
    """Timings keyed by (profile device, model name); later files override earlier ones."""
    timings: dict[tuple[str, str], ModelTiming] = {}
    for path in paths:
        timings.update(_profile_timings(Path(path)))
    return timings


_PARSED: dict[tuple[str, str, int, int], tuple[tuple[tuple[str, str], ModelTiming], ...]] = {}


def _profile_timings(path: Path) -> tuple[tuple[tuple[str, str], ModelTiming], ...]:
    """One profile file's timings, parsed once per process for each version of the file (its
    modification time and size): a sweep builds hundreds of simulations from the same
    profiles, and parsing the shipped ones took about 11 ms a run (0.2 ms once parsed)."""
    try:
        stat = path.stat()
    except OSError:  # missing or unreadable: _read_profile names the problem
        return tuple(_parsed_timings(path, _read_profile(path)))
    key = (str(path.resolve()), str(path), stat.st_mtime_ns, stat.st_size)
    if key not in _PARSED:
        _PARSED[key] = tuple(_parsed_timings(path, _read_profile(path)))
    return _PARSED[key]


_OPS: dict[tuple[str, str, int, int], dict[str, dict[str, float]]] = {}


def load_profile_ops(paths: Iterable[Path]) -> dict[str, dict[str, float]]:
    """The profiles' measured op costs (``{device: {op: seconds per parameter}}``, the ``ops``
    sections; :mod:`.op_costs`), later files overriding earlier ones; each file version parsed once."""
    merged: dict[str, dict[str, float]] = {}
    for path in map(Path, paths):
        try:
            stat = path.stat()
            key = (str(path.resolve()), str(path), stat.st_mtime_ns, stat.st_size)
        except OSError:
            key = None
        ops = _OPS.get(key) if key is not None else None
        if ops is None:
            ops = ops_from_profile(_read_profile(path), str(path))
            if key is not None:
                _OPS[key] = ops
        for device, values in ops.items():
            merged.setdefault(device, {}).update(values)
    return merged


MAX_PROFILE_TIME_S = 3600.0  # an hour per step or per sample is a unit slip, not a measurement


def _profile_number(entry: dict, key: str, path: Path, field: str) -> float | None:
    """``entry[key]`` as a finite float (None if absent); a bool, string or non-finite value is an error."""
    value = entry.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InputError(f"{key} must be a finite number, got {value!r}", source=str(path), field=f"{field}.{key}")
    return float(value)


def _parsed_timings(path: Path, data: dict) -> Iterator[tuple[tuple[str, str], ModelTiming]]:
    for model, entry in data["models"].items():
        field = f"models.{model}"
        if not isinstance(entry, dict):
            raise InputError("must be a mapping with t0_s and t1_s", source=str(path), field=field)
        t0, t1 = (_profile_number(entry, key, path, field) for key in ("t0_s", "t1_s"))
        if t0 is None or t1 is None:
            raise InputError("needs numeric t0_s and t1_s (seconds, seconds per sample)",
                             source=str(path), field=field)
        if not (0 <= t0 <= MAX_PROFILE_TIME_S and 0 < t1 <= MAX_PROFILE_TIME_S):
            raise InputError(f"t0_s must be >= 0 and t1_s > 0, each at most {MAX_PROFILE_TIME_S:g} s, "
                             f"got t0_s={t0}, t1_s={t1}", source=str(path), field=field)
        flops = _profile_number(entry, "forward_flops_per_sample", path, field)
        if flops is not None and flops <= 0:
            raise InputError(f"must be greater than zero, got {flops}", source=str(path),
                             field=f"{field}.forward_flops_per_sample")
        includes = entry.get("includes_optimizer_step", True)
        if not isinstance(includes, bool):
            raise InputError(f"must be true or false, got {includes!r}", source=str(path),
                             field=f"{field}.includes_optimizer_step")
        yield (data["device"], str(model)), ModelTiming(t0, t1, flops, str(path), includes_optimizer_step=includes)


def co_run_factors(platform: Platform) -> np.ndarray | None:
    """Each rank's constant slow-down from the CPU ranks it shares its node with (``node.co_run``),
    or None.

    A node whose cpu ranks have their own cpus (neither ``cores`` nor ``core_sets``) slows each
    of them by the undersubscribed factor (caches, memory bandwidth) when it holds two or more:
    they compute side by side all along. A node whose ranks share core pools gets no constant
    factor: the simulator's processor sharing applies ``co_run`` to a pool only while two or more
    of its ranks compute at once (:meth:`simdist.runtime.sim_compute.ComputeExecution._co_running`;
    the oversubscribed factor when they outnumber its cores), since a rank beside an idle one,
    such as a parameter server waiting for pushes, is not slowed (:mod:`simdist.calibrate.cpu_share`).
    """
    spec = platform.spec
    nodes = [spec.node_at(n) for n in range(spec.nodes)]
    if all(node.co_run is None for node in nodes):
        return None
    per_node = [_co_run_per_local(node) for node in nodes]
    factors = np.array([per_node[d.node][d.local_rank] if not DEVICE_KINDS.get(d.kind).is_gpu else 1.0
                        for d in platform.devices])
    return factors if np.any(factors != 1.0) else None


def _co_run_per_local(node: Any) -> np.ndarray:
    """One node's co-run slow-down of each of its local ranks (1 without ``co_run``)."""
    per_local = np.ones(node.devices)
    if node.co_run is None or node.shares_cores or node.devices < 2:  # shared pools: while ranks co-run
        return per_local
    per_local[:] = node.co_run.undersubscribed_factor  # each rank on cpus of its own, beside the others
    return per_local


class ComputeModel:
    """Forward/backward durations of every rank for one workload."""

    def __init__(self, platform: Platform, timings: dict[tuple[str, str], ModelTiming], *, model: str,
                 forward_flops_per_sample: float, parameter_layers: int, seed: int, noise_sigma: float = 0.0,
                 efficiency: float = 0.4, kernel_overhead_s: float = 10e-6,
                 stragglers: StragglerSchedule | None = None, noise: NoiseSpec | None = None,
                 optimizer_step_s: Callable[[Any], float] | None = None):
        """``optimizer_step_s(device)``: the optimizer step's time on one full core of ``device``;
        taken out of every profile that includes it, because each algorithm charges the step
        where it makes it (a parameter-server worker makes none)."""
        self.platform = platform
        self.noise_sigma = noise_sigma
        self.stragglers = stragglers
        self._noise = [numpy_stream(seed, f"compute-noise/rank{d.rank}") for d in platform.devices]
        self.noise = NoiseModel(noise, seed, [d.node for d in platform.devices]) \
            if noise is not None and noise.enabled else None
        self._base: dict[str, ModelTiming] = {}
        self._vector_cache: dict[tuple[int, ...], tuple[np.ndarray, ...]] = {}
        self.co_run = co_run_factors(platform)  # None: no rank is slowed by its neighbours
        for device in platform.devices:
            key = device.profile_device
            if key not in self._base:
                timing = self.timing_for(device, timings, model, forward_flops_per_sample,
                                         parameter_layers, efficiency, kernel_overhead_s)
                if optimizer_step_s is not None and timing.includes_optimizer_step:
                    timing = _without_optimizer_step(timing, optimizer_step_s(device))
                self._base[key] = timing

    @staticmethod
    def timing_for(device, timings, model, flops, layers, efficiency, overhead_s) -> ModelTiming:
        """The t0 + t1 * batch timing of ``model`` on ``device`` (anything with ``profile_device`` and
        ``peak_flops``): a measured profile, scaled to the model's FLOPs, or the FLOP-count estimate."""
        measured = timings.get((device.profile_device, model))
        if measured is not None:
            scale = flops / measured.forward_flops_per_sample if measured.forward_flops_per_sample and flops else 1.0
            return ModelTiming(measured.t0_s, measured.t1_s * scale, flops, measured.source,
                               includes_optimizer_step=measured.includes_optimizer_step)
        if device.peak_flops:
            return ModelTiming(overhead_s * PRODUCTS_PER_LAYER * layers,
                               PRODUCTS_PER_LAYER * flops / (device.peak_flops * efficiency), flops,
                               f"FLOP-count estimate: peak {device.peak_flops:.3g} FLOP/s x efficiency {efficiency}",
                               includes_optimizer_step=False)
        known = sorted({m for (d, m) in timings if d == device.profile_device})
        raise InputError(
            f"no compute profile for model {model!r} on device {device.profile_device!r} "
            f"(profiled models: {', '.join(known) or 'none'}); measure one with "
            f"'python -m simdist.calibrate.compute_profile' and list it under compute.profiles",
            field="compute.profiles")

    def timing(self, rank: int) -> ModelTiming:
        return self._base[self.platform.devices[rank].profile_device]

    def mean_duration_s(self, rank: int, batch_size: int) -> float:
        """The noiseless duration of one forward/backward of ``batch_size`` samples on ``rank``."""
        device = self.platform.devices[rank]
        timing = self._base[device.profile_device]
        share = device.cpus if device.cpus is not None else 1.0
        base = _step_work_s(timing.t0_s, timing.t1_s, batch_size) / (device.speed * share)
        return base * self.co_run[rank] if self.co_run is not None else base

    def forward_s(self, rank: int, samples: int) -> float:
        """A forward pass alone over ``samples`` samples on ``rank`` (an evaluation): noiseless, on its CPU share."""
        return self.mean_duration_s(rank, samples) / PRODUCTS_PER_LAYER

    def duration_s(self, rank: int, batch_size: int, now_s: float = 0.0) -> float:
        """One sampled duration of a forward/backward starting at ``now_s`` (alone on its cores)."""
        device = self.platform.devices[rank]
        share = device.cpus if device.cpus is not None else 1.0
        return self.work_core_s(rank, batch_size, now_s) / share

    def work_core_s(self, rank: int, batch_size: int, now_s: float = 0.0) -> float:
        """The same forward/backward as work for one full core (processor-sharing runs).

        Advances the rank's noise stream when noise is on.
        """
        device = self.platform.devices[rank]
        timing = self._base[device.profile_device]
        work = _step_work_s(timing.t0_s, timing.t1_s, batch_size) / device.speed
        if self.co_run is not None:
            work *= self.co_run[rank]
        if self.noise_sigma > 0:
            s = self.noise_sigma
            work *= math.exp(s * self._noise[rank].standard_normal() - 0.5 * s * s)
        if self.noise is not None:
            work *= self.noise.next_factor(rank)
        if self.stragglers is not None:
            work *= self.stragglers.factor(rank, now_s)
        return work

    def durations_s(self, ranks: list[int], batch_size: int, now_s: Any = 0.0) -> np.ndarray:
        """:meth:`duration_s` of every rank in ``ranks`` (rank order), as one array, all starting
        at ``now_s`` or each at its own entry of it.

        The same floating-point operations in the same order, and one draw per rank from
        its own noise stream (one step of each rank's correlated noise), so each entry equals
        what ``duration_s`` would have returned.
        """
        key = tuple(ranks)
        cached = self._vector_cache.get(key)
        if cached is None:
            devices = [self.platform.devices[r] for r in ranks]
            timings = [self._base[d.profile_device] for d in devices]
            cached = self._vector_cache[key] = (
                np.array([t.t0_s for t in timings]), np.array([t.t1_s for t in timings]),
                np.array([d.speed for d in devices], dtype=float),
                np.array([d.cpus if d.cpus is not None else 1.0 for d in devices], dtype=float),
                np.asarray(ranks, dtype=np.int64))
        t0, t1, speed, share, rank_index = cached
        work = _step_work_s(t0, t1, batch_size) / speed
        if self.co_run is not None:
            work = work * self.co_run[rank_index]
        if self.noise_sigma > 0:
            s = self.noise_sigma
            work = work * np.array([math.exp(s * self._noise[r].standard_normal() - 0.5 * s * s) for r in ranks])
        if self.noise is not None:
            work = work * self.noise.next_factors(rank_index)
        if self.stragglers is not None:
            starts = np.broadcast_to(np.asarray(now_s, dtype=float), (len(ranks),))
            work = work * np.array([self.stragglers.factor(r, float(t)) for r, t in zip(ranks, starts)])
        return work / share

    def describe(self) -> dict:
        return {key: {"t0_s": t.t0_s, "t1_s": t.t1_s, "source": t.source,
                      "optimizer_step_s": t.optimizer_step_s, "includes_optimizer_step": t.includes_optimizer_step}
                for key, t in self._base.items()}


def _without_optimizer_step(timing: ModelTiming, step_s: float) -> ModelTiming:
    """``timing`` with the optimizer step taken out of its batch-independent part ``t0_s``
    (the step's cost does not depend on the batch). A fit may put a small fixed cost into the
    per-sample part and leave ``t0_s`` below the step's cost: ``t0_s`` then goes negative, and
    a duration is ``max(t0_s + t1_s * batch, 0)`` (:func:`_step_work_s`)."""
    taken_s = max(step_s, 0.0)
    return ModelTiming(timing.t0_s - taken_s, timing.t1_s, timing.forward_flops_per_sample, timing.source,
                       includes_optimizer_step=False, optimizer_step_s=taken_s)


def _step_work_s(t0_s: Any, t1_s: Any, batch_size: int) -> Any:
    """``t0 + t1 * batch``, never below zero (scalars or arrays)."""
    work = t0_s + t1_s * batch_size
    return np.maximum(work, 0.0) if isinstance(work, np.ndarray) else max(work, 0.0)
