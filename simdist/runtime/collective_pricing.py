"""What an uncontended collective costs, from measured tables and the model fitted to them.

A platform may carry collective cost tables (:mod:`simdist.platform.cost_spec`): time against
size for one collective on one communicator size, as nccl-tests, OSU, ``calibrate network``
or a user's CSV measured it. A measurement already holds every effect the link model
leaves out (protocol switches, per-message overheads, the reduction's arithmetic, the
library's choice of algorithm), so where a table applies it is the price:

* **inside the table** — log–log interpolation between the two nearest sizes (times of
  collectives are close to power laws between neighbouring sizes; nccl-tests doubles them);
* **outside its sizes** — the alpha–beta–gamma model fitted to the table, anchored at the
  nearest measured size so price is continuous: per size regime (NCCL's LL/LL128/Simple,
  MPI's eager/rendezvous show as regimes; :class:`~simdist.fitting.PiecewiseAlphaBetaFit`)
  a per-step latency α and a bandwidth β over the schedule's critical-path bytes, plus gamma,
  the reduced bytes over ``reduce_bandwidth`` where the platform gives it;
* **another communicator size** — the same per-step α, β and γ applied to the schedule of
  the new size (:func:`schedule_shape`: steps, critical-path bytes and reduced bytes of the
  registered plan), from the table of the nearest size measured over the same kind of
  group (inside one node, or across nodes).

Every price says which of these it is (:class:`Price`); :class:`CollectivePricer` counts
them per collective for the run's manifest, so an extrapolation is never silent. How a
table price combines with the flow network (contention) is
:meth:`simdist.runtime.sim_collectives.CollectiveExecution._run_priced`.

Model: R. Thakur, R. Rabenseifner and W. Gropp, "Optimization of collective communication
operations in MPICH", IJHPCA 19(1), 2005 (alpha–beta–gamma costs per algorithm); protocol
regimes as in NCCL's tuning model (``src/graph/tuning.cc``: latency and bandwidth per
algorithm and protocol).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from ..fitting import PiecewiseAlphaBetaFit
from ..platform.cost_spec import CollectiveCostSpec, CostTableSpec
from .collectives import Plan, allgather_plan, allreduce_plan, broadcast_plan

__all__ = ["ScheduleShape", "schedule_shape", "TableModel", "Price", "CollectivePricer", "DEFAULT_SCHEDULE"]

# the schedule a table's busbw-style fit assumes when it does not name one (nccl-tests' bus
# bandwidth is defined on the ring; MPI broadcasts are binomial trees)
DEFAULT_SCHEDULE = {"allreduce": "ring", "broadcast": "binomial", "allgather": "ring"}


@dataclass(frozen=True)
class ScheduleShape:
    """A collective schedule reduced to its alpha–beta–gamma coefficients, per byte of size.

    ``steps``: steps on the critical path (each pays one per-step latency);
    ``critical_bytes``: bytes the slowest transfer of each step moves, summed over steps;
    ``reduced_bytes``: bytes the busiest receiver of each reducing step must sum, summed.
    """

    steps: int
    critical_bytes: float
    reduced_bytes: float

    def time_s(self, nbytes: float, step_latency_s: float, bandwidth_Bps: float, reduce_Bps: float | None) -> float:
        gamma = self.reduced_bytes * nbytes / reduce_Bps if reduce_Bps else 0.0
        return self.steps * step_latency_s + self.critical_bytes * nbytes / bandwidth_Bps + gamma


def _plan_of(op: str, schedule: str, n: int, nodes: int) -> Plan:
    ranks = list(range(n))
    if op == "allreduce":
        return allreduce_plan(schedule, ranks, 1.0, lambda r: r * nodes // n)
    if op == "broadcast":
        return broadcast_plan(ranks, 1.0, 0)
    return allgather_plan(ranks, 1.0)


@lru_cache(maxsize=1024)
def schedule_shape(op: str, schedule: str, n: int, nodes: int = 1) -> ScheduleShape:
    """Steps, critical-path bytes and reduced bytes (per byte) of ``op`` over ``n`` ranks on ``nodes`` nodes."""
    steps, critical, reduced = 0, 0.0, 0.0
    for phase in _plan_of(op, schedule, n, max(1, min(nodes, n))):
        for step in phase:
            steps += 1
            critical += max(t.nbytes for t in step)
            into: dict[int, float] = {}
            for t in step:
                if t.reduces:
                    into[t.dst] = into.get(t.dst, 0.0) + t.nbytes
            reduced += max(into.values(), default=0.0)
    return ScheduleShape(steps, critical, reduced)


@dataclass(frozen=True)
class Price:
    """The uncontended time of one collective and how it was obtained."""

    seconds: float
    basis: str  # "table", "table, size extrapolated" or "from the N-rank table"
    table: int  # index of the table in the platform's collectives.tables


class TableModel:
    """One cost table: interpolation inside it, the fitted alpha–beta–gamma model outside.

    Fitted on construction: ``fit_`` (the piecewise fit in critical-path bytes, after the
    gamma part is taken out), ``shape_`` (the schedule shape at the table's own size).
    """

    def __init__(self, table: CostTableSpec, reduce_Bps: float | None = None):
        self.table = table
        self.reduce_Bps = reduce_Bps
        self.schedule = table.algorithm or DEFAULT_SCHEDULE[table.op]
        self.sizes = np.asarray(table.sizes_bytes, dtype=float)
        self.times = np.asarray(table.times_s, dtype=float)
        self._log_s, self._log_t = np.log(self.sizes), np.log(self.times)
        self.shape_ = schedule_shape(table.op, self.schedule, table.ranks, table.nodes or 1)
        gamma = self.shape_.reduced_bytes * self.sizes / reduce_Bps if reduce_Bps else 0.0
        # what the links did; a reduction slower than the whole measurement is not plausible:
        # keep a floor so the fit stays positive and the excess shows as a large residual
        wire = np.maximum(self.times - gamma, 0.05 * self.times)
        rows = len(self.sizes)
        self.fit_ = PiecewiseAlphaBetaFit(max_segments=4 if rows >= 6 else 1, min_points=min(3, rows),
                                          tolerance=0.05).fit(self.shape_.critical_bytes * self.sizes, wire)

    @property
    def op(self) -> str:
        return self.table.op

    def covers(self, nbytes: float) -> bool:
        return self.sizes[0] <= nbytes <= self.sizes[-1]

    def interpolate(self, nbytes: float) -> float:
        """Log–log interpolation between the two measured sizes around ``nbytes`` (inside the table)."""
        return float(np.exp(np.interp(math.log(nbytes), self._log_s, self._log_t)))

    def model_s(self, nbytes: float, shape: ScheduleShape) -> float:
        """The fitted alpha–beta–gamma time of ``nbytes`` per rank on a schedule of ``shape``."""
        regime = self.fit_.regime(self.shape_.critical_bytes * nbytes).fit
        step_latency_s = regime.latency_s_ / max(self.shape_.steps, 1)
        return shape.time_s(nbytes, step_latency_s, regime.bandwidth_Bps_, self.reduce_Bps)

    def extrapolate_size(self, nbytes: float) -> float:
        """Outside the table, on its own communicator: the model, anchored at the nearest measured size."""
        edge = 0 if nbytes < self.sizes[0] else -1
        anchor_s, anchor_t = float(self.sizes[edge]), float(self.times[edge])
        moved = self.model_s(nbytes, self.shape_) - self.model_s(anchor_s, self.shape_)
        floor = self.model_s(0.0, self.shape_)  # a smaller message is never cheaper than the latency
        return max(anchor_t + moved, floor, 1e-12)

    def price(self, nbytes: float) -> tuple[float, str]:
        if nbytes <= 0:
            return float(self.times[0]), "table, size extrapolated"
        if self.covers(nbytes):
            return self.interpolate(nbytes), "table"
        return self.extrapolate_size(nbytes), "table, size extrapolated"


class CollectivePricer:
    """Prices of the platform's collectives (None where no table applies: the links price those).

    ``price(op, algorithm, ranks, nodes, nbytes)``; ``provenance()`` lists, per collective
    and basis, how many calls were priced and over which sizes.
    """

    def __init__(self, spec: CollectiveCostSpec | None):
        self.models = [TableModel(t, spec.reduce_bandwidth) for t in spec.tables] if spec is not None else []
        self._usage: dict[tuple, dict[str, Any]] = {}
        self._choice: dict[tuple, tuple[int, str] | None] = {}
        self._prices: dict[tuple, Price] = {}

    def __bool__(self) -> bool:
        return bool(self.models)

    def price(self, op: str, algorithm: str, ranks: int, nodes: int, nbytes: float,
              after_compute: bool = False, record: bool = True) -> Price | None:
        """The uncontended time of ``op`` of ``nbytes`` per rank over ``ranks`` ranks on ``nodes`` nodes;
        ``after_compute``: every member calls it right after a forward/backward, priced from a table
        timed so (``CostTableSpec.after_compute``) where the platform has one, else as any call;
        ``record``: False for a price only compared with another, not charged (not in the manifest)."""
        price = self._prices.get((op, algorithm, ranks, nodes, nbytes, after_compute))
        if price is None:
            key = (op, algorithm, ranks, nodes, after_compute)
            choice = self._choice.get(key, False)
            if choice is False:
                choice = self._choice[key] = self._choose(op, algorithm, ranks, nodes, after_compute)
            if choice is None:
                return None
            index, how = choice
            model = self.models[index]
            if how == "same size":
                seconds, basis = model.price(nbytes)
            else:
                seconds = model.model_s(nbytes, schedule_shape(op, model.schedule, ranks, nodes))
                basis = f"from the {model.table.ranks}-rank table"
            price = self._prices[(op, algorithm, ranks, nodes, nbytes, after_compute)] = Price(seconds, basis, index)
        if record:
            self._count(op, ranks, nodes, price.table, price.basis, nbytes)
        return price

    def links_slower(self, op: str, ranks: int, nodes: int, price: Price) -> None:
        """Note that the links alone took longer than the table's time (the platform's link
        values are below what the table measured): the links' time was charged."""
        entry = self._usage[(op, ranks, nodes, price.table, price.basis)]
        entry["links_slower_than_table"] = entry.get("links_slower_than_table", 0) + 1

    def _choose(self, op: str, algorithm: str, ranks: int, nodes: int,
                after_compute: bool = False) -> tuple[int, str] | None:
        """The table that prices this kind of call, and whether it was measured at this size: one
        timed in the call's state (right after compute, or not), else the warm one."""
        usable = [i for i, m in enumerate(self.models) if m.op == op and m.table.after_compute == after_compute
                  and m.table.algorithm in (None, algorithm) and _same_kind_of_group(m.table.nodes, nodes)]
        if not usable:
            return self._choose(op, algorithm, ranks, nodes) if after_compute else None
        exact = [i for i in usable if self.models[i].table.ranks == ranks]
        if exact:  # a table of exactly this layout first, then one that did not say
            exact.sort(key=lambda i: (self.models[i].table.nodes != nodes, self.models[i].table.algorithm is None))
            return exact[0], "same size"
        nearest = min(usable, key=lambda i: (abs(math.log(self.models[i].table.ranks / ranks)),
                                              -self.models[i].table.ranks))
        return nearest, "other size"

    def _count(self, op: str, ranks: int, nodes: int, table: int, basis: str, nbytes: float) -> None:
        entry = self._usage.get((op, ranks, nodes, table, basis))
        if entry is None:
            entry = self._usage[(op, ranks, nodes, table, basis)] = {
                "op": op, "ranks": ranks, "nodes": nodes, "table": table, "basis": basis, "calls": 0,
                "after_compute": self.models[table].table.after_compute,
                "min_bytes": nbytes, "max_bytes": nbytes, "source": self.models[table].table.source}
        entry["calls"] += 1
        entry["min_bytes"] = min(entry["min_bytes"], nbytes)
        entry["max_bytes"] = max(entry["max_bytes"], nbytes)

    def provenance(self) -> list[dict[str, Any]]:
        """How the run's collectives were priced (for the manifest), in a stable order."""
        return [dict(v) for _k, v in sorted(self._usage.items(), key=lambda kv: tuple(map(str, kv[0])))]


def _same_kind_of_group(table_nodes: int | None, group_nodes: int) -> bool:
    """A one-node table prices groups inside one node; a multi-node table, groups across nodes."""
    return table_nodes is None or (table_nodes == 1) == (group_nodes == 1)
