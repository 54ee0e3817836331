"""The first message call after a forward/backward costs what a call with cold caches costs.

A training step's compute fills the caches with its own data, so the send that follows it (a
gradient push, a neighbour's gradient) runs the library's code from memory. ``calibrate
network`` times the small-message send and receive again with the caches emptied before each
call (``overheads["cold"]``), the overlay writes them as ``messages.send_overhead_after_compute``
and ``recv_overhead_after_compute``, and the simulator charges them to the first send, and the
first message taken in, after each forward/backward; later calls pay the ordinary overheads.
"""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from simdist.calibrate.overlay import LinkFit, apply_overheads
from simdist.calibrate.sweep_timing import cache_evictor, cache_flush_bytes
from simdist.platform.cost_spec import MessageCostSpec
from simdist.training.replica import PhantomTensor

from conftest import build_platform, build_world

HOT = {"send_overhead": "5us", "recv_overhead": "4us", "source": "hand-made"}
COLD = {**HOT, "send_overhead_after_compute": "50us", "recv_overhead_after_compute": "30us"}


class _Batch:
    size = 4


def _world(messages):
    return build_world(2, platform=build_platform("laptop-cpu", node={"devices": 2}, messages=messages))


def _overhead_spans(world, rank):
    return [s.end_s - s.start_s for s in world.recorder.spans if s.rank == rank and s.name == "message overhead"]


def test_the_first_send_after_a_forward_backward_pays_the_cold_overhead_and_the_next_the_ordinary_one():
    world = _world(COLD)

    def sender(rt):
        yield rt.compute(None, _Batch())
        rt.send(1, PhantomTensor(1))
        rt.send(1, PhantomTensor(1))
        yield rt.busy(1e-3, "apply")
        rt.send(1, PhantomTensor(1))  # after busy work, not a forward/backward: warm
        yield rt.busy(1e-3, "apply")

    world.spawn(0, sender(world.runtime(0)))
    world.spawn(1, (lambda rt: (yield from (rt.recv(0) for _ in range(3))))(world.runtime(1)))
    world.env.run()
    assert _overhead_spans(world, 0) == [pytest.approx(55e-6), pytest.approx(5e-6)]


def test_the_first_message_taken_in_after_a_forward_backward_costs_the_receiver_the_cold_extra():
    world = _world(COLD)

    def sender(rt):
        rt.send(1, PhantomTensor(1))
        rt.send(1, PhantomTensor(1))
        yield rt.busy(1e-3, "idle")

    def receiver(rt):
        yield rt.compute(None, _Batch())  # both messages arrive while it computes
        yield rt.busy(1e-3, "before the poll")  # owes nothing yet: nothing taken in
        assert rt.poll(0) is not None and rt.poll(0) is not None
        yield rt.busy(1e-3, "apply")

    world.spawn(0, sender(world.runtime(0)))
    world.spawn(1, receiver(world.runtime(1)))
    world.env.run()
    assert _overhead_spans(world, 1) == [pytest.approx(30e-6 - 4e-6)]  # once, beyond o_r (a delivery delay)


def test_without_after_compute_figures_every_call_pays_the_ordinary_overhead():
    world = _world(HOT)

    def sender(rt):
        yield rt.compute(None, _Batch())
        rt.send(1, PhantomTensor(1))
        yield rt.busy(1e-3, "apply")

    world.spawn(0, sender(world.runtime(0)))
    world.spawn(1, (lambda rt: (yield rt.recv(0)))(world.runtime(1)))
    world.env.run()
    assert _overhead_spans(world, 0) == [pytest.approx(5e-6)]


@pytest.mark.parametrize("field", ["send_overhead_after_compute", "recv_overhead_after_compute"])
def test_after_compute_overheads_must_be_times_and_have_a_source(field):
    with pytest.raises(ValidationError, match=field):
        MessageCostSpec(**{field: "-1us", "source": "x"})
    with pytest.raises(ValidationError, match="source"):
        MessageCostSpec(**{field: "1us"})


def _link():
    return LinkFit(field="intra_link", kind="shm", latency_s=1e-3, bandwidth_Bps=1e9, basis="fit", source="sweep.json",
                   table=None)


def test_the_overlay_writes_the_cold_calls_as_the_overheads_after_compute():
    link = _link()
    small = {"send_overhead_s": 20e-6, "recv_overhead_s": 10e-6, "gap_s": 30e-6, "size_bytes": 8, "messages": 2000}
    cold = {"send_overhead_s": 300e-6, "recv_overhead_s": 200e-6, "size_bytes": 8, "messages": 64,
            "evicted_bytes": 64 << 20}
    apply_overheads(link, {**small, "cold": cold})
    m = link.messages
    assert (m["send_overhead"], m["recv_overhead"]) == (20e-6, 10e-6)  # split out of the hot ping-pong's latency
    assert (m["send_overhead_after_compute"], m["recv_overhead_after_compute"]) == (300e-6, 200e-6)
    assert "each after 64 MiB were written" in m["source"]
    assert link.latency_s == pytest.approx(1e-3 - 30e-6)


def test_the_overlay_says_when_the_cold_calls_followed_a_training_step():
    link = _link()
    small = {"send_overhead_s": 20e-6, "recv_overhead_s": 10e-6, "gap_s": 30e-6, "size_bytes": 8, "messages": 2000}
    cold = {"send_overhead_s": 90e-6, "recv_overhead_s": 70e-6, "size_bytes": 8, "messages": 64,
            "after_compute": "quickstart", "batch_size": 32}
    apply_overheads(link, {**small, "cold": cold})
    assert link.messages["send_overhead_after_compute"] == 90e-6
    assert "each right after a training step of the workload of scenario quickstart (batch 32" in link.messages["source"]
    assert "MiB were written" not in link.messages["source"]


def test_cold_calls_follow_the_scenarios_training_step_or_else_a_cache_sized_write():
    from simdist.calibrate.mpi_worker import cold_state

    step, said = cold_state("scenarios/quickstart.yaml")
    assert said == {"after_compute": "quickstart", "batch_size": 32}
    step()  # one forward, backward and optimizer step of that workload
    _evict, said = cold_state(None)  # not run here: it writes up to 1 GiB
    assert said == {"evicted_bytes": cache_flush_bytes()}


def test_the_cache_evictor_writes_twice_the_largest_cache_sysfs_reports(tmp_path):
    for index, size in enumerate(["48K", "32K", "1024K", "32768K"]):
        folder = tmp_path / f"index{index}"
        folder.mkdir()
        (folder / "size").write_text(size + "\n")
    assert cache_flush_bytes(str(tmp_path)) == 64 << 20
    assert cache_flush_bytes(str(tmp_path / "missing")) == 64 << 20  # the fallback
    evict = cache_evictor(1 << 16)
    buffer = next(cell.cell_contents for cell in evict.__closure__ if isinstance(cell.cell_contents, np.ndarray))
    evict()
    evict()
    assert buffer.size == 1 << 16 and np.all(buffer == 2)  # every byte written, each call


def test_a_sender_that_then_blocks_on_a_receive_spends_its_send_overhead_before_waiting_not_after():
    """Its send call returns before it can wait: the overhead is a span at the start of the wait,
    and the compute after the reply starts when the reply is in (not once more delayed by it)."""
    world = _world(COLD)

    def worker(rt):
        yield rt.compute(None, _Batch())
        rt.send(1, PhantomTensor(1))
        yield rt.recv(1)
        yield rt.compute(None, _Batch())

    def server(rt):
        yield rt.recv(0)
        rt.send(0, PhantomTensor(1))
        yield rt.busy(1e-3, "idle")

    world.spawn(0, worker(world.runtime(0)))
    world.spawn(1, server(world.runtime(1)))
    world.env.run()
    spans = [(s.kind, s.name, s.start_s, s.end_s) for s in world.recorder.spans if s.rank == 0]
    names = [(kind, name) for kind, name, _, _ in spans]
    assert names[:3] == [("compute", "forward/backward"), ("comm", "message overhead"), ("wait", "recv")]
    first_end = spans[0][3]
    assert spans[1][2:] == (pytest.approx(first_end), pytest.approx(first_end + 50e-6))
    assert spans[2][2] == pytest.approx(first_end + 50e-6)  # waiting begins once the call has returned
    second = [span for span in spans if span[1] == "forward/backward"][1]
    received = max(end for kind, name, _, end in spans if name == "recv")
    assert second[2] == pytest.approx(received)  # nothing owed is left to delay it
    assert names.count(("comm", "message overhead")) == 1


def _benchmark():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "send_after_compute.py"
    spec = importlib.util.spec_from_file_location("send_after_compute", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_send_after_compute_benchmark_refuses_counts_below_one(monkeypatch, capsys):
    monkeypatch.setattr("sys.argv", ["send_after_compute.py", "--sends", "0"])
    with pytest.raises(SystemExit) as exit_info:
        _benchmark().main()
    assert exit_info.value.code == 2 and "--sends" in capsys.readouterr().err


@pytest.mark.skipif(__import__("shutil").which("mpiexec") is None, reason="needs mpiexec (pip install 'simdist[mpi]')")
def test_the_send_after_compute_benchmark_prints_every_condition_against_back_to_back(monkeypatch, capsys):
    module = _benchmark()
    monkeypatch.setattr("sys.argv", ["send_after_compute.py", "--sends", "3", "--params", "1000", "--batch", "64"])
    assert module.main() == 0
    out = capsys.readouterr().out
    assert all(condition in out for condition in module.CONDITIONS) and "x 1.00 of back to back" in out
