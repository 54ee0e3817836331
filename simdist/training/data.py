"""Deterministic data sharding, reshuffled every epoch, with batch sizes that may change per step.

Each epoch, :class:`EpochSharder` draws one permutation of the training set from the named
stream ``"data-order/epoch{e}"`` of the run seed, drops the last ``n_samples % n_workers``
entries (as ``torch.utils.data.DistributedSampler(drop_last=True)`` does, so every worker
sees the same number of samples) and gives worker ``i`` the ``i``-th contiguous slice.
:class:`ShardIterator` walks one worker's shards epoch after epoch; its batch size can
differ on every call (DBS-SGD), and a batch never spans two epochs.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..errors import InputError
from ..seeding import numpy_stream

__all__ = ["EpochSharder", "Batch", "ShardIterator", "LockstepShards", "GroupBatch", "GroupShards"]


class EpochSharder:
    """Splits ``n_samples`` sample indices among ``n_workers`` workers, anew each epoch."""

    _CACHED_EPOCHS = 4  # workers of an asynchronous run may be a few epochs apart

    def __init__(self, n_samples: int, n_workers: int, seed: int, *, shuffle: bool = True):
        if n_workers < 1:
            raise InputError(f"the number of workers must be at least 1, got {n_workers}")
        if n_workers > n_samples:
            raise InputError(
                f"{n_workers} workers cannot share {n_samples} training samples; "
                f"use at most {n_samples} workers or a larger dataset"
            )
        self.n_samples = int(n_samples)
        self.n_workers = int(n_workers)
        self.seed = int(seed)
        # without shuffling (a timing-only run: no sample is read, only how many) every epoch has the
        # one order 0 .. n-1, made once: an ImageNet-sized permutation costs 20 ms per epoch
        self.shuffle = bool(shuffle)
        self._orders: dict[int, np.ndarray] = {}

    @property
    def shard_size(self) -> int:
        """Samples per worker per epoch."""
        return self.n_samples // self.n_workers

    def permutation(self, epoch: int) -> np.ndarray:
        """The epoch's whole permutation of the training set (int64; a shared epoch pool reads all of it);
        the identity for every epoch without shuffling."""
        if not self.shuffle:
            epoch = 0
            if epoch not in self._orders:
                self._orders[epoch] = np.arange(self.n_samples, dtype=np.int64)
            return self._orders[epoch]
        if epoch not in self._orders:
            if len(self._orders) >= self._CACHED_EPOCHS:
                del self._orders[min(self._orders)]
            perm = numpy_stream(self.seed, f"data-order/epoch{epoch}").permutation(self.n_samples)
            self._orders[epoch] = perm.astype(np.int64)
        return self._orders[epoch]

    def order(self, epoch: int) -> np.ndarray:
        """The epoch's permutation, truncated to ``shard_size * n_workers`` entries."""
        return self.permutation(epoch)[: self.shard_size * self.n_workers]

    def shard(self, epoch: int, worker: int) -> np.ndarray:
        """Sample indices (int64) of ``worker`` in ``epoch``; a read-only view."""
        if not 0 <= worker < self.n_workers:
            raise ValueError(f"worker {worker} out of range 0..{self.n_workers - 1}")
        size = self.shard_size
        view = self.order(epoch)[worker * size : (worker + 1) * size]
        view.flags.writeable = False
        return view


@dataclass(frozen=True)
class Batch:
    """One mini-batch: sample indices into the training set, and where they came from."""

    indices: np.ndarray
    epoch: int
    worker: int
    closes_epoch: bool = False  # the last batch of its epoch (epoch-end work follows: simdist.training.epoch_end)
    from_pool: bool = False  # drawn from a shared epoch pool (simdist.training.data_pool): another worker may close the epoch

    @property
    def size(self) -> int:
        return int(len(self.indices))


class ShardIterator:
    """One worker's walk through its shards; ``max_epochs=None`` never ends."""

    def __init__(self, sharder: EpochSharder, worker: int, max_epochs: int | None = None):
        if not 0 <= worker < sharder.n_workers:
            raise ValueError(f"worker {worker} out of range 0..{sharder.n_workers - 1}")
        self.sharder = sharder
        self.worker = worker
        self.max_epochs = max_epochs
        self._epoch = 0
        self._position = 0  # next unread offset inside the current epoch's shard
        self._shard: np.ndarray | None = None  # the current epoch's shard, once read

    @property
    def epoch(self) -> int:
        """The epoch the next batch comes from (equals ``max_epochs`` once exhausted)."""
        return self._epoch

    @property
    def position(self) -> int:
        """The offset of the next batch inside the current epoch's shard."""
        return self._position

    @property
    def samples_consumed(self) -> int:
        return self._epoch * self.sharder.shard_size + self._position

    @property
    def epochs_completed(self) -> float:
        """Epochs done, fractional: samples consumed / shard size."""
        return self.samples_consumed / self.sharder.shard_size

    @property
    def exhausted(self) -> bool:
        return self.max_epochs is not None and self._epoch >= self.max_epochs

    def next_batch(self, batch_size: int) -> Batch | None:
        """The next ``batch_size`` samples (fewer at an epoch's end), or None when exhausted."""
        if batch_size < 1:
            raise InputError(f"batch size must be a positive integer, got {batch_size}")
        if self.exhausted:
            return None
        shard = self._shard
        if shard is None:
            shard = self._shard = self.sharder.shard(self._epoch, self.worker)
        stop = min(self._position + int(batch_size), len(shard))
        batch = Batch(shard[self._position : stop], self._epoch, self.worker, closes_epoch=stop == len(shard))
        self._position = stop
        if stop == len(shard):
            self._epoch += 1
            self._position = 0
            self._shard = None
        return batch


class LockstepShards:
    """The shard iterators of workers that always ask for equal batch sizes, advanced together.

    Every worker's shard has the same size, so workers that take equal batches are always at
    the same (epoch, position): one position stands for all of them. ``next_batches`` returns
    the batch each worker's own :class:`ShardIterator` would have returned.
    """

    def __init__(self, sharder: EpochSharder, workers: int, max_epochs: int | None = None):
        self.lead = ShardIterator(sharder, 0, max_epochs)
        self.sharder = sharder
        self.workers = int(workers)

    @property
    def epochs_completed(self) -> float:
        return self.lead.epochs_completed

    def next_batches(self, batch_size: int, *, with_indices: bool = True) -> list[Batch] | None:
        """One batch per worker (worker order), or None when the epochs are exhausted.

        Without indices (timing-only runs) the list repeats worker 0's batch: only the size
        and the epoch are read.
        """
        epoch, position = self.lead.epoch, self.lead.position
        first = self.lead.next_batch(batch_size)
        if first is None:
            return None
        if not with_indices:
            return [first] * self.workers
        stop = position + first.size
        order = self.sharder.order(epoch)
        size = self.sharder.shard_size
        return [first] + [Batch(order[w * size + position : w * size + stop], epoch, w, first.closes_epoch)
                          for w in range(1, self.workers)]

    def group_view(self, *, with_indices: bool = True) -> "GroupShards":
        """One iterator for a lockstep group: its batches carry every worker's (:class:`GroupBatch`)."""
        return GroupShards(self, with_indices)


@dataclass(frozen=True)
class GroupBatch(Batch):
    """Worker 0's batch (its fields), standing for every worker's equal-sized one (``members``,
    worker order); ``source`` is told when each worker asked for it."""

    members: tuple[Batch, ...] = ()
    source: "GroupShards | None" = None

    @classmethod
    def of(cls, members: list[Batch], source: "GroupShards | None" = None) -> "GroupBatch":
        first = members[0]
        return cls(first.indices, first.epoch, first.worker, first.closes_epoch, first.from_pool,
                   members=tuple(members), source=source)

    def asked_at(self, times_s: np.ndarray, now: Callable[[], float]) -> None:
        """When each worker asked for it (the group's runtime knows; ``now`` reads the run's clock)."""
        if self.source is not None:
            self.source.asked_at(times_s, now)


class GroupShards:
    """The shard iterator of a lockstep group's one generator (what every worker's own would give)."""

    def __init__(self, shards: LockstepShards, with_indices: bool):
        self.shards, self.with_indices = shards, with_indices
        self.sharder = shards.sharder
        # the batches some worker may not have asked for yet, by the run's clock, oldest first:
        # [epochs before it, epochs after it, when each worker asked for it (None: not told yet)]
        self._recent: deque[list] = deque()
        self._now: Callable[[], float] | None = None

    @property
    def epochs_completed(self) -> float:
        """The mean over workers, as their own iterators count: a worker that, by the run's
        clock, has not asked for a batch yet has not taken it (members of a group apart in
        time may be several batches apart)."""
        done = self.shards.epochs_completed
        recent = [entry for entry in self._recent if entry[2] is not None]
        if not recent or self._now is None:
            return done
        now = self._now()
        counted = np.full(len(recent[0][2]), recent[0][0], dtype=float)
        for _before, after, asked_s in recent:
            counted = np.where(asked_s <= now, after, counted)
        return float(counted.mean())

    def asked_at(self, times_s: np.ndarray, now: Callable[[], float]) -> None:
        """When each worker asked for the latest batch (``now`` reads the run's clock)."""
        self._recent[-1][2], self._now = np.asarray(times_s, dtype=float), now
        clock = now()
        while len(self._recent) > 1 and np.all(self._recent[1][2] <= clock):  # older ones are all taken
            self._recent.popleft()

    @property
    def epoch(self) -> int:
        """The epoch the next batch comes from (every worker's own iterator is there too)."""
        return self.shards.lead.epoch

    @property
    def exhausted(self) -> bool:
        return self.shards.lead.exhausted

    def next_batch(self, batch_size: int) -> GroupBatch | None:
        before = self.shards.epochs_completed
        batches = self.shards.next_batches(batch_size, with_indices=self.with_indices)
        if batches is None:
            return None
        self._recent.append([before, self.shards.epochs_completed, None])
        return GroupBatch.of(batches, self)

