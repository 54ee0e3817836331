"""Heterogeneous compute: CPU shares, shared cores (processor sharing), jitter and stragglers."""

from __future__ import annotations

import math

import pytest
import torch

from simdist.errors import InputError
from simdist.platform.compute import ComputeModel, ModelTiming
from simdist.platform.spec import PlatformSpec
from simdist.platform.stragglers import StragglerSchedule, StragglerSpec
from simdist.platform.topology import Platform
from simdist.recorder import Recorder
from simdist.runtime.sim import Request, SimWorld
from simdist.scenario import scenario_from_dict
from simdist.simulate import simulate

T1 = 0.1  # seconds per sample on one core


class Batch:
    size = 10  # one core-second of work at T1


def world(node: dict, overrides=(), nodes: int = 1, **compute):
    platform = Platform(PlatformSpec.model_validate({"nodes": nodes, "node": {"device": {"kind": "cpu"}, **node},
                                                     "device_overrides": list(overrides)}))
    model = ComputeModel(platform, {("host-cpu", "m"): ModelTiming(0.0, T1, None, "test")}, model="m",
                         forward_flops_per_sample=1.0, parameter_layers=1, seed=0, **compute)
    return SimWorld(platform, model, Recorder(), gradient_source=lambda r, rep, b: (lambda: (torch.zeros(1), 0.0)))


def finish_times(w, ranks, starts=None):
    ends = {}

    def proc(rt, delay_rank):
        if starts and starts.get(rt.rank):
            yield Request("busy", "idle", rt.world.env.timeout(starts[rt.rank]))  # a late start, not work
        yield rt.compute(None, Batch())
        ends[rt.rank] = rt.now()

    for r in ranks:
        w.spawn(r, proc(w.runtime(r), r))
    w.env.run()
    return ends


def test_cpu_share_divides_compute_time():
    ends = finish_times(world({"devices": 2}, [{"ranks": [1], "cpus": 1.5}]), [0, 1])
    assert ends[0] == pytest.approx(1.0)
    assert ends[1] == pytest.approx(1.0 / 1.5)


def test_ranks_sharing_fewer_cores_slow_each_other_down():
    # 4 ranks, 2 cores: each gets half a core while all compute
    assert finish_times(world({"devices": 4, "cores": 2}), range(4)) == pytest.approx({r: 2.0 for r in range(4)})


def test_processor_sharing_speeds_up_when_a_neighbour_finishes():
    # 2 ranks on 1 core; rank 1 starts 0.5 s late: rank 0 runs alone 0.5 s, then both share
    ends = finish_times(world({"devices": 2, "cores": 1}), [0, 1], starts={1: 0.5})
    # rank 0: 0.5 core-s alone, 0.5 core-s at half speed -> ends at 1.5; rank 1: 0.5 core-s shared, 0.5 alone -> 2.0
    assert ends[0] == pytest.approx(1.5)
    assert ends[1] == pytest.approx(2.0)


def test_inference_on_a_shared_core_is_shared_like_compute():
    w = world({"devices": 2, "cores": 1})
    ends = {}

    def evaluate(rt):
        yield rt.inference(30)  # a third of 3 core-seconds: 1 core-second
        ends[rt.rank] = rt.now()

    for r in (0, 1):
        w.spawn(r, evaluate(w.runtime(r)))
    w.env.run()
    assert ends == pytest.approx({0: 2.0, 1: 2.0})


def test_alone_on_shared_cores_equals_dedicated():
    assert finish_times(world({"devices": 4, "cores": 4}), [2]) == pytest.approx({2: 1.0})


def test_core_sets_share_only_within_a_set():
    # ranks 0 and 3 pinned to one core, 1 and 2 to another: each pair halves its own core
    node = {"devices": 4, "core_sets": [{"cores": 1, "devices": [0, 3]}, {"cores": 1, "devices": [1, 2]}]}
    assert finish_times(world(node), range(4)) == pytest.approx({r: 2.0 for r in range(4)})
    # rank 0 alone on its set runs at full speed while 1 and 2 share theirs
    assert finish_times(world(node), [0, 1, 2]) == pytest.approx({0: 1.0, 1: 2.0, 2: 2.0})


def test_a_rank_whose_set_mate_waits_has_the_core_alone():
    # the difference from a fixed cpus share: rank 2 starts 0.5 s late, rank 1 runs alone until then
    node = {"devices": 3, "core_sets": [{"cores": 1, "devices": [1, 2]}]}
    ends = finish_times(world(node), [1, 2], starts={2: 0.5})
    assert ends == pytest.approx({1: 1.5, 2: 2.0})
    fixed = finish_times(world({"devices": 3}, [{"ranks": [1, 2], "cpus": 0.5}]), [1, 2], starts={2: 0.5})
    assert fixed == pytest.approx({1: 2.0, 2: 2.5})


def test_a_rank_in_no_core_set_keeps_its_cpus():
    node = {"devices": 3, "core_sets": [{"cores": 1, "devices": [0, 1]}]}
    ends = finish_times(world(node, [{"ranks": [2], "cpus": 2.0}]), range(3))
    assert ends == pytest.approx({0: 2.0, 1: 2.0, 2: 0.5})


def test_core_sets_repeat_on_every_node():
    w = world({"devices": 2, "core_sets": [{"cores": 1, "devices": [0, 1]}]}, nodes=2)
    assert not w.lockstep_supported
    assert finish_times(w, range(4)) == pytest.approx({r: 2.0 for r in range(4)})


@pytest.mark.parametrize("node, message", [
    ({"devices": 2, "cores": 2, "core_sets": [{"cores": 1, "devices": [0]}]}, "cores and core_sets: give one"),
    ({"devices": 2, "core_sets": [{"cores": 1, "devices": [2]}]}, r"core_sets\[0\].devices: device 2 does not exist"),
    ({"devices": 2, "core_sets": [{"cores": 1, "devices": [0]}, {"cores": 1, "devices": [0, 1]}]},
     r"core_sets\[1\].devices: device 0 is already in core_sets\[0\]"),
    ({"devices": 2, "core_sets": [{"cores": 0, "devices": [0]}]}, "greater than or equal to 0.01"),
])
def test_inconsistent_core_sets_are_refused(node, message):
    with pytest.raises(ValueError, match=message):
        PlatformSpec.model_validate({"node": node})


def test_jitter_has_mean_one_and_is_seeded():
    w = world({"devices": 1}, noise_sigma=0.3)
    draws = [w.compute_model.duration_s(0, 10) for _ in range(4000)]
    assert sum(draws) / len(draws) == pytest.approx(1.0, rel=0.03)
    again = world({"devices": 1}, noise_sigma=0.3)
    assert [again.compute_model.duration_s(0, 10) for _ in range(10)] == draws[:10]


def test_straggler_windows_fixed_periodic_random():
    fixed = StragglerSchedule([StragglerSpec(ranks=[0], factor=3.0, start="1s", duration="2s")], seed=0)
    assert [fixed.factor(0, t) for t in (0.5, 1.0, 2.9, 3.0, 10.0)] == [1.0, 3.0, 3.0, 1.0, 1.0]
    assert fixed.factor(1, 2.0) == 1.0
    periodic = StragglerSchedule([StragglerSpec(ranks=[0], factor=2.0, start=0, duration=1, every=10)], seed=0)
    assert [periodic.factor(0, t) for t in (0.5, 5.0, 10.5, 101.0)] == [2.0, 1.0, 2.0, 1.0]
    spec = StragglerSpec(ranks=[0, 1], factor=2.0, duration=1.0, random={"mean_interval": 5.0})
    schedule = StragglerSchedule([spec], seed=7)
    samples = [schedule.factor(0, t / 10) for t in range(100_000)]
    slow_fraction = sum(f > 1 for f in samples) / len(samples)
    assert slow_fraction == pytest.approx(1 - math.exp(-1 / 5), abs=0.05)  # P(a window covers t)
    assert [StragglerSchedule([spec], seed=7).factor(0, t / 10) for t in range(2000)] == samples[:2000]


def test_straggler_slows_a_sync_run(tmp_path):
    from pathlib import Path

    profile = str(Path(__file__).parent / "data" / "tiny_profile.yaml")
    base = {"platform": {"preset": "laptop-cpu", "node": {"devices": 2}},
            "workload": {"model": "mlp", "dataset": "digits", "batch_size": 16},
            "algorithm": "sync", "stop": {"steps": 20}, "compute": {"profiles": [profile]}}
    plain = simulate(scenario_from_dict(base)).virtual_time_s
    slowed = dict(base, compute={"profiles": [profile],
                                 "stragglers": [{"ranks": [1], "factor": 4.0, "start": 0, "duration": "1h"}]})
    assert simulate(scenario_from_dict(slowed)).virtual_time_s > 3 * plain
    bad = dict(base, compute={"profiles": [profile], "stragglers": [{"ranks": [9], "factor": 2, "duration": 1}]})
    with pytest.raises(InputError, match=r"compute.stragglers\[0\].ranks"):
        scenario_from_dict(bad)
