"""Time the algorithms' own elementwise work on the device: the ``ops`` of a compute profile.

An algorithm's updates, averages, delay compensation and copies are streaming kernels over
the flat parameter vector (:mod:`simdist.platform.op_costs`). ``calibrate compute`` times
each on float32 vectors with the torch threads and device of the profile, and writes the
seconds per parameter (``average``: per input buffer) into the profile's ``ops`` section,
where the simulator prefers them to its memory-bandwidth estimate. ``gather`` (random rows of
64 elements picked into a batch) prices indexing a batch out of an in-memory dataset
(:mod:`simdist.training.data_loading`); ``save`` (``torch.save`` of the vector into a temporary
file, deleted after each write) prices a checkpoint (:mod:`simdist.training.epoch_end`);
``compensate`` and ``merge`` are DC-S3GD's own functions (:mod:`simdist.algorithms.dcs3gd_math`),
timed as the algorithm calls them.

Each op is timed on vectors of ``params`` parameters (default 4 Mi: 16 MiB per buffer, past
the caches, as a model's parameters are), warmed up, then the median of repeated runs
within a time budget.

``calibrate compute --scenario`` times the ops at the scenario's own sizes instead
(:func:`measure_scenario_ops`): every vector op over the model's parameter count, so a small
model's fixed per-call cost (a few microseconds of dispatch per torch call, which a 4 Mi
vector hides) is in its seconds per parameter; ``update`` as the scenario's optimizer step on
the flat parameter vector (momentum or Adam buffers included), which is what every algorithm
applies; and ``gather`` as the workload's own batch fetch at the scenario's batch size, per
element gathered (features plus the label), for a dataset that holds values.

What the caches hold when an op runs decides its time at these sizes. Timed back to back,
a small model's vectors stay in the caches; in a run, one training step (the forward/backward
and its activations) passes between two updates and may evict them, or not, depending on how
much it streams. So each timed call at a scenario's sizes follows ``between``: the calling
command passes one training step of the scenario at its batch size, the very work that
precedes an update in a run. Without it, a write of twice the largest cache
(:func:`cache_flush_bytes`) stands in: the cold bound. On this project's 2-core host the
optimizer step of an 85 k-parameter MLP at batch 2,048 takes 37 µs back to back, 102 µs after
the flush and 85 µs inside a real run; ``python benchmarks/op_costs_at_size.py`` prints every
op all these ways.
"""

from __future__ import annotations

import os
import tempfile
import time
from typing import Any, Callable

import numpy as np
import torch

from ..algorithms.dcs3gd_math import (apply_combined, compensated_gradient, compensation_lambda,
                                      distance_to_average, tensor_norm)
from ..training.data import Batch
from .sweep_timing import cache_flush_bytes  # shared with the network sweep's cold calls
from ..training.data_loading import LABEL_ELEMENTS
from ..training.replica import Replica

__all__ = ["DEFAULT_OP_PARAMS", "measure_ops", "measure_scenario_ops", "cache_flusher", "cache_flush_bytes"]

DEFAULT_OP_PARAMS = 1 << 22
_GATHER_ROW = 64  # elements per gathered row: one 8x8 digits sample (256 bytes)


def _on_device(tensor: torch.Tensor, device: str) -> torch.Tensor:
    return tensor.to(device)


def _kernels(params: int, device: str, place: Callable) -> dict[str, Callable[[], None]]:
    w, g, w_old, out = (place(torch.randn(params), device) for _ in range(4))
    neighbours = [place(torch.randn(params), device) for _ in range(3)]

    def update() -> None:  # w <- w - lr * g
        w.add_(g, alpha=-1e-3)

    def average() -> None:  # mean of w and 3 neighbours (4 buffers), pass by pass as in the algorithms
        torch.add(w, neighbours[0], out=out)
        for other in neighbours[1:]:
            out.add_(other)
        out.mul_(0.25)

    def compensate() -> None:  # DC-S3GD's lambda and compensated gradient, as the algorithm computes them
        distance = w_old  # D: a buffer the size of the parameters
        compensated_gradient(g, distance, compensation_lambda(g, distance, 0.2))

    def merge() -> None:  # DC-S3GD's move to the workers' average plus its own step, and ||D||
        distance = distance_to_average(out, w_old, 4)
        apply_combined(w, distance, g)
        tensor_norm(distance)

    def copy() -> None:
        out.copy_(w)

    def cast() -> None:  # fp32 -> bf16 into a preallocated buffer (a compressed gradient or model)
        half.copy_(w)

    half = place(torch.empty(params, dtype=torch.bfloat16), device)
    whole_rows = params // _GATHER_ROW * _GATHER_ROW
    table, picked = w[:whole_rows].view(-1, _GATHER_ROW), out[:whole_rows].view(-1, _GATHER_ROW)
    rows = place(torch.randperm(table.shape[0]), device)

    def gather() -> None:  # a batch of random rows out of an in-memory dataset (simdist.training.data_loading)
        torch.index_select(table, 0, rows, out=picked)

    def save() -> None:  # a checkpoint: torch.save into a file (page cache), deleted again
        handle, path = tempfile.mkstemp(prefix="simdist-op-save-")
        try:
            with os.fdopen(handle, "wb") as out:
                torch.save(w, out)
        finally:
            os.unlink(path)

    return {"update": update, "average": average, "compensate": compensate, "merge": merge, "copy": copy,
            "cast": cast, "gather": gather, "save": save}


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _flush_bytes_on(device: str) -> int:
    """Bytes to write to evict a buffer on ``device``: the CPU's (:func:`cache_flush_bytes`), and
    on a GPU at least twice its L2 cache."""
    flush = cache_flush_bytes()
    if device.startswith("cuda"):
        l2 = getattr(torch.cuda.get_device_properties(torch.device(device)), "L2_cache_size", 0) or 0
        flush = max(flush, 2 * int(l2))
    return flush


def _median_s(kernel: Callable[[], None], device: str, budget_s: float,
              flush: Callable[[], None] | None = None) -> float:
    """Median seconds of ``kernel`` (``flush``, untimed, before each timed call)."""
    for _ in range(3):
        kernel()
    _sync(device)
    times: list[float] = []
    end = time.perf_counter() + budget_s
    while time.perf_counter() < end or len(times) < 5:
        if flush is not None:
            flush()
            _sync(device)
        start = time.perf_counter()
        kernel()
        _sync(device)
        times.append(time.perf_counter() - start)
    times.sort()
    return times[len(times) // 2]


def measure_ops(params: int = DEFAULT_OP_PARAMS, device: str = "cpu", budget_s: float = 0.2,
                place: Callable = _on_device, replace: dict[str, tuple[Callable[[], None], int]] | None = None,
                between: Callable[[], None] | None = None) -> dict[str, float]:
    """Seconds per parameter of each op (``average`` per input buffer) on ``device`` (tensors moved
    there by ``place(tensor, device)``, the profile's own placement). ``replace``: ops timed
    with another kernel, ``{op: (kernel, elements it works on)}``; ``between``: run, untimed,
    before every timed call (a training step, :func:`cache_flusher`; see the module doc)."""
    if params < _GATHER_ROW:
        raise ValueError(f"ops are timed on at least {_GATHER_ROW} parameters, got {params}")
    kernels = {op: (kernel, params) for op, kernel in _kernels(params, device, place).items()}
    kernels.update(replace or {})
    per_param = {op: _median_s(kernel, device, budget_s, between) / elements
                 for op, (kernel, elements) in kernels.items()}
    per_param["average"] /= 4  # four input buffers
    return per_param


def cache_flusher(device: str = "cpu", place: Callable = _on_device) -> Callable[[], None]:
    """A callable writing :func:`_flush_bytes_on` bytes on ``device``: after it, no buffer is cached."""
    scratch = place(torch.empty(_flush_bytes_on(device), dtype=torch.uint8), device)
    return lambda: scratch.fill_(1)


def measure_scenario_ops(workload: Any, batch_size: int, device: str = "cpu", budget_s: float = 0.2,
                         place: Callable = _on_device, between: tuple[Callable[[], None], str] | None = None,
                         ) -> tuple[dict[str, float], dict[str, Any]]:
    """The ops at a scenario's sizes (see the module doc): (seconds per parameter, how each was timed).
    ``between``: (what runs before every timed call, its description); None: a cache flush."""
    params = int(workload.param_count)
    weights = place(workload.initial_params().detach().clone().float(), device)
    replica, grad = Replica(weights, workload.optimizer), place(torch.randn(params) * 1e-3, device)
    replace = {"update": (lambda: replica.apply_gradient(grad), params)}
    if between is None:
        between = (cache_flusher(device, place), f"a cache flush ({_flush_bytes_on(device) >> 20} MiB written)")
    basis = {"params": params, "before each timed call": between[1],
             "update": f"the scenario's optimizer step ({workload.optimizer_config.name}) on the flat parameter vector"}
    fetch = _batch_fetch(workload, batch_size)
    if fetch is not None:
        replace["gather"] = fetch
        basis["gather"] = f"the workload's batch fetch at batch {batch_size}, per element (features + label)"
    return measure_ops(params, device, budget_s, place, replace, between[0]), basis


def _batch_fetch(workload: Any, batch_size: int) -> tuple[Callable[[], None], int] | None:
    """The workload's fetch of one random batch and the elements it gathers (None: no values to fetch)."""
    x = getattr(workload.dataset, "train_x", None)
    if not isinstance(x, torch.Tensor) or len(x) == 0:
        return None
    rows = np.random.default_rng(0).choice(len(x), size=batch_size, replace=len(x) < batch_size)
    batch = Batch(rows.astype(np.int64), epoch=0, worker=0)
    elements = len(rows) * (x[0].numel() + LABEL_ELEMENTS)
    return (lambda: workload.batch_tensors(batch)), elements
