"""nsoftsync — n-softsync SGD (Gupta et al., "Rudra"; Zhang et al.; docs/algorithms.md §3).

As asgd, but the server collects c = ⌊N / n⌋ gradients — from any workers, a fast worker
may contribute two — before one update: w ← w − η·(1/c)·Σ g; v ← v + 1. n = N is asgd
(c = 1); n = 1 is the closest to a synchronous step without a barrier. With
``staleness_aware: true`` each gradient is divided by max(1, its staleness) first.

Staleness per gradient: s = v at the update that applies it − v_read (the version the update
is applied to, as in asgd). Published: mean staleness grows with n and is close to n.

``pull`` (when a worker gets the server's (w, v) after pushing):

* ``immediate`` (default): as soon as the server has handled the push — without waiting
  for the update that will include the gradient. The server handles one message at a
  time, so a push that completes a group of c is answered after that update (this makes
  n = N exactly asgd); every other push is answered at once with the current weights.
* ``after_update``: the reply waits until the update that includes the gradient.

At the end of the data a partial group (fewer than c gradients) is applied once no further
gradient can arrive, averaged over the gradients it holds, so every gradient counts once.

The server sums each gradient into the round's aggregate when it arrives (``accumulate``)
and applies the average once per round (``apply``); see :mod:`.parameter_server` for what each
costs. ``push: buckets`` pushes gradients bucket by bucket during backward (:mod:`.ps_buckets`).

``n`` defaults to 1 (**choice**, docs/algorithms.md §3: n = 1 is valid for every
N). 1 ≤ n ≤ N is checked when the scenario loads (field ``algorithm.n``).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from ..errors import InputError
from .async_math import softsync_accumulate, softsync_average, softsync_group_size, softsync_mean, staleness_scale
from .base import ALGORITHMS, AlgorithmContext
from .parameter_server import ParameterServerAlgorithm, ParameterServerConfig, PendingGradient

__all__ = ["NSoftsyncConfig", "NSoftsync"]


class NSoftsyncConfig(ParameterServerConfig):
    """Options of n-softsync (plus the parameter-server options)."""

    name: Literal["nsoftsync"] = "nsoftsync"
    n: int = Field(1, ge=1, description="softness: the server averages c = floor(N / n) gradients per update; "
                                        "1 <= n <= N. Default 1")
    pull: Literal["immediate", "after_update"] = Field(
        "immediate", description="reply to a push at once (immediate) or after the update including it. "
                                 "Default immediate")

    def check_scenario(self, scenario: Any) -> None:
        super().check_scenario(scenario)
        workers = scenario.worker_count
        if self.n > workers:
            raise InputError(f"n = {self.n} exceeds the {workers} workers; n-softsync needs 1 <= n <= N "
                             f"(c = floor(N / n) >= 1 gradients per update)", field="algorithm.n")


@ALGORITHMS.register("nsoftsync", "n-softsync: the parameter server averages floor(N/n) gradients from any workers "
                                  "per update", citation="Gupta et al., Model Accuracy and Runtime Tradeoff in "
                                                         "Distributed Deep Learning (Rudra), ICDM 2016",
                     config=NSoftsyncConfig)
class NSoftsync(ParameterServerAlgorithm):
    """n-softsync: updates of c = ⌊N/n⌋ averaged gradients."""

    Config = NSoftsyncConfig

    def __init__(self, config: NSoftsyncConfig, ctx: AlgorithmContext):
        super().__init__(config, ctx)
        self.group_size = softsync_group_size(ctx.n_workers, config.n)
        self.reply_after_update = config.pull == "after_update"

    def combine(self, pending: list[PendingGradient], stalenesses: list[int]) -> tuple[Any, float]:
        grads = [p.grad for p in pending]  # c = 1: each gradient is its own round
        return softsync_average(grads, stalenesses, self.config.staleness_aware), self.lr

    def accumulate(self, total: Any, gradient: Any, s: int) -> Any:
        return softsync_accumulate(total, gradient, s, self.config.staleness_aware)

    def average(self, total: Any, count: int) -> tuple[Any, float]:
        return softsync_mean(total, count), self.lr

    def scales(self, gradient: PendingGradient, s: int) -> bool:
        return self.config.staleness_aware and staleness_scale(s) != 1.0
