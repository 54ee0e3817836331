"""Where the ranks of a real run sit on the host's cores, and the same placement for the simulator.

A real run on one host shares its cores among the ranks; the simulation has to be told the
same sharing, or it predicts another machine. :func:`plan` turns an affinity request into a
:class:`Placement`: the cores each rank may run on (``os.sched_setaffinity`` in the rank), and
the platform fields that describe that to the simulator (``platform.node.cores``: the cores
the ranks of a node share by processor sharing; ``platform.node.core_sets``: the sets of cores
ranks are pinned to, each shared by its own ranks).

Requests:

* ``auto`` (default): while every rank can have a core, not pinned (a pinned rank could not
  escape another process on its core); each simulated node gets an equal slice of the cores.
  With more ranks than cores on one node, rank r is pinned to core r mod cores: the kernel
  would otherwise keep the ranks as unevenly as it likes (three busy ranks on two cores stay
  two on one core and one on the other — already "balanced" for its load balancer), which
  fair processor sharing cannot describe; pinned, every worker's share is known and given
  to the simulator. Where several "nodes" on one host (daso) have more ranks than their
  slice has cores, node n's ranks are pinned to the n-th slice, so that each simulated node
  shares the cores it really has;
* ``none``: no pinning; the ranks share every core;
* an explicit list, ``'0;1;1;0'`` (one ``,``-list of cores per rank, ``;``-separated, repeated
  if shorter than the ranks): pinned as given.

Pinned ranks on the same core set share it; the sets of different ranks must be equal or
disjoint. Where workers share cores, the pinning is described as the node's
``platform.node.core_sets``: the cores of each set shared from moment to moment by the ranks
on it (a server's update work competing with the worker beside it), so that a worker whose
core-mate waits has the core alone, as for real, instead of a fixed share. A worker whose
torch threads are fewer than its set's cores is capped at its threads (``cpus``).

A rank *spins* while it waits only when it has a core to itself (no other rank may use any of
its cores); otherwise it sleeps between tests so the computing ranks get the cores.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Sequence

from ..errors import InputError

__all__ = ["Placement", "available_cores", "parse_affinity", "plan", "rank_spins"]


def available_cores() -> list[int]:
    """The cores this process may run on."""
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return list(range(os.cpu_count() or 1))


def parse_affinity(spec: str, ranks: int) -> list[frozenset[int]]:
    """``'0;1;1'`` → one core set per rank (the list repeats when shorter than ``ranks``)."""
    try:
        sets = [frozenset(int(c) for c in part.split(",") if c.strip()) for part in spec.split(";")]
    except ValueError:
        raise InputError(f"affinity {spec!r}: expected core numbers, ',' within a rank and ';' between ranks",
                         source="--affinity") from None
    if not sets or any(not s for s in sets):
        raise InputError(f"affinity {spec!r}: every rank needs at least one core", source="--affinity")
    return [sets[r % len(sets)] for r in range(ranks)]


@dataclass(frozen=True)
class Placement:
    """Core sets per rank (None: not pinned) and the platform overrides that describe them."""

    affinity: str | None  # the spec handed to the ranks, '' when not pinned
    sets: tuple[frozenset[int], ...] | None
    cores_per_node: float
    cpus: dict[int, float]  # rank -> CPU share, where it differs from 1
    core_sets: tuple[tuple[int, tuple[int, ...]], ...] | None = None  # (cores, ranks) per set of one node

    def overrides(self) -> list[str]:
        """``--set`` items for the simulation: the node's cores or its core sets, the ranks' caps."""
        items = []
        if self.core_sets:
            listed = ", ".join(f"{{cores: {cores}, devices: {list(ranks)}}}" for cores, ranks in self.core_sets)
            items.append(f"platform.node.core_sets=[{listed}]")
        else:
            items.append(f"platform.node.cores={self.cores_per_node:g}")
        if self.cpus:
            groups: dict[float, list[int]] = {}
            for rank, share in sorted(self.cpus.items()):
                groups.setdefault(share, []).append(rank)
            listed = ", ".join(f"{{ranks: {ranks}, cpus: {share:g}}}" for share, ranks in groups.items())
            items.append(f"platform.device_overrides=[{listed}]")
        return items

    def spin(self, rank: int, ranks: int) -> bool:
        """Whether ``rank`` may spin while waiting (see the module doc)."""
        return _spins(rank, ranks, self.sets, len(available_cores()))


def _spins(rank: int, ranks: int, sets: Sequence[frozenset[int]] | None, cores: int) -> bool:
    if sets is None:
        return ranks <= cores
    mine = sets[rank]
    return sum(1 for s in sets if s & mine) <= len(mine)


def rank_spins(rank: int, ranks: int, spec: str | None) -> bool:
    """Whether ``rank`` of a run pinned by ``spec`` ('' or None: not pinned) may spin while waiting."""
    sets = parse_affinity(spec, ranks) if spec else None
    return _spins(rank, ranks, sets, len(available_cores()))


def _spec(sets: Sequence[frozenset[int]]) -> str:
    return ";".join(",".join(str(c) for c in sorted(s)) for s in sets)


def _auto(ranks: int, nodes: int, cores: list[int]) -> list[frozenset[int]] | None:
    per, per_node_ranks = len(cores) // nodes, ranks // nodes
    if nodes == 1:
        if ranks <= len(cores):
            return None
        if ranks % len(cores) == 0:  # equal blocks of consecutive ranks: one simulated node per core
            block = ranks // len(cores)
            return [frozenset([cores[r // block]]) for r in range(ranks)]
        return [frozenset([cores[r % len(cores)]]) for r in range(ranks)]
    if len(cores) % nodes or per_node_ranks <= per:
        return None
    return [frozenset(cores[(r // per_node_ranks) * per:(r // per_node_ranks + 1) * per]) for r in range(ranks)]


def _check_disjoint(sets: Sequence[frozenset[int]]) -> None:
    for a in sets:
        for b in sets:
            if a & b and a != b:
                raise InputError("affinity: the core sets of different ranks must be equal or disjoint to be "
                                 f"described to the simulator ({sorted(a)} and {sorted(b)} overlap)",
                                 source="--affinity")


def _workers_share(sets: Sequence[frozenset[int]], workers: Sequence[int], threads: int) -> bool:
    """Whether some worker's cores are not exactly one per torch thread of its own."""
    return any(min(float(threads), len(sets[rank]) / sum(1 for w in workers if sets[w] == sets[rank])) != 1.0
               for rank in workers)


def _core_sets(sets: Sequence[frozenset[int]]) -> tuple[tuple[int, tuple[int, ...]], ...]:
    """(cores, ranks) of every distinct core set, in the order of its first rank."""
    return tuple((len(s), tuple(r for r, mine in enumerate(sets) if mine == s)) for s in dict.fromkeys(sets))


def _thread_caps(sets: Sequence[frozenset[int]], workers: Sequence[int], threads: int) -> dict[int, float]:
    """``cpus`` of every worker whose set has more cores than its torch threads use."""
    return {rank: float(min(threads, len(sets[rank]))) for rank in workers if min(threads, len(sets[rank])) != 1}


def plan(request: str | None, ranks: int, *, nodes: int = 1, workers: Sequence[int] | None = None,
         threads: int = 1, cores: list[int] | None = None) -> Placement:
    """The placement for ``request`` (``auto``, ``none`` or a spec) of ``ranks`` ranks on ``nodes`` nodes."""
    cores = cores or available_cores()
    workers = list(range(ranks)) if workers is None else list(workers)
    request = request or "auto"
    if request == "none":
        sets = None
    elif request == "auto":
        sets = _auto(ranks, nodes, cores)
    else:
        sets = parse_affinity(request, ranks)
    if sets is None:
        return Placement("", None, len(cores) / nodes, {})
    used = sorted(set().union(*sets))
    if nodes > 1:
        node_size = ranks // nodes
        per_node = max(len(set().union(*sets[n * node_size:(n + 1) * node_size])) for n in range(nodes))
        return Placement(_spec(sets), tuple(sets), float(per_node), {})
    _check_disjoint(sets)
    if not _workers_share(sets, workers, threads):  # one pool of every used core
        return Placement(_spec(sets), tuple(sets), float(len(used)), {})
    return Placement(_spec(sets), tuple(sets), float(len(used)), _thread_caps(sets, workers, threads),
                     core_sets=_core_sets(sets))
