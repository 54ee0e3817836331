"""What getting a batch costs a rank: loading and decoding samples on the node's CPU.

Before every forward/backward a rank needs its batch in memory, decoded and augmented. The
scenario's ``workload.data_loading`` says how (:class:`DataLoadingConfig`); the simulator
charges it as the ledger part ``data`` (a span named ``data`` before the ``forward/backward``
span), and a real run times its own batch fetch under the same name.

**Cost per sample.** ``per_sample_core_s`` is one sample's loading work on one CPU core
(read, decode, augment, copy into the batch). In order of preference:

1. **declared** — ``workload.data_loading.per_sample`` (with its ``source``);
2. **published** — the dataset's own figure (:attr:`~simdist.training.datasets.Dataset.load_per_sample_s`):
   the shape-only ``imagenet-shape`` carries a measured ImageNet JPEG decode + augmentation
   time per image per core, with its citation;
3. **measured** — datasets that hold their tensors in memory (``synthetic``, ``digits``, a
   user's dataset) cost what indexing a batch out of memory costs: the sample's float32
   elements (plus its int64 label, two elements' worth) times the ``gather`` seconds per
   element that ``simdist calibrate compute`` measured on the host
   (:mod:`simdist.calibrate.op_profile`);
4. **estimated** — without that measurement, 8 bytes per element (read 4, write 4) over the
   host's memory bandwidth (:class:`~simdist.platform.devices.DeviceKind`), recorded as an
   estimate. A random-row gather streams below that bandwidth and a batch also pays a fixed
   dispatch cost, so the estimate is a lower bound.

The host of a GPU rank is priced as the ``cpu`` device kind (the node's CPU does the work;
the copy to the GPU is not modelled); a CPU rank's host is its own device kind.

**How loading overlaps compute** follows PyTorch's ``torch.utils.data.DataLoader``
(``torch/utils/data/dataloader.py``, ``_MultiProcessingDataLoaderIter``):

* ``loader_workers: 0`` — the rank loads its batch itself, in its own process, when it asks
  for it: ``batch · per_sample_core_s`` of work on its CPU share (``cpus``, or one core),
  before the forward/backward. With shared node cores (``node.cores``) this work competes
  for the cores as compute does.
* ``loader_workers: w ≥ 1`` — ``w`` worker processes, each loading *whole batches* (batch
  ``k`` goes to worker ``k mod w``, one core each: ``batch · per_sample_core_s`` per batch).
  A new iterator per epoch asks for the first ``prefetch_factor · w`` batches at once
  (``_reset``: ``prefetch_factor`` defaults to 2); after that, handing batch ``k`` to the
  rank asks for batch ``k + prefetch_factor · w`` (``_try_put_index`` in ``_next_data``).
  A worker starts a batch once it is asked for and the worker is free; the rank waits
  (``data``) only for what is not ready: ``max(0, ready − asked)``. Loading is hidden when
  ``batch · per_sample_core_s / w`` is at most a step; each epoch's first batch is never
  hidden (its iterator starts when the epoch does).

Approximations: the loader workers' cores are not taken from the shared pool of
``node.cores`` (each worker is assumed to have a core of its own); loading time has no noise;
worker start-up and the hand-over of a batch to the rank's process cost nothing.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Annotated, Any, Sequence

import numpy as np
from pydantic import BaseModel, BeforeValidator, Field

from ..config import USER_CONFIG
from ..errors import InputError
from ..platform.devices import DEVICE_KINDS
from ..platform.op_costs import bytes_per_param
from ..units import parse_time

__all__ = ["DataLoadingConfig", "LoadFigure", "PrefetchPipeline", "DataLoading", "build_data_loading",
           "GATHER_BYTES_PER_ELEMENT", "LABEL_ELEMENTS", "MAX_PER_SAMPLE_S"]

MAX_PER_SAMPLE_S = 60.0  # a minute to load one sample is a unit slip, not a data pipeline
GATHER_BYTES_PER_ELEMENT = bytes_per_param("gather")  # a float32 element read from the dataset, written into the batch
LABEL_ELEMENTS = 2  # an int64 label gathered alongside: 16 bytes, two float32 elements' worth


def _per_sample_seconds(value: Any) -> float:
    seconds = parse_time(value)
    if seconds > MAX_PER_SAMPLE_S:
        raise ValueError(f"must be at most {MAX_PER_SAMPLE_S:g} s per sample, got {value!r}")
    return seconds


PerSampleSeconds = Annotated[float, BeforeValidator(_per_sample_seconds)]


class DataLoadingConfig(BaseModel):
    """``workload.data_loading``: what loading a sample costs and how many loader workers hide it."""

    model_config = USER_CONFIG

    per_sample: PerSampleSeconds | None = Field(
        None, description="one sample's load + decode + augment time on one CPU core, e.g. '2ms' (0 .. 60 s); "
                          "default: the dataset's own figure, or indexing it out of memory (measured or estimated)")
    loader_workers: int = Field(0, ge=0, le=4096, description="DataLoader worker processes (num_workers); "
                                "0: the rank loads each batch itself before its forward/backward. Default 0.")
    prefetch_factor: int = Field(2, ge=1, le=1024, description="batches each worker loads ahead (PyTorch's "
                                 "prefetch_factor; its default 2); only with loader_workers >= 1")
    source: str | None = Field(None, max_length=500, description="where the per_sample figure comes from")


@dataclass(frozen=True)
class LoadFigure:
    """One sample's loading work on one core, and where the figure comes from."""

    per_sample_core_s: float
    basis: str  # declared | published | measured | estimate
    source: str

    def describe(self) -> dict[str, Any]:
        return {"per_sample_core_s": self.per_sample_core_s, "basis": self.basis, "source": self.source}


class PrefetchPipeline:
    """One rank's DataLoader with ``workers`` worker processes, in PyTorch's order (module docstring).

    :meth:`wait_s` is called when the rank asks for its next batch; batches of one epoch come
    from one iterator, so a new ``epoch`` starts the pipeline anew.
    """

    def __init__(self, workers: int, prefetch_factor: int, per_sample_core_s: float):
        self.workers = int(workers)
        self.depth = self.workers * int(prefetch_factor)  # batches asked for ahead of the rank
        self.per_sample_core_s = float(per_sample_core_s)
        self._epoch: Any = None
        self._opened_s = 0.0
        self._handed = 0  # batches of this epoch handed to the rank
        self._free_s = [0.0] * self.workers
        self._recent_s: deque[float] = deque(maxlen=self.depth)  # hand-over times of the last depth batches

    def wait_s(self, now_s: float, batch_size: int, epoch: Any) -> float:
        """Seconds the rank asking at ``now_s`` waits for its next batch (of ``batch_size`` samples)."""
        if epoch != self._epoch:  # a new iterator: its first depth batches are asked for now, workers idle
            self._epoch, self._opened_s, self._handed = epoch, now_s, 0
            self._free_s = [now_s] * self.workers
            self._recent_s.clear()
        asked_s = self._opened_s if self._handed < self.depth else self._recent_s[0]
        worker = self._handed % self.workers
        ready_s = max(asked_s, self._free_s[worker]) + batch_size * self.per_sample_core_s
        self._free_s[worker] = ready_s
        wait_s = max(0.0, ready_s - now_s)
        self._recent_s.append(now_s + wait_s)
        self._handed += 1
        return wait_s


class DataLoading:
    """The data loading of one run: per rank, its figure, CPU share and loader.

    ``figures[r]``: rank ``r``'s :class:`LoadFigure`; ``cores[r]``: the CPU share its own
    loading runs at (``loader_workers: 0``). A run asks either rank by rank (:meth:`wait_s`)
    or for a lockstep group at once (:meth:`waits_s`), never both.
    """

    def __init__(self, figures: Sequence[LoadFigure], cores: Sequence[float], config: DataLoadingConfig):
        self.figures = list(figures)
        self.workers = config.loader_workers
        self.prefetch_factor = config.prefetch_factor
        self._per_sample = np.array([f.per_sample_core_s for f in figures], dtype=float)
        self._cores = np.array(cores, dtype=float)
        self._pipelines: dict[Any, PrefetchPipeline] = {}

    @property
    def serial(self) -> bool:
        """Whether each rank loads its batches itself (``loader_workers: 0``)."""
        return self.workers == 0

    def load_core_s(self, rank: int, batch_size: int) -> float:
        """The work of loading a batch of ``batch_size`` on ``rank``, in core-seconds."""
        return batch_size * float(self._per_sample[rank])

    def core_share(self, rank: int) -> float:
        """The CPU share ``rank`` loads its own batches at (``loader_workers: 0``)."""
        return float(self._cores[rank])

    def wait_s(self, rank: int, now_s: float, batch_size: int, epoch: Any) -> float:
        """Seconds ``rank``, asking for a batch at ``now_s``, spends before it has it (alone on its cores)."""
        if self.serial:
            return batch_size * float(self._per_sample[rank]) / float(self._cores[rank])
        return self._pipeline(rank, rank).wait_s(now_s, batch_size, epoch)

    def waits_s(self, ranks: Sequence[int], now_s: float, batch_size: int, epoch: Any) -> np.ndarray:
        """:meth:`wait_s` of every rank of a lockstep group, all asking at ``now_s`` (rank order).

        Ranks asking at the same instants for the same batches with the same figure have the
        same loader state, so a group keeps one pipeline per figure.
        """
        index = np.asarray(ranks, dtype=np.int64)
        if self.serial:
            return batch_size * self._per_sample[index] / self._cores[index]
        per_sample = self._per_sample[index]
        waits = np.empty(len(index))
        for value in np.unique(per_sample):
            lane = ("group", float(value))
            waits[per_sample == value] = self._pipeline(lane, int(index[per_sample == value][0])).wait_s(
                now_s, batch_size, epoch)
        return waits

    def _pipeline(self, key: Any, rank: int) -> PrefetchPipeline:
        pipeline = self._pipelines.get(key)
        if pipeline is None:
            pipeline = self._pipelines[key] = PrefetchPipeline(self.workers, self.prefetch_factor,
                                                               float(self._per_sample[rank]))
        return pipeline

    def describe(self) -> dict[str, Any]:
        """For the manifest: the overlap model and every distinct figure (with the ranks using it)."""
        figures: dict[tuple, list[int]] = {}
        for rank, figure in enumerate(self.figures):
            figures.setdefault((figure.per_sample_core_s, figure.basis, figure.source), []).append(rank)
        return {"loader_workers": self.workers, "prefetch_factor": self.prefetch_factor if self.workers else None,
                "model": "serial: the rank loads each batch itself" if self.serial else
                         "prefetch: PyTorch DataLoader workers, whole batches round-robin",
                "figures": [{**LoadFigure(*key).describe(), "ranks": _ranges(ranks)}
                            for key, ranks in figures.items()]}


def _ranges(ranks: list[int]) -> str:
    """``[0, 1, 2, 5]`` as ``"0-2,5"``."""
    spans, start = [], ranks[0]
    for i, rank in enumerate(ranks):
        if i + 1 == len(ranks) or ranks[i + 1] != rank + 1:  # a run of consecutive ranks ends here
            spans.append(str(start) if start == rank else f"{start}-{rank}")
            start = ranks[i + 1] if i + 1 < len(ranks) else rank
    return ",".join(spans)


def _in_memory_figure(elements_per_sample: int, kind_name: str,
                      measured_ops: dict[str, dict[str, float]]) -> LoadFigure:
    """Indexing one sample out of memory on a host of device kind ``kind_name``: measured or estimated."""
    kind = DEVICE_KINDS.get(kind_name)
    elements = elements_per_sample + LABEL_ELEMENTS
    measured = measured_ops.get(kind.profile_device, {}).get("gather")
    if measured is not None:
        return LoadFigure(elements * measured, "measured",
                          f"{elements} elements x gather {measured:.4g} s/element measured by simdist calibrate "
                          f"compute on {kind.profile_device}")
    if not kind.memory_bandwidth_Bps:
        raise InputError(f"the host of device kind {kind_name!r} has no measured 'gather' cost and no memory "
                         "bandwidth to estimate it from; declare workload.data_loading.per_sample",
                         field="workload.data_loading.per_sample")
    return LoadFigure(elements * GATHER_BYTES_PER_ELEMENT / kind.memory_bandwidth_Bps, "estimate",
                      f"{elements} elements x {GATHER_BYTES_PER_ELEMENT:g} B over the {kind_name} host memory "
                      f"bandwidth {kind.memory_bandwidth_Bps:.4g} B/s ({kind.memory_source})")


def _dataset_figure(config: DataLoadingConfig, dataset: Any, kind_name: str,
                    measured_ops: dict[str, dict[str, float]]) -> LoadFigure:
    if config.per_sample is not None:
        return LoadFigure(config.per_sample, "declared",
                          config.source or "workload.data_loading.per_sample (no source given)")
    if getattr(dataset, "load_per_sample_s", None) is not None:
        return LoadFigure(dataset.load_per_sample_s, "published", dataset.load_source)
    if dataset.shape_only:
        raise InputError(f"dataset {dataset.name!r} holds no samples and has no loading figure; declare "
                         "workload.data_loading.per_sample (and its source)", field="workload.data_loading.per_sample")
    return _in_memory_figure(math.prod(dataset.input_shape), kind_name, measured_ops)


def build_data_loading(config: DataLoadingConfig | None, dataset: Any, platform: Any,
                       measured_ops: dict[str, dict[str, float]] | None = None) -> DataLoading:
    """The run's :class:`DataLoading`: ``config`` (None: the defaults) for ``dataset`` on ``platform``.

    ``measured_ops``: the compute profiles' measured op costs (``{profile device: {op: s}}``).
    """
    config = config or DataLoadingConfig()
    figures: dict[str, LoadFigure] = {}
    per_rank, cores = [], []
    for device in platform.devices:
        host = "cpu" if DEVICE_KINDS.get(device.kind).is_gpu else device.kind
        if host not in figures:
            figures[host] = _dataset_figure(config, dataset, host, measured_ops or {})
        per_rank.append(figures[host])
        cores.append(device.cpus if device.cpus is not None else 1.0)
    return DataLoading(per_rank, cores, config)
