"""What a training job does between epochs: its validation pass and its checkpoint.

A real training script ends each epoch (or every few) with a pass over a held-out set and a
checkpoint written to storage; both take the job's time, and neither is part of a step's
forward/backward or communication. The scenario's ``workload.validation`` and
``workload.checkpoint`` declare them (:class:`ValidationConfig`, :class:`CheckpointConfig`);
both runtimes charge them as the ledger parts ``eval`` and ``checkpoint``.

**When.** A rank owes its epoch-end work once it has computed the last batch of an epoch
(:attr:`~simdist.training.data.Batch.closes_epoch`); it does the work before it gets its
next batch, or, after the last epoch, before its process ends (:class:`EpochEndSchedule`).
Ranks in lockstep therefore validate together, and a synchronous algorithm's next collective
waits for the slowest of them, as it does in a real job.

**Who.** Every worker validates its share of the set, ``ceil(samples / workers)`` samples,
as ``torch.utils.data.DistributedSampler`` splits it (the metrics' allreduce is a few bytes
and not priced). Worker 0 writes the checkpoint (the ``if rank == 0: torch.save(...)`` of
data-parallel scripts). A parameter-server job's checkpoint is priced on worker 0 too: the
servers' shards are the same bytes, but a server's own write is not modelled.

**What it costs in the simulator** (:class:`EpochEndCosts`):

* *validation* — a forward pass over the rank's share on its device (the compute model's
  inference time, as an algorithm's own evaluation costs), plus loading those samples
  (:mod:`.data_loading`): done by the rank itself before the pass (``loader_workers: 0``), or
  by its loader workers alongside it, so the pass takes the longer of the two.
* *checkpoint* — the model and the optimizer's state (float32: the parameters, plus one
  buffer per parameter for SGD momentum, two for Adam) serialized into host memory: the
  ``save`` op of :mod:`simdist.platform.op_costs` (measured by ``calibrate compute``, which
  times ``torch.save`` into a file, or estimated from the host's memory bandwidth: written
  files land in the page cache first). A GPU rank first copies the state to the host over its
  host link (:mod:`simdist.platform.host_staging`). Where the node declares
  ``storage_write_bandwidth`` (a parallel file system, a local disk written through), the
  write takes at least ``bytes / storage_write_bandwidth``; serializing and writing overlap,
  so the slower of the two sets the time.

A real run (:mod:`simdist.real.runtime`) does the same work for real under the same span
names: the forward pass over the rank's share of the held-out set (the validation split where
``workload.validation_split`` holds one out, else the test set), and ``torch.save`` of the
replica's parameters and optimizer state into a temporary file, deleted afterwards.
"""

from __future__ import annotations

import math
import os
import tempfile
from typing import Any, NamedTuple, Sequence

import torch
from pydantic import BaseModel, Field

from ..config import USER_CONFIG

__all__ = ["ValidationConfig", "CheckpointConfig", "EpochEndTask", "EpochEndSchedule", "EpochEndCosts",
           "optimizer_state_buffers", "checkpoint_bytes", "VALIDATION_SPAN", "CHECKPOINT_SPAN",
           "run_validation", "write_checkpoint", "EpochEndRunner", "save_seconds"]

VALIDATION_SPAN = "eval: validation pass"  # ledger part eval
CHECKPOINT_SPAN = "checkpoint write"  # ledger part checkpoint
FLOAT32_BYTES = 4


class ValidationConfig(BaseModel):
    """The job's own pass over a held-out set (``workload.validation``)."""

    model_config = USER_CONFIG
    every_epochs: int = Field(1, ge=1, le=10_000, description="validate after every this many epochs (default 1)")
    samples: int | None = Field(None, ge=1, le=2**40, description=(
        "samples in the validation set, split over the workers; default: the whole validation split "
        "(workload.validation_split) where there is one, else the dataset's test set (imagenet-shape: 50,000)"))


class CheckpointConfig(BaseModel):
    """The job's checkpoint of model and optimizer state (``workload.checkpoint``), written by worker 0."""

    model_config = USER_CONFIG
    every_epochs: int = Field(1, ge=1, le=10_000, description="write a checkpoint after every this many epochs "
                                                              "(default 1)")


class EpochEndTask(NamedTuple):
    """One piece of epoch-end work a rank owes: ``kind`` is ``validation`` or ``checkpoint``."""

    kind: str
    epoch: int  # the epoch that ended (0-based)


class EpochEndSchedule:
    """Which rank owes which epoch-end work, from the batches it computes.

    ``validation``/``checkpoint``: the configs (None: not done); ``workers``: the ranks that
    train; the checkpoint's writer is ``workers[0]``.
    """

    def __init__(self, validation: ValidationConfig | None, checkpoint: CheckpointConfig | None,
                 workers: Sequence[int]):
        self.validation = validation
        self.checkpoint = checkpoint
        self.workers = frozenset(int(w) for w in workers)
        self.writer = int(workers[0]) if len(workers) else None
        self._ended: dict[int, int] = {}  # rank -> the epoch it finished and has not yet done the work for
        self._last_epoch: dict[int, int] = {}  # rank -> the epoch of the latest batch it computed
        self._noted: dict[int, int] = {}  # rank -> the latest epoch whose end it has been charged for or owes
        self._pooled: set[int] = set()  # ranks drawing from a shared epoch pool

    def before_batch(self, rank: int, batch: Any) -> list[EpochEndTask]:
        """The work ``rank`` owes before computing ``batch``; notes whether ``batch`` closes an epoch.

        A rank has finished an epoch when it computes the epoch's closing batch, or, drawing from
        a shared epoch pool (:mod:`simdist.training.data_pool`) where another rank took the
        closing batch, when its next batch comes from a later epoch."""
        if rank in self.workers and hasattr(batch, "epoch"):
            self._note_epoch_left(rank, int(batch.epoch))
            if getattr(batch, "from_pool", False):
                self._pooled.add(rank)
        owed = self._take(rank)
        if getattr(batch, "closes_epoch", False) and rank in self.workers:
            self._note_end(rank, int(batch.epoch))
        return owed

    def owes_nothing_before(self, batch: Any) -> bool:
        """Whether no rank owes work now and ``batch`` (of ranks in lockstep) closes no epoch:
        a lockstep group then skips asking rank by rank."""
        return not self._ended and not getattr(batch, "closes_epoch", False)

    def at_finish(self, rank: int) -> list[EpochEndTask]:
        """The work ``rank`` owes when its process ends (after its last epoch: its data is exhausted)."""
        if rank in self._pooled:  # its data is exhausted, so the pool's last epoch has ended
            self._pooled.discard(rank)
            last = self._last_epoch[rank]
            if self._noted.get(rank, -1) < last:
                self._note_end(rank, last)
        return self._take(rank)

    def _note_epoch_left(self, rank: int, epoch: int) -> None:
        last = self._last_epoch.get(rank)
        if last is not None and epoch > last and self._noted.get(rank, -1) < last:
            self._note_end(rank, last)
        self._last_epoch[rank] = max(epoch, last if last is not None else epoch)

    def _note_end(self, rank: int, epoch: int) -> None:
        self._ended[rank] = epoch
        self._noted[rank] = epoch

    def _take(self, rank: int) -> list[EpochEndTask]:
        epoch = self._ended.pop(rank, None)
        if epoch is None:
            return []
        done = epoch + 1  # epochs completed
        tasks = []
        if self.validation is not None and done % self.validation.every_epochs == 0:
            tasks.append(EpochEndTask("validation", epoch))
        if self.checkpoint is not None and rank == self.writer and done % self.checkpoint.every_epochs == 0:
            tasks.append(EpochEndTask("checkpoint", epoch))
        return tasks

    def differs_by_rank(self) -> bool:
        """Whether ranks owe different work at one epoch's end (only the writer checkpoints)."""
        return self.checkpoint is not None and len(self.workers) > 1


def optimizer_state_buffers(optimizer_name: str, momentum: float) -> int:
    """Float32 buffers per parameter an optimizer keeps: SGD's momentum (if any), Adam's two moments."""
    if optimizer_name == "adam":
        return 2
    return 1 if momentum > 0 else 0


def save_seconds(op_costs: Any, platform: Any, rank: int, values: int) -> float:
    """Serializing ``values`` float32 values of ``rank`` into host memory (a checkpoint).

    ``op_costs``: the run's :class:`~simdist.platform.op_costs.OpCostModel`. Measured on the
    rank's profile device, the ``save`` op is the whole cost (``torch.save`` of a GPU tensor
    copies it to the host). Otherwise a GPU rank pays the copy over its host link
    (:mod:`simdist.platform.host_staging`) and the host CPU's ``save``; a CPU rank its own ``save``.
    """
    from ..platform.host_staging import HOST_CPU_KIND, host_path

    device = platform.devices[rank]
    path = host_path(platform, rank)
    if path is None or op_costs.measured.get(device.profile_device, {}).get("save") is not None:
        return op_costs.seconds(rank, "save", values)
    return path.copy_s(FLOAT32_BYTES * values) + op_costs.kind_seconds(HOST_CPU_KIND, "save", values)


def checkpoint_bytes(params: int, state_buffers: int) -> int:
    """Bytes of a float32 checkpoint: the parameters and the optimizer's buffers."""
    return params * FLOAT32_BYTES * (1 + state_buffers)


class EpochEndCosts:
    """Seconds of each epoch-end task on a rank, in the simulator (module docstring).

    ``forward_s(rank, samples)``: the compute model's inference time; ``save_s(rank, params)``:
    serializing ``params`` float32 values into host memory on the rank (including a GPU rank's
    copy to its host); ``loading``: the run's :class:`~.data_loading.DataLoading` or None;
    ``storage_Bps``: the node's storage write bandwidth or None.
    """

    def __init__(self, schedule: EpochEndSchedule, *, validation_samples: int, state_buffers: int, params: int,
                 forward_s, save_s, loading: Any = None, storage_Bps: float | None = None):
        self.schedule = schedule
        self.share = math.ceil(validation_samples / max(1, len(schedule.workers))) if validation_samples else 0
        self.validation_samples = int(validation_samples)
        self.values = params * (1 + state_buffers)  # float32 values in a checkpoint
        self.checkpoint_bytes = checkpoint_bytes(params, state_buffers)
        self.state_buffers = state_buffers
        self._forward_s = forward_s
        self._save_s = save_s
        self.loading = loading
        self.storage_Bps = storage_Bps

    def seconds(self, rank: int, task: EpochEndTask) -> float:
        """What ``task`` takes ``rank``, alone on its device."""
        if task.kind == "validation":
            return self._validation_s(rank)
        save_s = self._save_s(rank, self.values)
        if self.storage_Bps:
            return max(save_s, self.checkpoint_bytes / self.storage_Bps)
        return save_s

    def _validation_s(self, rank: int) -> float:
        if self.share == 0:
            return 0.0
        forward_s = self._forward_s(rank, self.share)
        loading = self.loading
        if loading is None:
            return forward_s
        load_s = loading.load_core_s(rank, self.share)
        if loading.serial:
            return forward_s + load_s / loading.core_share(rank)
        return max(forward_s, load_s / loading.workers)

    @staticmethod
    def span_name(task: EpochEndTask) -> str:
        return VALIDATION_SPAN if task.kind == "validation" else CHECKPOINT_SPAN

    def describe(self) -> dict[str, Any]:
        """For the manifest: what is done, how often, and its size."""
        schedule = self.schedule
        out: dict[str, Any] = {}
        if schedule.validation is not None:
            out["validation"] = {"every_epochs": schedule.validation.every_epochs,
                                 "samples": self.validation_samples, "samples_per_worker": self.share}
        if schedule.checkpoint is not None:
            out["checkpoint"] = {"every_epochs": schedule.checkpoint.every_epochs, "writer_rank": schedule.writer,
                                 "bytes": self.checkpoint_bytes, "optimizer_state_buffers": self.state_buffers,
                                 "storage_write_bandwidth_Bps": self.storage_Bps}
        return out


def run_validation(workload: Any, params: torch.Tensor, worker_index: int, workers: int,
                   samples: int | None) -> tuple[float, float]:
    """A real run's validation pass: worker ``worker_index``'s share of the first ``samples``
    held-out samples (all by default), evaluated on ``params``; returns (loss, accuracy) on that
    share. The held-out set is the workload's validation split where it has one
    (``workload.validation_split``), else the test set (:meth:`~.workload.Workload.held_out`).

    Every worker evaluates ``ceil(samples / workers)`` samples: as ``DistributedSampler`` does, the
    last shares wrap around to the first samples, so each worker does the work the simulator charges.
    """
    x, y = workload.held_out()
    total = len(y) if samples is None else min(samples, len(y))
    if total == 0:
        return float("nan"), float("nan")
    share = math.ceil(total / max(1, workers))
    index = torch.arange(worker_index * share, (worker_index + 1) * share) % total
    return workload.evaluator.evaluate(params, x[index], y[index])


def write_checkpoint(params: torch.Tensor, optimizer_state: dict) -> int:
    """A real run's checkpoint: ``torch.save`` of the parameters and optimizer state into a
    temporary file (flushed to the OS, then deleted: the run's timing is what is wanted, and no
    user file is touched). Returns the bytes written."""
    handle, path = tempfile.mkstemp(prefix="simdist-checkpoint-", suffix=".pt")
    try:
        with os.fdopen(handle, "wb") as out:
            torch.save({"params": params, "optimizer": optimizer_state}, out)
            out.flush()
        return os.path.getsize(path)
    finally:
        os.unlink(path)


class EpochEndRunner:
    """A real run's epoch-end work: the same schedule, done for real on the rank's replica."""

    def __init__(self, schedule: EpochEndSchedule, workload: Any, samples: int | None):
        self.schedule = schedule
        self.workload = workload
        self.samples = samples
        self._worker_index = {rank: i for i, rank in enumerate(sorted(schedule.workers))}

    span_name = staticmethod(EpochEndCosts.span_name)

    def perform(self, rank: int, task: EpochEndTask, replica: Any) -> None:
        """Do ``task`` on ``rank`` with ``replica`` (its parameters and optimizer state)."""
        if task.kind == "validation":
            run_validation(self.workload, replica.params, self._worker_index[rank], len(self._worker_index),
                           self.samples)
        else:
            write_checkpoint(replica.params, getattr(replica, "opt_state", {}))
