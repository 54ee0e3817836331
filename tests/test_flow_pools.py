"""Pooled flows (simdist.platform.flow_pools): many flows behind one bottleneck in virtual time.

A pool must give what the max-min solver gives — the same finish times (to rounding), byte
counters, busy times and link usage — and hand its flows back whenever its condition stops
holding: a flow that shares one of its links without crossing its bottleneck, a narrower link
once the pool has shrunk, a capacity window, weighted sharing.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simdist.platform import flow_pools
from simdist.platform.link_usage import LinkUsage, UsageLog
from test_flow_components import reference_finish_times, traffic
from test_network import _run

REL = 1e-9


def incast(n, *, seed=0, cross=(), rounds=3, server_capacity=1e3, worker_capacity=None):
    """``n`` workers each pushing ``rounds`` messages of random size to one server link (link 0);
    worker i's own link is i + 1. ``cross``: extra (route, bytes, start) flows."""
    rnd = random.Random(seed)
    capacity = [server_capacity] + [worker_capacity or 10 * server_capacity] * n + [server_capacity] * 2
    flows = []
    for i in range(n):
        start = 0.0
        for _ in range(rounds):
            start += rnd.uniform(0.0, 1.0)
            flows.append(([i + 1, 0], rnd.uniform(10.0, 500.0), start))
    flows += list(cross)
    return capacity, [0.0] * len(capacity), flows


def both(capacity, latency, flows, *, usage=LinkUsage, degrade=None, **options):
    """(solver network, its finish times), (pooled network, its finish times)."""
    plain = _run(capacity, latency, [(*f, 0, 1) for f in flows], usage=usage, degrade=degrade, pools=False)
    pooled = _run(capacity, latency, [(*f, 0, 1) for f in flows], usage=usage, degrade=degrade, pool_min=8,
                  **options)
    return plain[:2], pooled[:2]


def assert_same(plain, pooled, end_s):
    (net_a, finish_a), (net_b, finish_b) = plain, pooled
    assert finish_b == [pytest.approx(t, rel=REL) for t in finish_a]
    assert net_b.link_bytes == net_a.link_bytes
    assert net_b.link_busy_s == [pytest.approx(t, rel=REL, abs=1e-12) for t in net_a.link_busy_s]
    assert dict(net_b.received_bytes) == dict(net_a.received_bytes)
    if isinstance(net_a.usage, LinkUsage):
        a, b = net_a.usage.series(end_s), net_b.usage.series(end_s)
        assert np.array_equal(a["link"], b["link"]) and np.allclose(a["start_s"], b["start_s"])
        assert np.allclose(b["bytes"], a["bytes"], rtol=1e-9, atol=1e-6)
        assert np.allclose(b["flow_s"], a["flow_s"], rtol=1e-9, atol=1e-12)
    assert net_b.idle and not net_b._pools and not net_b._pool_of_link


def test_an_incast_moves_as_a_pool_and_ends_as_the_solver_has_it():
    plain, pooled = both(*incast(60))
    assert_same(plain, pooled, max(plain[1]))
    assert pooled[0].solves < plain[0].solves / 10  # the pool, not the solver, carried the incast


def test_without_usage_kept_and_with_totals_only():
    for usage in (None, UsageLog):
        plain, pooled = both(*incast(40, seed=3), usage=usage)
        assert_same(plain, pooled, max(plain[1]))


def test_a_flow_on_a_workers_link_that_skips_the_bottleneck_dissolves_the_pool():
    n = 40
    cross = [([1, n + 1], 300.0, 0.9), ([n + 1, 2], 200.0, 1.4)]  # worker 0's and worker 1's links, not link 0
    plain, pooled = both(*incast(n, seed=1, cross=cross))
    assert_same(plain, pooled, max(plain[1]))


def test_a_link_narrower_than_the_share_once_the_pool_shrinks_ends_the_pool():
    # worker links of 40 B/s: below the server's share while fewer than 25 push at once
    plain, pooled = both(*incast(60, seed=2, rounds=1, worker_capacity=40.0))
    assert_same(plain, pooled, max(plain[1]))


def test_a_capacity_window_on_the_bottleneck_dissolves_the_pool():
    plain, pooled = both(*incast(50, seed=4), degrade=(0, 0.25, 0.6, 1.5))
    assert_same(plain, pooled, max(plain[1]))


def test_weighted_sharing_never_pools():
    capacity, latency, flows = incast(40)
    net, _, _ = _run(capacity, [1e-3 * (i % 3) for i in range(len(capacity))], [(*f, 0, 1) for f in flows],
                     pool_min=8, sharing="rtt-weighted")
    assert net.solves > 100 and not net._pools


@settings(max_examples=120, deadline=None)
@given(traffic(max_flows=14), st.one_of(st.none(), st.tuples(st.integers(0, 6), st.sampled_from([0.25, 0.5]),
                                                             st.floats(0.01, 0.3), st.floats(0.31, 1.0))))
def test_pools_of_any_two_flows_finish_every_transfer_as_a_whole_network_solve(case, window):
    """Pools from two flows up, on random sparse traffic: they form, take flows in, dissolve."""
    capacity, latency, flows = case
    if window is not None and window[0] >= len(capacity):
        window = None
    net, finish, _ = _run(capacity, latency, [(*f, 0, 1) for f in flows], degrade=window, pool_min=2)
    expected = reference_finish_times(capacity, latency, flows, window)
    assert finish == [pytest.approx(t, rel=REL, abs=1e-12) for t in expected]
    assert net.idle and not net._pool_of_link


def test_the_threshold_is_the_modules(monkeypatch):
    capacity, latency, flows = incast(20)
    default, _, _ = _run(capacity, latency, [(*f, 0, 1) for f in flows])  # at most 20 at once: below it
    monkeypatch.setattr(flow_pools, "POOL_MIN", 4)
    lowered, _, _ = _run(capacity, latency, [(*f, 0, 1) for f in flows])
    assert default.pool_min == 32 and lowered.pool_min == 4
    assert lowered.solves < default.solves / 3


def _asgd_steps(monkeypatch, pool_min: int):
    from simdist.metrics import steps_table
    from simdist.scenario import scenario_from_dict
    from simdist.simulate import Simulation

    monkeypatch.setattr(flow_pools, "POOL_MIN", pool_min)
    spec = {"name": "incast", "workers": 40, "platform": {"preset": "cluster-a100-hdr", "nodes": 11},
            "workload": {"model": {"name": "mlp", "hidden": [4096, 4096]}, "batch_size": 64, "timing_only": True,
                         "dataset": {"name": "imagenet-shape", "samples": 40 * 64 * 8, "input_shape": [1024],
                                     "classes": 10, "test_samples": 0}},
            "compute": {"noise": {"rank_sigma": 0.05, "source": "test"}},
            "algorithm": {"name": "asgd"}, "stop": {"steps": 160}, "outputs": {"plots": False, "trace": False}}
    return steps_table(Simulation(scenario_from_dict(spec), None).execute())


def test_forty_workers_pushing_to_one_server_run_the_same_with_and_without_pools(monkeypatch):
    plain, pooled = _asgd_steps(monkeypatch, 10**9), _asgd_steps(monkeypatch, 8)
    assert list(pooled["worker"]) == list(plain["worker"])
    assert list(pooled["staleness"]) == list(plain["staleness"])
    assert np.allclose(pooled["time_s"], plain["time_s"], rtol=1e-12, atol=0)


def test_service_history_reads_recorded_points_exactly_and_forgets_only_what_no_interval_needs():
    history = flow_pools.ServiceHistory(0.0)
    for k in range(1, 3000):
        history.append(float(k), 10.0 * k + (k % 7))
    assert history.at(1234.0) == 10.0 * 1234 + 1234 % 7  # a recorded instant: its value
    assert history.at(10.5) == pytest.approx((history.at(10.0) + history.at(11.0)) / 2)
    assert list(history.at(np.array([2.0, 2.25]))) == [22.0, pytest.approx(22.0 + 0.25 * 11.0)]
    assert history.due_for_trim
    history.trim(2500.5)
    assert history.size == 500 and history.at(2500.0) == 10.0 * 2500 + 2500 % 7
    assert not history.due_for_trim  # next trim once it has doubled again
