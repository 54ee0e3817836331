"""The plain max-min solver gives the reference progressive filling's rates bit for bit.

The reference below is progressive filling as first written (every round re-reads every link,
the last round takes its capacity too): the faster solver must not change a single bit, since
simulated times follow from these rates.
"""

from __future__ import annotations

import random
from collections import defaultdict

from simdist.platform.maxmin import _TIE, max_min_rates, max_min_rounds


def reference(routes, capacity):
    rates = [float("inf")] * len(routes)
    remaining, users = {}, defaultdict(set)
    for f, route in enumerate(routes):
        for link in route:
            users[link].add(f)
            remaining[link] = capacity[link]
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
            for link in routes[f]:
                remaining[link] -= share
                if link in users:
                    users[link].discard(f)
                    if not users[link]:
                        del users[link]
    return rates, rounds


def random_problem(rng: random.Random):
    links = rng.randint(1, 12)
    capacity = [rng.choice([1e9, 2e9, 12.5e9, rng.uniform(1e8, 1e10)]) for _ in range(links)]
    routes = [tuple(rng.choice(range(links)) for _ in range(rng.randint(0, 4))) for _ in range(rng.randint(1, 20))]
    return routes, capacity


def test_plain_solver_matches_the_reference_bit_for_bit():
    rng = random.Random(7)
    for _ in range(3000):
        routes, capacity = random_problem(rng)
        expected, rounds = reference(routes, capacity)
        if len(set(link for route in routes for link in route)) == sum(map(len, routes)):
            continue  # disjoint routes take the narrowest-link shortcut, as before
        assert max_min_rates(routes, capacity) == expected
        assert max_min_rounds(routes, capacity) == rounds


def test_disjoint_routes_get_their_narrowest_link():
    capacity = [5.0, 3.0, 7.0, 1.0]
    assert max_min_rates([(0, 1), (2,), ()], capacity) == [3.0, 7.0, float("inf")]
    assert max_min_rates([(3, 3)], capacity) == reference([(3, 3)], capacity)[0]
