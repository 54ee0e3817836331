"""Flow solver: one max-min re-solve with 10,000 active flows (target <= 10 ms).

The flows cross a two-level fat tree of 1,024 hosts (32 leaves x 32 hosts, each leaf 8
uplinks to a spine layer): every flow uses its source's NIC up-link, a leaf up-link, a spine
down-link and its destination's NIC down-link (inter-leaf) or just the two NIC links
(intra-leaf). This is what ``FlowNetwork`` solves whenever a flow starts or ends. Routes are
passed as Python lists, as ``FlowNetwork`` passes them, so the figures include the conversion.

``--crossover`` also times the plain and the vectorised solver on small problems, to check
that ``max_min_rates`` switches between them (at ``_VECTOR_ABOVE`` route entries) where the
vectorised one becomes faster.

    python benchmarks/flow_solver.py [--flows 10000] [--repeats 9] [--crossover]
"""

from __future__ import annotations

import argparse
import random
import time

from simdist.platform.maxmin import (_VECTOR_ABOVE, _max_min_rates_numpy, _max_min_rates_python, max_min_rates,
                                     max_min_rounds)

TARGET_MS = 10.0
CROSSOVER_FLOWS = (2, 8, 32, 64, 128, 512)


def fat_tree_flows(n_flows: int, hosts: int = 1024, per_leaf: int = 32, uplinks: int = 8, seed: int = 0):
    """Routes (link indices) of ``n_flows`` random host pairs and the links' capacities (bytes/s)."""
    rng = random.Random(seed)
    leaves = hosts // per_leaf
    nic_up, nic_down = 0, hosts  # links 0..H-1 up, H..2H-1 down
    leaf_up = 2 * hosts  # leaves*uplinks up-links, then as many down-links
    leaf_down = leaf_up + leaves * uplinks
    capacity = [25e9] * (2 * hosts) + [100e9] * (2 * leaves * uplinks)
    routes = []
    for _ in range(n_flows):
        src, dst = rng.sample(range(hosts), 2)
        route = [nic_up + src]
        if src // per_leaf != dst // per_leaf:
            port = rng.randrange(uplinks)
            route += [leaf_up + (src // per_leaf) * uplinks + port, leaf_down + (dst // per_leaf) * uplinks + port]
        route.append(nic_down + dst)
        routes.append(route)
    return routes, capacity


def best_ms(solve, problems: dict[int, tuple], repeats: int) -> dict[int, float]:
    """The fastest of ``repeats`` timed solves of each problem, in milliseconds.

    Other load on the machine only adds time, so the minimum is the figure; the problems take
    turns, which spreads each one's samples over the whole run.
    """
    best = dict.fromkeys(problems, float("inf"))
    for _ in range(repeats):
        for n, (routes, capacity) in problems.items():
            start = time.perf_counter()
            solve(routes, capacity)
            best[n] = min(best[n], (time.perf_counter() - start) * 1e3)
    return best


def crossover(repeats: int) -> None:
    """Plain versus vectorised solver on small fat-tree problems, and which one the dispatcher picks."""
    print(f"plain vs vectorised solver on small problems (best of {repeats}; vectorised above "
          f"{_VECTOR_ABOVE} route entries)")
    problems = {n: fat_tree_flows(n) for n in CROSSOVER_FLOWS}
    plain = best_ms(_max_min_rates_python, problems, repeats)
    vectorised = best_ms(_max_min_rates_numpy, problems, repeats)
    for n, (routes, _capacity) in problems.items():
        entries = sum(map(len, routes))
        picked = "vectorised" if n > _VECTOR_ABOVE or entries > _VECTOR_ABOVE else "plain"
        print(f"  {n:6d} flows {entries:6d} entries: plain {plain[n] * 1e3:8.1f} us  vectorised "
              f"{vectorised[n] * 1e3:8.1f} us  picks {picked}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--flows", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--crossover", action="store_true", help="also time both solvers on small problems")
    args = parser.parse_args()
    if args.crossover:
        crossover(max(args.repeats, 50))
    print(f"max-min re-solve on a 1,024-host fat tree (best of {args.repeats})")
    problems = {n: fat_tree_flows(n) for n in sorted({1_000, 3_000, args.flows})}
    results = best_ms(max_min_rates, problems, args.repeats)
    for n, (routes, capacity) in problems.items():
        print(f"  {n:6d} flows: {results[n]:8.2f} ms  ({max_min_rounds(routes, capacity)} rounds)")
    ms = results[args.flows]
    print(f"  re-solve with {args.flows} flows: {ms:.2f} ms  (target <= {TARGET_MS:g} ms)  "
          f"{'MET' if ms <= TARGET_MS else 'NOT MET'}")


if __name__ == "__main__":
    main()
