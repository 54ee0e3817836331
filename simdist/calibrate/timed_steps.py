"""What is timed and with which clock when ``calibrate compute`` measures a step.

The pieces of :mod:`simdist.calibrate.compute_profile` that do not depend on where tensors
are placed: the device choice (:func:`resolve_device`), a fixed training batch, the CPU step
the simulator's ``measured`` mode runs (:func:`cpu_training_step`), the allocator setting that
keeps step times steady (:func:`steady_allocator`) and the two clocks — ``time.perf_counter``
on the CPU, ``torch.cuda.Event`` pairs read after ``torch.cuda.synchronize`` on a GPU, whose
kernels are asynchronous (host clocks would time the launches).
"""

from __future__ import annotations

import sys
import time
from types import MappingProxyType
from typing import Callable

import numpy as np
import torch

from ..seeding import numpy_stream
from ..training.workload import Workload

__all__ = ["resolve_device", "training_batch", "steady_allocator", "cpu_training_step", "TIMERS"]


def resolve_device(device: str) -> str:
    """``"cpu"`` or ``"cuda"`` (``"auto"``: CUDA when torch sees a GPU); ValueError on anything else."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device 'cuda' requested but torch.cuda.is_available() is False on this machine")
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be cpu, cuda or auto, got {device!r}")
    return device


def training_batch(workload: Workload, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A fixed training batch of ``batch_size`` samples (drawn with replacement if the set is smaller).

    A dataset of sizes without values (``imagenet-shape``) gives seeded random features and
    labels of its shapes: the step's time does not depend on the values.
    """
    n = workload.dataset.train_size
    rng = numpy_stream(workload.seed, f"calibrate/batch{batch_size}")
    if workload.dataset.shape_only:
        generator = torch.Generator().manual_seed(int(rng.integers(2**62)))
        x = torch.randn((batch_size, *workload.dataset.input_shape), generator=generator)
        return x, torch.randint(workload.dataset.num_classes, (batch_size,), generator=generator)
    index = torch.from_numpy(rng.choice(n, size=batch_size, replace=batch_size > n).astype(np.int64))
    return workload.dataset.train_x[index], workload.dataset.train_y[index]


def steady_allocator() -> bool:
    """Stop glibc from handing large buffers back to the OS between steps; True if applied.

    By default glibc serves big allocations with fresh ``mmap``s and trims the heap top on
    free, so every step page-faults its activation buffers in again (hundreds of faults per
    cnn step at batch 512 here) and step times turn bimodal with the allocator's state.
    Raising ``M_MMAP_THRESHOLD`` and ``M_TRIM_THRESHOLD`` (as jemalloc/tcmalloc setups do in
    effect) keeps the buffers mapped: steady-state times, reproducible. Process-wide; other
    C libraries are left alone (False).
    """
    import ctypes
    import ctypes.util

    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    m_trim_threshold, m_mmap_threshold = -1, -3
    return bool(mallopt(m_mmap_threshold, 1 << 30)) and bool(mallopt(m_trim_threshold, 1 << 30))


# -- one step ---------------------------------------------------------------------------

def cpu_training_step(workload: Workload, batch_size: int) -> Callable[[], None]:
    """Forward + backward + optimizer step, exactly as the simulator's measured mode runs it."""
    x, y = training_batch(workload, batch_size)
    replica = workload.new_replica()

    def step() -> None:
        grad, _loss = workload.evaluator.gradient(replica.params, x, y)
        replica.apply_gradient(grad)

    return step


# -- timers ----------------------------------------------------------------------------

def _cpu_times(step: Callable[[], None], n: int) -> list[float]:
    out = []
    for _ in range(n):
        start = time.perf_counter()
        step()
        out.append(time.perf_counter() - start)
    return out


def _cuda_times(step: Callable[[], None], n: int) -> list[float]:
    """Seconds of ``n`` steps from CUDA events, read once the device has finished them."""
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    torch.cuda.synchronize()
    for start, end in zip(starts, ends):
        start.record()
        step()
        end.record()
    torch.cuda.synchronize()
    return [start.elapsed_time(end) / 1e3 for start, end in zip(starts, ends)]  # elapsed_time is in ms


TIMERS = MappingProxyType(  # device -> (timer name, seconds of n steps)
    {"cpu": ("perf_counter", _cpu_times), "cuda": ("cuda-events", _cuda_times)})
