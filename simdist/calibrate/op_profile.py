"""Time the algorithms' own elementwise work on the device: the ``ops`` of a compute profile.

An algorithm's updates, averages, delay compensation and copies are streaming kernels over
the flat parameter vector (:mod:`simdist.platform.op_costs`). ``calibrate compute`` times
each on float32 vectors with the torch threads and device of the profile, and writes the
seconds per parameter (``average``: per input buffer) into the profile's ``ops`` section,
where the simulator prefers them to its memory-bandwidth estimate. ``gather`` (random rows of
64 elements picked into a batch) prices indexing a batch out of an in-memory dataset
(:mod:`simdist.training.data_loading`); ``save`` (``torch.save`` of the vector into a temporary
file, deleted after each write) prices a checkpoint (:mod:`simdist.training.epoch_end`).

Each op is timed on vectors of ``params`` parameters (default 4 Mi: 16 MiB per buffer, past
the caches, as a model's parameters are), warmed up, then the median of repeated runs
within a time budget.
"""

from __future__ import annotations

import os
import tempfile
import time
from typing import Callable

import torch

__all__ = ["DEFAULT_OP_PARAMS", "measure_ops"]

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

    def compensate() -> None:  # g + lambda * g * g * (w - w_old), in place
        g.addcmul_(g * g, w - w_old, value=0.2)

    def copy() -> None:
        out.copy_(w)

    def cast() -> None:  # fp32 -> bf16 into a preallocated buffer (a compressed gradient or model)
        half.copy_(w)

    half = place(torch.empty(params, dtype=torch.bfloat16), device)
    table, picked = w.view(-1, _GATHER_ROW), out.view(-1, _GATHER_ROW)
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

    return {"update": update, "average": average, "compensate": compensate, "copy": copy, "cast": cast,
            "gather": gather, "save": save}


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _median_s(kernel: Callable[[], None], device: str, budget_s: float) -> float:
    for _ in range(3):
        kernel()
    _sync(device)
    times: list[float] = []
    end = time.perf_counter() + budget_s
    while time.perf_counter() < end or len(times) < 5:
        start = time.perf_counter()
        kernel()
        _sync(device)
        times.append(time.perf_counter() - start)
    times.sort()
    return times[len(times) // 2]


def measure_ops(params: int = DEFAULT_OP_PARAMS, device: str = "cpu", budget_s: float = 0.2,
                place: Callable = _on_device) -> dict[str, float]:
    """Seconds per parameter of each op (``average`` per input buffer) on ``device`` (tensors moved
    there by ``place(tensor, device)``, the profile's own placement)."""
    kernels = _kernels(params, device, place)
    per_param = {op: _median_s(kernel, device, budget_s) / params for op, kernel in kernels.items()}
    per_param["average"] /= 4  # four input buffers
    return per_param
