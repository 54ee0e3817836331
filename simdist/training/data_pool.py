"""A shared epoch pool: workers draw batches of their own size from one queue per epoch.

DBS-SGD (docs/algorithms.md §4; Ye et al., DBS, 2020) gives faster workers larger batches
*and* a larger part of the epoch, so that every worker finishes the epoch at the same time.
With fixed equal shards a worker with a larger batch would run out of data first and a slow
worker would trail the epoch alone. The pool is that dynamic partition taken to its limit:
one queue holds the epoch's permutation of the whole training set and each request takes
the next ``batch_size`` samples, whoever asks; the last request of an epoch gets what is left
(a batch never spans two epochs), so workers end the epoch within one iteration of each other.

The permutation is the one :class:`~simdist.training.data.EpochSharder` draws for the epoch
(stream ``"data-order/epoch{e}"``), taken whole: no sample is dropped, since nothing needs
equal shares. The queue lives with whoever hands out the batches (the parameter server 0 of
a DBS run, so the simulator and a real MPI run hand them out in the same way); a worker turns
the :class:`PoolSlice` it receives into sample indices from the same seeded permutation.
"""

from __future__ import annotations

from typing import NamedTuple

from ..errors import InputError
from .data import Batch, EpochSharder

__all__ = ["PoolSlice", "EpochPool"]


class PoolSlice(NamedTuple):
    """Samples ``start:stop`` of epoch ``epoch``'s permutation; ``closes_epoch``: the epoch's last."""

    epoch: int
    start: int
    stop: int
    closes_epoch: bool

    @property
    def size(self) -> int:
        return self.stop - self.start

    def batch(self, sharder: EpochSharder, worker: int) -> Batch:
        """The slice as a :class:`Batch` of sample indices (read-only view of the permutation)."""
        view = sharder.permutation(self.epoch)[self.start:self.stop]
        view.flags.writeable = False
        return Batch(view, self.epoch, worker, closes_epoch=self.closes_epoch, from_pool=True)


class EpochPool:
    """The queue of one run: ``n_samples`` per epoch, ``max_epochs`` epochs (None: never ends)."""

    def __init__(self, n_samples: int, max_epochs: int | None = None):
        if n_samples < 1:
            raise InputError(f"an epoch pool needs at least one sample, got {n_samples}")
        self.n_samples = int(n_samples)
        self.max_epochs = max_epochs
        self._epoch = 0
        self._position = 0

    @property
    def exhausted(self) -> bool:
        return self.max_epochs is not None and self._epoch >= self.max_epochs

    @property
    def samples_consumed(self) -> int:
        return self._epoch * self.n_samples + self._position

    @property
    def epochs_completed(self) -> float:
        """Epochs handed out, fractional."""
        return self.samples_consumed / self.n_samples

    def take(self, batch_size: int) -> PoolSlice | None:
        """The next ``batch_size`` samples of the current epoch (fewer at its end), or None when exhausted."""
        if batch_size < 1:
            raise InputError(f"batch size must be a positive integer, got {batch_size}")
        if self.exhausted:
            return None
        start = self._position
        stop = min(start + int(batch_size), self.n_samples)
        taken = PoolSlice(self._epoch, start, stop, stop == self.n_samples)
        self._position = stop
        if stop == self.n_samples:
            self._epoch += 1
            self._position = 0
        return taken
