"""The vectorised max-min solver gives the plain progressive-filling allocation, and it is physical.

``_max_min_rates_numpy`` freezes every final link per round; ``_max_min_rates_python`` freezes
one fair-share level per round and defines the allocation. Properties (hypothesis):

* both give the same rates (within 1e-9 of the largest capacity) on random routes, including
  repeated links, empty routes, zero capacities and exact ties, small and large;
* on simple routes no link carries more than its capacity, and every routed flow has a
  bottleneck: a saturated link on which no flow is faster;
* the dispatcher :func:`max_min_rates` agrees with the plain solver on either side of its
  size threshold.

Exact cases pin the semantics of a link named twice (counted once in the share, its capacity
used per mention) and the number of rounds the vectorised solver takes on a dependency chain.
"""

from __future__ import annotations

import math
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from simdist.platform.maxmin import (_VECTOR_ABOVE, _max_min_rates_numpy, _max_min_rates_python, max_min_rates,
                                     max_min_rounds)
from helpers import link_load

REL = 1e-9
PROPERTY = settings(max_examples=100, deadline=None)
CAPACITIES = st.one_of(st.sampled_from([0.0, 1.0, 2.0, 3.0, 4.0]), st.floats(1e-3, 1e3))  # integers give ties


@st.composite
def routes_over(draw, n_links, repeats):
    """Distinct links in any order; with ``repeats``, sometimes one of them named up to five times."""
    route = draw(st.lists(st.integers(0, n_links - 1), max_size=n_links, unique=True))
    if repeats and route and draw(st.booleans()):
        route += [draw(st.sampled_from(route))] * draw(st.integers(1, 4))
        route = list(draw(st.permutations(route)))
    return route


@st.composite
def small_problems(draw, max_links=6, max_flows=12, repeats=True):
    """Capacities (some zero, many equal) and routes (some empty, some naming a link repeatedly)."""
    n_links = draw(st.integers(1, max_links))
    capacity = draw(st.lists(CAPACITIES, min_size=n_links, max_size=n_links))
    route = routes_over(n_links, repeats)
    pool = draw(st.lists(route, min_size=1, max_size=5))
    routes = draw(st.lists(st.one_of(route, st.sampled_from(pool)), max_size=max_flows))
    return routes, capacity


@st.composite
def repeater_problems(draw):
    """Simple routes plus flows naming one link several times, held low by a small private link.

    Freezing such a flow can push a shared link's share below a level already settled
    elsewhere, the case where freezing every locally final link at once would go wrong.
    """
    n_links = draw(st.integers(2, 5))
    capacity = draw(st.lists(st.sampled_from([1.0, 2.0, 3.0, 4.0]) | st.floats(0.5, 10.0),
                             min_size=n_links, max_size=n_links))
    routes = draw(st.lists(routes_over(n_links, repeats=False).filter(bool), min_size=1, max_size=6))
    for _ in range(draw(st.integers(1, 2))):
        routes.append([draw(st.integers(0, n_links - 1))] * draw(st.integers(2, 6)) + [len(capacity)])
        capacity.append(draw(st.floats(0.05, 1.0)))
    return list(draw(st.permutations(routes))), capacity


@st.composite
def large_problems(draw, repeats=True):
    """Hundreds of flows over tens of links, drawn from a seeded generator (fast to build, still shrinkable)."""
    rng = random.Random(draw(st.integers(0, 2**32 - 1)))
    n_links = draw(st.integers(2, 60))
    n_flows = draw(st.integers(_VECTOR_ABOVE // 4, 600))
    p_zero = draw(st.sampled_from([0.0, 0.0, 0.05]))
    p_empty = draw(st.sampled_from([0.0, 0.02]))
    p_repeat = draw(st.sampled_from([0.0, 0.0, 0.01])) if repeats else 0.0
    capacity = [0.0 if rng.random() < p_zero else rng.choice([1.0, 2.0, 5.0, rng.uniform(0.5, 50.0)])
                for _ in range(n_links)]
    routes = []
    for _ in range(n_flows):
        route = [] if rng.random() < p_empty else rng.sample(range(n_links), rng.randint(1, min(5, n_links)))
        if route and rng.random() < p_repeat:
            route.insert(rng.randrange(len(route) + 1), rng.choice(route))
        routes.append(route)
    return routes, capacity


def _assert_same_rates(got, want, capacity):
    assert len(got) == len(want)
    scale = max(capacity, default=1.0)
    for f, (a, b) in enumerate(zip(got, want)):
        assert a == b or math.isclose(a, b, rel_tol=REL, abs_tol=REL * scale), f"flow {f}: {a} != {b}"


def _assert_physical(routes, capacity, rates):
    tolerance = REL * max(capacity)
    load = link_load(routes, rates, len(capacity))
    for link, carried in enumerate(load):
        assert carried <= capacity[link] * (1 + REL) + tolerance, f"link {link} over capacity"
    for f, route in enumerate(routes):
        if not route:
            assert rates[f] == math.inf
            continue
        bottlenecks = [
            link for link in route
            if load[link] >= capacity[link] * (1 - REL) - tolerance
            and all(rates[f] >= rates[g] * (1 - REL) - tolerance for g, other in enumerate(routes) if link in other)
        ]
        assert bottlenecks, f"flow {f} (route {route}, rate {rates[f]}) has no bottleneck"


# -- the same allocation --------------------------------------------------------------------


@PROPERTY
@given(small_problems())
def test_vectorised_solver_matches_plain_filling_on_small_problems(problem):
    routes, capacity = problem
    _assert_same_rates(_max_min_rates_numpy(routes, capacity), _max_min_rates_python(routes, capacity), capacity)


@PROPERTY
@given(repeater_problems())
def test_vectorised_solver_matches_plain_filling_where_routes_repeat_links(problem):
    routes, capacity = problem
    _assert_same_rates(_max_min_rates_numpy(routes, capacity), _max_min_rates_python(routes, capacity), capacity)


@settings(max_examples=60, deadline=None)
@given(large_problems())
def test_vectorised_solver_matches_plain_filling_on_large_problems(problem):
    routes, capacity = problem
    _assert_same_rates(_max_min_rates_numpy(routes, capacity), _max_min_rates_python(routes, capacity), capacity)


@settings(max_examples=30, deadline=None)
@given(large_problems())
def test_dispatcher_matches_plain_filling_on_either_side_of_the_threshold(problem):
    routes, capacity = problem
    _assert_same_rates(max_min_rates(routes, capacity), _max_min_rates_python(routes, capacity), capacity)


def _fat_tree(n_flows, hosts=256, per_leaf=16, uplinks=4, seed=3):
    """Random host pairs on a two-level fat tree (as in benchmarks/flow_solver.py): NIC up, leaf
    up, spine down, NIC down between leaves; the two NIC links within one."""
    rng = random.Random(seed)
    leaf_up = 2 * hosts
    leaf_down = leaf_up + hosts // per_leaf * uplinks
    capacity = [25e9] * (2 * hosts) + [100e9] * (2 * hosts // per_leaf * uplinks)
    routes = []
    for _ in range(n_flows):
        src, dst = rng.sample(range(hosts), 2)
        port = rng.randrange(uplinks)
        spine = [leaf_up + src // per_leaf * uplinks + port, leaf_down + dst // per_leaf * uplinks + port]
        routes.append([src, *(spine if src // per_leaf != dst // per_leaf else []), hosts + dst])
    return routes, capacity


def test_vectorised_solver_matches_plain_filling_on_a_fat_tree():
    routes, capacity = _fat_tree(2_000)
    assert max_min_rounds(routes, capacity) > 1
    _assert_same_rates(max_min_rates(routes, capacity), _max_min_rates_python(routes, capacity), capacity)


# -- physical properties of the fast solver -------------------------------------------------


@PROPERTY
@given(small_problems(repeats=False))
def test_fast_solver_small_rates_are_feasible_and_bottlenecked(problem):
    routes, capacity = problem
    if sum(capacity) > 0:
        _assert_physical(routes, capacity, _max_min_rates_numpy(routes, capacity))


@settings(max_examples=40, deadline=None)
@given(large_problems(repeats=False))
def test_fast_solver_large_rates_are_feasible_and_bottlenecked(problem):
    routes, capacity = problem
    if sum(capacity) > 0:
        _assert_physical(routes, capacity, max_min_rates(routes, capacity))


# -- exact cases ----------------------------------------------------------------------------


def test_a_link_named_twice_counts_once_in_the_share_and_uses_capacity_per_mention():
    # link 1 (capacity 3) is shared by flows 0 and 2; flow 2 names it five times and is held
    # to 0.5 by link 2, using 2.5 of link 1 and leaving flow 0 only 0.5, so flow 1 gets 1.5 of link 0
    routes, capacity = [[0, 1], [0], [1, 1, 1, 1, 1, 2]], [2.0, 3.0, 0.5]
    assert _max_min_rates_python(routes, capacity) == [0.5, 1.5, 0.5]
    assert _max_min_rates_numpy(routes, capacity) == [0.5, 1.5, 0.5]


def test_a_link_over_used_by_repeated_mentions_leaves_its_other_flows_at_zero():
    routes, capacity = [[0, 0, 0, 1], [0]], [1.0, 0.45]  # flow 0 uses 1.35 of link 0's 1.0
    assert _max_min_rates_python(routes, capacity) == [0.45, 0.0]
    assert _max_min_rates_numpy(routes, capacity) == [0.45, 0.0]


def test_vectorised_edge_cases():
    inf = math.inf
    assert _max_min_rates_numpy([], [1.0]) == []
    assert _max_min_rates_numpy([[], []], [1.0]) == [inf, inf]
    assert _max_min_rates_numpy([[0], [0, 1], [1]], [0.0, 2.0]) == [0.0, 0.0, 2.0]
    assert _max_min_rates_numpy([[0], [0, 1], [1]], [inf, 2.0]) == [inf, 1.0, 1.0]
    assert _max_min_rates_numpy([[0], [0, 1], [1]], [inf, inf]) == [inf, inf, inf]
    assert _max_min_rates_numpy([[1, 0]], [5.0, 3.0]) == [3.0]


def _chain(depth, padding):
    """Flow i crosses links i and i+1, capacities doubling: link i settles only after link i-1."""
    routes = [[0]] + [[i, i + 1] for i in range(depth - 1)] + [[depth - 1]]
    capacity = [2.0 ** i for i in range(depth)]
    routes += [[depth + i] for i in range(padding)]  # independent flows, final in the first round
    capacity += [10.0] * padding
    return routes, capacity


def test_rounds_follow_the_longest_bottleneck_chain_not_the_number_of_flows():
    routes, capacity = _chain(depth=6, padding=2 * _VECTOR_ABOVE)
    assert max_min_rounds(routes, capacity) == 6
    _assert_same_rates(max_min_rates(routes, capacity), _max_min_rates_python(routes, capacity), capacity)


def test_rounds_of_the_plain_solver_count_its_levels():
    assert max_min_rounds([[0], [0, 1], [1]], [1.0, 2.0]) == 2
    assert max_min_rounds([], [1.0]) == 0


def test_flows_on_disjoint_links_get_their_narrowest_link_like_progressive_filling():
    routes = [[0, 3], [1], [], [2, 4, 5]]
    capacity = [5.0, 2.0, 7.0, 4.0, 1.5, 9.0]
    assert max_min_rates(routes, capacity) == [4.0, 2.0, float("inf"), 1.5]
    assert max_min_rates(routes, capacity) == _max_min_rates_python(routes, capacity)
    shared = [[0, 1], [1]]  # one shared link: the shortcut does not apply
    assert max_min_rates(shared, [5.0, 2.0]) == _max_min_rates_python(shared, [5.0, 2.0]) == [1.0, 1.0]
