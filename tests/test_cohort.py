"""Lockstep cohorts give the same results as one process per rank.

A synchronous run whose workers move as one cohort (simdist.runtime.cohort) must produce the
same tables as the same run with one SimPy process per rank: update rows, evaluations,
spans (in any order), per-worker totals, link counters and the summary. Losses, batch sizes,
counts and bytes are equal; times are compared to a relative 1e-12, because a collective
phase that a cohort replays from its first run adds its duration in one piece where the
flows added it in several.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from simdist import metrics
from simdist.scenario import scenario_from_dict
from simdist.simulate import Simulation

PROFILE = str(Path(__file__).parent / "data" / "tiny_profile.yaml")


def replay_scenario(**changes) -> dict:
    data = {
        "name": "cohort-replay",
        "platform": {"preset": "laptop-cpu", "nodes": 2, "node": {"devices": 2}},
        "workload": {"model": {"name": "mlp", "hidden": [16]},
                     "dataset": {"name": "synthetic", "samples": 300, "features": 8, "classes": 3},
                     "batch_size": 16, "optimizer": {"name": "sgd", "lr": 0.05, "momentum": 0.9}},
        "algorithm": {"name": "sync"},
        "stop": {"epochs": 3},
        "evaluation": {"every_steps": 4},
        "compute": {"profiles": [PROFILE], "noise_sigma": 0.2},
    }
    for key, value in changes.items():
        target = data
        *parents, leaf = key.split(".")
        for part in parents:
            target = target.setdefault(part, {})
        target[leaf] = value
    return data


def timing_scenario(**changes) -> dict:
    data = replay_scenario(**changes)
    data["platform"] = changes.get("platform", {"preset": "cluster-a100-hdr", "nodes": 4})
    data["workload"].update(timing_only=True, model={"name": "mlp", "hidden": [256, 256]})
    data["compute"] = changes.get("compute", {"noise_sigma": 0.1})
    data["stop"] = changes.get("stop", {"steps": 12})
    return data


def run_both(data: dict):
    scenario = scenario_from_dict(data)
    per_rank = Simulation(scenario, None, lockstep=False)
    cohort = Simulation(scenario, None, lockstep=True)
    return (per_rank, per_rank.execute()), (cohort, cohort.execute())


def sorted_spans(result) -> pd.DataFrame:
    return metrics.spans_table(result).sort_values(["rank", "start_s", "kind", "end_s"]).reset_index(drop=True)


def assert_same_results(a, b) -> None:
    tolerance = {"rtol": 1e-12, "atol": 0.0}
    for table in (metrics.steps_table, metrics.evals_table):
        pd.testing.assert_frame_equal(table(a), table(b), **tolerance)
    # idle_s is the run's time less a rank's span sums: a rank whose spans tile the run is left a rounding
    # residue of either sign (1e-18 s) where the cohort's collective phases round differently
    pd.testing.assert_frame_equal(metrics.workers_table(a), metrics.workers_table(b), rtol=1e-12, atol=1e-15)
    pd.testing.assert_frame_equal(sorted_spans(a), sorted_spans(b), **tolerance)
    # a link's busy time sums many short intervals, each the difference of two absolute times
    pd.testing.assert_frame_equal(metrics.links_table(a), metrics.links_table(b), rtol=1e-9, atol=0.0)
    summary_a, summary_b = metrics.summarize(a), metrics.summarize(b)
    summary_a.pop("wall_time_s"), summary_b.pop("wall_time_s")
    assert summary_a.keys() == summary_b.keys()
    for key in summary_a:
        if isinstance(summary_a[key], float) and isinstance(summary_b[key], float):
            assert summary_b[key] == pytest.approx(summary_a[key], rel=1e-12, abs=0.0), key
        else:
            assert summary_b[key] == summary_a[key], key
    assert a.extra["sent_bytes"] == b.extra["sent_bytes"]
    assert a.virtual_time_s == pytest.approx(b.virtual_time_s, rel=1e-12)


REPLAY_CASES = {
    "plain": {},
    "fp16-tree": {"algorithm": {"name": "sync", "collective": "tree", "compression": "fp16"}},
    "halving-doubling-flows": {"algorithm": {"name": "sync", "collective": "halving_doubling"},
                               "network": {"collective_fidelity": "flows"}},
    "hierarchical": {"algorithm": {"name": "sync", "collective": "hierarchical"}},
    "step-limit": {"stop": {"steps": 7}, "evaluation": {"every_steps": 3}},
    "adam-uneven-batches": {"workload.batch_size": 23, "workload.optimizer": {"name": "adam", "lr": 0.01}},
    "overlap-per-tensor": {"algorithm": {"name": "sync", "preset": "classic"}},
    "overlap-horovod-fp16": {"algorithm": {"name": "sync", "preset": "horovod", "bucket_bytes": 300}},
}


@pytest.mark.parametrize("case", sorted(REPLAY_CASES))
def test_replay_cohort_equals_per_rank_processes(case):
    (_, per_rank), (cohort_sim, cohort) = run_both(replay_scenario(**REPLAY_CASES[case]))
    assert cohort_sim.cohort
    assert_same_results(per_rank, cohort)
    assert len(cohort.recorder.updates) > 0


def test_cohort_final_weights_equal_per_rank_weights():
    (per_rank_sim, _), (cohort_sim, _) = run_both(replay_scenario())
    for replica in per_rank_sim.algorithm.replicas:
        assert np.array_equal(replica.params.numpy(), cohort_sim.algorithm.replicas[0].params.numpy())
    assert cohort_sim.algorithm.epochs_completed() == per_rank_sim.algorithm.epochs_completed() == 3


TIMING_CASES = {
    "noise": {},
    "stragglers-and-slow-devices": {
        "compute": {"noise_sigma": 0.05, "stragglers": [{"ranks": [3], "factor": 3.0, "duration": "1s"}]},
        "platform": {"preset": "cluster-a100-hdr", "nodes": 4, "device_overrides": [{"ranks": [5], "speed": 0.5}]}},
    "loss-curve-epochs": {"stop": {"epochs": 2}, "workload.loss_curve": {"law": "exponential", "start": 2.3, "end": 0.2, "scale": 1.0}},
    "link-degradation": {"faults": {"link_degradation": [{"links": ["*"], "factor": 0.5, "start": "0s"}]}},
    "overlap-tree": {"algorithm": {"name": "sync", "overlap": "backward", "bucket_bytes": 100_000,
                                   "collective": "tree"}},
}


@pytest.mark.parametrize("case", sorted(TIMING_CASES))
def test_timing_only_cohort_equals_per_rank_processes(case):
    (_, per_rank), (cohort_sim, cohort) = run_both(timing_scenario(**TIMING_CASES[case]))
    assert cohort_sim.cohort
    assert_same_results(per_rank, cohort)


def test_phases_replayed_alone_only_when_the_cohort_is_all_the_traffic():
    _, (plain, _) = run_both(timing_scenario())
    _, (degraded, _) = run_both(timing_scenario(**TIMING_CASES["link-degradation"]))
    assert plain.world.network_exclusive and plain.world._alone
    assert not degraded.world.network_exclusive and not degraded.world._alone


@pytest.mark.parametrize("changes", [
    {"platform": {"preset": "laptop-cpu", "nodes": 1, "node": {"devices": 4, "cores": 2}}},  # shared cores
    {"faults": {"node_crash": [{"node": 1, "at": "1ms"}]}},  # a crash stops some ranks mid-step
    {"algorithm": {"name": "asgd"}, "workers": 3},  # not a lockstep algorithm
], ids=["shared-cores", "crash", "asgd"])
def test_no_cohort_where_results_would_differ(changes):
    sim = Simulation(scenario_from_dict(replay_scenario(**changes)), None)
    sim.execute()
    assert not sim.cohort


def test_lockstep_off_runs_one_process_per_rank():
    sim = Simulation(scenario_from_dict(replay_scenario()), None, lockstep=False)
    sim.execute()
    assert not sim.cohort and len(sim.process_ranks) == 4
