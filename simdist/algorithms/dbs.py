"""dbs — DBS-SGD, dynamic batch sizes for heterogeneous workers (docs/algorithms.md §4).

Built on asgd (parameter server, asynchronous pushes, one update per gradient). Goal:
equal iteration *time* across workers, so staleness stays low when workers differ in speed.

* Iteration time (definition): one loop of a worker — from receiving weights, through its
  forward/backward and push, to receiving the server's reply with the next weights.
  Consecutive loops tile the worker's time, so this is also the interval between its
  consecutive pushes. Only loops at the full requested batch count: the short last batch
  of an epoch (a batch never spans two epochs) would otherwise look like a speed-up.
* Every worker keeps its last ``m`` iteration times (default 5). Worker 0 is the
  reference: it reports each iteration time with its next push, server 0 keeps worker 0's
  last m times and sends them with every reply (= every pull).
* Before each step, worker i ≠ 0 with m own times and m reference times computes
  S = Σ(worker 0's last m) / Σ(own last m). If |1 − S| > ``A`` (default 0.1):
  b_i ← clamp(round(b·S), ``b_min``, ``b_max``) with b = b_i (``rescale: current``, default)
  or b = X, the scenario's batch size (``rescale: base``, the paper's b_i = X·S).
  **choice** (docs/algorithms.md §4): times are measured at the current b_i, so the current batch is
  scaled. To keep that true, a worker's own window restarts after every change, so S always
  compares times measured at its current batch size (m more iterations before the next
  decision). Worker 0 keeps b_0 = X. Each change is recorded as a ``batch_size`` event
  (worker, batch_size, previous, ratio).
* Server: mean gradient over the worker's batch applied with η (asgd's rule, including
  ``staleness_aware``); ``weight_by_batch: true`` scales it by b_i / X first (one more pass
  over the shard, charged with the update; see :mod:`.parameter_server`).
* An epoch still covers the dataset once: each worker consumes its own shard at its own rate.

Defaults: m = 5, A = 0.1, b_min = 1, b_max = 4·X (**choice**, docs/algorithms.md §4: four
times the base batch lets a worker up to 4× faster than worker 0 catch up while bounding
memory), rescale = current, weight_by_batch = false.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator

from ..errors import InputError
from ..runtime.base import Runtime
from .async_math import asgd_learning_rate, batch_weighted, dbs_rescale, dbs_speed_ratio
from .base import ALGORITHMS, AlgorithmContext
from .parameter_server import BatchPolicy, ParameterServerAlgorithm, ParameterServerConfig, PendingGradient, ServerState

__all__ = ["DbsConfig", "Dbs", "DbsPolicy", "DEFAULT_B_MAX_FACTOR"]

DEFAULT_B_MAX_FACTOR = 4  # b_max defaults to this many times the base batch X


class DbsConfig(ParameterServerConfig):
    """Options of DBS-SGD (plus the parameter-server options)."""

    name: Literal["dbs"] = "dbs"
    m: int = Field(5, ge=1, description="iteration times in the moving window (reported good range 5-10). Default 5")
    A: float = Field(0.1, gt=0, description="rescale only when |1 - S| > A. Default 0.1")
    b_min: int = Field(1, ge=1, description="smallest batch a worker may get. Default 1")
    b_max: int | None = Field(None, ge=1, description="largest batch a worker may get. Default 4 x the base batch")
    rescale: Literal["current", "base"] = Field(
        "current", description="scale the current batch (current) or the base batch X (base, the paper's b = X*S). "
                               "Default current")
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
        self.own_times_s: deque[float] = deque(maxlen=config.m)
        self._last_full_s: float | None = None

    def next_batch_size(self, rt: Runtime, reply: dict[str, Any]) -> int:
        if self.index == 0:
            return self.batch_size
        reference = reply.get("reference_times_s") or []
        m = self.config.m
        if len(self.own_times_s) < m or len(reference) < m:
            return self.batch_size
        ratio = dbs_speed_ratio(reference, self.own_times_s)
        new = dbs_rescale(self.batch_size, self.base, ratio, threshold=self.config.A, b_min=self.config.b_min,
                          b_max=self.b_max, rescale=self.config.rescale)
        if new != self.batch_size:
            rt.record("batch_size", worker=rt.rank, batch_size=new, previous=self.batch_size, ratio=ratio)
            self.batch_size = new
            self.own_times_s.clear()  # the window restarts at the new batch size
        return self.batch_size

    def observe(self, iteration_s: float, full_batch: bool) -> None:
        self._last_full_s = iteration_s if full_batch else None
        if full_batch:
            self.own_times_s.append(iteration_s)

    def report(self) -> float | None:
        return self._last_full_s if self.index == 0 else None


@ALGORITHMS.register("dbs", "DBS-SGD: asgd whose workers rescale their batch so iteration times match worker 0's",
                     citation="Ye et al., DBS: Dynamic Batch Size for Distributed Deep Neural Network Training, 2020",
                     config=DbsConfig)
class Dbs(ParameterServerAlgorithm):
    """asgd with per-worker batch sizes that equalise iteration times."""

    Config = DbsConfig

    def __init__(self, config: DbsConfig, ctx: AlgorithmContext):
        super().__init__(config, ctx)
        self.reference_times_s: deque[float] = deque(maxlen=config.m)  # kept by server 0

    def make_policy(self, index: int) -> BatchPolicy:
        return DbsPolicy(index, self.ctx.batch_size, self.config)

    def on_push(self, server: ServerState, worker_index: int, payload: dict[str, Any]) -> None:
        if server.index == 0 and worker_index == 0 and payload.get("report") is not None:
            self.reference_times_s.append(float(payload["report"]))

    def reply_extra(self, server: ServerState) -> dict[str, Any]:
        return {"reference_times_s": list(self.reference_times_s)} if server.index == 0 else {}

    def scales(self, gradient: PendingGradient, s: int) -> bool:
        return self.config.weight_by_batch and gradient.batch_size != self.ctx.batch_size

    def combine(self, pending: list[PendingGradient], stalenesses: list[int]) -> tuple[Any, float]:
        (gradient,), (s,) = pending, stalenesses
        grad = gradient.grad
        if self.config.weight_by_batch:
            grad = batch_weighted(grad, gradient.batch_size, self.ctx.batch_size)
        return grad, asgd_learning_rate(self.lr, s, self.config.staleness_aware)
