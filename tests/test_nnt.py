"""Nearest-Neighbours Training (docs/algorithms.md §7): layouts, protocol and epoch restarts.

* Layouts: ring and torus neighbour maps, hop distances (closed form = breadth-first
  search), most-square grid shapes; too-small layouts refused at scenario load.
* Protocol: on a ring every gradient reaches both neighbours exactly once; information from
  worker 0 reaches each worker after the hops the topology says (a protocol-level check with
  a "taint" gradient: two local steps per hop in lock-step); after an epoch sync all replicas
  are identical; runs are deterministic.

Compute times: ``tests/data/tiny_profile.yaml``; platform ``laptop-cpu`` with N devices.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import wire_and_run
from simdist.algorithms import AlgorithmContext
from simdist.algorithms.nnt import Nnt, NntConfig, best_worker
from simdist.algorithms.nnt_topology import (
    bfs_hops,
    grid_distance,
    grid_neighbours,
    make_layout,
    most_square_shape,
    ring_distance,
    ring_neighbours,
)
from simdist.errors import InputError
from simdist.platform.compute import ComputeModel, ModelTiming
from simdist.recorder import Recorder
from simdist.runtime.sim import SimWorld
from simdist.scenario import scenario_from_dict
from simdist.simulate import simulate
from simdist.training.data import EpochSharder, ShardIterator
from simdist.training.optim import OptimizerConfig, make_optimizer
from simdist.training.replica import Replica

from conftest import build_platform

PROFILE = str((Path(__file__).parent / "data" / "tiny_profile.yaml").resolve())


def scenario(*, workers=5, epochs=2, batch=16, timing_only=False, eval_samples=None, validation_split=0.2,
             **algorithm):
    """625 synthetic samples: 125 test, 100 held out for validation (0.2), 400 to train on."""
    data = {
        "name": "nnt-test",
        "seed": 11,
        "platform": {"preset": "laptop-cpu", "node": {"devices": workers}},
        "workload": {
            "model": {"name": "mlp", "hidden": [16]},
            "dataset": {"name": "synthetic", "samples": 625, "features": 8, "classes": 3},
            "validation_split": validation_split,
            "batch_size": batch,
            "optimizer": {"name": "sgd", "lr": 0.1},
            "timing_only": timing_only,
        },
        "algorithm": {"name": "nnt", **algorithm},
        "stop": {"epochs": epochs},
        "evaluation": {"every_steps": 10**6, "max_samples": eval_samples},
        "compute": {"profiles": [PROFILE]},
    }
    return scenario_from_dict(data)


# -- layouts ---------------------------------------------------------------------------------


def test_ring_and_grid_neighbours():
    assert ring_neighbours(5) == ((4, 1), (0, 2), (1, 3), (2, 4), (3, 0))
    grid = grid_neighbours(3, 4)
    assert grid[0] == (8, 4, 3, 1)  # up (wraps), down, left (wraps), right
    assert grid[5] == (1, 9, 4, 6)
    assert all(len(set(nb)) == 4 and i not in nb for i, nb in enumerate(grid))
    for i, nb in enumerate(grid):  # symmetric: my neighbours have me as a neighbour
        assert all(i in grid[j] for j in nb)


def test_most_square_shapes():
    assert [most_square_shape(n) for n in (9, 12, 16, 18, 7, 8)] == [(3, 3), (3, 4), (4, 4), (3, 6), (1, 7), (2, 4)]


@settings(max_examples=40, deadline=None)
@given(rows=st.integers(3, 7), cols=st.integers(3, 7), source=st.integers(0, 48))
def test_closed_form_hops_equal_breadth_first_search(rows, cols, source):
    n = rows * cols
    source %= n
    assert bfs_hops(grid_neighbours(rows, cols), source) == [grid_distance(rows, cols, source, b) for b in range(n)]
    assert bfs_hops(ring_neighbours(n), source) == [ring_distance(n, source, b) for b in range(n)]


def test_eccentricity_from_worker_zero():
    assert make_layout("ring", 16).eccentricity() == 8
    assert make_layout("ring", 7).eccentricity() == 3
    assert make_layout("grid", 16).eccentricity() == 4
    assert make_layout("grid", 15).eccentricity() == 1 + 2  # 3 x 5


def test_two_worker_ring_is_refused_at_load():
    with pytest.raises(InputError, match="at least 3 workers") as err:
        scenario(workers=2)
    assert err.value.field == "workers"


def test_two_by_two_grid_is_refused_at_load():
    with pytest.raises(InputError, match="at least 3x3") as err:
        scenario(workers=4, topology="grid")
    assert err.value.field == "algorithm.topology"
    with pytest.raises(InputError, match="at least 3x3") as err:
        scenario(workers=4, topology="grid", grid_shape=[2, 2])
    assert err.value.field == "algorithm.grid_shape"
    with pytest.raises(InputError, match="holds 9 workers") as err:
        scenario(workers=12, topology="grid", grid_shape=[3, 3])
    with pytest.raises(InputError, match="grid_shape applies to topology: grid"):
        scenario(workers=9, grid_shape=[3, 3])
    assert scenario(workers=12, topology="grid").algorithm["topology"] == "grid"  # 3 x 4 is fine


def test_best_worker_picks_the_highest_known_accuracy():
    assert best_worker([0.5, 0.7, 0.7, 0.1]) == 1
    assert best_worker([float("nan"), float("nan")]) == 0
    assert best_worker([None, 0.2]) == 1


# -- the protocol ----------------------------------------------------------------------------


def rows_by_source(result):
    own = [r for r in result.recorder.updates if r["source"] == "own"]
    neighbour = [r for r in result.recorder.updates if r["source"] == "neighbour"]
    return own, neighbour


@pytest.mark.parametrize("sync_every_epochs", [1, 5])  # a sync at every epoch end / only the final drain
def test_every_gradient_reaches_both_ring_neighbours_exactly_once(sync_every_epochs):
    n = 5
    result = simulate(scenario(workers=n, sync_every_epochs=sync_every_epochs))
    own, neighbour = rows_by_source(result)
    produced = Counter((r["worker"], r["step"]) for r in own)
    assert set(produced.values()) == {1} and len(produced) == n * 2 * 5  # 80 samples per shard, batch 16
    received = Counter((r["sender"], r["sender_step"], r["worker"]) for r in neighbour)
    assert set(received.values()) == {1}
    expected = {(w, step, (w + d) % n) for (w, step) in produced for d in (-1, 1)}
    assert set(received) == expected
    assert all(r["batch_size"] == 0 and r["sender_batch_size"] == 16 for r in neighbour)
    assert sum(r["batch_size"] for r in result.recorder.updates) == 2 * 400  # every sample counted once
    assert all(r["staleness"] >= 0 and r["age_s"] > 0 for r in neighbour)
    assert Counter(r["staleness"] for r in neighbour).most_common(1)[0][0] == 1


def run_by_hand(s):
    """Nnt wired to a SimWorld as simulate wires it: (algorithm, world)."""
    algorithm, world, _, _ = wire_and_run(s)
    return algorithm, world


def test_after_an_epoch_sync_all_replicas_are_identical():
    algorithm, world = run_by_hand(scenario(workers=4, epochs=2))
    first = algorithm.replicas[0].params
    assert all(torch.equal(r.params, first) for r in algorithm.replicas[1:])
    syncs = [e for e in world.recorder.events if e["kind"] == "nnt_sync"]
    assert sorted(Counter(e["epoch"] for e in syncs).items()) == [(1, 4), (2, 4)]
    for epoch in (1, 2):
        rows = [e for e in syncs if e["epoch"] == epoch]
        best = max(rows, key=lambda e: (e["validation_accuracy"], -e["worker"]))
        assert {e["best_worker"] for e in rows} == {best["worker"]}
        assert {e["best_accuracy"] for e in rows} == {best["validation_accuracy"]}
    # without a sync at the end (every 2 epochs, 3 run) the replicas have drifted apart again
    algorithm, _ = run_by_hand(scenario(workers=4, epochs=3, sync_every_epochs=2))
    assert not torch.equal(algorithm.replicas[0].params, algorithm.replicas[1].params)


@pytest.mark.parametrize("samples", [30, 60])
def test_every_epoch_sync_evaluation_costs_a_forward_pass_over_the_evaluated_samples(samples):
    result = simulate(scenario(workers=4, epochs=2, eval_samples=samples))
    evaluations = [span for span in result.recorder.spans if span.name == "nnt evaluation"]
    assert Counter(span.rank for span in evaluations) == {w: 2 for w in range(4)}  # every worker, both epoch ends
    # tiny_profile: a third of a forward/backward of that many samples, without the profile's optimizer step
    t0_s = 1e-4 - result.extra["compute_profiles"]["host-cpu"]["optimizer_step_s"]
    forward = (t0_s + 1e-5 * samples) / 3
    assert all(span.kind == "compute" and span.end_s - span.start_s == pytest.approx(forward) for span in evaluations)
    syncs = [e for e in result.recorder.events if e["kind"] == "nnt_sync"]
    assert all(e["validation_accuracy"] is not None for e in syncs) and len(syncs) == 8


def test_runs_are_deterministic_and_every_replica_is_evaluated():
    first, second = simulate(scenario(workers=9, topology="grid")), simulate(scenario(workers=9, topology="grid"))
    assert first.recorder.updates == second.recorder.updates
    assert first.recorder.events == second.recorder.events
    assert first.recorder.evals == second.recorder.evals
    assert {e["worker"] for e in first.recorder.evals} == set(range(9))
    _, neighbour = rows_by_source(first)
    assert Counter(r["sender"] for r in neighbour) == {w: 4 * 2 * 3 for w in range(9)}  # 4 neighbours x 6 steps
    timing = simulate(scenario(workers=9, topology="grid", timing_only=True))
    assert [r["time_s"] for r in timing.recorder.updates] == [r["time_s"] for r in first.recorder.updates]


# -- information spreads one hop per two local steps -----------------------------------------


@pytest.mark.parametrize("topology,n", [("ring", 7), ("ring", 8), ("grid", 9), ("grid", 12)])
def test_information_from_worker_zero_travels_hop_by_hop(topology, n):
    """Each worker's gradient marks its own index and every index its weights already carry.

    Weights are a vector of n zeros and η = 1, so entry 0 becomes non-zero in a replica exactly
    when information that started at worker 0 has reached it. In lock-step (equal compute
    times, fast links) worker 0 is informed by its own first step; a worker h ≥ 1 hops away by
    its step 2h: a neighbour's gradient is applied one step after it was computed, and it
    carries the information from the step after the information arrived.
    """
    layout = make_layout(topology, n)
    steps = 3 * layout.eccentricity()
    computes = Counter()
    informed_after_step: dict[int, int] = {}

    def taint_gradients(rank, replica, batch):
        computes[rank] += 1
        k = computes[rank]

        def resolve():
            carried = replica.params != 0
            if carried[0] and rank not in informed_after_step:
                informed_after_step[rank] = k - 1  # this k-th gradient is computed after step k - 1
            grad = -carried.float()
            grad[rank] = -1.0
            return grad, 0.0

        return resolve

    platform = build_platform("laptop-cpu", node={"devices": n})
    timing = ModelTiming(1e-3, 0.0, None, "test")
    compute = ComputeModel(platform, {("host-cpu", "m"): timing}, model="m", forward_flops_per_sample=1.0,
                           parameter_layers=1, seed=0)
    world = SimWorld(platform, compute, Recorder(), gradient_source=taint_gradients)
    optimizer = make_optimizer(OptimizerConfig(lr=1.0))
    workload = SimpleNamespace(optimizer_config=optimizer.config, param_count=n,
                               validation_size=1, validation_metrics=lambda p, max_samples=None: (0.0, 0.5),
                               validation_samples=lambda max_samples=None: 0)
    sharder = EpochSharder(n * steps, n, seed=0)
    ctx = AlgorithmContext(workers=list(range(n)), node_of=platform.node_of, workload=workload, batch_size=1, seed=0,
                           max_epochs=1, timing_only=False, make_data=lambda i: ShardIterator(sharder, i, 1),
                           make_replica=lambda: Replica(torch.zeros(n), optimizer))
    algorithm = Nnt(NntConfig(topology=topology, update_time_per_param=0.0), ctx)
    for rank, process in algorithm.processes().items():
        world.spawn(rank, process(world.runtime(rank)))
    world.env.run()

    expected = {w: 1 if w == 0 else 2 * layout.hops(0, w) for w in range(n)}
    assert informed_after_step == expected
    farthest = max(range(n), key=lambda w: layout.hops(0, w))
    assert informed_after_step[farthest] == 2 * layout.eccentricity()
    assert all(r["staleness"] == 1 for r in world.recorder.updates if r["source"] == "neighbour"
               and r["sender_step"] < steps)  # lock-step: applied right after the receiver's next step
