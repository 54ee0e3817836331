"""Published behaviours that no other test checks (docs/reported_behaviour.md lists every claim).

* n-softsync (docs/algorithms.md §3): heterogeneous workers widen the staleness distribution;
* NNT (§7): the per-epoch time scales well with the node count (16 CPU nodes in the paper),
  and against sync the paper's ordering per epoch (level at batch 32, sync faster at 128),
  timing-only on the paper's cluster stand-in (scenarios/nnt_paper_cpu_cluster.yaml).
"""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from simdist.scenario import load_scenario
from simdist.simulate import simulate

from test_async_algorithms import scenario

NNT_CLUSTER = Path(__file__).resolve().parents[1] / "scenarios" / "nnt_paper_cpu_cluster.yaml"


def staleness_spread(result) -> tuple[float, int]:
    """(standard deviation, range) of the applied gradients' staleness."""
    values = [row["staleness"] for row in result.recorder.updates]
    return statistics.pstdev(values), max(values) - min(values)


def test_heterogeneous_workers_widen_n_softsync_s_staleness_distribution():
    common = dict(workers=8, batch=8, samples=1000, n=2)
    homogeneous = simulate(scenario("nsoftsync", **common))
    mixed = simulate(scenario("nsoftsync", overrides=[{"ranks": [0, 1, 2, 3], "cpus": 0.5}], **common))
    (std_even, range_even), (std_mixed, range_mixed) = staleness_spread(homogeneous), staleness_spread(mixed)
    assert std_mixed > 1.5 * std_even and range_mixed > range_even


@pytest.fixture(scope="module")
def nnt_epoch_s() -> dict[int, float]:
    times = {}
    for nodes in (4, 8, 16):
        result = simulate(load_scenario(NNT_CLUSTER, overrides=[f"platform.nodes={nodes}", f"workers={nodes}"]))
        assert result.epochs == pytest.approx(1.0)
        times[nodes] = result.virtual_time_s
    return times


def test_nnt_s_epoch_time_falls_with_the_node_count(nnt_epoch_s):
    """Strong scaling of one CIFAR-10 epoch (batch 128 per node): at least 70 % efficiency from 4 to
    16 nodes (measured 2.87x for 4x the nodes), where sync on the same network pays a growing
    allreduce (reports/nnt_vs_sync.md)."""
    assert nnt_epoch_s[4] > nnt_epoch_s[8] > nnt_epoch_s[16]
    assert nnt_epoch_s[4] / nnt_epoch_s[16] >= 0.7 * 4


def _epoch_s(algorithm: str, batch: int, *extra: str) -> float:
    result = simulate(load_scenario(NNT_CLUSTER, overrides=[f"algorithm={algorithm}",
                                                            f"workload.batch_size={batch}", *extra]))
    assert result.epochs == pytest.approx(1.0)
    return result.virtual_time_s


def test_nnt_and_sync_come_out_in_the_paper_s_order_because_tcp_copies_take_nnt_s_cpu():
    """Level at per-node batch 32 (within 10 %), sync faster at 128 (reports/nnt_vs_sync.md). At 32
    it is the per-byte copies of MPI over TCP that bring NNT level: without them (the overlap of
    its exchange with compute free) NNT is the faster by more than 10 %."""
    level = {algorithm: _epoch_s(algorithm, 32) for algorithm in ("nnt", "sync")}
    assert abs(level["nnt"] - level["sync"]) <= 0.1 * max(level.values())
    assert _epoch_s("sync", 128) < _epoch_s("nnt", 128)
    free = [f"platform.messages.{side}_overhead_per_byte=0" for side in ("send", "recv")]
    assert _epoch_s("nnt", 32, *free) < 0.9 * level["sync"]
