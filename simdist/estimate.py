"""How much work a scenario asks for, known before any of it is done.

A scenario is a few lines; what it asks for can be a million nodes, a hidden layer of a
billion units or an evaluation every nanosecond. :func:`estimate_work` reads the validated
scenario only (the model is built on PyTorch's ``meta`` device: shapes, no memory) and
returns a :class:`WorkEstimate` — forward/backward passes, evaluations, memory and an
order-of-magnitude wall time. :func:`check_work` refuses, with the estimate and the field to
change, a run whose memory exceeds the host's available memory or whose wall time exceeds
:data:`MAX_WALL_S`; ``--force`` runs it anyway.

The cost constants were measured on the development host (one core of a 2-core x86 VM,
PyTorch CPU, one thread) and are meant to be right within a factor of a few:

* :data:`GRADIENT_OVERHEAD_S` — host time of one simulated forward/backward beyond its
  arithmetic (events, flows, recorder, optimizer step): the quickstart (MLP 64-128-10,
  batch 32, 960 passes) ran in 0.56 s, ~580 us a pass of ~2 MFLOP;
* :data:`HOST_FLOPS` — arithmetic rate of small fp32 matrix products on one core;
* :data:`RANK_STEP_S` — host time per rank and step of a timing-only run: 27-76 us measured
  on the ResNet-50 timing scenario at 16 and 256 GPUs, rounded up;
* :data:`BYTES_PER_RANK` and :data:`BYTES_PER_PASS` — platform objects per rank, recorder rows
  and trace spans per forward/backward; :data:`THREAD_STACK_BYTES` — the stack each compute
  thread reserves.

Timing-only runs hold no replicas, but they still build the dataset (labels at least) and the
model once.

A run stopped only by ``stop.virtual_time`` is bounded through the fastest device's compute
time per step (a lower bound, so the pass count is an upper bound).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
from torch import nn

from .errors import InputError
from .scenario import Scenario
from .training.datasets import dataset_shape, validation_split_size
from .units import format_bytes, format_time

__all__ = ["WorkEstimate", "estimate_work", "check_work", "refuse_excess_work", "available_memory_bytes", "MAX_WALL_S"]

GRADIENT_OVERHEAD_S = 500e-6
HOST_FLOPS = 5e9
RANK_STEP_S = 100e-6
EVAL_OVERHEAD_S = 200e-6
BYTES_PER_RANK = 64 * 1024
BYTES_PER_PASS = 400
THREAD_STACK_BYTES = 8 << 20  # address space each torch thread reserves for its stack (glibc default)
MAX_WALL_S = 6 * 3600.0  # a run longer than this is a mistake more often than an experiment: --force
_COPIES_PER_REPLICA = 4  # parameters, gradient, optimizer state (momentum or Adam's two moments)
_DATASET_BYTES_PER_VALUE = 32  # float64 temporaries while generating and standardising (3), then float32


@dataclass(frozen=True)
class WorkEstimate:
    """What a run will do and cost, to an order of magnitude."""

    ranks: int
    params: int | None  # parameters of the model (None: an imported model, not built here)
    passes: float  # forward/backward passes over all workers
    evaluations: float
    memory_bytes: float
    wall_s: float
    evaluation_wall_s: float  # the part of wall_s spent evaluating
    memory_field: str  # the field behind the largest part of memory_bytes
    passes_field: str  # the stop criterion that bounds the passes

    def describe(self) -> str:
        params = "?" if self.params is None else f"{self.params:,}"
        return (f"{self.ranks} ranks, {params} parameters, ~{self.passes:.3g} forward/backward passes, "
                f"~{self.evaluations:.3g} evaluations, ~{format_bytes(self.memory_bytes)} memory, "
                f"~{format_time(self.wall_s)} wall time")


def available_memory_bytes() -> float:
    """Memory this process can still get: the least of the host's ``MemAvailable`` (total memory
    where that is unknown), its container's cgroup limit and its own address-space limit
    (``ulimit -v``) less what it uses."""
    limits = [_host_available()]
    try:
        text = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        used = Path("/sys/fs/cgroup/memory.current").read_text().strip()
        if text != "max":
            limits.append(float(text) - float(used))
    except (OSError, ValueError):
        pass
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
        if soft != resource.RLIM_INFINITY:
            limits.append(soft - _address_space_bytes())
    except (ImportError, OSError, ValueError):
        pass
    return max(0.0, min(limits))


def _host_available() -> float:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return float(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return math.inf


def _address_space_bytes() -> float:
    """This process's virtual memory size (what RLIMIT_AS counts); 0 where unknown."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmSize:"):
                return float(line.split()[1]) * 1024
    except OSError:
        pass
    return 0.0


def _meta_model(scenario: Scenario, input_shape: tuple[int, ...], classes: int):
    """(parameters, forward FLOPs per sample, activations per sample) of the model, built on ``meta``."""
    from .training.models import MODELS, model_info

    spec = scenario.workload.model
    if spec.name not in MODELS:
        return None
    entry = MODELS.entry(spec.name)
    try:
        config = entry.config.model_validate(spec.options) if entry.config else None
        with torch.device("meta"):
            module = entry.factory(tuple(input_shape), classes, config)
        info = model_info(module, tuple(input_shape))
        return info.param_count, info.forward_flops_per_sample, _activations(module, input_shape)
    except Exception:  # noqa: BLE001 - bad options are reported when the workload is built
        return None


def _activations(module: nn.Module, input_shape: tuple[int, ...]) -> int:
    """Values every leaf module outputs for one sample (kept for the backward pass)."""
    total = [0]

    def hook(_module, _inputs, output):
        if isinstance(output, torch.Tensor):
            total[0] += output.numel()

    leaves = [m for m in module.modules() if not list(m.children())]
    handles = [m.register_forward_hook(hook) for m in leaves]
    try:
        with torch.no_grad():
            module(torch.zeros((1, *input_shape), device="meta"))
    finally:
        for handle in handles:
            handle.remove()
    return total[0]


def _fastest_step_s(scenario: Scenario, flops: float, layers: int) -> float | None:
    """A lower bound of one forward/backward on the scenario's fastest device (None if unknown)."""
    platform = scenario.platform
    steps = [_step_on(scenario, node.device, flops, layers) for node in [platform.node] + [g.node for g in platform.node_groups]]
    known = [s for s in steps if s is not None]
    return min(known) if known else None


def _step_on(scenario: Scenario, spec: Any, flops: float, layers: int) -> float | None:
    """A lower bound of one forward/backward on a device of ``spec`` (the fastest of any override)."""
    from .assembly import profile_paths
    from .platform.compute import ComputeModel, load_profiles
    from .platform.devices import DEVICE_KINDS

    kind = DEVICE_KINDS.get(spec.kind)
    overrides = scenario.platform.device_overrides
    speed = max([spec.speed] + [o.speed for o in overrides if o.speed])
    share = max([spec.cpus or 1.0] + [o.cpus for o in overrides if o.cpus])
    device = SimpleNamespace(profile_device=kind.profile_device, peak_flops=spec.peak_flops or kind.peak_flops)
    try:
        timing = ComputeModel.timing_for(device, load_profiles(profile_paths(scenario)), scenario.workload.model.name,
                                         flops, layers, scenario.compute.efficiency, scenario.compute.kernel_overhead_s)
    except InputError:
        return None
    step_s = (timing.t0_s + timing.t1_s * scenario.workload.batch_size) / (speed * share)
    return step_s if step_s > 0 else None


def _passes(scenario: Scenario, train_samples: float | None, step_s: float | None) -> tuple[float, str]:
    """Forward/backward passes over all workers: the smallest bound the stop criteria give."""
    stop, workers, batch = scenario.stop, scenario.worker_count, scenario.workload.batch_size
    bounds: list[tuple[float, str]] = []
    if stop.steps is not None:
        bounds.append((float(stop.steps) * workers, "stop.steps"))
    if stop.epochs is not None and train_samples is not None:
        bounds.append((stop.epochs * (train_samples / batch + workers), "stop.epochs"))
    if stop.virtual_time is not None and step_s is not None:
        bounds.append((workers * (stop.virtual_time / step_s + 1), "stop.virtual_time"))
    bounds.append((float(stop.max_events), "stop.max_events"))  # every pass is at least one event
    return min(bounds)


def estimate_work(scenario: Scenario) -> WorkEstimate:
    """The work ``scenario`` asks for (see the module docstring for what is counted)."""
    workers = scenario.worker_count
    servers = int(scenario.algorithm.get("servers") or 0)
    ranks = scenario.platform.device_count
    timing_only = scenario.workload.timing_only
    shape = dataset_shape(scenario.workload.dataset.name, scenario.workload.dataset.options)
    model = _meta_model(scenario, shape.input_shape, shape.classes) if shape else None
    params, flops, activations = model if model else (None, 0.0, 0)
    train = shape.train_samples if shape else None
    if train is not None:  # the validation split is held out of training
        train -= validation_split_size(train, scenario.validation_split)
    step_s = _fastest_step_s(scenario, flops, 1) if model else None
    passes, passes_field = _passes(scenario, train, step_s)
    evaluations, eval_samples = _evaluations(scenario, passes, step_s, shape)
    batch = scenario.workload.batch_size if train is None else min(scenario.workload.batch_size,
                                                                     math.ceil(train / workers))
    eval_wall = evaluations * (EVAL_OVERHEAD_S + eval_samples * flops / HOST_FLOPS)
    parts = {"platform.nodes": ranks * BYTES_PER_RANK, passes_field: passes * BYTES_PER_PASS,
             "compute.threads": scenario.compute.threads * THREAD_STACK_BYTES,
             # the module, the initial vector and the evaluator's flat buffer exist in both modes
             "workload.model": (params or 0) * 4 * 3}
    if shape is not None:
        per_sample = math.prod(shape.input_shape) * _DATASET_BYTES_PER_VALUE if shape.holds_values else 0
        parts["workload.dataset"] = shape.samples * (per_sample + 8)  # values while built, int64 labels
    if timing_only:
        wall = passes * RANK_STEP_S
    else:
        wall = passes * (GRADIENT_OVERHEAD_S + 3 * flops * batch / HOST_FLOPS) + eval_wall
        parts["workload.model"] += (params or 0) * 4 * _COPIES_PER_REPLICA * (workers + servers)
        parts["workload.batch_size"] = workers * batch * activations * 4 * 3
    memory_field = max(parts, key=parts.get)
    return WorkEstimate(ranks, params, passes, evaluations, sum(parts.values()), wall, eval_wall, memory_field,
                        passes_field)


def _evaluations(scenario: Scenario, passes: float, step_s: float | None, shape) -> tuple[float, float]:
    """(evaluations, test samples each) of a run of ``passes`` forward/backward passes."""
    if scenario.workload.timing_only:
        return 0.0, 0.0
    evaluation = scenario.evaluation
    steps = passes / scenario.worker_count
    if evaluation.every_time is not None:
        horizon = scenario.stop.virtual_time if scenario.stop.virtual_time is not None else steps * (step_s or 0.0)
        count = horizon / evaluation.every_time
    else:
        count = steps / (evaluation.every_steps or 50)
    test = shape.samples * shape.test_fraction if shape else 0.0
    return count + 1, min(test, evaluation.max_samples or test)


def check_work(scenario: Scenario, estimate: WorkEstimate, *, force: bool = False,
               memory_limit_bytes: float | None = None) -> None:
    """Refuse a run above the host's available memory or :data:`MAX_WALL_S` (unless ``force``)."""
    if force:
        return
    limit = available_memory_bytes() * 0.8 if memory_limit_bytes is None else memory_limit_bytes
    if estimate.memory_bytes > limit:
        raise InputError(f"needs ~{format_bytes(estimate.memory_bytes)} of memory, more than the "
                         f"~{format_bytes(limit)} this host can give ({estimate.describe()}); shrink the model, "
                         "batch, dataset or platform, or pass --force", source=scenario.source,
                         field=estimate.memory_field)
    if estimate.wall_s > MAX_WALL_S:
        field, change = _wall_advice(scenario, estimate)
        raise InputError(f"would take ~{format_time(estimate.wall_s)} (more than {format_time(MAX_WALL_S)}: "
                         f"{estimate.describe()}); {change} {field} or pass --force",
                         source=scenario.source, field=field)


def refuse_excess_work(scenario: Scenario, *, force: bool = False) -> WorkEstimate:
    """Estimate ``scenario`` and :func:`check_work` it; the estimate, for callers that report it."""
    estimate = estimate_work(scenario)
    check_work(scenario, estimate, force=force)
    return estimate


def _wall_advice(scenario: Scenario, estimate: WorkEstimate) -> tuple[str, str]:
    """The field whose change shortens the run most directly, and which way to change it."""
    if estimate.evaluation_wall_s > estimate.wall_s / 2:
        timed = scenario.evaluation.every_time is not None
        return ("evaluation.every_time" if timed else "evaluation.every_steps"), "raise"
    return estimate.passes_field, "lower"
