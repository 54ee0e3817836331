"""What a rank's runtime calls cost its CPU beyond the messages: the driver's turn between two
requests (``platform.calls``) and a collective's first call after compute with cold caches
(``messages.send_overhead_after_compute``), in the simulator and in the network calibration."""

from __future__ import annotations


import pytest
from pydantic import ValidationError

import simdist
from simdist.calibrate.network import calls_section
from simdist.platform.cost_spec import CallCostSpec
from simdist.training.replica import PhantomTensor

from conftest import build_platform, build_world
from helpers import assert_run_refuses, tiny_scenario

CALLS = {"overhead": "10us", "overhead_after_compute": "100us", "source": "hand-made"}
COLD_MESSAGES = {"send_overhead": "10us", "send_overhead_after_compute": "200us", "source": "hand-made"}
FB_S = 1e-3 + 1e-4 * 4  # build_world's compute model at a batch of 4


class _Batch:
    size = 4


def _spans(world, rank):
    return [(s.kind, s.name, s.start_s, s.end_s) for s in world.recorder.spans if s.rank == rank]


@pytest.mark.parametrize("cores", [None, 1])
def test_each_turn_costs_the_calls_overhead_and_the_first_after_compute_its_cold_cost(cores):
    node = {"devices": 1, **({"cores": cores} if cores else {})}
    world = build_world(1, platform=build_platform("laptop-cpu", node=node, calls=CALLS))

    def worker(rt):
        yield rt.compute(None, _Batch())
        yield rt.busy(1e-3, "apply")
        yield rt.busy(2e-3, "update")

    world.spawn(0, worker(world.runtime(0)))
    world.env.run()
    spans = _spans(world, 0)
    assert [(kind, name) for kind, name, _, _ in spans] == [
        ("compute", "forward/backward"), ("compute", "runtime call"), ("compute", "apply"),
        ("compute", "runtime call"), ("compute", "update"), ("compute", "runtime call")]
    durations = [end - start for _, _, start, end in spans]
    assert durations == [pytest.approx(d) for d in (FB_S, 100e-6, 1e-3, 10e-6, 2e-3, 10e-6)]
    assert world.env.now == pytest.approx(FB_S + 100e-6 + 1e-3 + 10e-6 + 2e-3 + 10e-6)


def test_without_calls_the_turns_are_free():
    world = build_world(1)

    def worker(rt):
        yield rt.compute(None, _Batch())
        yield rt.busy(1e-3, "apply")

    world.spawn(0, worker(world.runtime(0)))
    world.env.run()
    assert "runtime call" not in {name for _, name, _, _ in _spans(world, 0)}
    assert world.env.now == pytest.approx(FB_S + 1e-3)


def test_a_blocking_collective_starts_once_every_member_has_made_its_cold_call():
    world = build_world(2, platform=build_platform("laptop-cpu", node={"devices": 2}, messages=COLD_MESSAGES))
    group = world.runtime(0).group([0, 1], "world")

    def worker(rt, busy_s):
        yield rt.busy(busy_s, "apply")
        yield rt.compute(None, _Batch())
        yield rt.allreduce(group, PhantomTensor(256))

    world.spawn(0, worker(world.runtime(0), 0.0))
    world.spawn(1, worker(world.runtime(1), 1e-3))  # rank 1 computes 1 ms later
    world.env.run()
    late_fb_end = 1e-3 + FB_S
    for rank, fb_end in ((0, FB_S), (1, late_fb_end)):
        spans = _spans(world, rank)
        overhead = next(s for s in spans if s[1] == "message overhead")
        assert (overhead[2], overhead[3]) == (pytest.approx(fb_end), pytest.approx(fb_end + 190e-6))
        moving = next(s for s in spans if s[0] == "comm" and s[1] == "allreduce")
        assert moving[2] == pytest.approx(late_fb_end + 190e-6)  # the last member's call posted it


def test_a_nonblocking_collective_posts_after_the_cold_call_which_the_next_compute_pays():
    world = build_world(1, platform=build_platform("laptop-cpu", node={"devices": 1}, messages=COLD_MESSAGES))
    group = world.runtime(0).group([0], "world")
    started = []

    def worker(rt):
        yield rt.compute(None, _Batch())
        request = rt.iallreduce(group, PhantomTensor(256))
        yield rt.compute(None, _Batch())
        yield request
        started.append(request.started_s)

    world.spawn(0, worker(world.runtime(0)))
    world.env.run()
    assert started == [pytest.approx(FB_S + 190e-6)]
    spans = _spans(world, 0)
    assert [(k, n) for k, n, _, _ in spans][:3] == [("compute", "forward/backward"), ("comm", "message overhead"),
                                                   ("compute", "forward/backward")]
    assert spans[1][3] - spans[1][2] == pytest.approx(190e-6)


def _sync(platform_fields: dict) -> dict:
    return tiny_scenario(platform={"preset": "laptop-cpu", "node": {"devices": 2}, **platform_fields},
                         stop={"steps": 4})


def test_a_run_charges_the_turns_to_update_and_the_cold_collective_call_to_comm_cpu():
    plain = simdist.run(_sync({}))
    priced = simdist.run(_sync({"calls": CALLS, "messages": COLD_MESSAGES}))
    assert priced.manifest["execution"]["mode"] == "per_rank"
    grew = priced.ledger.groupby("rank")[["update", "comm_cpu"]].sum() - \
        plain.ledger.groupby("rank")[["update", "comm_cpu"]].sum()
    steps = priced.ledger.groupby("rank").size()
    # a step: forward/backward (cold turn), pack, allreduce, unpack, update (four warm turns)
    assert (grew["update"] >= steps * (100e-6 + 3 * 10e-6) * 0.999).all()
    assert (grew["comm_cpu"] >= steps * 190e-6 * 0.999).all()
    assert priced.summary["virtual_time_s"] > plain.summary["virtual_time_s"]
    # the manifest says whether the turns were charged, and from what
    assert plain.manifest["runtime_calls"]["charged"] is False
    assert "calibrate network --path runtime" in plain.manifest["runtime_calls"]["why"]
    assert priced.manifest["runtime_calls"] == {"charged": True, "overhead_s": pytest.approx(10e-6),
                                                "overhead_after_compute_s": pytest.approx(100e-6),
                                                "source": "hand-made"}


@pytest.mark.parametrize("fields, why", [
    ({"calls": CALLS}, "platform.calls"),
    ({"messages": COLD_MESSAGES}, "messages.send_overhead_after_compute"),
])
def test_priced_calls_run_one_process_per_rank_and_say_why(fields, why):
    timing_only = {"model": "mlp", "dataset": {"name": "synthetic", "samples": 200, "features": 4, "classes": 2},
                   "batch_size": 8, "timing_only": True}
    data = tiny_scenario(platform={"preset": "laptop-cpu", "node": {"devices": 4}, **fields}, workload=timing_only)
    execution = simdist.run(data).manifest["execution"]
    assert execution["mode"] == "per_rank" and why in execution["why"]


def test_call_costs_need_a_source_and_are_not_negative():
    assert CallCostSpec(overhead="7us", source="x").seconds(True) == pytest.approx(7e-6)  # cold defaults to warm
    assert CallCostSpec(overhead="7us", overhead_after_compute="50us", source="x").seconds(True) == pytest.approx(5e-5)
    with pytest.raises(ValidationError):
        CallCostSpec(overhead="7us")
    with pytest.raises(ValidationError):
        CallCostSpec(overhead="-1us", source="x")


def test_a_scenario_with_a_bad_call_overhead_exits_2_naming_the_field(tmp_path):
    data = _sync({"calls": {"overhead": "soon", "source": "x"}})
    assert_run_refuses(tmp_path, data, "platform.calls.overhead")


def test_the_network_overlay_carries_the_timed_turns():
    document = {"mpi_library": "MPICH 5", "calls": {"overhead_s": 6.5e-6, "turns": 2000,
                                                    "overhead_after_compute_s": 5.1e-5, "cold_turns": 64,
                                                    "evicted_bytes": 64 << 20}}
    section = calls_section(document)
    assert section["overhead"] == 6.5e-6 and section["overhead_after_compute"] == 5.1e-5
    assert "2000 turns" in section["source"] and "64 MiB" in section["source"]
    CallCostSpec.model_validate(section)  # what the platform reads back
    assert calls_section({"calls": None}) is None and calls_section({}) is None


def test_a_rank_whose_node_dies_during_the_runtimes_turn_runs_no_further():
    world = build_world(1, platform=build_platform("laptop-cpu", node={"devices": 1}, calls=CALLS))

    def worker(rt):
        yield rt.compute(None, _Batch())
        yield rt.busy(1e-3, "apply")  # never reached: the node dies in the turn after the compute

    world.spawn(0, worker(world.runtime(0)))
    world.env.timeout(FB_S + 50e-6).callbacks.append(lambda _event: world.crash(0, [0]))
    world.env.run()
    assert [name for _, name, _, _ in _spans(world, 0)] == ["forward/backward", "runtime call"]
