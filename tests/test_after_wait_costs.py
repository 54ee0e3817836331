"""What a rank's calls cost right after it waited, and right after its own work: the platform's
``calls.overhead_after_wait``, ``calls.overhead_after_work``, ``messages.send_overhead_after_wait``
and ``send_overhead_per_byte_after_wait`` (docs/calibration.md), in the simulator and as the
network calibration's idle rounds make them (:mod:`simdist.calibrate.idle_sweep`)."""

from __future__ import annotations

import pytest
import torch
from pydantic import ValidationError

import simdist
from simdist.calibrate import idle_sweep
from simdist.platform.cost_spec import CallCostSpec, MessageCostSpec, after_wait_s

from conftest import build_platform, build_world
from helpers import assert_run_refuses, tiny_scenario

CALLS = {"overhead": "10us", "overhead_after_work": "30us", "overhead_after_wait": [["1ms", "50us"], ["4ms", "80us"]],
         "source": "hand-made"}
MESSAGES = {"send_overhead": "10us", "send_overhead_per_byte": 0.0,
            "send_overhead_after_wait": [["1ms", "100us"], ["4ms", "200us"]],
            "send_overhead_per_byte_after_wait": [["1ms", "1ns"], ["4ms", "2ns"]], "source": "hand-made"}
ROWS = [(1e-3, 50e-6), (4e-3, 80e-6)]
FB_S = 1e-3 + 1e-4 * 4  # build_world's compute model at a batch of 4


class _Batch:
    size = 4


def test_the_cost_after_a_wait_runs_from_the_warm_figure_through_the_rows_and_holds_the_last():
    assert after_wait_s(ROWS, 10e-6, 0.0) == 10e-6  # no wait: warm
    assert after_wait_s(ROWS, 10e-6, 0.5e-3) == pytest.approx(30e-6)  # half way from warm to the first row
    assert after_wait_s(ROWS, 10e-6, 1e-3) == pytest.approx(50e-6)
    assert after_wait_s(ROWS, 10e-6, 2.5e-3) == pytest.approx(65e-6)
    assert after_wait_s(ROWS, 10e-6, 1.0) == pytest.approx(80e-6)  # held beyond the last row
    assert after_wait_s(None, 10e-6, 1.0) == 10e-6  # no table: warm
    assert after_wait_s([(1e-3, 5e-6)], 10e-6, 2e-3) == 10e-6  # a row below warm is noise: never cheaper than warm


def test_a_turn_is_priced_after_compute_after_work_after_a_wait_or_warm():
    calls = CallCostSpec.model_validate(CALLS)
    assert calls.seconds(False) == pytest.approx(10e-6)
    assert calls.seconds(False, after_work=True) == pytest.approx(30e-6)
    assert calls.seconds(False, waited_s=4e-3) == pytest.approx(80e-6)
    assert calls.seconds(True) == pytest.approx(10e-6)  # no figure after compute: warm
    messages = MessageCostSpec.model_validate(MESSAGES)
    assert messages.send_overhead_s(False, 2.5e-3) == pytest.approx(150e-6)
    assert messages.send_per_byte_s(0.5e-9, 1e-3) == pytest.approx(1e-9)
    assert messages.send_per_byte_s(0.5e-9, 0.0) == pytest.approx(0.5e-9)


@pytest.mark.parametrize("rows, says", [
    ([["1ms", "50us"], ["1ms", "60us"]], "must be above the row before"),
    ([["0s", "50us"]], "above zero"),
    ([["1ms", "-5us"]], "non-negative"),
    ([["1ms"]], "a row is [waited, seconds]"),
])
def test_after_wait_tables_refuse_rows_they_cannot_interpolate(rows, says):
    with pytest.raises(ValidationError, match="overhead_after_wait") as calls_error:
        CallCostSpec.model_validate({**CALLS, "overhead_after_wait": rows})
    assert says in str(calls_error.value)
    with pytest.raises(ValidationError, match="send_overhead_after_wait"):
        MessageCostSpec.model_validate({**MESSAGES, "send_overhead_after_wait": rows})


def test_after_wait_send_costs_need_a_source():
    with pytest.raises(ValidationError, match="source"):
        MessageCostSpec.model_validate({"send_overhead_after_wait": [["1ms", "100us"]]})


def test_a_scenario_with_a_bad_after_wait_row_exits_2_naming_the_field(tmp_path):
    data = tiny_scenario(platform={"preset": "laptop-cpu", "node": {"devices": 2},
                                   "calls": {**CALLS, "overhead_after_wait": [["3ms", "50us"], ["2ms", "60us"]]}})
    assert_run_refuses(tmp_path, data, "platform.calls.overhead_after_wait")


def _spans(world, rank):
    return [(s.kind, s.name, s.start_s, s.end_s) for s in world.recorder.spans if s.rank == rank]


def _server_world():
    return build_world(2, platform=build_platform("laptop-cpu", node={"devices": 2}, calls=CALLS, messages=MESSAGES))


def test_a_rank_that_waited_pays_its_turn_and_its_first_send_at_their_after_wait_costs():
    world = _server_world()
    reply = torch.zeros(1000)  # 4,000 bytes

    def worker(rt):
        yield rt.busy(2e-3, "compute elsewhere")
        rt.send(1, torch.zeros(2), tag=1)
        yield rt.recv(1, tag=2)

    def server(rt):
        yield rt.recv(0, tag=1)  # blocked while the worker works
        yield rt.busy(1e-3, "apply")
        rt.send(0, reply, tag=2)
        yield rt.recv(0, tag=3)  # never comes: the send's CPU is paid as this receive starts

    world.spawn(0, worker(world.runtime(0)))
    world.spawn(1, server(world.runtime(1)))
    world.env.run()
    spans = _spans(world, 1)
    names = [name for _, name, _, _ in spans]
    assert names[:6] == ["recv", "recv", "runtime call", "apply", "runtime call", "message overhead"]
    waited = spans[1][3] - spans[0][2]  # the receive's wait and data phase: blocked throughout
    assert 2e-3 < waited < 3e-3
    durations = [end - start for _, _, start, end in spans]
    assert durations[2] == pytest.approx(after_wait_s(ROWS, 10e-6, waited))  # the turn right after the wait
    assert durations[4] == pytest.approx(30e-6)  # the turn right after its own work
    send_s = after_wait_s([(1e-3, 100e-6), (4e-3, 200e-6)], 10e-6, waited)
    per_byte_s = after_wait_s([(1e-3, 1e-9), (4e-3, 2e-9)], 0.0, waited)
    assert durations[5] == pytest.approx(send_s + per_byte_s * 4000)  # its first send after the wait


def test_a_forward_backward_between_the_wait_and_the_send_leaves_the_send_warm():
    world = _server_world()

    def worker(rt):
        yield rt.busy(2e-3, "compute elsewhere")
        rt.send(1, torch.zeros(2), tag=1)

    def other(rt):
        yield rt.recv(0, tag=1)
        yield rt.compute(None, _Batch())
        rt.send(0, torch.zeros(1000), tag=2)
        yield rt.recv(0, tag=3)

    world.spawn(0, worker(world.runtime(0)))
    world.spawn(1, other(world.runtime(1)))
    world.env.run()
    overhead = next(end - start for _, name, start, end in _spans(world, 1) if name == "message overhead")
    assert overhead == pytest.approx(10e-6)


def test_after_wait_sends_run_one_process_per_rank_and_say_why():
    timing_only = {"model": "mlp", "dataset": {"name": "synthetic", "samples": 200, "features": 4, "classes": 2},
                   "batch_size": 8, "timing_only": True}
    data = tiny_scenario(platform={"preset": "laptop-cpu", "node": {"devices": 4}, "messages": MESSAGES},
                         workload=timing_only)
    execution = simdist.run(data).manifest["execution"]
    assert execution["mode"] == "per_rank" and "messages.send_overhead_after_wait" in execution["why"]


def test_a_run_records_the_after_wait_turns_in_its_manifest():
    data = tiny_scenario(platform={"preset": "laptop-cpu", "node": {"devices": 2}, "calls": CALLS},
                         stop={"steps": 4})
    basis = simdist.run(data).manifest["runtime_calls"]
    assert basis["overhead_after_work_s"] == pytest.approx(30e-6)
    assert basis["overhead_after_wait"] == [[pytest.approx(w), pytest.approx(s)] for w, s in ROWS]


# -- the calibration's idle rounds --------------------------------------------------------------

def _round(idle, large, waited, turn, update, after_update, send):
    return (idle, large, waited, turn, update, after_update, send)


def test_the_idle_rounds_keep_medians_per_idle_time_and_the_large_sends_rise_per_byte():
    timed = []
    for k in range(3):  # three rounds of each kind; the middle one is the median
        timed += [_round(0.0, False, 3e-4 + k * 1e-5, 12e-6, 100e-6, 15e-6, 110e-6 + k * 1e-6),
                  _round(0.0, True, 3e-4 + k * 1e-5, 12e-6, 100e-6, 15e-6, 130e-6),
                  _round(0.01, False, 1.1e-2, 20e-6, 180e-6, 18e-6, 150e-6),
                  _round(0.01, True, 1.1e-2, 20e-6, 180e-6, 18e-6, 150e-6 + 1000 * 0.4e-9)]
    summary = idle_sweep._summary(timed, (0.0, 0.01), 3)
    assert [row["send_s"] for row in summary["rows"]] == [pytest.approx(111e-6), pytest.approx(150e-6)]
    document = {"mpi_library": "MPICH", "after_idle": {**summary, "update_params": 252, "update": "w <- w - lr * g",
                                                       "large_send_bytes": 1008, "peer": "asleep"}}
    section = idle_sweep.after_idle_section(document)
    assert section["turn"] == [[pytest.approx(3.1e-4), pytest.approx(12e-6)], [pytest.approx(1.1e-2),
                                                                               pytest.approx(20e-6)]]
    assert section["send_per_byte"][1][1] == pytest.approx(0.4e-9)
    assert section["send_per_byte"][0][1] == pytest.approx((130e-6 - 111e-6) / 1000)
    assert section["turn_after_work"] == pytest.approx(15e-6)  # after the update, in the rounds with no idle
    assert "0, 10 ms" in section["source"] and "asleep" in section["source"]
    CallCostSpec.model_validate({"overhead": 4e-6, "overhead_after_wait": section["turn"], "source": "x"})
    assert idle_sweep.after_idle_section({}) is None


def test_rows_whose_wait_does_not_grow_are_left_out_of_the_tables():
    rows = [{"idle_s": idle, "waited_s": waited, "turn_s": 1e-5, "update_s": 1e-4, "turn_after_update_s": 1e-5,
             "send_s": 1e-4, "large_send_s": 2e-4} for idle, waited in ((0.0, 4e-4), (1e-3, 3e-4), (3e-3, 3e-3))]
    document = {"after_idle": {"rows": rows, "rounds": 1, "update_params": 10, "update": "u",
                               "large_send_bytes": 48, "peer": "asleep"}}
    assert [w for w, _ in idle_sweep.after_idle_section(document)["send"]] == [4e-4, 3e-3]


class _Clock:
    """A fake ``time`` for :func:`idle_sweep._pass`: sleeping and working move it, nothing else."""

    def __init__(self):
        self.now = 0.0

    def perf_counter(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def test_the_waking_rank_works_while_another_call_fits_and_sleeps_the_rest(monkeypatch):
    clock, starts = _Clock(), []
    monkeypatch.setattr(idle_sweep, "time", clock)

    def busy():  # a training step of 2 ms
        starts.append(clock.now)
        clock.now += 2e-3

    took = idle_sweep._pass(7e-3, busy, 2e-3)
    assert starts == [0.0, pytest.approx(2e-3), pytest.approx(4e-3)]  # a fourth would run past 7 ms
    assert clock.now == pytest.approx(7e-3) and took == pytest.approx(2e-3)  # asleep for the rest
    starts.clear()
    idle_sweep._pass(1e-3, busy, 2e-3)
    assert starts == [] and clock.now == pytest.approx(8e-3)  # too short for one call: asleep throughout


def test_calibrate_network_prints_the_tables_it_wrote():
    from simdist.calibrate.network import call_cost_lines

    overlay = {"calls": {"overhead": 4e-6, "overhead_after_compute": 8e-5, "overhead_after_work": 1.5e-5,
                         "overhead_after_wait": [[4e-4, 1.4e-5], [0.011, 1.9e-5]]},
               "messages": {"send_overhead": 4e-5, "send_overhead_after_wait": [[4e-4, 1.6e-4]],
                            "send_overhead_per_byte_after_wait": [[4e-4, 4e-10]]}}
    lines = call_cost_lines(overlay)
    assert "15us right after an update" in lines[1]
    assert lines[2] == "runtime call after a wait of 400us: 14us, 11ms: 19us"
    assert lines[3] == "send after a wait of 400us: 160us" and lines[4] == "send per byte after a wait of 400us: 0.4 ns/B"
    assert call_cost_lines({}) == []
