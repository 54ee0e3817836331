"""Calibration from a pilot run's trace (simdist.real.pilot), on hand-made traces: no MPI."""

from __future__ import annotations

import json
from types import SimpleNamespace
from pathlib import Path

import pandas as pd
import pytest

from simdist.errors import InputError
from simdist.real.pilot import (collective_costs, fit_size_cost, message_costs, pilot_compute, pilot_link,
                                pilot_steps, server_cpu_per_push)
from simdist.scenario import load_scenario
from simdist.tracefile import ASYNC_TID_OFFSET

SCENARIO = Path(__file__).resolve().parents[1] / "scenarios" / "quickstart.yaml"
MB = 1_000_000


def _span(rank, kind, name, start_s, end_s, **args):
    return {"name": name, "cat": kind, "ph": "X", "ts": start_s * 1e6, "dur": (end_s - start_s) * 1e6, "pid": 0,
            "tid": rank + (ASYNC_TID_OFFSET if args.get("blocking") is False else 0), "args": args}


def _ps_trace(iterations: int = 6) -> list[dict]:
    """Worker 0 and server 1: compute 5 ms, push (send call 0.3 ms, 1 ms to receipt), 2 ms later the reply."""
    events, t, cpu = [], 0.0, 0.0
    for k in range(iterations):
        events.append(_span(0, "compute", "forward/backward", t, t + 5e-3, batch_size=64 if k % 3 == 2 else 256,
                            cpu_s=(1e-3 + 16e-6 * (64 if k % 3 == 2 else 256)) * (2.0 if k == 0 else 1.0),
                            host_cpu_s=cpu))
        push = t + 5e-3
        events.append(_span(0, "comm", "send", push, push + 0.3e-3, blocking=False, bytes=MB, dst=1, host_cpu_s=cpu))
        events.append(_span(1, "wait", "recv", push - 1e-3, push, host_cpu_s=2e-3 * k))
        events.append(_span(1, "comm", "recv", push, push + 1.3e-3, bytes=MB, src=0, sent_s=push, host_cpu_s=2e-3 * k))
        reply = push + 2e-3
        events.append(_span(1, "comm", "send", reply, reply + 0.2e-3, blocking=False, bytes=MB, dst=0,
                            host_cpu_s=2e-3 * k + 1e-3))
        events.append(_span(0, "wait", "recv", push + 0.3e-3, reply, host_cpu_s=cpu + 0.5e-3))
        events.append(_span(0, "comm", "recv", reply, reply + 1.2e-3, bytes=MB, src=1, sent_s=reply,
                            host_cpu_s=cpu + 0.5e-3))
        t, cpu = reply + 1.5e-3, cpu + 0.5e-3
    return events


def _write(tmp_path: Path, events: list[dict], steps: list[dict] | None = None) -> Path:
    (tmp_path / "trace.json").write_text(json.dumps({"traceEvents": events}))
    if steps is not None:
        pd.DataFrame(steps).to_csv(tmp_path / "steps.csv", index=False)
    return tmp_path


def test_message_costs_run_from_the_end_of_the_send_call_and_skip_warm_up(tmp_path):
    costs = message_costs(_write(tmp_path, _ps_trace()), [0], warmup=2)
    assert len(costs) == 2 * 4  # 6 iterations, the first two workers' iterations left out
    to_server, to_worker = costs[costs["dst"] == 1], costs[costs["dst"] == 0]
    assert to_server["seconds"].tolist() == pytest.approx([1.0e-3] * 4)  # 1.3 ms receipt - 0.3 ms send call
    assert to_worker["seconds"].tolist() == pytest.approx([1.0e-3] * 4)
    assert set(costs["bytes"]) == {MB}


def test_pilot_link_from_messages_takes_the_latency_of_the_tiny_ping(tmp_path):
    link = pilot_link(_write(tmp_path, _ps_trace()), [0], {"p2p": {"one_way_s": [0.2e-3, 0.5e-3]}})
    assert link["from"] == "pilot messages"
    assert link["latency_s"] == pytest.approx(0.2e-3)
    assert link["latency_s"] + MB / link["bandwidth_Bps"] == pytest.approx(1.0e-3)  # the median message cost


def test_fit_size_cost_uses_two_sizes_when_far_apart():
    costs = pd.DataFrame({"bytes": [1e3, 1e3, 1e6, 1e6], "seconds": [0.1e-3, 0.1e-3, 1.1e-3, 1.1e-3]})
    fit = fit_size_cost(costs, tiny_s=None)
    assert fit["bandwidth_Bps"] == pytest.approx(999e3 / 1e-3)
    assert fit["latency_s"] + 1e6 / fit["bandwidth_Bps"] == pytest.approx(1.1e-3)
    one = fit_size_cost(costs[costs["bytes"] > 1e4], tiny_s=5e-3)  # a "tiny" time above the cost: all latency
    assert one["latency_s"] == pytest.approx(1.1e-3) and one["bandwidth_Bps"] == 1e12
    assert fit_size_cost(costs.iloc[:0], tiny_s=None) is None


def test_collective_costs_are_per_ring_step(tmp_path):
    events = [_span(0, "compute", "forward/backward", 0.01 * k, 0.01 * k + 5e-3, batch_size=8, cpu_s=1e-3,
                    host_cpu_s=0.0) for k in range(5)]
    events += [_span(r, "comm", "allreduce", 0.01 * k + 6e-3, 0.01 * k + 6e-3 + 1.2e-3, bytes=4 * MB, group_size=4,
                     host_cpu_s=0.0) for k in range(5) for r in range(4)]
    steps = collective_costs(_write(tmp_path, events), [0], warmup=2)
    assert len(steps) == 3 * 4
    assert steps["bytes"].tolist() == pytest.approx([MB] * 12)  # S / n per step
    assert steps["seconds"].tolist() == pytest.approx([0.2e-3] * 12)  # 2(n-1) = 6 steps
    link = pilot_link(tmp_path, [0], {"allreduce": {"ranks": 4, "time_s": [0.06e-3, 1e-3]}})
    assert link["from"].startswith("pilot allreduces") and link["latency_s"] == pytest.approx(0.01e-3)


def test_pilot_compute_takes_the_slowest_workers_level_and_the_isolated_slope(tmp_path):
    """Peers wait for the slowest worker: its median forward/backward is the level."""
    events = _ps_trace(9)
    slow = [dict(e, tid=2, args=dict(e["args"], cpu_s=1.1 * e["args"]["cpu_s"])) for e in events
            if e["cat"] == "compute"]  # a second worker on a slower core
    isolated = {"t0_s": 0.5e-3, "t1_s": 15e-6, "r2": 1.0, "median_wall_s": [], "relative_iqr": []}
    fit = pilot_compute(_write(tmp_path, events + slow), [0, 2], isolated, warmup=1)
    fast = 1e-3 + 16e-6 * 256  # the doubled first step is warm-up, left out
    assert fit["batch_sizes"] == [256] and fit["median_cpu_s"] == [pytest.approx(1.1 * fast)]
    assert fit["t1_s"] == 15e-6 and fit["t0_s"] + 256 * fit["t1_s"] == pytest.approx(1.1 * fast)
    assert fit["per_worker_median_cpu_s"] == pytest.approx({0: fast, 2: 1.1 * fast})
    assert pilot_compute(tmp_path, [5], isolated) == isolated  # no steps of these workers: the isolated fit


def test_pilot_compute_takes_the_wall_level_for_workers_with_cores_of_their_own(tmp_path):
    """Wall time counts what shared the core with the compute (an overlapped collective's progress)."""
    events = _ps_trace(9)  # forward/backwards of 5 ms wall, less in CPU
    isolated = {"t0_s": 0.5e-3, "t1_s": 15e-6, "r2": 1.0, "median_wall_s": [], "relative_iqr": []}
    by_cpu = pilot_compute(_write(tmp_path, events), [0], isolated, warmup=1)
    by_wall = pilot_compute(tmp_path, [0], isolated, warmup=1, wall=True)
    assert by_cpu["level_from"] == "cpu" and by_cpu["median_cpu_s"] == [pytest.approx(1e-3 + 16e-6 * 256)]
    assert by_wall["level_from"] == "wall" and by_wall["median_cpu_s"] == [pytest.approx(5e-3)]
    assert by_wall["t0_s"] + 256 * by_wall["t1_s"] == pytest.approx(5e-3)


def test_other_threads_cpu_is_the_median_per_worker_and_zero_when_not_recorded(tmp_path):
    from simdist.real.calibration import other_threads_cpu_per_step

    events = _ps_trace(9)
    assert other_threads_cpu_per_step(_write(tmp_path, events), [0]) == 0.0  # an older trace: nothing recorded
    for k, e in enumerate(e for e in events if e["cat"] == "compute"):
        e["args"]["other_threads_cpu_s"] = 50e-3 if k == 0 else (0.4e-3 if k % 2 else 0.6e-3)
    assert other_threads_cpu_per_step(_write(tmp_path, events), [0]) == pytest.approx(0.5e-3)  # warm-up left out


def test_server_cpu_per_push_counts_the_steady_pushes(tmp_path):
    steps = [{"time_s": 0.0095 * k + 0.007, "worker": 0, "step": k + 1, "batch_size": 256} for k in range(6)]
    per_push = server_cpu_per_push(_write(tmp_path, _ps_trace(), steps), 1, [0], warmup=2)
    assert per_push == pytest.approx(2e-3, rel=0.3)


def test_pilot_steps_count_pushes_for_a_parameter_server():
    sync = load_scenario(SCENARIO, ["stop.steps=500"])
    assert pilot_steps(sync, 12) == 12
    asgd = load_scenario(SCENARIO, ["stop.steps=500", "workers=3", "platform.node.devices=4", "algorithm={name: asgd}"])
    assert pilot_steps(asgd, 12) == 36
    assert pilot_steps(load_scenario(SCENARIO, ["stop.steps=10"]), 12) == 10  # never beyond the scenario's budget


def test_validate_rejects_an_unknown_calibration(tmp_path):
    from simdist.validation import validate

    with pytest.raises(InputError, match="unknown calibration 'pilots'"):
        validate(SCENARIO, 2, tmp_path, calibrate="pilots")
    with pytest.raises(InputError, match="at least 4"):
        validate(SCENARIO, 2, tmp_path, pilot_iterations=2)
    with pytest.raises(InputError, match="--pilot-runs.*1 or 2"):
        validate(SCENARIO, 2, tmp_path, pilot_runs=3)


def test_two_pilots_average_their_levels_and_slopes():
    from simdist.real.describe import _mean_level

    before = {"t0_s": 0.001, "t1_s": 1e-4, "batch_sizes": [10], "per_worker_median_cpu_s": {0: 0.002}}
    after = {"t0_s": 0.002, "t1_s": 2e-4, "batch_sizes": [10], "per_worker_median_cpu_s": {0: 0.004}}
    fit = _mean_level([before, after])
    assert fit["t1_s"] == pytest.approx(1.5e-4) and fit["per_pilot_level_cpu_s"] == pytest.approx([0.002, 0.004])
    assert fit["t0_s"] + fit["t1_s"] * 10 == pytest.approx(0.003)  # the mean level, at the pilots' batch size
    isolated_fallback = {"t0_s": 0.5, "t1_s": 1e-4, "batch_sizes": [10, 20]}  # a pilot without steady steps
    assert _mean_level([before, isolated_fallback]) is before


class _FakeWorld:
    """What MPIDriver.wait needs of a world: a clock, CPU accounting and a mailbox that fills after ``late`` polls."""

    def __init__(self, late: int):
        from simdist.real.runtime import CpuClock

        self.spin, self.cpu, self.late, self.polls = True, CpuClock(), late, 0
        self.in_flight = 0  # how many more tests find a sent message still in flight

    def now(self) -> float:
        return 0.0

    def sends_in_flight(self) -> bool:
        self.in_flight = max(0, self.in_flight - 1)
        return self.in_flight > 0

    def poll(self, rank, src, tag):
        from simdist.runtime.base import Message

        self.polls += 1
        return Message(1, 0, 0, "x", 8, 0.0, 0.0) if self.polls > self.late else None


def _receive_cpu(late: int) -> float:
    from simdist.real.driver import MPIDriver
    from simdist.real.requests import RecvRequest

    world = _FakeWorld(late)
    MPIDriver(world).wait(RecvRequest(world, 0, 1, 0))
    return world.cpu.wait_s


def test_receiving_a_message_already_there_is_host_work_not_waiting():
    assert _receive_cpu(late=0) == 0.0  # delivered before it was asked for: the copy is the rank's own work
    assert _receive_cpu(late=3) > 0.0  # asked for before it came: waiting (and the transfer) as before


def test_progress_tests_outstanding_collectives_only_while_computing():
    import threading
    from types import SimpleNamespace

    from simdist.real.progress import Progress

    tested = threading.Event()
    pending: list = []
    world = SimpleNamespace(MPI=SimpleNamespace(Request=SimpleNamespace(Testall=lambda reqs: tested.set())),
                            pending_collectives=lambda: list(pending))
    progress = Progress(world, 1e-4)
    with progress.during():  # nothing outstanding: the helper stays asleep
        pass
    assert not tested.wait(0.05)
    pending.append(SimpleNamespace(mpi_requests=lambda: ["request"]))
    with progress.during():
        assert tested.wait(10.0)
    tested.clear()
    assert not tested.wait(0.05)  # after the compute the rank's own MPI calls take over


def test_speed_change_compares_the_isolated_timing_of_pilot_and_compared_run():
    from simdist.real.describe import speed_change

    pilot = [{"cpu_s": {"256": [5e-3, 5e-3]}}, {"cpu_s": {"256": [5e-3]}}]
    compared = [{"cpu_s": {"256": [5.5e-3]}, "cpu_after_s": {"256": [7.5e-3]}}]
    change = speed_change(pilot, compared, 256)
    assert change["before"] == pytest.approx(10.0) and change["after"] == pytest.approx(50.0)
    assert speed_change(pilot, compared, 64) is None  # that batch size was not timed


def _timed(before_ms: float, after_ms: float, sizes=(256, 512)) -> list[dict]:
    """calibration.json workers: two workers timed at ``sizes``, cost proportional to the size."""
    def at(level_ms):
        return {str(n): [level_ms * 1e-3 * n / 256] * 3 for n in sizes}
    return [{"sizes": list(sizes), "cpu_s": at(before_ms), "cpu_after_s": at(after_ms)} for _ in range(2)]


def test_speed_ratio_compares_the_pooled_timings_size_by_size():
    from simdist.real.describe import speed_ratio

    assert speed_ratio(_timed(5.0, 5.0), _timed(5.5, 5.5)) == pytest.approx(1.1)
    assert speed_ratio(_timed(5.0, 5.0), _timed(4.0, 4.0, sizes=(512, 1024))) == pytest.approx(0.8)  # 512 alone
    assert speed_ratio(_timed(5.0, 5.0), _timed(5.0, 5.0, sizes=(64,))) is None  # no size timed in both
    assert speed_ratio([], _timed(5.0, 5.0)) is None


def test_pilots_whose_host_changed_speed_during_them_are_left_out():
    from simdist.real.describe import STEADY_LIMIT, _steady

    steady, slowed, worse = Path("pilot"), Path("pilot-after"), Path("worse")
    timings = {steady: _timed(5.0, 5.0 * (1 + STEADY_LIMIT / 2)),
               slowed: _timed(5.0, 8.0),  # the host slowed 1.6x during it: seen for real
               worse: _timed(5.0, 10.0)}
    assert _steady({d: timings[d] for d in (steady, slowed)}) == [steady]
    assert _steady({d: timings[d] for d in (slowed, steady)}) == [steady]
    assert _steady({d: timings[d] for d in (worse, slowed)}) == [slowed]  # none steady: the steadiest, not nothing


def test_a_pilot_fit_scales_as_a_whole_line():
    from simdist.real.describe import _scaled

    fit = {"t0_s": 1e-3, "t1_s": 1e-5, "batch_sizes": [100], "median_cpu_s": [2e-3],
           "per_worker_median_cpu_s": {0: 2e-3, 1: 2.2e-3}}
    scaled = _scaled(fit, 1.5)
    assert scaled["t0_s"] == pytest.approx(1.5e-3) and scaled["t1_s"] == pytest.approx(1.5e-5)
    assert scaled["median_cpu_s"] == pytest.approx([3e-3])
    assert scaled["per_worker_median_cpu_s"] == pytest.approx({0: 3e-3, 1: 3.3e-3})
    assert _scaled(fit, 1.0) is fit and fit["t0_s"] == 1e-3  # the original is left as it was


def test_a_rank_sharing_its_core_sleeps_longer_the_longer_it_waits(monkeypatch):
    from simdist.real import driver
    from simdist.real.driver import MPIDriver
    from simdist.real.requests import RecvRequest

    slept: list[float] = []
    monkeypatch.setattr(driver.time, "sleep", slept.append)
    world = _FakeWorld(late=8)
    world.spin = False  # ranks outnumber cores: every wake-up takes the core from a computing rank
    MPIDriver(world).wait(RecvRequest(world, 0, 1, 0))
    assert slept == pytest.approx([50e-6, 100e-6, 200e-6, 400e-6, 800e-6, 1e-3, 1e-3, 1e-3])


def test_a_rank_with_a_message_in_flight_keeps_its_sleeps_short(monkeypatch):
    """Its receiver may need this rank's next MPI call to move the message (a rendezvous)."""
    from simdist.real import driver
    from simdist.real.driver import MPIDriver
    from simdist.real.requests import RecvRequest

    slept: list[float] = []
    monkeypatch.setattr(driver.time, "sleep", slept.append)
    world = _FakeWorld(late=8)
    world.spin, world.in_flight = False, 4  # the message leaves at the fourth test
    MPIDriver(world).wait(RecvRequest(world, 0, 1, 0))
    assert slept == pytest.approx([50e-6, 50e-6, 50e-6, 50e-6, 100e-6, 200e-6, 400e-6, 800e-6])


class _ProbingComm:
    """An ``improbe`` that finds the message only on the call after ``progress_calls`` empty ones."""

    def __init__(self, progress_calls: int):
        self.calls, self.progress_calls = 0, progress_calls

    def improbe(self, source, tag, status):
        self.calls += 1
        if self.calls <= self.progress_calls:
            return None
        return SimpleNamespace(recv=lambda: (("payload", {}), 0.0, 8))


def test_a_probe_that_finds_nothing_probes_once_more_at_once():
    """MPICH's probe makes progress and returns; what the progress delivered shows in the next probe."""
    pytest.importorskip("mpi4py")
    from mpi4py import MPI

    from simdist.real.runtime import MPIWorld

    world = SimpleNamespace(MPI=MPI, comm=_ProbingComm(progress_calls=1), now=lambda: 0.0)
    message = MPIWorld.poll(world, 0, 1, 5)
    assert message is not None and world.comm.calls == 2
    world.comm = _ProbingComm(progress_calls=2)  # nothing there after two probes: None, no third probe
    assert MPIWorld.poll(world, 0, 1, 5) is None and world.comm.calls == 2
