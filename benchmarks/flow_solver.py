"""Flow solver: one max-min re-solve with 10,000 active flows (target <= 10 ms).

The flows cross a two-level fat tree of 1,024 hosts (32 leaves x 32 hosts, each leaf 8
uplinks to a spine layer): every flow uses its source's NIC up-link, a leaf up-link, a spine
down-link and its destination's NIC down-link (inter-leaf) or just the two NIC links
(intra-leaf). This is what ``FlowNetwork`` solves whenever a flow starts or ends.

    python benchmarks/flow_solver.py [--flows 10000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import random
import time

from simdist.platform.network import max_min_rates

TARGET_MS = 10.0


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--flows", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print(f"max-min re-solve on a 1,024-host fat tree (best of {args.repeats})")
    results = {}
    for n in sorted({1_000, 3_000, args.flows}):
        routes, capacity = fat_tree_flows(n)
        times = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            max_min_rates(routes, capacity)
            times.append(time.perf_counter() - start)
        results[n] = min(times) * 1e3
        print(f"  {n:6d} flows: {results[n]:8.2f} ms")
    ms = results[args.flows]
    print(f"  re-solve with {args.flows} flows: {ms:.2f} ms  (target <= {TARGET_MS:g} ms)  "
          f"{'MET' if ms <= TARGET_MS else 'NOT MET'}")


if __name__ == "__main__":
    main()
