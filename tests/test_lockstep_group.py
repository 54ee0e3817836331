"""Lockstep groups give the same results as one process per rank.

A run whose workers move as one lockstep group (simdist.runtime.group: worker 0's generator,
unchanged, standing for every worker) must produce the same tables as the same run with one
SimPy process per rank: update rows, evaluations, spans (in any order), per-worker totals,
link counters and the summary. Losses, batch sizes, counts and bytes are equal; times are
compared to a relative 1e-12, because a collective phase that a group replays from its first
run adds its duration in one piece where the flows added it in several. Sync runs as a group
in replay and timing-only runs, dc-s3gd (whose workers' replicas differ) in timing-only runs,
its workers' clocks apart.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from simdist import metrics
from simdist.scenario import scenario_from_dict
from simdist.scenario_files import set_dotted
from simdist.simulate import Simulation

PROFILE = str(Path(__file__).parent / "data" / "tiny_profile.yaml")


def replay_scenario(**changes) -> dict:
    data = {
        "name": "lockstep-replay",
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
        set_dotted(data, key, value)
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
    group = Simulation(scenario, None, lockstep=True)
    return (per_rank, per_rank.execute()), (group, group.execute())


def sorted_spans(result) -> pd.DataFrame:
    return metrics.spans_table(result).sort_values(["rank", "start_s", "kind", "end_s"]).reset_index(drop=True)


def assert_same_results(a, b) -> None:
    tolerance = {"rtol": 1e-12, "atol": 0.0}
    # a column that is the difference of two times (dc-s3gd's allreduce_wait_s) is a rounding residue
    # (1e-19 s) where the other run has an exact zero: absolute differences below a femtosecond are equal
    for table in (metrics.steps_table, metrics.evals_table):
        pd.testing.assert_frame_equal(table(a), table(b), rtol=1e-12, atol=1e-15)
    # idle_s is the run's time less a rank's span sums: a rank whose spans tile the run is left a rounding
    # residue of either sign (1e-18 s) where the group's collective phases round differently
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
def test_replay_group_equals_per_rank_processes(case):
    (_, per_rank), (group_sim, group) = run_both(replay_scenario(**REPLAY_CASES[case]))
    assert group_sim.in_lockstep
    assert_same_results(per_rank, group)
    assert len(group.recorder.updates) > 0


def test_group_final_weights_equal_per_rank_weights():
    (per_rank_sim, _), (group_sim, _) = run_both(replay_scenario())
    for replica in per_rank_sim.algorithm.replicas:
        assert np.array_equal(replica.params.numpy(), group_sim.algorithm.replicas[0].params.numpy())
    assert group_sim.algorithm.epochs_completed() == per_rank_sim.algorithm.epochs_completed() == 3


TIMING_CASES = {
    "noise": {},
    "stragglers-and-slow-devices": {
        "compute": {"noise_sigma": 0.05, "stragglers": [{"ranks": [3], "factor": 3.0, "duration": "1s"}]},
        "platform": {"preset": "cluster-a100-hdr", "nodes": 4, "device_overrides": [{"ranks": [5], "speed": 0.5}]}},
    "loss-curve-epochs": {"stop": {"epochs": 2}, "workload.loss_curve": {"law": "exponential", "start": 2.3, "end": 0.2, "scale": 1.0}},
    "link-degradation": {"faults": {"link_degradation": [{"links": ["*"], "factor": 0.5, "start": "0s"}]}},
    "overlap-tree": {"algorithm": {"name": "sync", "overlap": "backward", "bucket_bytes": 100_000,
                                   "collective": "tree"}},
    # dc-s3gd: the allreduce of one step runs beside the next forward/backward, which each worker starts
    # at its own time; its update rows carry each worker's own overlap and wait
    "dcs3gd-noise": {"algorithm": {"name": "dcs3gd"}},
    "dcs3gd-stragglers": {
        "algorithm": {"name": "dcs3gd", "collective": "tree"},
        "compute": {"noise_sigma": 0.05, "stragglers": [{"ranks": [3], "factor": 3.0, "duration": "1s"}]},
        "platform": {"preset": "cluster-a100-hdr", "nodes": 4, "device_overrides": [{"ranks": [5], "speed": 0.5}]}},
    "dcs3gd-epochs-and-final-merge": {"algorithm": {"name": "dcs3gd"}, "stop": {"epochs": 2}},
    "dcs3gd-on-call": {"algorithm": {"name": "dcs3gd"},
                       "platform": {"preset": "cluster-a100-hdr", "nodes": 4, "progress": "on_call"}},
    "dcs3gd-loader-workers": {"algorithm": {"name": "dcs3gd"},
                              "workload.data_loading": {"per_sample": "40us", "loader_workers": 2}},
    "dcs3gd-time-limit": {"algorithm": {"name": "dcs3gd"}, "stop": {"virtual_time": "2.5ms"}},
    "dcs3gd-slow-links": {"algorithm": {"name": "dcs3gd"}, "stop": {"steps": 9},
                          "faults": {"link_degradation": [{"links": ["*"], "factor": 0.01, "start": "0s"}]}},
    # daso: one lane per local rank; node collectives join the lanes node by node, global syncs stay in a lane
    "daso-cycling": {"algorithm": {"name": "daso", "schedule": "fixed", "B": 2, "S": 1}},
    "daso-blocking-tree": {"algorithm": {"name": "daso", "schedule": "fixed", "B": 3, "S": 0},
                           "network": {"collective": "tree"}},
    "daso-adaptive-epochs": {"algorithm": {"name": "daso", "warmup_epochs": 1, "cooldown_epochs": 1,
                                           "max_global_skips": 4},
                             "stop": {"epochs": 4},
                             "workload.loss_curve": {"law": "exponential", "start": 2.3, "end": 0.2, "scale": 1.0}},
    "daso-stragglers": {
        "algorithm": {"name": "daso", "schedule": "fixed", "B": 2, "S": 2},
        "compute": {"noise_sigma": 0.05, "stragglers": [{"ranks": [3], "factor": 3.0, "duration": "1s"}]},
        "platform": {"preset": "cluster-a100-hdr", "nodes": 4, "device_overrides": [{"ranks": [5], "speed": 0.5}]}},
    "daso-host-staging-flows": {"algorithm": {"name": "daso", "schedule": "fixed", "B": 2, "S": 1,
                                              "global_staging": "host"},
                                "network": {"collective_fidelity": "flows"}},
    "daso-loader-workers": {"algorithm": {"name": "daso", "schedule": "fixed", "B": 2, "S": 1},
                            "workload.data_loading": {"per_sample": "40us", "loader_workers": 2}},
    "daso-one-gpu-per-node": {"algorithm": {"name": "daso", "schedule": "fixed", "B": 2, "S": 1},
                              "platform": {"preset": "cluster-a100-hdr", "nodes": 4, "node": {"devices": 1}}},
    "daso-eight-gpus-per-node": {"algorithm": {"name": "daso", "schedule": "fixed", "B": 3, "S": 1},
                                 "platform": {"preset": "cluster-a100-hdr", "nodes": 2, "node": {"devices": 8}}},
    # node 2's slower interconnect: its node collectives are measured on their own, not moved from node 0's
    "daso-one-slower-node": {"algorithm": {"name": "daso", "schedule": "fixed", "B": 2, "S": 1},
                             "platform": {"preset": "cluster-a100-hdr", "nodes": 4, "node_groups": [
                                 {"nodes": [2], "node": {"intra_link": {"bandwidth": "10GB/s"}}}]}},
    # on_call: a non-blocking global sync starts once every member of its group is inside a call at once
    "daso-on-call": {"algorithm": {"name": "daso", "schedule": "fixed", "B": 2, "S": 2},
                     "platform": {"preset": "cluster-a100-hdr", "nodes": 4, "progress": "on_call"}},
    "daso-on-call-stragglers": {
        "algorithm": {"name": "daso", "schedule": "fixed", "B": 2, "S": 1},
        "compute": {"noise_sigma": 0.3, "stragglers": [{"ranks": [6], "factor": 4.0, "duration": "1s"}]},
        "platform": {"preset": "cluster-a100-hdr", "nodes": 4, "progress": "on_call"}},
    "daso-on-call-adaptive": {"algorithm": {"name": "daso", "warmup_epochs": 1, "cooldown_epochs": 1,
                                            "max_global_skips": 4},
                              "stop": {"epochs": 4},
                              "workload.loss_curve": {"law": "exponential", "start": 2.3, "end": 0.2, "scale": 1.0},
                              "platform": {"preset": "cluster-a100-hdr", "nodes": 4, "progress": "on_call"}},
    "daso-step-limit": {"algorithm": {"name": "daso", "schedule": "fixed", "B": 2, "S": 1}, "stop": {"steps": 7}},
    "daso-time-limit": {"algorithm": {"name": "daso", "schedule": "fixed", "B": 2, "S": 1},
                        "stop": {"virtual_time": "2.5ms"}},
}


@pytest.mark.parametrize("case", sorted(TIMING_CASES))
def test_timing_only_group_equals_per_rank_processes(case):
    (_, per_rank), (group_sim, group) = run_both(timing_scenario(**TIMING_CASES[case]))
    assert group_sim.in_lockstep
    assert_same_results(per_rank, group)


def test_daso_runs_one_lane_per_local_rank_and_records_run_wide_events_once():
    data = timing_scenario(**TIMING_CASES["daso-adaptive-epochs"])
    (_, per_rank), (sim, result) = run_both(data)
    assert sim.execution["why"] == ("the workers run as 4 lockstep lanes, one per role: one process moves each "
                                    "lane's workers")
    assert [list(lane.ranks) for lane in sim.world.lanes.lanes] == [[0, 4, 8, 12], [1, 5, 9, 13], [2, 6, 10, 14],
                                                                    [3, 7, 11, 15]]
    for kind in ("phase", "schedule", "epoch_loss", "global_sync"):
        ours = [e for e in result.recorder.events if e["kind"] == kind]
        theirs = [e for e in per_rank.recorder.events if e["kind"] == kind]
        assert ours and len(ours) == len(theirs), kind
        for mine, other in zip(ours, theirs):  # times to a relative 1e-12, as every table
            assert mine.pop("time_s") == pytest.approx(other.pop("time_s"), rel=1e-12) and mine == other, kind


def test_phases_replayed_alone_only_when_the_group_is_all_the_traffic_and_every_phase_ends():
    _, (plain, _) = run_both(timing_scenario())
    _, (degraded, _) = run_both(timing_scenario(**TIMING_CASES["link-degradation"]))
    _, (cut, _) = run_both(timing_scenario(**TIMING_CASES["dcs3gd-time-limit"]))
    assert plain.world.network_exclusive and plain.world._alone
    assert not degraded.world.network_exclusive and not degraded.world._alone
    # a time limit may stop the run inside a phase: it counts what the phase's flows had moved by then
    assert cut.in_lockstep and cut.world.network_exclusive


@pytest.mark.parametrize("changes", [
    {"platform": {"preset": "laptop-cpu", "nodes": 1, "node": {"devices": 4, "cores": 2}}},  # shared cores
    {"faults": {"node_crash": [{"node": 1, "at": "1ms"}]}},  # a crash stops some ranks mid-step
    {"algorithm": {"name": "asgd"}, "workers": 3},  # not a lockstep algorithm
], ids=["shared-cores", "crash", "asgd"])
def test_no_group_where_results_would_differ(changes):
    sim = Simulation(scenario_from_dict(replay_scenario(**changes)), None)
    sim.execute()
    assert not sim.in_lockstep


@pytest.mark.parametrize("changes, why", [
    ({"faults": {"link_degradation": [{"links": ["*"], "factor": 0.01, "start": "0s"}]}},
     "links change capacity (faults.link_degradation): collectives joining lockstep lanes are priced alone on "
     "fixed links"),
], ids=["slow-links"])
def test_daso_runs_one_process_per_rank_where_its_lanes_cannot_and_says_why(changes, why):
    data = timing_scenario(algorithm={"name": "daso", "schedule": "fixed", "B": 2, "S": 1}, **changes)
    (_, per_rank), (sim, result) = run_both(data)
    assert not sim.in_lockstep and sim.execution["why"] == why
    assert_same_results(per_rank, result)


def test_dcs3gd_replay_runs_one_process_per_rank_and_says_why():
    sim = Simulation(scenario_from_dict(replay_scenario(algorithm={"name": "dcs3gd"})), None)
    sim.execute()
    assert not sim.in_lockstep
    assert sim.execution["why"] == ("algorithm 'dcs3gd' runs in lockstep only without tensor math "
                                    "(its workers' replicas differ in replay)")


def test_a_step_limit_keeps_only_the_rows_applied_by_the_stop():
    """The first worker to apply the last step stops the run; a group records every member's row of that
    step at once, and the rows of members later than the stop are dropped, as their processes never made them."""
    data = timing_scenario(algorithm={"name": "dcs3gd"}, stop={"steps": 5})
    (_, per_rank), (group_sim, group) = run_both(data)
    assert group_sim.in_lockstep
    steps = metrics.steps_table(group)
    assert steps["time_s"].max() <= group.virtual_time_s
    assert len(steps) < 5 * 16  # the last step's later members are not in it
    pd.testing.assert_frame_equal(steps, metrics.steps_table(per_rank), rtol=1e-12, atol=0.0)


def test_lockstep_off_runs_one_process_per_rank():
    sim = Simulation(scenario_from_dict(replay_scenario()), None, lockstep=False)
    sim.execute()
    assert not sim.in_lockstep and len(sim.process_ranks) == 4


def test_a_group_refuses_what_would_set_its_members_apart():
    from simdist.errors import SimulationError
    from simdist.runtime.group import GroupRuntime

    sim = Simulation(scenario_from_dict(timing_scenario()), None)
    group = GroupRuntime(sim.world, [0, 1, 2])
    for call in (lambda: group.send(1, None), lambda: group.recv(), lambda: group.poll(), lambda: group.barrier(None)):
        with pytest.raises(SimulationError, match="lockstep group cannot"):
            call()
    with pytest.raises(SimulationError, match="only reduce over all of its members"):
        group.allreduce(sim.world.group([0, 1], "part"), None)


def test_member_tensors_cast_and_slice_member_by_member():
    import torch

    from simdist.algorithms.tensors import cast, flat_slice
    from simdist.runtime.group import MemberTensor

    grads = MemberTensor([torch.arange(4.0), torch.arange(4.0) + 10])
    half = cast(flat_slice(grads, 1, 3), torch.float16)
    assert [m.tolist() for m in half.members] == [[1.0, 2.0], [11.0, 12.0]]
    assert half.dtype == torch.float16 and half.numel() == 2 and half.element_size() == 2
    with pytest.raises(AttributeError):  # no meaning for a group: refused, not guessed
        grads.norm()


def test_update_blocks_apply_at_each_member_s_time_and_stop_at_the_end():
    from simdist.recorder import UpdateBlock

    block = UpdateBlock(np.array([1.0, 2.0, 3.0]), np.array([4, 5, 6]), 7, 7, 1, np.array([8, 8, 8]), None,
                        extra={"lag_s": np.array([0.1, 0.2, 0.3]), "lr": 0.5})
    rows = block.rows()
    assert [(r["time_s"], r["worker"], r["lag_s"], r["lr"]) for r in rows] == [
        (1.0, 4, 0.1, 0.5), (2.0, 5, 0.2, 0.5), (3.0, 6, 0.3, 0.5)]
    kept = block.until(2.0)
    assert [r["worker"] for r in kept.rows()] == [4, 5] and list(kept.extra["lag_s"]) == [0.1, 0.2]
    assert block.until(5.0) is block


def test_a_node_unlike_the_first_has_its_collectives_priced_on_its_own_links():
    data = timing_scenario(**TIMING_CASES["daso-one-slower-node"])
    sim = Simulation(scenario_from_dict(data), None)
    sim.execute()
    for (_, kind, *_rest), pieces in sim.world.lanes._pieces.items():
        seconds = [sum(s for s, _ in instance) for instance in pieces]
        assert seconds[0] == seconds[1] == seconds[3] < seconds[2], kind  # node 2 is slower; 0, 1, 3 alike


def test_lanes_join_only_whole_lanes_or_their_first_members():
    from simdist.errors import SimulationError
    from simdist.runtime.group import GroupRuntime
    from simdist.runtime.lanes import LaneSet

    sim = Simulation(scenario_from_dict(timing_scenario()), None)
    lanes = LaneSet(sim.world, [GroupRuntime(sim.world, [0, 4, 8, 12]), GroupRuntime(sim.world, [1, 5, 9, 13])])
    whole = lanes.shape((0, 4, 8, 12, 1, 5, 9, 13))
    assert not whole.per_member and whole.instances == ((0, 4, 8, 12, 1, 5, 9, 13),)
    by_node = lanes.shape((0, 1))
    assert by_node.per_member and by_node.instances == ((0, 1), (4, 5), (8, 9), (12, 13))
    assert by_node.root_of(lanes.lanes, lanes.where, 1) == [1, 5, 9, 13]
    with pytest.raises(SimulationError, match="whole lanes or over the lanes' first members"):
        lanes.shape((0, 5))  # rank 5 is not a first member
    with pytest.raises(SimulationError, match="outside every lane"):
        lanes.shape((0, 2))


def test_collectives_joining_lanes_must_each_be_alone_on_their_links():
    """Two nodes' copies of a collective that cross the same leaf uplinks would slow each other:
    pricing each alone would be wrong, so the lanes refuse them."""
    import torch

    from simdist.errors import SimulationError
    from simdist.runtime.group import GroupRuntime
    from simdist.runtime.lanes import LaneSet
    from simdist.runtime.phantom import PhantomTensor

    platform = {"preset": "cluster-a100-hdr", "nodes": 4,
                "fabric": {"topology": "fat_tree", "nodes_per_leaf": 2, "oversubscription": 2}}
    world = Simulation(scenario_from_dict(timing_scenario(platform=platform)), None).world
    world.network_exclusive = True
    first, second = GroupRuntime(world, [0, 4]), GroupRuntime(world, [8, 12])  # nodes 0, 1 and 2, 3
    world.lanes = lanes = LaneSet(world, [first, second])
    across = world.group([0, 8], "across leaves")  # instances (0, 8) and (4, 12) both cross leaf 0 -> leaf 1
    tensor = PhantomTensor(1_000_000, torch.float32)
    lanes.call(first, "allreduce", across, tensor)
    with pytest.raises(SimulationError, match="share links between instances"):
        lanes.call(second, "allreduce", across, tensor)
