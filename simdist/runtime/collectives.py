"""Collective algorithms as transfer schedules, shared by both network fidelities.

A collective algorithm turns (ranks, bytes) into a :data:`Plan`: phases run one after the
other; a phase is a list of steps run one after the other; a step is a set of concurrent
point-to-point transfers. One schedule, two ways to run it (see
:mod:`simdist.runtime.sim`):

* ``flows``: every step's transfers are real flows (each paying its route latency); a step
  ends when its last transfer ends. Contention with any other traffic shows.
* ``analytic``: the closed-form alpha–beta cost of the schedule, ``Σ_steps (max latency +
  max bytes / rate)`` with each step's rates the max-min share of its own transfers on an
  otherwise idle platform; the phase's bytes are still put on the links as one aggregate
  flow per (src, dst) pair so link counters are charged and foreign traffic can stretch it.

On an otherwise idle platform the two agree (tested within 1 %) whenever the transfers of one
step share no link; when they do and their route latencies differ, ``analytic`` lets them
overlap for the whole step, while under ``flows`` the earlier one finishes first (seen: up to
8 % apart for a tree on a torus).

Costs (n ranks, S bytes, α latency, B bandwidth) — R. Thakur, R. Rabenseifner and W. Gropp,
"Optimization of collective communication operations in MPICH", IJHPCA 19(1), 2005:
ring 2(n−1)(α + S/(nB)); binary tree 2⌊log2 n⌋(α + S/B); recursive halving-doubling
2 log2 n · α + 2(n−1)/n · S/B (plus two folding steps when n is not a power of two).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from ..registry import Registry

__all__ = ["Transfer", "Plan", "COLLECTIVES", "allreduce_plan", "broadcast_plan", "allgather_plan",
           "barrier_plan", "FIDELITIES", "default_schedule"]

FIDELITIES = ("analytic", "flows")


@dataclass(frozen=True)
class Transfer:
    """``nbytes`` from rank ``src`` to rank ``dst``; ``reduces``: the receiver sums them into its buffer."""

    src: int
    dst: int
    nbytes: float
    reduces: bool = False


Step = tuple[Transfer, ...]
Phase = tuple[Step, ...]
Plan = tuple[Phase, ...]
NodeOf = Callable[[int], int]
AllreducePlanner = Callable[[Sequence[int], float, NodeOf], Plan]

COLLECTIVES: Registry[AllreducePlanner] = Registry("collective")


def _ring_steps(ranks: Sequence[int], chunk_bytes: float, count: int, reduces: bool = False) -> list[Step]:
    n = len(ranks)
    step = tuple(Transfer(ranks[i], ranks[(i + 1) % n], chunk_bytes, reduces) for i in range(n))
    return [step] * count


@COLLECTIVES.register("ring", "ring allreduce: reduce-scatter then allgather, 2(n-1) steps of S/n bytes",
                      citation="Patarasuk & Yuan, J. Parallel Distrib. Comput. 69(2), 2009")
def ring_allreduce(ranks: Sequence[int], nbytes: float, node_of: NodeOf) -> Plan:
    n = len(ranks)
    if n < 2:
        return ()
    return (tuple(_ring_steps(ranks, nbytes / n, n - 1, reduces=True) + _ring_steps(ranks, nbytes / n, n - 1)),)


def _tree_levels(n: int) -> list[list[int]]:
    """Indices of a binary heap (parent of i is (i-1)//2), grouped by depth."""
    levels, start, width = [], 0, 1
    while start < n:
        levels.append(list(range(start, min(start + width, n))))
        start, width = start + width, width * 2
    return levels


@COLLECTIVES.register("tree", "binary-tree reduce to rank 0 then broadcast, 2 floor(log2 n) steps of S bytes",
                      citation="Thakur, Rabenseifner & Gropp, IJHPCA 19(1), 2005")
def tree_allreduce(ranks: Sequence[int], nbytes: float, node_of: NodeOf) -> Plan:
    if len(ranks) < 2:
        return ()
    levels = _tree_levels(len(ranks))[1:]
    up = [tuple(Transfer(ranks[i], ranks[(i - 1) // 2], nbytes, True) for i in level) for level in reversed(levels)]
    down = [tuple(Transfer(ranks[(i - 1) // 2], ranks[i], nbytes) for i in level) for level in levels]
    return (tuple(up + down),)


def _power_of_two_core(ranks: Sequence[int], nbytes: float, core: Callable[[int], list[Step]]) -> Plan:
    """A schedule over the largest power of two p <= n ranks (``core(p)``: its steps over ranks[:p]),
    the n − p extra ranks folded into the first ones before and handed the result after."""
    n = len(ranks)
    if n < 2:
        return ()
    p = 1 << (n.bit_length() - 1)
    extra = n - p
    steps: list[Step] = []
    if extra:
        steps.append(tuple(Transfer(ranks[p + i], ranks[i], nbytes, True) for i in range(extra)))
    steps += core(p)
    if extra:
        steps.append(tuple(Transfer(ranks[i], ranks[p + i], nbytes) for i in range(extra)))
    return (tuple(steps),)


@COLLECTIVES.register("halving_doubling", "recursive halving reduce-scatter then recursive doubling allgather",
                      citation="Rabenseifner, ICCS 2004; Thakur, Rabenseifner & Gropp, IJHPCA 19(1), 2005")
def halving_doubling_allreduce(ranks: Sequence[int], nbytes: float, node_of: NodeOf) -> Plan:
    def core(p: int) -> list[Step]:
        rounds = int(math.log2(p))
        scatter = [tuple(Transfer(ranks[i], ranks[i ^ (1 << k)], nbytes / (2 << k), True) for i in range(p))
                   for k in range(rounds)]  # distance 1, 2, 4 ..., halving the data
        gather = [tuple(Transfer(ranks[i], ranks[i ^ (1 << k)], nbytes / (2 << k)) for i in range(p))
                  for k in reversed(range(rounds))]  # doubling it back
        return scatter + gather
    return _power_of_two_core(ranks, nbytes, core)


@COLLECTIVES.register("recursive_doubling", "log2 n steps, each rank exchanging its whole buffer with rank i xor 2^k",
                      citation="Thakur, Rabenseifner & Gropp, IJHPCA 19(1), 2005 (MPICH's short-message allreduce)")
def recursive_doubling_allreduce(ranks: Sequence[int], nbytes: float, node_of: NodeOf) -> Plan:
    def core(p: int) -> list[Step]:
        return [tuple(Transfer(ranks[i], ranks[i ^ (1 << k)], nbytes, True) for i in range(p))
                for k in range(int(math.log2(p)))]
    return _power_of_two_core(ranks, nbytes, core)


MPICH_SHORT_ALLREDUCE_BYTES = 8  # avg_msg_size <= 8: recursive doubling (MPICH src/mpi/coll/coll_selection.json)
MPICH_ELEMENT_BYTES = 4  # the count MPICH compares with the power of two: float32 elements


@COLLECTIVES.register("mpich", "MPICH's own choice: recursive doubling for messages of at most 8 B or fewer "
                               "elements than the largest power of two <= n, else halving-doubling "
                               "(reduce-scatter + allgather)",
                      citation="MPICH 4-5 default selection, src/mpi/coll/coll_selection.json (allreduce, intra); "
                               "Thakur, Rabenseifner & Gropp, IJHPCA 19(1), 2005")
def mpich_allreduce(ranks: Sequence[int], nbytes: float, node_of: NodeOf) -> Plan:
    """The schedule MPICH's default selection runs for an allreduce of a built-in operation
    (a sum) over an intra-communicator: an MPI job on MPICH pays this one, not a ring."""
    n = len(ranks)
    pof2 = 1 << (n.bit_length() - 1) if n else 0
    if nbytes <= MPICH_SHORT_ALLREDUCE_BYTES or nbytes < MPICH_ELEMENT_BYTES * pof2:
        return recursive_doubling_allreduce(ranks, nbytes, node_of)
    return halving_doubling_allreduce(ranks, nbytes, node_of)


@COLLECTIVES.register("hierarchical", "node-local reduce to a leader, ring allreduce among leaders, local broadcast",
                      citation="Horovod hierarchical allreduce; Sergeev & Del Balso, arXiv:1802.05799, 2018")
def hierarchical_allreduce(ranks: Sequence[int], nbytes: float, node_of: NodeOf) -> Plan:
    by_node: dict[int, list[int]] = {}
    for r in ranks:
        by_node.setdefault(node_of(r), []).append(r)
    leaders = [members[0] for members in by_node.values()]
    locals_ = [(members[0], members[1:]) for members in by_node.values() if len(members) > 1]
    phases: list[Phase] = []
    if locals_:
        phases.append((tuple(Transfer(r, leader, nbytes, True) for leader, rest in locals_ for r in rest),))
    if len(leaders) > 1:
        phases.extend(ring_allreduce(leaders, nbytes, node_of))
    if locals_:
        phases.append((tuple(Transfer(leader, r, nbytes) for leader, rest in locals_ for r in rest),))
    return tuple(phases)


def allreduce_plan(algorithm: str, ranks: Sequence[int], nbytes: float, node_of: NodeOf) -> Plan:
    """The schedule of an allreduce of ``nbytes`` per rank over ``ranks`` with ``algorithm``."""
    return COLLECTIVES.get(algorithm)(ranks, nbytes, node_of)


def broadcast_plan(ranks: Sequence[int], nbytes: float, root: int) -> Plan:
    """Binomial-tree broadcast from ``root``: ⌈log2 n⌉ rounds, the holders doubling each round."""
    order = [root] + [r for r in ranks if r != root]
    n, steps, have = len(order), [], 1
    while have < n:
        steps.append(tuple(Transfer(order[i], order[i + have], nbytes) for i in range(min(have, n - have))))
        have *= 2
    return (tuple(steps),) if steps else ()


def allgather_plan(ranks: Sequence[int], nbytes_each: float) -> Plan:
    """Ring allgather: n−1 steps, each rank forwarding one block of ``nbytes_each``."""
    n = len(ranks)
    return (tuple(_ring_steps(ranks, nbytes_each, n - 1)),) if n > 1 else ()


def barrier_plan(ranks: Sequence[int]) -> Plan:
    """Dissemination barrier: ⌈log2 n⌉ rounds of empty messages to rank i + 2^k."""
    n, steps, dist = len(ranks), [], 1
    while dist < n:
        steps.append(tuple(Transfer(ranks[i], ranks[(i + dist) % n], 0.0) for i in range(n)))
        dist *= 2
    return (tuple(steps),) if steps else ()


def default_schedule(scenario_choice: str | None, platform_collectives: Any) -> tuple[str, dict[str, Any]]:
    """(the allreduce schedule of calls that name none, why: for the run's manifest).

    The scenario's ``network.collective`` if it names one; else the platform's
    ``collectives.schedule`` — the library its collectives run on, which ``calibrate network``
    records (an MPI job on MPICH runs MPICH's choice by size, not a ring); else ring."""
    if scenario_choice is not None:
        return scenario_choice, {"allreduce": scenario_choice, "basis": "network.collective of the scenario"}
    schedule = getattr(platform_collectives, "schedule", None)
    if schedule is not None:
        return schedule, {"allreduce": schedule, "basis": "collectives.schedule of the platform",
                          "source": platform_collectives.schedule_source}
    return "ring", {"allreduce": "ring", "basis": "default: neither the scenario nor the platform names one"}
