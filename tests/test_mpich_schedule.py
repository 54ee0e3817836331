"""MPICH's own allreduce choice (``mpich``), recursive doubling, and where a run's default schedule comes from.

An MPI job on MPICH does not run a ring: MPICH's default selection
(``src/mpi/coll/coll_selection.json``) takes recursive doubling for tiny buffers and
Rabenseifner's reduce-scatter + allgather otherwise. ``calibrate network`` records the library
in the platform (``collectives.schedule``), and calls that name no algorithm run it.
"""

from __future__ import annotations

import json

import pytest

from simdist.calibrate.network import library_schedule
from simdist.errors import InputError
from simdist.runtime.collectives import allreduce_plan, default_schedule
from simdist.scenario import scenario_from_dict
from simdist.simulate import simulate


def steps(plan):
    return [step for phase in plan for step in phase]


def one_node(rank):
    return 0


def test_recursive_doubling_moves_the_whole_buffer_in_log2_n_steps():
    plan = steps(allreduce_plan("recursive_doubling", [0, 1, 2, 3], 100.0, one_node))
    assert len(plan) == 2 and all(t.nbytes == 100.0 and t.reduces for step in plan for t in step)
    assert {(t.src, t.dst) for t in plan[0]} == {(0, 1), (1, 0), (2, 3), (3, 2)}
    assert {(t.src, t.dst) for t in plan[1]} == {(0, 2), (2, 0), (1, 3), (3, 1)}
    folded = steps(allreduce_plan("recursive_doubling", list(range(6)), 100.0, one_node))
    assert len(folded) == 4  # fold ranks 4, 5 in, two doubling steps, hand them the result
    assert {(t.src, t.dst) for t in folded[0]} == {(4, 0), (5, 1)}
    assert {(t.src, t.dst) for t in folded[-1]} == {(0, 4), (1, 5)}


@pytest.mark.parametrize("n, nbytes, expected", [
    (4, 8.0, "recursive_doubling"),  # a scalar: avg_msg_size <= 8
    (8, 28.0, "recursive_doubling"),  # 7 float32 elements: fewer than the power of two (8)
    (8, 32.0, "halving_doubling"),  # 8 elements
    (4, 340008.0, "halving_doubling"),  # a gradient
    (6, 340008.0, "halving_doubling"),
])
def test_mpich_runs_recursive_doubling_for_tiny_buffers_and_reduce_scatter_allgather_otherwise(n, nbytes, expected):
    ranks = list(range(n))
    assert allreduce_plan("mpich", ranks, nbytes, one_node) == allreduce_plan(expected, ranks, nbytes, one_node)


def test_the_scenario_names_the_schedule_else_the_platform_else_ring():
    class Platform:
        schedule, schedule_source = "mpich", "calibrate network on MPICH"

    assert default_schedule("tree", Platform())[0] == "tree"
    name, basis = default_schedule(None, Platform())
    assert name == "mpich" and basis["source"] == "calibrate network on MPICH"
    assert default_schedule(None, None)[0] == "ring"


def test_only_mpich_itself_records_its_schedule():
    assert library_schedule("MPICH Version:      5.0.2")["schedule"] == "mpich"
    assert "MPICH Version: 5.0.2" in library_schedule("MPICH Version:      5.0.2")["schedule_source"]
    assert library_schedule("Open MPI v5.0.3, package: Open MPI") == {}
    assert library_schedule(None) == {}


def _scenario(collectives, **network):
    return {"name": "mpich-schedule", "platform": {"preset": "laptop-cpu", "nodes": 2, "node": {"devices": 2},
                                                    "collectives": collectives},
            "workload": {"model": {"name": "mlp", "hidden": [16]}, "batch_size": 32, "timing_only": True,
                         "dataset": {"name": "synthetic", "samples": 2048, "features": 16}},
            "algorithm": {"name": "dcs3gd"}, "network": network, "stop": {"steps": 3},
            "outputs": {"plots": False, "trace": False}}


def test_a_run_takes_the_platforms_schedule_and_says_so(tmp_path):
    mpich = {"schedule": "mpich", "schedule_source": "test: the job runs on MPICH"}
    result = simulate(scenario_from_dict(_scenario(mpich)))
    assert result.extra["collective_schedule"] == {"allreduce": "mpich", "basis": "collectives.schedule of the "
                                                   "platform", "source": "test: the job runs on MPICH"}
    ring = simulate(scenario_from_dict(_scenario(mpich, collective="ring")))
    assert ring.extra["collective_schedule"]["allreduce"] == "ring"
    assert ring.virtual_time_s != result.virtual_time_s  # 4 ranks: six ring steps against four
    json.dumps(result.extra["collective_schedule"])


def test_an_unknown_or_unsourced_platform_schedule_is_refused():
    with pytest.raises(InputError, match="platform.collectives.schedule: unknown collective algorithm 'mpitch'"):
        scenario_from_dict(_scenario({"schedule": "mpitch", "schedule_source": "x"}))
    with pytest.raises(InputError, match="schedule needs schedule_source"):
        scenario_from_dict(_scenario({"schedule": "mpich"}))
