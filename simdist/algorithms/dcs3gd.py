"""dcs3gd — DC-S3GD, delay-compensated stale-synchronous SGD (docs/algorithms.md §6).

Decentralised (no server), staleness exactly 1, communication overlapped with compute.
Per worker i, with U the scenario's optimizer step (momentum SGD in the paper)::

    init: w_i = w̄;  g_i = ∇l(w_i);  Δw_i = U(g_i);  w_i += Δw_i
    loop: req = iallreduce_sum(Δw_i)            # non-blocking
          g_i = ∇l(w_i)                         # overlaps with the allreduce
          Δw  = wait(req)
          D_i = Δw / N − Δw_i;  λ_i = λ0 ‖g_i‖ / ‖g_i ⊙ g_i ⊙ D_i‖ (0 if the denominator is 0)
          Δw_i = U(g_i + λ_i g_i ⊙ g_i ⊙ D_i);  w_i += D_i + Δw_i

so an iteration costs max(compute, allreduce) + the update instead of their sum. The math is
in :mod:`.dcs3gd_math`. When a worker's data runs out it still waits for the allreduce of its
last step and applies ``w_i += D_i``, so every replica ends at the same average model.

Options (:class:`Dcs3gdConfig`): ``lambda0`` (0.2), ``lr_scaling`` (``linear``: η = N·η_1
with η_1 the optimizer's ``lr``), ``warmup_iterations`` (0) starting at
``warmup_start_fraction`` of η (default 1/N, i.e. η_1), ``decay`` (``linear`` to
``final_lr_fraction`` = 0 at ``decay_iterations``, default the run's length when
``stop.epochs`` is set, otherwise no decay), ``schedule_weight_decay`` (true: weight decay
follows the same factor), ``collective`` (default: the scenario's ``network.collective``, else the platform's library's),
``update_time_per_param`` (seconds per parameter charged for each update; default: each
update's own arithmetic at the device's measured or estimated op costs
(:mod:`simdist.platform.op_costs`): the optimizer step (``update``), the move to the
workers' average with its own step and ‖D‖ (``merge``) and the delay compensation
(``compensate``, not with ``lambda0: 0``, where the math skips it); the first step is the
optimizer step alone, the final merge one ``merge``).

**choice**: the schedule is iteration based and its defaults (no warm-up, linear decay over
the run) are this module's; the paper's warm-up length is a scenario setting.

Records: one ``update`` row per worker and iteration with staleness 0 for the first step and
1 afterwards, plus ``d_norm`` (‖D_i‖), ``lambda_`` (λ_i), ``lr``, ``overlap_fraction`` (share
of the allreduce hidden behind compute) and ``allreduce_wait_s`` (time blocked on it after
compute). The final merge is a ``dcs3gd_final_merge`` event. Replicas differ by each worker's
last local step, so worker 0's replica stands for the model in evaluations.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import Field, field_validator

from ..runtime.base import Runtime
from ..runtime.collectives import COLLECTIVES
from .base import ALGORITHMS, AlgorithmConfig, AlgorithmContext, PeerAlgorithm
from .dcs3gd_math import (Schedule, dcs3gd_update, distance_to_average, local_update, overlap_fraction,
                          tensor_norm, wait_after_compute_s)

__all__ = ["Dcs3gdConfig", "Dcs3gd"]



class Dcs3gdConfig(AlgorithmConfig):
    """Options of DC-S3GD."""

    name: Literal["dcs3gd"] = "dcs3gd"
    lambda0: float = Field(0.2, ge=0, description="delay-compensation strength λ0. Default 0.2")
    lr_scaling: Literal["linear", "none"] = Field(
        "linear", description="peak learning rate: 'linear' = N x optimizer lr (η = N·η_1), 'none' = optimizer lr")
    warmup_iterations: int = Field(0, ge=0, description="iterations of linear learning-rate warm-up. Default 0")
    warmup_start_fraction: float | None = Field(
        None, ge=0, le=1, description="warm-up start as a fraction of the peak rate (default 1/N with linear "
                                      "scaling, i.e. the one-worker rate η_1; 1 otherwise)")
    decay: Literal["linear", "none"] = Field("linear", description="after warm-up: linear decay, or none")
    decay_iterations: int | None = Field(
        None, ge=1, description="iteration at which the decay reaches final_lr_fraction (default: the run's "
                                "iterations when stop.epochs is set; no decay otherwise)")
    final_lr_fraction: float = Field(0.0, ge=0, le=1, description="rate at the end of the decay / peak. Default 0")
    schedule_weight_decay: bool = Field(True, description="weight decay follows the learning-rate factor. Default true")
    collective: str | None = Field(None, description=(
        "allreduce algorithm (default: network.collective, else the platform's collectives.schedule, else ring)"))
    update_time_per_param: float | None = Field(
        None, ge=0, description="seconds per parameter charged for one update. Default: the device's 'update', "
                                "'merge' and 'compensate' op costs")

    @field_validator("collective")
    @classmethod
    def _collective_known(cls, value: str | None) -> str | None:
        return value if value is None else COLLECTIVES.check(value)


@ALGORITHMS.register("dcs3gd", "DC-S3GD: decentralised stale-synchronous SGD; allreduce of local steps overlapped "
                               "with the next gradient, delay-compensated (staleness 1)",
                     citation="A. Rigazzi, DC-S3GD: Delay-Compensated Stale-Synchronous SGD for Large-Scale "
                              "Decentralized Neural Network Training, arXiv:1911.02516, 2019", config=Dcs3gdConfig)
class Dcs3gd(PeerAlgorithm):
    """DC-S3GD: every worker allreduces its last step while computing the next gradient."""

    Config = Dcs3gdConfig
    # every worker runs the same steps; the replicas differ (each applies its own gradient), so only in timing-only
    # runs; a worker's next forward/backward starts at its own time, beside the allreduce
    lockstep = "timing_only"
    lockstep_apart = True

    def __init__(self, config: Dcs3gdConfig, ctx: AlgorithmContext):
        super().__init__(config, ctx)
        opt = ctx.workload.optimizer_config
        self.schedule = Schedule.build(
            opt.lr, opt.weight_decay, ctx.n_workers, lr_scaling=config.lr_scaling,
            warmup_iterations=config.warmup_iterations, total_iterations=self._decay_iterations(),
            start_fraction=config.warmup_start_fraction, final_fraction=config.final_lr_fraction,
            decay_weight_decay=config.schedule_weight_decay)
        per_param = config.update_time_per_param
        self.update_s = None if per_param is None else per_param * ctx.workload.param_count

    def _update_s(self, rank: int, kind: str = "step") -> float:
        """Time charged on ``rank`` for its own arithmetic (see ``update_time_per_param``): ``first``,
        the optimizer step alone; ``step``, the step on the compensated gradient after moving to the
        average (``update`` + ``compensate`` + ``merge``); ``final``, the last move to the average."""
        if self.update_s is not None:
            return self.update_s
        params, op = self.ctx.workload.param_count, self.ctx.op_seconds
        if kind == "first":
            return op(rank, "update", params)
        if kind == "final":
            return op(rank, "merge", params)
        compensates = self.config.lambda0 > 0  # λ0 = 0: the math skips the compensation
        return (op(rank, "update", params) + op(rank, "merge", params)
                + (op(rank, "compensate", params) if compensates else 0.0))

    def _decay_iterations(self) -> int | None:
        config, ctx = self.config, self.ctx
        if config.decay == "none":
            return None
        if config.decay_iterations is not None:
            return config.decay_iterations
        if ctx.max_epochs is None:
            return None
        return ctx.max_epochs * math.ceil(self.data[0].sharder.shard_size / ctx.batch_size)

    def _worker(self, rt: Runtime, index: int):
        ctx, config, schedule = self.ctx, self.config, self.schedule
        replica, data, n = self.replicas[index], self.data[index], ctx.n_workers
        optimizer = ctx.workload.optimizer
        group = rt.group(ctx.workers, "world")
        batch = data.next_batch(ctx.batch_size)
        if batch is None:
            return
        result = yield rt.compute(replica, batch)

        def first_step() -> Any:
            step_delta = local_update(optimizer, replica.params, result.grad, replica.opt_state, schedule.lr(0),
                                      schedule.weight_decay_at(0))
            replica.params.add_(step_delta)
            return step_delta

        # the first step: no compensation
        delta = yield rt.busy(self._update_s(rt.rank, "first"), "dcs3gd update", run=first_step)
        step = 1
        rt.record("update", worker=rt.rank, step=step, version=step, staleness=0, batch_size=batch.size,
                  loss=result.loss, d_norm=0.0, lambda_=0.0, lr=schedule.lr(0), overlap_fraction=None,
                  allreduce_wait_s=None)
        while True:
            started_s = rt.now()
            request = rt.iallreduce(group, delta, algorithm=config.collective)
            batch = data.next_batch(ctx.batch_size)
            if batch is None:
                yield from self._final_merge(rt, replica, request, delta)
                return
            result = yield rt.compute(replica, batch)
            total = yield request
            done_s = rt.now()
            update = yield rt.busy(self._update_s(rt.rank), "dcs3gd update", run=lambda: dcs3gd_update(
                optimizer, replica.params, replica.opt_state, result.grad, total, delta, n, config.lambda0,
                schedule.lr(step), schedule.weight_decay_at(step)))
            delta = update.delta
            rt.record("update", worker=rt.rank, step=step + 1, version=step + 1, staleness=1, batch_size=batch.size,
                      loss=result.loss, d_norm=update.distance_norm, lambda_=update.lambda_, lr=schedule.lr(step),
                      overlap_fraction=overlap_fraction(started_s, result.end_s, done_s),
                      allreduce_wait_s=wait_after_compute_s(result.end_s, done_s))
            step += 1

    def _final_merge(self, rt: Runtime, replica: Any, request: Any, delta: Any):
        """Out of data: wait for the last allreduce and move to the average, ``w_i += D_i``."""
        total = yield request
        def merge() -> Any:
            distance = distance_to_average(total, delta, self.ctx.n_workers)
            replica.params.add_(distance)
            return distance

        distance = yield rt.busy(self._update_s(rt.rank, "final"), "dcs3gd final merge", run=merge)
        rt.record("dcs3gd_final_merge", worker=rt.rank, d_norm=tensor_norm(distance))
