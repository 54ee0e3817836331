"""Faults as scenario input: node crashes, link degradation windows, stragglers, and the guards.

Every scenario in ``scenarios/faults/`` states its expected status in a ``# expected status:``
comment (documented per algorithm in docs/faults.md); each must run to exactly that status.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import simpy

from simdist.cli import main
from simdist.errors import InputError
from simdist.metrics import steps_table
from simdist.platform.network import FlowNetwork
from simdist.platform.topology import Link
from simdist.scenario import load_scenario, scenario_from_dict
from simdist.simulate import simulate

FAULTS = Path(__file__).resolve().parents[1] / "scenarios" / "faults"
PROFILE = str(Path(__file__).parent / "data" / "tiny_profile.yaml")
FAULT_FILES = sorted(FAULTS.glob("*.yaml"))


def expected_status(path: Path) -> str:
    match = re.search(r"^# expected status: (\w+)", path.read_text(), re.MULTILINE)
    assert match, f"{path.name} documents no expected status"
    return match.group(1)


def test_fault_scenarios_exist():
    assert len(FAULT_FILES) >= 10
    assert {expected_status(p) for p in FAULT_FILES} >= {"stalled", "completed"}


@pytest.mark.parametrize("path", FAULT_FILES, ids=lambda p: p.stem)
def test_fault_scenario_runs_to_its_documented_status(path):
    result = simulate(load_scenario(path, ["evaluation.every_steps=1000"]))
    assert result.status == expected_status(path)
    crashes = load_scenario(path).faults.node_crash
    assert bool(result.extra["faults"]["crashed_ranks"]) == bool(crashes)
    if result.status == "stalled":  # it stopped soon after the crash, not at a limit
        assert result.virtual_time_s >= min(c.at for c in crashes)


def tiny(algorithm: dict, *, nodes: int = 4, workers: int = 4, devices: int = 1, **changes):
    data = {
        "name": "fault-test",
        "platform": {"preset": "laptop-cpu", "nodes": nodes, "node": {"devices": devices}},
        "workers": workers,
        "workload": {"model": {"name": "mlp", "hidden": [16]},
                     "dataset": {"name": "synthetic", "samples": 300, "features": 8, "classes": 3},
                     "batch_size": 16, "optimizer": {"name": "sgd", "lr": 0.05}},
        "algorithm": algorithm,
        "stop": {"epochs": 2},
        "evaluation": {"every_steps": 10},
        "compute": {"profiles": [PROFILE]},
    }
    data.update(changes)
    return scenario_from_dict(data)


def test_crashed_worker_gradients_are_applied_or_counted_dropped():
    scenario = tiny({"name": "asgd"}, nodes=5, faults={"node_crash": [{"node": 1, "at": "1ms"}]})
    result = simulate(scenario)
    assert result.status == "completed"
    faults = result.extra["faults"]
    assert faults["crashed_ranks"] == [1]
    computed = sum(1 for s in result.recorder.spans
                   if s.rank == 1 and s.kind == "compute" and s.name == "forward/backward")
    applied = int((steps_table(result)["worker"] == 1).sum())
    assert faults["dropped_gradients"] == 1 and applied + faults["dropped_gradients"] == computed
    # the others still consume their whole shards, the crashed one stops part-way
    others = steps_table(result).groupby("worker")["batch_size"].sum()
    assert others[0] == others[2] == others[3] > others[1]


def test_crash_with_timed_evaluation_and_no_time_limit_does_not_hang():
    scenario = tiny({"name": "sync"}, faults={"node_crash": [{"node": 2, "at": "1ms"}]},
                    evaluation={"every_time": "0.1ms"})
    result = simulate(scenario)
    assert result.status == "stalled"
    assert result.virtual_time_s < 0.01


def test_crash_after_the_run_ends_changes_nothing():
    base = simulate(tiny({"name": "sync"}))
    late = simulate(tiny({"name": "sync"}, faults={"node_crash": [{"node": 2, "at": "100s"}]}))
    assert late.status == base.status == "completed"
    assert late.recorder.updates == base.recorder.updates and late.virtual_time_s == base.virtual_time_s


def test_link_degradation_slows_the_run_and_ends():
    base = simulate(tiny({"name": "sync"}))
    slow = simulate(tiny({"name": "sync"}, faults={"link_degradation": [
        {"links": ["n*.nic*"], "factor": 0.01, "start": "0.2ms", "duration": "1ms"}]}))
    assert slow.status == "completed"
    assert slow.virtual_time_s > base.virtual_time_s
    assert len(slow.recorder.updates) == len(base.recorder.updates)


def test_degradation_window_on_a_flow_is_exact():
    """100 B over a 100 B/s link; capacity halved during [0.5, 1.0): 50 + 25 + 25 B → ends at 1.25 s."""
    env = simpy.Environment()
    link = Link(0, "l", "test", 0.0, 100.0)
    net = FlowNetwork(env, [link])
    done = net.transfer([link], 100.0, src=0, dst=1)
    env.timeout(0.5).callbacks.append(lambda _e: net.degrade([0], 0.5, active=True))
    env.timeout(1.0).callbacks.append(lambda _e: net.degrade([0], 0.5, active=False))
    env.run(until=done)
    assert env.now == pytest.approx(1.25)
    assert net._capacity == [100.0]  # restored exactly
    assert net.sent_bytes[(0, 1)] == net.received_bytes[(0, 1)] == 100


def test_straggler_window_slows_only_inside_it():
    base = simulate(tiny({"name": "asgd"}, nodes=5))
    slow = simulate(tiny({"name": "asgd"}, nodes=5, compute={
        "profiles": [PROFILE], "stragglers": [{"ranks": [2], "factor": 5, "start": "0.2ms", "duration": "0.5ms"}]}))
    assert slow.status == base.status == "completed"
    assert slow.virtual_time_s > base.virtual_time_s


def test_event_guard_ends_a_run_with_its_status():
    result = simulate(tiny({"name": "sync"}, stop={"epochs": 2, "max_events": 50}))
    assert result.status == "event_limit"
    assert result.extra["events"] == 50


def test_wall_time_guard_ends_a_run_with_its_status():
    result = simulate(tiny({"name": "asgd"}, nodes=5, stop={"epochs": 50, "max_wall_time": "1ns"}))
    assert result.status == "wall_time_limit"


@pytest.mark.parametrize("faults, field", [
    ({"node_crash": [{"node": 4, "at": "1s"}]}, "faults.node_crash[0].node"),
    ({"node_crash": [{"node": 0, "at": "-1s"}]}, "faults.node_crash[0].at"),
    ({"link_degradation": [{"links": ["nope*"], "factor": 0.5}]}, "faults.link_degradation[0].links"),
    ({"link_degradation": [{"links": ["*"], "factor": 2}]}, "faults.link_degradation[0].factor"),
    ({"link_degradation": [{"links": ["*"], "factor": 0.5, "duration": "0s"}]}, "faults.link_degradation[0]"),
    ({"node_crashes": []}, "faults.node_crashes"),
])
def test_bad_faults_name_the_field(faults, field):
    with pytest.raises(InputError) as info:
        tiny({"name": "sync"}, faults=faults)
    assert info.value.field == field


def test_summary_says_stalled(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["run", str(FAULTS / "sync_node_crash.yaml"), "--out", str(out), "--quiet", "--no-plots"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "stalled"
    faults = json.loads((out / "manifest.json").read_text())["faults"]
    assert faults["crashed_ranks"] == [1]
