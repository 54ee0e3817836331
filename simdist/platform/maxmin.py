"""Max-min fair rates of flows over shared links (progressive filling), plain and vectorised.

Every flow ends with a bottleneck link that is saturated and on which it has the largest
rate. :func:`max_min_rates` picks the solver that is faster at the problem's size; both give
the same allocation (``tests/test_flow_solver_fast.py``).

:func:`weighted_max_min_rates` is the weighted form: flow ``f`` has weight ``w_f``, filling
raises every unfrozen flow's rate as ``w_f · t`` for one common level ``t``, and on each
bottleneck the flows' rates are proportional to their weights (unit weights give
:func:`max_min_rates`). It is a separate function so that the unweighted solver, the one
every default platform uses, does not pay for weights.

References: D. Bertsekas and R. Gallager, *Data Networks*, §6.5.2 (max-min fairness and
progressive filling); SimGrid's LMM solver, which solves the same weighted problem with a
"sharing penalty" per flow (rate proportional to 1 / penalty; SimGrid documentation,
"Models", https://simgrid.org/doc/latest/Models.html, and
``src/kernel/lmm/maxmin.cpp``).
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from typing import Sequence

import numpy as np

__all__ = ["max_min_rates", "max_min_rounds", "weighted_max_min_rates"]


def max_min_rates(routes: Sequence[Sequence[int]], capacity: Sequence[float]) -> list[float]:
    """Max-min fair rates of flows with the given routes (link indices) and link capacities.

    Progressive filling: find the smallest fair share (remaining capacity split evenly over
    a link's unfrozen flows); freeze every flow crossing a link with that share (those links
    saturate together) and subtract; repeat. Every flow ends with a bottleneck link that is
    saturated and on which it has the largest rate. A flow with an empty route gets ``inf``.
    A route that names a link twice counts once in that link's share and uses its capacity
    once per mention.

    Small problems (the common case inside a simulation) run in plain Python; above
    :data:`_VECTOR_ABOVE` route entries the same allocation is computed on NumPy arrays,
    freezing every link that is already final in one round (see :func:`_max_min_rates_numpy`).
    """
    return _solve(routes, capacity)[0]


def max_min_rounds(routes: Sequence[Sequence[int]], capacity: Sequence[float]) -> int:
    """How many filling rounds :func:`max_min_rates` takes on this problem (for benchmarks).

    The plain solver takes one round per distinct fair-share level; the vectorised one, the
    length of the longest chain of bottleneck dependencies (routes that name a link twice
    always go to the plain solver).
    """
    return _solve(routes, capacity)[1]


_VECTOR_ABOVE = 256  # route entries (flow-link incidences) above which the NumPy solver is faster
_TIE = 1e-12  # relative: fair shares this close count as equal


def _solve(routes: Sequence[Sequence[int]], capacity: Sequence[float]) -> tuple[list[float], int]:
    """Rates and rounds from the solver that is faster at this size.

    Routes are seldom empty, so more flows than the bound go to NumPy without summing lengths.
    """
    if len(routes) > _VECTOR_ABOVE or sum(map(len, routes)) > _VECTOR_ABOVE:
        return _fill_numpy(routes, capacity)
    users = _users(routes)
    if len(users) == sum(map(len, routes)):  # no link named twice (see _disjoint_rates)
        disjoint = [min(capacity[link] for link in route) if route else float("inf") for route in routes]
        return disjoint, len({rate for rate in disjoint if rate != float("inf")})  # one round per distinct level
    return _fill_python(routes, capacity, users)


def _disjoint_rates(routes: Sequence[Sequence[int]], capacity: Sequence[float]) -> list[float] | None:
    """Rates when no link is named twice (by two flows or by one): each flow alone on its
    links gets its narrowest link's capacity, as progressive filling would give it. None
    otherwise. A lone message between two ranks, the common case, needs nothing more."""
    seen: set[int] = set()
    entries = 0
    for route in routes:
        seen.update(route)
        entries += len(route)
    if len(seen) != entries:
        return None
    return [min(capacity[link] for link in route) if route else float("inf") for route in routes]


def _max_min_rates_python(routes: Sequence[Sequence[int]], capacity: Sequence[float]) -> list[float]:
    """Plain progressive filling, one fair-share level per round: the reference allocation."""
    return _fill_python(routes, capacity)[0]


def _fill_python(routes: Sequence[Sequence[int]], capacity: Sequence[float],
                 users: dict[int, set[int]] | None = None) -> tuple[list[float], int]:
    """Rates by progressive filling on dicts and sets, and the number of rounds (levels) taken.

    A link a route names twice can be left with negative capacity; its share is then
    negative, the flows on it freeze at rate 0, and the tie margin is taken on the absolute
    value so that the smallest share always freezes its own link. The round that freezes
    every flow left ends there: the capacity it would take is read by no later round.
    ``users`` is :func:`_users` of ``routes`` where the caller has it already.
    """
    rates = [float("inf")] * len(routes)
    users = _users(routes) if users is None else users
    remaining = {link: capacity[link] for link in users}
    unfrozen = sum(1 for route in routes if route)
    rounds = 0
    while users:
        rounds += 1
        shares = {link: remaining[link] / len(fs) for link, fs in users.items()}
        share = min(shares.values())
        tie = share + abs(share) * _TIE
        frozen = {f for link, s in shares.items() if s <= tie for f in users[link]}
        share = max(share, 0.0)
        for f in frozen:
            rates[f] = share
        unfrozen -= len(frozen)
        if not unfrozen:
            break
        for f in frozen:
            for link in routes[f]:
                remaining[link] -= share
                flows_here = users.get(link)
                if flows_here is not None:
                    flows_here.discard(f)
                    if not flows_here:
                        del users[link]
    return rates, rounds


def _users(routes: Sequence[Sequence[int]]) -> dict[int, set[int]]:
    """Each link named by a route -> the flows naming it, links in order of first mention."""
    users: dict[int, set[int]] = {}
    for f, route in enumerate(routes):
        for link in route:
            flows_here = users.get(link)
            if flows_here is None:
                users[link] = {f}
            else:
                flows_here.add(f)
    return users


def _max_min_rates_numpy(routes: Sequence[Sequence[int]], capacity: Sequence[float]) -> list[float]:
    """The same allocation as :func:`_max_min_rates_python`, many filling levels per round.

    Fair shares only grow as filling proceeds (freezing flows at a level no higher than a
    link's share leaves that link's share no lower). So a link whose share is no larger than
    the share of every other link its unfrozen flows cross is already final: progressive
    filling would freeze its flows at exactly that share. Each round freezes all such links at
    once, so the rounds number the longest chain of bottleneck dependencies, not the levels.

    That argument needs every flow to use a link's capacity once: where a route names a link
    twice, freezing it can lower a share, the allocation depends on the order of the levels,
    and the plain solver (which defines it) runs instead.
    """
    return _fill_numpy(routes, capacity)[0]


def _fill_numpy(routes: Sequence[Sequence[int]], capacity: Sequence[float]) -> tuple[list[float], int]:
    """Rates by rounds of freezing every final link at once, and the number of rounds taken."""
    flows, hops, used = _hop_columns(routes, len(capacity))
    if _repeats_a_link(hops):
        return _fill_python(routes, capacity)
    rates = np.full(len(routes), np.inf)
    remaining = _capacities(capacity, used)
    count = np.zeros(used.size)
    for hop in hops:
        count += np.bincount(hop, minlength=used.size)
    rounds = 0
    while flows.size:
        rounds += 1
        with np.errstate(divide="ignore", invalid="ignore"):  # links no unfrozen flow crosses
            share = np.maximum(remaining / count, 0.0)
        level, frozen = _final_flows(share, hops)
        if not frozen.any():
            break  # the flows left cross only links of unbounded capacity: they keep rate inf
        level = level.compress(frozen)
        rates[flows.compress(frozen)] = level
        _take_capacity(remaining, count, hops, frozen, level)
        flows, hops = _drop(flows, hops, ~frozen)
    return rates.tolist(), rounds


def _hop_columns(routes: Sequence[Sequence[int]], n_links: int) -> tuple[np.ndarray, list[np.ndarray], np.ndarray]:
    """The routed flows, longest route first; their links hop by hop; the links used.

    ``hops[j][i]`` is the ``j``-th link of flow ``flows[i]``, numbered by position in ``used``
    (so per-link arrays are only as long as the links in play, which on a large platform with
    few flows is a small fraction). Column ``j`` holds only the flows with more than ``j``
    hops, which (longest first) are a prefix of ``flows``: per-flow reductions are a few
    whole-column operations instead of a segmented reduction, and no padding is needed.
    """
    lengths = np.fromiter(map(len, routes), dtype=np.intp, count=len(routes))
    flat = np.fromiter(itertools.chain.from_iterable(routes), dtype=np.intp, count=int(lengths.sum()))
    in_use = np.zeros(n_links, dtype=bool)
    in_use[flat] = True
    flat = (np.cumsum(in_use) - 1).take(flat)
    starts = np.cumsum(lengths) - lengths
    order = np.argsort(-lengths, kind="stable")
    flows = order[:np.count_nonzero(lengths)]
    longer_than = flows.size - np.cumsum(np.bincount(lengths[flows]))  # flows with more than j hops
    first_link = starts[flows]
    hops = [flat.take(first_link[:n] + j) for j, n in enumerate(longer_than.tolist()) if n]
    return flows, hops, np.flatnonzero(in_use)


def _capacities(capacity: Sequence[float], used: np.ndarray) -> np.ndarray:
    """The capacities of the used links, as floats: item by item when few are used, else all at once
    (reading a list item by item costs about three times as much per item as converting it whole)."""
    if 3 * used.size < len(capacity):
        return np.fromiter(map(capacity.__getitem__, used.tolist()), dtype=float, count=used.size)
    return np.fromiter(capacity, dtype=float, count=len(capacity)).take(used)


def _repeats_a_link(hops: list[np.ndarray]) -> bool:
    """Whether some route names a link twice (hop columns compared pairwise)."""
    return any(np.any(later == hops[i][:later.size]) for j, later in enumerate(hops) for i in range(j))


def _final_flows(share: np.ndarray, hops: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Each unfrozen flow's smallest share, and whether it crosses a link that is final now.

    A link is final when no flow on it has a smaller share elsewhere (within the tie margin);
    a link of unbounded capacity waits until nothing else is left.
    """
    flow_min = share.take(hops[0])
    for hop in hops[1:]:
        head = flow_min[:hop.size]
        np.minimum(head, share.take(hop), out=head)
    link_min = np.full(share.size, np.inf)
    for hop in hops:
        np.minimum.at(link_min, hop, flow_min[:hop.size])
    final = (link_min >= share * (1 - _TIE)) & (share < np.inf)
    frozen = final.take(hops[0])
    for hop in hops[1:]:
        head = frozen[:hop.size]
        np.logical_or(head, final.take(hop), out=head)
    return flow_min, frozen


def _take_capacity(remaining: np.ndarray, count: np.ndarray, hops: list[np.ndarray], frozen: np.ndarray,
                   level: np.ndarray) -> None:
    """Subtract the frozen flows (rates ``level``, in order) from their links' capacity and count."""
    gone = [hop.compress(frozen[:hop.size]) for hop in hops]  # frozen flows with > j hops lead ``level``
    links = np.concatenate(gone)
    weights = np.concatenate([level[:g.size] for g in gone])
    remaining -= np.bincount(links, weights=weights, minlength=remaining.size)
    count -= np.bincount(links, minlength=count.size)


def _drop(flows: np.ndarray, hops: list[np.ndarray], keep: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    """The flows and hop columns without the frozen flows (order, hence prefixes, preserved)."""
    kept = (hop.compress(keep[:hop.size]) for hop in hops)
    return flows.compress(keep), [hop for hop in kept if hop.size]


# -- weighted max-min ---------------------------------------------------------------------


def weighted_max_min_rates(routes: Sequence[Sequence[int]], capacity: Sequence[float],
                           weights: Sequence[float]) -> list[float]:
    """Weighted max-min fair rates: on each bottleneck, rates proportional to the flows' weights.

    Progressive filling with weights: every unfrozen flow ``f`` moves at ``weights[f] · t``;
    a link's level is its remaining capacity over the summed weights of its unfrozen flows;
    the links with the smallest level saturate together and freeze their flows at
    ``weights[f] · level``; repeat. Weights must be positive and finite. A flow with an empty
    route gets ``inf``; a route that names a link twice counts once in that link's summed
    weight and uses its capacity once per mention, as in :func:`max_min_rates`, which this
    equals when every weight is the same.

    This is the allocation of SimGrid's LMM solver with each flow's sharing penalty
    ``1 / weights[f]`` (``src/kernel/lmm/maxmin.cpp``: a constraint's usage is the sum of
    ``1 / penalty`` of its variables, a saturated variable gets ``min_usage / penalty``).
    """
    if len(routes) > _VECTOR_ABOVE or sum(map(len, routes)) > _VECTOR_ABOVE:
        return _fill_numpy_weighted(routes, capacity, weights)
    disjoint = _disjoint_rates(routes, capacity)  # no link shared: weights do not matter
    if disjoint is not None:
        return disjoint
    return _fill_python_weighted(routes, capacity, weights)


def _fill_python_weighted(routes: Sequence[Sequence[int]], capacity: Sequence[float],
                          weights: Sequence[float]) -> list[float]:
    """Weighted progressive filling on dicts and sets, one level per round: the reference."""
    rates = [float("inf")] * len(routes)
    remaining: dict[int, float] = {}
    users: dict[int, set[int]] = defaultdict(set)
    weight_on: dict[int, float] = defaultdict(float)  # link -> summed weight of its unfrozen flows
    for f, route in enumerate(routes):
        for link in route:
            if f not in users[link]:
                users[link].add(f)
                weight_on[link] += weights[f]
            remaining[link] = capacity[link]
    while users:
        levels = {link: remaining[link] / weight_on[link] for link in users}
        level = min(levels.values())
        tie = level + abs(level) * _TIE
        frozen = {f for link, s in levels.items() if s <= tie for f in users[link]}
        level = max(level, 0.0)
        for f in frozen:
            rate = rates[f] = weights[f] * level
            for link in routes[f]:
                remaining[link] -= rate
                flows_here = users.get(link)
                if flows_here is not None and f in flows_here:
                    flows_here.discard(f)
                    if flows_here:
                        weight_on[link] -= weights[f]
                    else:
                        del users[link], weight_on[link]
    return rates


def _fill_numpy_weighted(routes: Sequence[Sequence[int]], capacity: Sequence[float],
                         weights: Sequence[float]) -> list[float]:
    """The weighted allocation by rounds of freezing every final link at once.

    The argument of :func:`_max_min_rates_numpy` holds with weights: freezing flows at a level
    no higher than a link's level leaves that link's level no lower, so a link whose level is
    no larger than that of every other link its unfrozen flows cross is final. Routes that
    name a link twice go to the plain solver, as there.
    """
    flows, hops, used = _hop_columns(routes, len(capacity))
    if _repeats_a_link(hops):
        return _fill_python_weighted(routes, capacity, weights)
    rates = np.full(len(routes), np.inf)
    weight = np.asarray(weights, dtype=float).take(flows)  # in the order of ``flows``
    remaining = _capacities(capacity, used)
    weight_on = np.zeros(used.size)
    for hop in hops:
        weight_on += np.bincount(hop, weights=weight[:hop.size], minlength=used.size)
    while flows.size:
        with np.errstate(divide="ignore", invalid="ignore"):  # links no unfrozen flow crosses
            level = np.maximum(remaining / weight_on, 0.0)
        flow_level, frozen = _final_flows(level, hops)
        if not frozen.any():
            break  # the flows left cross only links of unbounded capacity: they keep rate inf
        frozen_weight = weight.compress(frozen)
        rate = frozen_weight * flow_level.compress(frozen)
        rates[flows.compress(frozen)] = rate
        gone = [hop.compress(frozen[:hop.size]) for hop in hops]  # frozen flows with > j hops lead ``rate``
        links = np.concatenate(gone)
        remaining -= np.bincount(links, weights=np.concatenate([rate[:g.size] for g in gone]), minlength=used.size)
        weight_on -= np.bincount(links, weights=np.concatenate([frozen_weight[:g.size] for g in gone]),
                                 minlength=used.size)
        weight = weight.compress(~frozen)
        flows, hops = _drop(flows, hops, ~frozen)
    return rates.tolist()
