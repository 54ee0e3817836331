"""Invariants checked on every algorithm's conformance scenario, with and without a node crash.

* bytes sent = bytes received per (src, dst) rank pair, and per link (a link carries exactly
  the bytes of the pairs whose route crosses it);
* every sample of every worker's shard is handed out exactly once per epoch (with a shared
  epoch pool, dbs: every sample of the epoch, over all workers together);
* every gradient a worker computes is applied exactly once (by its own update row, and for
  nnt once by each neighbour) or counted as dropped (faults);
* versions are monotone per worker; virtual time never decreases (updates, evaluations,
  spans).
"""

from __future__ import annotations

from collections import Counter, defaultdict

import numpy as np
import pandas as pd
import pytest

import simdist.assembly as assembly_module
from simdist.metrics import steps_table
from simdist.simulate import Simulation
from simdist.training.data import LockstepShards, ShardIterator
from simdist.training.data_pool import PoolSlice
from test_conformance import EPOCHS, TINY, tiny_scenario


class _Recording(ShardIterator):
    log: list = []

    def next_batch(self, batch_size):
        batch = super().next_batch(batch_size)
        if batch is not None:
            type(self).log.append(batch)
        return batch


def run_recorded(scenario, monkeypatch):
    recording = type("Recording", (_Recording,), {"log": []})
    monkeypatch.setattr(assembly_module, "ShardIterator", recording)  # where a run builds its shards
    lockstep_batches = LockstepShards.next_batches

    def logged(self, batch_size, *, with_indices=True):  # a cohort's workers take their batches together
        batches = lockstep_batches(self, batch_size, with_indices=True)
        recording.log.extend(batches or [])
        return batches

    monkeypatch.setattr(LockstepShards, "next_batches", logged)
    pool_batch = PoolSlice.batch

    def pooled(self, sharder, worker):  # dbs: a batch server 0 handed out of the epoch pool
        batch = pool_batch(self, sharder, worker)
        recording.log.append(batch)
        return batch

    monkeypatch.setattr(PoolSlice, "batch", pooled)
    sim = Simulation(scenario, None)
    result = sim.execute()
    return sim, result, recording.log


def crash_variant(name: str):
    """The conformance scenario with the last worker's node crashing at 1 ms (one rank per node)."""
    devices, nodes, workers, _ = TINY[name]
    if nodes == 1:
        nodes, devices = devices, 1
    return tiny_scenario(name, one_rank_per_node=True,
                         faults={"node_crash": [{"node": (workers - 1) // devices, "at": "1ms"}]})


@pytest.fixture(scope="module", params=[(n, crash) for n in sorted(TINY) for crash in (False, True)],
                ids=lambda p: f"{p[0]}{'-crash' if p[1] else ''}")
def recorded(request):
    name, crash = request.param
    scenario = crash_variant(name) if crash else tiny_scenario(name)
    with pytest.MonkeyPatch.context() as mp:
        sim, result, batches = run_recorded(scenario, mp)
    return name, crash, sim, result, batches


def test_bytes_sent_equal_received_per_pair_and_link(recorded):
    _, _, sim, result, _ = recorded
    net = sim.world.network
    in_flight: dict[tuple[int, int], float] = defaultdict(float)  # flows cut by the end of a stopped run
    for flow in net.in_flight():
        in_flight[(flow.src, flow.dst)] += flow.counted_bytes
    assert set(net.sent_bytes) >= set(net.received_bytes)
    for pair, sent in net.sent_bytes.items():
        assert sent == net.received_bytes.get(pair, 0.0) + in_flight.get(pair, 0.0), pair
    assert result.extra["sent_bytes"] > 0
    expected = [0.0] * len(net.links)
    for (src, dst), nbytes in net.received_bytes.items():
        for link in sim.platform.route(src, dst):
            expected[link.index] += nbytes
    assert net.link_bytes == expected


def test_every_sample_once_per_epoch_per_shard(recorded):
    name, crash, sim, result, batches = recorded
    if batches and all(batch.from_pool for batch in batches):
        return check_every_sample_once_per_epoch_of_the_pool(sim, result, crash, batches)
    by_shard: dict[tuple[int, int], list[np.ndarray]] = defaultdict(list)
    for batch in batches:
        by_shard[(batch.worker, batch.epoch)].append(batch.indices)
    crashed = set(result.extra["faults"]["crashed_ranks"])
    for (worker, epoch), parts in by_shard.items():
        handed = np.concatenate(parts)
        assert len(np.unique(handed)) == len(handed), (worker, epoch)  # never twice
        shard = sim.sharder.shard(epoch, worker)
        if not crash or (result.status == "completed" and worker not in crashed):
            assert sorted(handed.tolist()) == sorted(shard.tolist()), (worker, epoch)  # every one
        else:
            assert set(handed.tolist()) <= set(shard.tolist())
    if result.status == "completed" and not crash:
        assert {e for (_, e) in by_shard} == set(range(EPOCHS))


def check_every_sample_once_per_epoch_of_the_pool(sim, result, crash, batches):
    by_epoch: dict[int, list[np.ndarray]] = defaultdict(list)
    for batch in batches:
        by_epoch[batch.epoch].append(batch.indices)
    for epoch, parts in by_epoch.items():
        handed = np.concatenate(parts)
        assert len(np.unique(handed)) == len(handed), epoch  # never twice
        assert sorted(handed.tolist()) == list(range(sim.sharder.n_samples)), epoch  # every one, whoever took it
    if result.status == "completed":
        assert set(by_epoch) == set(range(EPOCHS))


def test_every_gradient_applied_once_or_dropped(recorded):
    name, _, sim, result, _ = recorded
    steps = steps_table(result)
    own = steps[pd.to_numeric(steps["batch_size"], errors="coerce") > 0]
    computed = Counter(s.rank for s in result.recorder.spans if s.kind == "compute" and s.name == "forward/backward")
    applied = Counter(int(w) for w in own["worker"])
    dropped = sim.world.dropped["gradients"]
    stopped_early = result.status != "completed"
    for worker in sim.workers:
        total = applied[worker] + dropped.get(worker, 0)
        if stopped_early:  # gradients in flight when the run stalled are neither applied nor lost yet
            assert total <= computed[worker], worker
        else:
            assert total == computed[worker], worker
    if "sender" in steps:
        neighbour = steps[steps["source"] == "neighbour"]
        keys = list(zip(neighbour["worker"], neighbour["sender"], neighbour["sender_step"]))
        assert len(keys) == len(set(keys))  # each neighbour applies each gradient at most once


def test_versions_and_time_are_monotone(recorded):
    _, _, sim, result, _ = recorded
    times = [row["time_s"] for row in result.recorder.updates]
    assert times == sorted(times) and all(t <= result.virtual_time_s for t in times)
    evals = [row["time_s"] for row in result.recorder.evals]
    assert evals == sorted(evals)
    assert all(0 <= s.start_s <= s.end_s <= result.virtual_time_s for s in result.recorder.spans)
    for worker, rows in steps_table(result).groupby("worker"):
        assert rows["version"].is_monotonic_increasing, worker
        assert rows["step"].is_monotonic_increasing, worker


def test_crash_variants_reach_their_documented_status(recorded):
    name, crash, _, result, _ = recorded
    if not crash:
        assert result.status == "completed"
    else:
        continues = {"asgd", "nsoftsync", "dbs"}
        assert result.status == ("completed" if name in continues else "stalled"), name
