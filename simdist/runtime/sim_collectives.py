"""Collectives of a simulation: calls matched across ranks, the math done once, the bytes on the links.

:class:`CollectiveExecution` is the collective half of :class:`~simdist.runtime.sim.SimWorld`
(a mixin over its state: environment, network, platform, fidelity and caches). A collective
runs once every member of its group has called it: the result is computed once in group
order, and the schedule (:mod:`.collectives`) runs on the flow network at the world's
fidelity — every step as flows, or each phase as aggregate flows taking at least its
closed-form time — or, when the phase is all the traffic there is, replayed from its first
run alone.

Where the platform has a measured table for the collective (:mod:`.collective_pricing`), the
table's time is the collective's time on an idle network; the schedule's bytes still cross
the links as one aggregate flow per rank pair, and whatever those flows lose to other
traffic (their time beside it minus their time alone) is added: contention stays the flow
model's, the uncontended cost is the measurement's. Where no table applies, each step also
pays the platform's per-message costs (``messages``: LogGP o, g and the rendezvous
handshake) and the reduction's arithmetic (``collectives.reduce_bandwidth``, gamma), as
:mod:`.step_costs` prices them.

Under ``platform.progress: on_call`` a collective that any member called non-blocking starts
its schedule only once every member is inside a runtime call at the same moment
(:mod:`.progress`); until then its members' waits count as ``wait``, not ``comm``.

With ``platform.messages.wait_loop`` (a real run's waiting loop, :mod:`.wait_loop`) the
members blocked in the call learn that the last one has arrived at their loop's next test, as
simdist's MPI runtime tests its arrival agreement between sleeps; the data phase starts once
every blocked member has: their waits end when the last member arrived, and the time until
then is ``comm``, as the real runtime records it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import simpy
import torch

from ..errors import SimulationError
from ..platform.network import FlowNetwork
from .base import Group
from .collective_pricing import CollectivePricer, Price
from .collectives import allgather_plan, allreduce_plan, barrier_plan, broadcast_plan
from .payloads import payload_nbytes, snapshot
from .phantom import PhantomTensor
from .requests import Request
from .sim_alone import AloneReplay
from .step_costs import StepCosts

__all__ = ["CollectiveExecution"]


@dataclass(eq=False)
class _CollectiveOp:
    kind: str
    group: Group
    algorithm: str | None
    root: int | None
    blocking: dict[int, bool] = field(default_factory=dict)
    contributions: dict[int, Any] = field(default_factory=dict)
    requests: dict[int, Request] = field(default_factory=dict)
    posted: list[simpy.Event] = field(default_factory=list)  # members whose call's CPU is not done yet
    waiting_since: dict[int, float] = field(default_factory=dict)  # blocking member -> when its wait loop began
    after_compute: dict[int, bool] = field(default_factory=dict)  # member -> its first call since a forward/backward


class CollectiveExecution(AloneReplay):
    """The collective operations of :class:`~simdist.runtime.sim.SimWorld`."""

    def _init_collectives(self) -> None:
        self._collective_seq: dict[tuple[tuple[int, ...], int], int] = {}  # (group, rank) -> calls made
        self._open_ops: dict[tuple[tuple[int, ...], int], _CollectiveOp] = {}  # waiting for members
        self._analytic_cache: dict[Any, tuple[float, float, dict[tuple[int, int], float], float]] = {}
        self._plans: dict[Any, Any] = {}
        self._init_alone()
        spec = self.platform.spec
        self.pricer = CollectivePricer(spec.collectives)
        self.message_costs = spec.messages
        self.step_costs = StepCosts(self.platform, spec.messages,
                                    spec.collectives.reduce_bandwidth if spec.collectives is not None else None)
        self._nodes_spanned: dict[tuple[int, ...], int] = {}
        self._plan_pairs: dict[Any, dict[tuple[int, int], float]] = {}

    def collective(self, rank: int, kind: str, group: Group, tensor: Any, *, algorithm: str | None = None,
                   root: int | None = None, blocking: bool = True) -> Request:
        if rank not in group:
            raise SimulationError(f"rank {rank} calls {kind} on group {group.ranks} it is not a member of")
        if root is not None and root not in group:
            raise SimulationError(f"rank {rank} calls {kind} with root {root}, which is not in group {group.ranks}")
        if self.on_call is not None:
            self.on_call.called(rank)
        key = (group.ranks, rank)
        seq = self._collective_seq.get(key, 0)
        self._collective_seq[key] = seq + 1
        op = self._open_ops.setdefault((group.ranks, seq), _CollectiveOp(kind, group, algorithm, root))
        if (op.kind, op.algorithm, op.root) != (kind, algorithm, root):
            raise SimulationError(
                f"collective mismatch on group {group.ranks} (call #{seq}): rank {rank} calls {kind}"
                f"(algorithm={algorithm}, root={root}) but another member called {op.kind}"
                f"(algorithm={op.algorithm}, root={op.root})")
        request = Request("comm", kind, self.env.event())
        request.span_args = {"bytes": int(payload_nbytes(tensor)), "group_size": group.size,
                             **({} if blocking else {"nonblocking": True})}
        op.contributions[rank], op.requests[rank], op.blocking[rank] = tensor, request, blocking
        op.after_compute[rank] = self._first_call_after_compute(rank)
        posted = self._call_cpu(rank, blocking, op.after_compute[rank])
        if posted is not None:
            op.posted.append(posted)
        if blocking:  # it waits from when its call's CPU is spent
            op.waiting_since[rank] = self.env.now
            if posted is not None:
                posted.callbacks.append(lambda _event: op.waiting_since.__setitem__(rank, self.env.now))
        if len(op.contributions) == group.size:
            del self._open_ops[(group.ranks, seq)]
            self.env.process(self._run_collective(op))
        return request

    def _call_cpu(self, rank: int, blocking: bool, after_compute: bool) -> simpy.Event | None:
        """The CPU of the rank's call before its contribution is posted: what its message calls
        still owe, and for its first call after a forward/backward what a call with cold caches
        costs beyond a warm one (``messages.send_overhead_after_compute`` less ``send_overhead``:
        a table's or the links' time holds the warm call). A blocking call spends it now; a
        non-blocking one still owes it (paid before its next work) and posts once it would
        be spent. An event that fires when posted; None when nothing delays it."""
        costs = self.message_costs
        if after_compute and costs is not None:
            self._owe_cpu(rank, costs.send_extra_after_compute_s())
        if blocking:
            return self.spend_owed_cpu(rank)
        owed = self._cpu_owed_s.get(rank, 0.0)
        return self.env.timeout(owed) if owed > 0 else None

    def _run_collective(self, op: _CollectiveOp):
        pending = [event for event in op.posted if not event.processed]
        if pending:  # every member's call has posted its contribution
            yield self.env.all_of(pending)
        if self.on_call is not None and not all(op.blocking.values()):  # on_call: moves inside calls only
            gate = self.on_call.all_inside(op.group.ranks)
            if gate is not None:
                yield gate
        start = self.env.now
        for request in op.requests.values():
            request.started_s = start
        noticed = self._arrival_noticed_s(op, start)
        if noticed > start:  # the blocked members learn at their next tests that the last one is in
            yield self.env.timeout(noticed - start)
        results, plan_key, make_plan = self._collective_math_and_plan(op)
        plan = self._plans.get(plan_key)
        if plan is None:  # schedules are pure functions of their key: build each once
            plan = self._plans[plan_key] = make_plan()
        if plan:
            yield from self._execute(plan_key, plan, all(op.after_compute.values()))
        end = self.env.now
        for index, rank in enumerate(op.group.ranks):
            if not op.blocking[rank]:
                self.recorder.span(rank, "comm", op.kind, start, end, blocking=False, **op.requests[rank].span_args)
            # every member gets its own copy, as with MPI: one rank's in-place change stays its own
            op.requests[rank].event.succeed(results if index == 0 else snapshot(results))

    def _arrival_noticed_s(self, op: _CollectiveOp, arrived_s: float) -> float:
        """When every member blocked in ``op`` has tested and found that all have arrived (at
        ``arrived_s``): the latest of their loops' next tests (:mod:`.wait_loop`); ``arrived_s``
        without a waiting loop."""
        wakeups = self._wakeups
        if wakeups is None:
            return arrived_s
        return max((wakeups.noticed_s(rank, since, arrived_s) for rank, since in op.waiting_since.items()),
                   default=arrived_s)

    def _collective_math_and_plan(self, op: _CollectiveOp):
        ranks = op.group.ranks
        ordered = [op.contributions[r] for r in ranks]
        nbytes = max(payload_nbytes(t) for t in ordered) if ordered else 0
        if op.kind == "allreduce":
            value = _sum(ordered)
        elif op.kind == "broadcast":
            value = snapshot(op.contributions[op.root])
            nbytes = payload_nbytes(value)
        elif op.kind == "allgather":
            value = [snapshot(t) for t in ordered]
        elif op.kind == "barrier":
            value = None
        else:
            raise SimulationError(f"unknown collective {op.kind!r}")
        key, make_plan = self._key_and_planner(op.kind, ranks, nbytes, op.algorithm, op.root)
        return value, key, make_plan

    def _key_and_planner(self, kind: str, ranks: tuple[int, ...], nbytes: int, algorithm: str | None,
                         root: int | None):
        """A collective's key (what its schedule and price depend on) and how to build its schedule."""
        if kind == "allreduce":
            algorithm = algorithm or self.default_collective
            return (("allreduce", algorithm, ranks, nbytes),
                    lambda: allreduce_plan(algorithm, ranks, nbytes, self.platform.node_of))
        if kind == "broadcast":
            return ("broadcast", ranks, nbytes, root), lambda: broadcast_plan(ranks, nbytes, root)
        if kind == "allgather":
            return ("allgather", ranks, nbytes), lambda: allgather_plan(ranks, nbytes)
        return ("barrier", ranks), lambda: barrier_plan(ranks)

    def collective_plan(self, kind: str, ranks: tuple[int, ...], nbytes: int, algorithm: str | None = None,
                        root: int | None = None) -> tuple[Any, Any]:
        """(key, schedule) of a collective over ``ranks``; schedules are built once per key."""
        key, make_plan = self._key_and_planner(kind, ranks, nbytes, algorithm, root)
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plans[key] = make_plan()
        return key, plan

    def reduce_sum(self, tensors: list[Any]) -> Any:
        """The elementwise sum an allreduce delivers, in group order."""
        return _sum(tensors)

    def run_allreduce(self, algorithm: str, ranks: tuple[int, ...], nbytes: int):
        """Generator: an allreduce schedule of ``nbytes`` over ``ranks``, run on the links now."""
        key = ("allreduce", algorithm, ranks, nbytes)
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plans[key] = allreduce_plan(algorithm, ranks, nbytes, self.platform.node_of)
        if plan:
            yield from self._execute(key, plan)

    def _execute(self, key: Any, plan, after_compute: bool = False):
        """Run a collective schedule: at its table's price where one applies (``after_compute``:
        every member called it first after a forward/backward), else with the world's fidelity
        (see runtime.collectives)."""
        price = self._price(key, after_compute) if self.pricer else None
        if price is not None:
            yield from self._run_priced(key, plan, price)
            return
        for index, phase in enumerate(plan):
            if self.network_exclusive and self.network.idle:
                yield from self._replay_alone(key, index, phase)
            else:
                yield from self._run_phase(self.env, self.network, (key, index), phase)

    def _price(self, key: Any, after_compute: bool = False) -> Price | None:
        """The table price of the collective ``key`` names, or None where no table applies.

        ``after_compute`` (every member calls it first after a forward/backward), where a table
        was timed so: that table times the collective from when the members enter it together,
        so it holds their first call's cold code (which :meth:`_call_cpu` charges each member
        before its contribution is posted, as ``send_overhead_after_compute`` less the warm
        ``send_overhead``); the data phase after the last contribution is that table less it,
        never below the warm table's price (both time the ranks entering together; below it is
        the noise of two medians).
        """
        kind = key[0]
        if kind == "allreduce":
            _kind, algorithm, ranks, nbytes = key
        elif kind == "broadcast":
            _kind, ranks, nbytes, _root = key
            algorithm = None
        elif kind == "allgather":
            _kind, ranks, nbytes = key
            algorithm = None
        else:
            return None
        n, nodes = len(ranks), self._nodes_of(ranks)
        if not after_compute:
            return self.pricer.price(kind, algorithm, n, nodes, nbytes)
        price = self.pricer.price(kind, algorithm, n, nodes, nbytes, after_compute=True)
        if price is None or not self.pricer.models[price.table].table.after_compute:
            return price
        warm = self.pricer.price(kind, algorithm, n, nodes, nbytes, record=False)
        first_call_s = self.message_costs.send_extra_after_compute_s() if self.message_costs is not None else 0.0
        return Price(max(price.seconds - first_call_s, warm.seconds if warm else 0.0), price.basis, price.table)

    def _nodes_of(self, ranks: tuple[int, ...]) -> int:
        nodes = self._nodes_spanned.get(ranks)
        if nodes is None:
            nodes = self._nodes_spanned[ranks] = len({self.platform.node_of(r) for r in ranks})
        return nodes

    def _run_priced(self, key: Any, plan, price: Price):
        """A collective at its table price, stretched by what its flows lose to other traffic.

        The plan's bytes cross the links as one flow per (src, dst) pair. Alone on the network
        they take ``A`` (measured once on a scratch copy); beside other traffic ``E``. The
        collective ends at ``start + max(E, price + E − A)``: the measured time plus the delay
        contention adds; if the links alone are slower than the table, the links' time.
        """
        env, start = self.env, self.env.now
        pair_bytes = self._pair_bytes(key, plan)
        alone = self._priced_alone(key, plan, price)
        alone_s = alone[0]
        if self.network_exclusive and self.network.idle:
            yield from self._replay(alone, max(price.seconds, alone_s))
            return
        yield from self._aggregate_flows(env, self.network, pair_bytes)
        elapsed_s = env.now - start
        remaining = max(elapsed_s, price.seconds + elapsed_s - alone_s) - elapsed_s
        if remaining > 0:
            yield env.timeout(remaining)

    def _aggregate_flows(self, env: simpy.Environment, network: FlowNetwork, pair_bytes: dict):
        route = self.platform.route
        yield simpy.AllOf(env, [network.transfer(route(src, dst), nbytes, src=src, dst=dst, latency_s=0.0)
                                for (src, dst), nbytes in pair_bytes.items()])

    def _pair_bytes(self, key: Any, plan) -> dict[tuple[int, int], float]:
        """Bytes each (src, dst) pair moves over the whole plan (a repeated step is counted once
        per repetition, its transfers walked once)."""
        cached = self._plan_pairs.get(key)
        if cached is None:
            repeats: dict[int, list] = {}
            for phase in plan:
                for step in phase:
                    repeats.setdefault(id(step), [step, 0])[1] += 1
            cached = self._plan_pairs[key] = _pair_totals(repeats.values())
        return cached

    def _run_phase(self, env: simpy.Environment, network: FlowNetwork, key: Any, phase):
        """One phase of a schedule on ``network``: every step as flows (``flows``), or the
        phase's bytes as one flow per pair, taking at least the closed-form time (``analytic``)."""
        route = self.platform.route
        if self.fidelity == "flows":
            for step in phase:
                message_s, reduce_s = self.step_costs.extras(step)
                latency = self.platform.route_latency_s
                cpu_until = env.now + self.step_costs.copy_cpu_s(step)
                yield simpy.AllOf(env, [network.transfer(route(t.src, t.dst), t.nbytes, src=t.src, dst=t.dst,
                                                         latency_s=latency(t.src, t.dst) + message_s if message_s else None)
                                        for t in step])
                if cpu_until > env.now:  # the ranks' copies outlast the wire
                    yield env.timeout(cpu_until - env.now)
                if reduce_s > 0:
                    yield env.timeout(reduce_s)
            return
        closed_form_s, latency_s, pair_bytes, extras_s = self._analytic_phase(key, phase)
        start = env.now
        flows = [network.transfer(route(src, dst), nbytes, src=src, dst=dst, latency_s=latency_s)
                 for (src, dst), nbytes in pair_bytes.items()]
        yield simpy.AllOf(env, flows)
        remaining = max(start + closed_form_s - env.now, 0.0) + extras_s  # per-message CPU and reduction follow
        if remaining > 0:
            yield env.timeout(remaining)

    def _analytic_phase(self, key: Any, phase) -> tuple[float, float, dict[tuple[int, int], float], float]:
        """(closed-form time on the wire, latency paid before the aggregate flows, bytes per pair,
        per-message and reduction time) of a phase: contention stretches the wire, not the rest.

        Schedules repeat one step object many times (a ring's 2(n-1) steps): each distinct
        step is costed once and its bytes are counted times its repetitions.
        """
        cached = self._analytic_cache.get(key)
        if cached is None:
            step_costs: dict[int, tuple[float, float]] = {}
            repeats: dict[int, list] = {}  # id(step) -> [step, count], in order of first appearance
            total_s = latency_s = extras_s = 0.0
            for step in phase:
                cost = step_costs.get(id(step))
                if cost is None:
                    cost = step_costs[id(step)] = self.step_costs.uncontended(step)
                    repeats[id(step)] = [step, 0]
                repeats[id(step)][1] += 1
                latency_s += cost[0]
                total_s += cost[1]
                extras_s += cost[2]
            cached = self._analytic_cache[key] = (total_s, latency_s, _pair_totals(repeats.values()), extras_s)
        return cached

    def reduction_basis(self) -> list[dict[str, Any]]:
        """How the collectives' reduction arithmetic was priced, for the run's manifest."""
        return self.step_costs.reduction_basis()


def _pair_totals(repeats) -> dict[tuple[int, int], float]:
    """Bytes per (src, dst) pair of ``[step, repetitions]`` entries: each step's transfers are
    walked once and counted times its repetitions."""
    pair_bytes: dict[tuple[int, int], float] = {}
    for step, count in repeats:
        for t in step:
            pair_bytes[(t.src, t.dst)] = pair_bytes.get((t.src, t.dst), 0.0) + t.nbytes * count
    return pair_bytes


def _sum(tensors: list[Any]) -> Any:
    """Elementwise sum in group order (deterministic); phantoms stay phantoms."""
    first = tensors[0]
    if any(isinstance(t, PhantomTensor) for t in tensors):
        return PhantomTensor(first.numel(), first.dtype)
    if len(tensors) == 1:
        return first.clone()
    return torch.stack(tensors).sum(0)
