"""dbs — DBS-SGD, dynamic batch sizes for heterogeneous workers (docs/algorithms.md §4).

Built on asgd (parameter server, asynchronous pushes, one update per gradient). Goal:
equal iteration *time* across workers, so staleness stays low when workers differ in speed,
and every worker ends each epoch at the same time (Ye et al., DBS: Dynamic Batch Size for
Distributed Deep Neural Network Training, arXiv:2007.11831, 2020: the batch size *and the
dataset partition* follow each worker's measured performance).

* **Data** (``data: pool``, the default): one shared epoch pool
  (:mod:`simdist.training.data_pool`) held by server 0. A worker's push says how many samples
  it wants next; server 0's reply carries that many from the epoch's queue (fewer at the
  epoch's end; a batch never spans two epochs), so a worker with a larger batch also takes a
  larger part of the epoch and all workers finish it within one iteration of each other. The
  run ends when the last epoch's queue is empty: server 0 then answers a push with an
  acknowledgement instead of weights. ``data: shards``: fixed equal shards, each consumed at
  its worker's own rate (the earlier reading; a fast worker then runs out first).
* **Speed** (``measure: compute``, the default): a worker's time per sample is its measured
  forward/backward time divided by its batch, smoothed over its last ``m`` iterations
  (``τ = Σ t / Σ b``, default m = 5, the reported good range 5–10). Worker 0 is the reference:
  it reports each iteration's ``(t, b)`` with its next push, server 0 keeps worker 0's last m
  and sends them with every reply. Worker i ≠ 0 with m of its own and m reference
  measurements aims at ``X·τ_0/τ_i`` (X = the scenario's batch, worker 0's), which makes its
  compute time equal to worker 0's; the batch changes to ``clamp(round(X·τ_0/τ_i), b_min,
  b_max)`` when that differs from the current batch by more than a relative ``A`` (default
  0.1). Waiting for the server is not in τ, so a worker queued at a busy server does not shrink
  its batch for it. ``measure: iteration``: the earlier reading, with whole-loop times
  (compute, push, reply: they include waiting) and ``S = Σ(worker 0's last m) / Σ(own last m)``
  applied to the current batch (``rescale: current``) or to X (``rescale: base``).
* Only measurements at the worker's current batch size enter its window, which restarts after
  every change: the short last batch of an epoch, or (with the pool, whose batch size takes
  effect one iteration later) the batch still asked at the old size, would otherwise skew τ.
  Worker 0 keeps b_0 = X. Each change is recorded as a ``batch_size`` event (worker,
  batch_size, previous, ratio: τ_0/τ_i or S).
* Server: mean gradient over the worker's batch applied with η (asgd's rule, including
  ``staleness_aware``); ``weight_by_batch: true`` scales it by b_i / X first (one more pass
  over the shard, charged with the update; see :mod:`.parameter_server`).

Defaults: data = pool, measure = compute, m = 5, A = 0.1, b_min = 1, b_max = 4·X
(**choice**, docs/algorithms.md §4: four times the base batch lets a worker up to 4× faster
than worker 0 catch up while bounding memory), rescale = current (``measure: iteration``
only), weight_by_batch = false.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator

from ..errors import InputError
from ..runtime.base import Runtime
from ..training.data_pool import EpochPool
from .async_math import asgd_learning_rate, batch_weighted, dbs_per_sample_s, dbs_rescale, dbs_resize, dbs_speed_ratio
from .base import ALGORITHMS, AlgorithmContext
from .parameter_server import BatchPolicy, ParameterServerAlgorithm, ParameterServerConfig, PendingGradient, ServerState

__all__ = ["DbsConfig", "Dbs", "DbsPolicy", "DEFAULT_B_MAX_FACTOR"]

DEFAULT_B_MAX_FACTOR = 4  # b_max defaults to this many times the base batch X


class DbsConfig(ParameterServerConfig):
    """Options of DBS-SGD (plus the parameter-server options)."""

    name: Literal["dbs"] = "dbs"
    data: Literal["pool", "shards"] = Field(
        "pool", description="pool: workers draw batches of their own size from one shared queue per epoch, so all "
                            "finish it together (the paper's dynamic partition); shards: fixed equal shards, each "
                            "consumed at its worker's own rate. Default pool")
    measure: Literal["compute", "iteration"] = Field(
        "compute", description="compute: size batches from the measured forward/backward time per sample (the "
                               "paper); iteration: from whole-loop times, waiting included. Default compute")
    m: int = Field(5, ge=1, description="measurements in the moving window (reported good range 5-10). Default 5")
    A: float = Field(0.1, gt=0, description="resize only when the new batch differs from the current one by more "
                                           "than this fraction (measure: iteration: when |1 - S| > A). Default 0.1")
    b_min: int = Field(1, ge=1, description="smallest batch a worker may get. Default 1")
    b_max: int | None = Field(None, ge=1, description="largest batch a worker may get. Default 4 x the base batch")
    rescale: Literal["current", "base"] = Field(
        "current", description="measure: iteration only: scale the current batch (current) or the base batch X "
                               "(base, b = X*S). Default current")
    weight_by_batch: bool = Field(False, description="scale each gradient by b_i / X at the server. Default false")

    @field_validator("b_max")
    @classmethod
    def _not_below_b_min(cls, value: int | None, info: ValidationInfo) -> int | None:
        b_min = info.data.get("b_min")
        if value is not None and b_min is not None and value < b_min:
            raise ValueError(f"b_max = {value} is smaller than b_min = {b_min}")
        return value

    def effective_b_max(self, base_batch_size: int) -> int:
        return self.b_max if self.b_max is not None else DEFAULT_B_MAX_FACTOR * base_batch_size

    def check_scenario(self, scenario: Any) -> None:
        super().check_scenario(scenario)
        b_max = self.effective_b_max(scenario.workload.batch_size)
        if self.b_min > b_max:
            raise InputError(f"b_min = {self.b_min} exceeds b_max = {b_max} (default {DEFAULT_B_MAX_FACTOR} x "
                             f"workload.batch_size); lower b_min or set b_max", field="algorithm.b_min")


class DbsPolicy(BatchPolicy):
    """One worker's batch size under DBS-SGD (worker 0 keeps the base batch)."""

    def __init__(self, index: int, base_batch_size: int, config: DbsConfig):
        super().__init__(base_batch_size)
        self.index = index
        self.base = base_batch_size
        self.config = config
        self.b_max = config.effective_b_max(base_batch_size)
        self.own: deque[Any] = deque(maxlen=config.m)  # (compute_s, samples) or iteration_s, at the current size
        self._last: Any = None

    def next_batch_size(self, rt: Runtime, reply: dict[str, Any]) -> int:
        if self.index == 0:
            return self.batch_size
        reference = reply.get("reference") or []
        m = self.config.m
        if len(self.own) < m or len(reference) < m:
            return self.batch_size
        new, ratio = self._resized(reference)
        if new != self.batch_size:
            rt.record("batch_size", worker=rt.rank, batch_size=new, previous=self.batch_size, ratio=ratio)
            self.batch_size = new
            self.own.clear()  # the window restarts at the new batch size
        return self.batch_size

    def _resized(self, reference: list[Any]) -> tuple[int, float]:
        config = self.config
        if config.measure == "compute":
            own_s = dbs_per_sample_s(self.own)
            if own_s <= 0.0:  # compute that costs no time (a zero profile): no speed to compare
                return self.batch_size, 1.0
            ratio = dbs_per_sample_s(reference) / own_s
            return dbs_resize(self.batch_size, self.base * ratio, threshold=config.A, b_min=config.b_min,
                              b_max=self.b_max), ratio
        ratio = dbs_speed_ratio(reference, self.own)
        return dbs_rescale(self.batch_size, self.base, ratio, threshold=config.A, b_min=config.b_min,
                           b_max=self.b_max, rescale=config.rescale), ratio

    def observe(self, iteration_s: float, compute_s: float, samples: int) -> None:
        at_size = samples == self.batch_size
        measured = (compute_s, samples) if self.config.measure == "compute" else iteration_s
        self._last = measured if at_size else None
        if at_size:
            self.own.append(measured)

    def report(self) -> Any:
        return self._last if self.index == 0 else None


@ALGORITHMS.register("dbs", "DBS-SGD: asgd whose workers rescale their batch so iteration times match worker 0's",
                     citation="Ye et al., DBS: Dynamic Batch Size for Distributed Deep Neural Network Training, 2020",
                     config=DbsConfig)
class Dbs(ParameterServerAlgorithm):
    """asgd with per-worker batch sizes that equalise iteration times."""

    Config = DbsConfig

    def __init__(self, config: DbsConfig, ctx: AlgorithmContext):
        super().__init__(config, ctx)
        self.reference: deque[Any] = deque(maxlen=config.m)  # worker 0's measurements, kept by server 0

    def make_policy(self, index: int) -> BatchPolicy:
        return DbsPolicy(index, self.ctx.batch_size, self.config)

    def make_pool(self) -> EpochPool | None:
        if self.config.data != "pool":
            return None
        return EpochPool(self.data[0].sharder.n_samples, self.ctx.max_epochs)

    def on_push(self, server: ServerState, worker_index: int, payload: dict[str, Any]) -> None:
        if server.index == 0 and worker_index == 0 and payload.get("report") is not None:
            self.reference.append(payload["report"])

    def reply_extra(self, server: ServerState) -> dict[str, Any]:
        return {"reference": list(self.reference)} if server.index == 0 else {}

    def scales(self, gradient: PendingGradient, s: int) -> bool:
        return self.config.weight_by_batch and gradient.batch_size != self.ctx.batch_size

    def combine(self, pending: list[PendingGradient], stalenesses: list[int]) -> tuple[Any, float]:
        (gradient,), (s,) = pending, stalenesses
        grad = gradient.grad
        if self.config.weight_by_batch:
            grad = batch_weighted(grad, gradient.batch_size, self.ctx.batch_size)
        return grad, asgd_learning_rate(self.lr, s, self.config.staleness_aware)
