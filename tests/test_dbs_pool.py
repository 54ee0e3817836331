"""DBS-SGD as the paper defines it: one shared epoch pool and batch sizes from per-sample compute time.

The pool (:mod:`simdist.training.data_pool`) hands every sample of an epoch out once, in
batches of each worker's own size, so workers finish the epoch together; a worker's batch
follows its measured forward/backward time per sample (docs/algorithms.md §4). Scenarios are
the parameter-server test scenarios of ``test_async_algorithms`` (tiny profile: mlp
1e-4 s + 1e-5 s/sample).
"""

from __future__ import annotations

import statistics
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from simdist.errors import InputError
from simdist.real.launch import mpi_available, run_real
from simdist.result_files import load_result_dir
from simdist.scenario import load_scenario
from simdist.simulate import simulate
from simdist.training.data import EpochSharder
from simdist.training.data_pool import EpochPool, PoolSlice
from simdist.tracefile import span_events
from test_async_algorithms import TRAIN_SAMPLES, scenario

QUICKSTART = Path(__file__).resolve().parents[1] / "scenarios" / "quickstart.yaml"
SLOW_WORKERS = [{"ranks": [2, 3], "cpus": 0.5}]  # workers 2 and 3 compute 2x slower than 0 and 1


def recorded_batches(monkeypatch) -> list:
    """Every batch a worker builds from a pool slice, in the order they are built."""
    batches = []
    original = PoolSlice.batch

    def recording(self, sharder, worker):
        batch = original(self, sharder, worker)
        batches.append(batch)
        return batch

    monkeypatch.setattr(PoolSlice, "batch", recording)
    return batches


# -- the pool ----------------------------------------------------------------------------------


def test_the_pool_hands_out_each_epoch_once_and_closes_it_with_the_remainder():
    pool = EpochPool(10, max_epochs=2)
    taken = [pool.take(size) for size in (4, 4, 4, 3, 3, 3, 3)]
    assert taken[:3] == [PoolSlice(0, 0, 4, False), PoolSlice(0, 4, 8, False), PoolSlice(0, 8, 10, True)]
    assert taken[3:6] == [PoolSlice(1, 0, 3, False), PoolSlice(1, 3, 6, False), PoolSlice(1, 6, 9, False)]
    assert taken[6] == PoolSlice(1, 9, 10, True)
    assert pool.exhausted and pool.take(3) is None and pool.epochs_completed == 2


def test_a_slice_reads_the_epoch_permutation_of_the_sharder():
    sharder = EpochSharder(10, 3, seed=7)
    batch = PoolSlice(1, 2, 6, False).batch(sharder, worker=2)
    assert batch.indices.tolist() == sharder.permutation(1)[2:6].tolist()
    assert batch.from_pool and batch.worker == 2 and batch.epoch == 1 and not batch.closes_epoch
    assert len(sharder.permutation(1)) == 10  # the pool drops nothing; equal shards drop 10 % 3
    assert len(sharder.order(1)) == 9


def test_the_pool_refuses_a_bad_batch_size():
    with pytest.raises(InputError, match="positive"):
        EpochPool(10).take(0)


# -- dbs on the pool ---------------------------------------------------------------------------


def test_every_sample_is_used_once_per_epoch_and_fast_workers_take_more(monkeypatch):
    batches = recorded_batches(monkeypatch)
    result = simulate(scenario("dbs", m=2, overrides=SLOW_WORKERS))
    assert result.status == "completed" and result.epochs == 2
    for epoch in (0, 1):
        used = np.concatenate([b.indices for b in batches if b.epoch == epoch])
        assert sorted(used.tolist()) == list(range(TRAIN_SAMPLES))
    share = defaultdict(int)
    for b in batches:
        share[b.worker] += b.size
    assert min(share[0], share[1]) > 1.4 * max(share[2], share[3])  # twice as fast: a larger part of the data


def epoch_end_spread(monkeypatch, **options) -> tuple[float, float]:
    """(time between the first and the last worker finishing epoch 0 — its last gradient of the
    epoch applied —, the longest median interval between a worker's consecutive updates)."""
    batches = recorded_batches(monkeypatch)
    result = simulate(scenario("dbs", m=2, overrides=SLOW_WORKERS, epochs=2, **options))
    rows = defaultdict(list)
    for row in result.recorder.updates:
        rows[row["worker"]].append(row["time_s"])
    iteration_s = max(float(np.median(np.diff(times))) for times in rows.values())
    if options.get("data") == "shards":  # each worker's own k-th batch: its shard in order
        per_epoch = TRAIN_SAMPLES // 4
        ends = []
        for worker, times in rows.items():
            sizes = [r["batch_size"] for r in result.recorder.updates if r["worker"] == worker]
            ends.append(times[int(np.searchsorted(np.cumsum(sizes), per_epoch))])
        return max(ends) - min(ends), iteration_s
    epochs = defaultdict(list)
    for b in batches:
        epochs[b.worker].append(b.epoch)
    ends = [rows[w][max(k for k, e in enumerate(epochs[w]) if e == 0)] for w in rows]
    return max(ends) - min(ends), iteration_s


def test_workers_finish_an_epoch_together_on_the_pool_not_on_shards(monkeypatch):
    pool, pool_iteration_s = epoch_end_spread(monkeypatch)
    shards, shards_iteration_s = epoch_end_spread(monkeypatch, data="shards", measure="iteration")
    assert pool <= pool_iteration_s  # within one iteration of each other
    assert shards > 2 * shards_iteration_s  # the fast workers' shards run out iterations before the slow ones'


def compute_spans(result, rank):
    return [s for s in result.recorder.spans if s.rank == rank and s.name == "forward/backward"]


def test_a_slower_worker_settles_where_its_compute_time_equals_worker_0s():
    """t0 + t1·X = k·(t0 + t1·b): with X = 400, k = 1.5, t0 = 1e-4 s, t1 = 1e-5 s, b = 263.3."""
    result = simulate(scenario("dbs", workers=2, batch=400, samples=25_000, epochs=1,
                               optimizer={"name": "sgd", "lr": 0.05}, overrides=[{"ranks": [0], "cpus": 1.5}]))
    changes = [e for e in result.recorder.events if e["kind"] == "batch_size"]
    assert changes and {e["worker"] for e in changes} == {1}
    final = changes[-1]["batch_size"]
    assert abs(final - 263.3) <= 0.1 * 263.3  # within the threshold A of the fixed point
    after = changes[-1]["time_s"]
    own = [s.duration_s for s in compute_spans(result, 1) if s.start_s > after and s.args["batch_size"] == final]
    reference = [s.duration_s for s in compute_spans(result, 0) if s.start_s > after and s.args["batch_size"] == 400]
    assert statistics.mean(own) == pytest.approx(statistics.mean(reference), rel=0.1)


def test_waiting_at_a_busy_server_does_not_shrink_a_batch():
    """Equal workers queued at a slow server: whole-loop times differ by the queue, compute times do not."""
    base = dict(workers=4, batch=16, m=2, apply_time_per_param=5e-6)
    by_compute = simulate(scenario("dbs", **base))
    assert not [e for e in by_compute.recorder.events if e["kind"] == "batch_size"]
    assert {row["batch_size"] for row in by_compute.recorder.updates} <= {16, TRAIN_SAMPLES % 16 or 16}


def test_timing_only_dbs_runs_on_the_pool():
    result = simulate(scenario("dbs", m=2, overrides=SLOW_WORKERS, timing_only=True))
    assert result.status == "completed" and result.epochs == 2
    assert sum(row["batch_size"] for row in result.recorder.updates) == 2 * TRAIN_SAMPLES


def test_every_worker_validates_once_per_epoch_on_the_pool():
    result = simulate(scenario("dbs", m=2, overrides=SLOW_WORKERS, workload_extra={"validation": {"samples": 40}}))
    validations = defaultdict(int)
    for span in result.recorder.spans:
        if span.name == "eval: validation pass":
            validations[span.rank] += 1
    assert dict(validations) == {0: 2, 1: 2, 2: 2, 3: 2}  # servers validate nothing


def test_an_unknown_data_mode_is_refused_naming_the_field(tmp_path):
    scenario_file = tmp_path / "bad.yaml"
    scenario_file.write_text(
        "name: bad\nplatform: {preset: laptop-cpu, node: {devices: 3}}\nworkers: 2\n"
        "workload: {model: mlp, dataset: digits, batch_size: 16}\nalgorithm: {name: dbs, data: queue}\n"
        "stop: {epochs: 1}\n")
    done = subprocess.run([sys.executable, "-m", "simdist", "run", str(scenario_file), "--out", str(tmp_path / "out")],
                          capture_output=True, text=True)
    assert done.returncode == 2
    assert "algorithm.data" in done.stderr and "pool" in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


@pytest.mark.skipif(mpi_available() is not None, reason=f"no MPI here: {mpi_available()}")
def test_a_real_run_hands_out_the_pool_through_server_0(tmp_path):
    overrides = ["platform.node.devices=3", "workers=2", "algorithm={name: dbs, m: 2}", "stop.epochs=2",
                 "stop.steps=null", "evaluation.max_samples=100"]
    out = run_real(QUICKSTART, 3, tmp_path, overrides=overrides, timeout_s=120, plots=False)
    simulated = simulate(load_scenario(QUICKSTART, overrides=overrides))
    real_samples = int(load_result_dir(out).steps["batch_size"].sum())
    assert real_samples == sum(row["batch_size"] for row in simulated.recorder.updates)  # both epochs, once each
    computes = [e for e in span_events(out) if e["name"] == "forward/backward"]
    assert {e["tid"] for e in computes} == {0, 1}
