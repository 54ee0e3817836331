"""SimRuntime: exact (rank, what, when) logs of small runs, with times worked out by hand.

Two CPU ranks on ``laptop-cpu`` talk over shared memory: a route is the sender's port up and
the receiver's port down, each with half of shm's 0.11 us latency, at 13.8e9 B/s. A rank
computes ``t0 + t1 · batch`` seconds (t0 = 1 ms, t1 = 0.1 ms per sample).
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from conftest import Sized
from simdist.errors import SimulationError
from simdist.platform.links import LINK_KINDS
from simdist.runtime.base import ANY

T0, T1 = 1e-3, 1e-4
LATENCY_S = 0.11e-6  # shm port-to-port, paid once per route
BANDWIDTH_BPS = 13.8e9
CPU_REDUCE_BPS = 19e9 / 3  # a cpu rank sums at its memory bandwidth over the 3 bytes a += b moves per byte


def test_the_shm_figures_used_here_are_the_link_kinds():
    shm = LINK_KINDS.get("shm")
    assert (shm.latency_s, shm.bandwidth_Bps) == (LATENCY_S, BANDWIDTH_BPS)


def approx_log(log):
    return [tuple(pytest.approx(x, rel=1e-12, abs=1e-18) if isinstance(x, float) else x for x in row) for row in log]


# -- the exact log of a two-worker step ---------------------------------------------------------------


@pytest.mark.parametrize("fidelity", ["flows", "analytic"])
def test_two_workers_compute_then_allreduce_exact_log(make_world, run_world, fidelity):
    world = make_world(2, fidelity=fidelity, t0=T0, t1=T1)
    group = world.runtime(0).group([0, 1])
    batch = {0: 10, 1: 20}  # rank 0 computes 2 ms, rank 1 3 ms
    log = []

    def worker(rt):
        log.append((rt.rank, "compute", rt.now()))
        result = yield rt.compute(None, Sized(batch[rt.rank]))
        log.append((rt.rank, "computed", rt.now(), result.batch_size, result.start_s, result.end_s))
        total = yield rt.allreduce(group, torch.full((1000,), float(rt.rank + 1)))  # 4000 B each
        log.append((rt.rank, "allreduced", rt.now(), total[0].item(), total.numel()))

    run_world(world, {0: worker, 1: worker})

    c0, c1 = T0 + T1 * 10, T0 + T1 * 20
    # ring of two: 2 steps, each moving half the tensor (2000 B) both ways on separate ports
    step_s = LATENCY_S + 2000 / BANDWIDTH_BPS
    # starts when the last member (rank 1) arrives; the first step's receiver sums 2000 B
    done = c1 + 2 * step_s + 2000 / CPU_REDUCE_BPS
    assert log == approx_log([
        (0, "compute", 0.0),
        (1, "compute", 0.0),
        (0, "computed", c0, 10, 0.0, c0),
        (1, "computed", c1, 20, 0.0, c1),
        (0, "allreduced", done, 3.0, 1000),
        (1, "allreduced", done, 3.0, 1000),
    ])
    assert [(s.rank, s.kind, s.name, s.start_s, s.end_s, s.blocking) for s in world.recorder.spans] == approx_log([
        (0, "compute", "forward/backward", 0.0, c0, True),
        (1, "compute", "forward/backward", 0.0, c1, True),
        (0, "wait", "allreduce", c0, c1, True),  # rank 1 was not there yet
        (0, "comm", "allreduce", c1, done, True),
        (1, "comm", "allreduce", c1, done, True),
    ])
    assert [s.args for s in world.recorder.spans[:2]] == [{"batch_size": 10}, {"batch_size": 20}]
    _assert_blocking_spans_do_not_overlap(world.recorder.spans)
    net, links = world.network, world.platform.link_by_name
    for port in ("n0.d0.up", "n0.d0.down", "n0.d1.up", "n0.d1.down"):
        assert net.link_bytes[links[port].index] == 4000.0
    assert dict(net.sent_bytes) == dict(net.received_bytes) == {(0, 1): 4000.0, (1, 0): 4000.0}


def _assert_blocking_spans_do_not_overlap(spans):
    for rank in {s.rank for s in spans}:
        mine = sorted((s.start_s, s.end_s) for s in spans if s.rank == rank and s.blocking)
        assert all(a_end <= b_start * (1 + 1e-12) for (_, a_end), (b_start, _) in zip(mine, mine[1:]))


def test_non_blocking_allreduce_is_recorded_apart_and_costs_nothing_when_done(make_world, run_world):
    world = make_world(2, t0=T0, t1=T1)
    group = world.runtime(0).group([0, 1])
    log = []

    def worker(rt):
        request = rt.iallreduce(group, torch.ones(500))  # 2000 B: overlaps with the compute below
        yield rt.compute(None, Sized(10))
        total = yield request
        log.append((rt.rank, rt.now(), total[0].item()))

    run_world(world, {0: worker, 1: worker})
    c = T0 + T1 * 10
    done = 2 * (LATENCY_S + 1000 / BANDWIDTH_BPS) + 1000 / CPU_REDUCE_BPS
    assert log == approx_log([(0, c, 2.0), (1, c, 2.0)])
    assert [(s.rank, s.kind, s.start_s, s.end_s, s.blocking) for s in world.recorder.spans] == approx_log([
        (0, "compute", 0.0, c, True),
        (1, "compute", 0.0, c, True),
        (0, "comm", 0.0, done, False),
        (1, "comm", 0.0, done, False),
    ])


# -- point to point -----------------------------------------------------------------------------------


def test_send_delivers_a_snapshot_after_latency_plus_bytes_over_bandwidth(make_world, run_world):
    world = make_world(2)
    got = {}

    def sender(rt):
        tensor = torch.arange(250.0)  # 1000 B
        request = rt.send(1, tensor, tag=3)
        tensor.add_(1000)  # the message in flight must not change
        yield request
        got["send done"] = rt.now()

    def receiver(rt):
        message = yield rt.recv()
        got["message"] = message

    run_world(world, {0: sender, 1: receiver})
    arrival = LATENCY_S + 1000 / BANDWIDTH_BPS
    message = got["message"]
    assert (message.src, message.dst, message.tag, message.nbytes, message.sent_s) == (0, 1, 3, 1000, 0.0)
    assert message.arrived_s == pytest.approx(arrival, rel=1e-12)
    assert torch.equal(message.payload, torch.arange(250.0))
    assert got["send done"] == pytest.approx(arrival, rel=1e-12)
    # both sides were blocked on data that was moving from the send on
    assert sorted((s.rank, s.kind, s.name, s.start_s, s.end_s) for s in world.recorder.spans) == approx_log([
        (0, "comm", "send", 0.0, arrival), (1, "comm", "recv", 0.0, arrival)])


def test_recv_waits_for_a_late_sender_and_records_the_wait(make_world, run_world):
    world = make_world(2, t0=T0, t1=T1)
    got = {}

    def sender(rt):
        yield rt.compute(None, Sized(10))
        rt.send(1, torch.zeros(25))  # 100 B, not waited for

    def receiver(rt):
        got["message"] = yield rt.recv(src=0)
        got["at"] = rt.now()

    run_world(world, {0: sender, 1: receiver})
    c = T0 + T1 * 10
    arrival = c + LATENCY_S + 100 / BANDWIDTH_BPS
    assert got["at"] == pytest.approx(arrival, rel=1e-12)
    assert got["message"].sent_s == pytest.approx(c)
    spans = [(s.kind, s.start_s, s.end_s) for s in world.recorder.spans if s.rank == 1]
    assert spans == approx_log([("wait", 0.0, c), ("comm", c, arrival)])


def test_recv_from_a_specific_source_or_tag_skips_other_messages(make_world, run_world):
    world = make_world(3, t0=T0, t1=T1)
    got = []

    def early(rt):  # rank 0: sends at once
        rt.send(2, "from 0", tag=0)
        rt.send(2, "from 0, tag 7", tag=7)
        return
        yield

    def late(rt):  # rank 1: sends after 2 ms of compute
        yield rt.compute(None, Sized(10))
        rt.send(2, "from 1", tag=0)

    def receiver(rt):
        for src, tag in ((1, ANY), (ANY, 7), (ANY, ANY)):
            message = yield rt.recv(src=src, tag=tag)
            got.append((message.payload, rt.now()))

    run_world(world, {0: early, 1: late, 2: receiver})
    from_1 = T0 + T1 * 10 + LATENCY_S + 6 / BANDWIDTH_BPS
    # rank 0's messages arrived first but wait in the mailbox until asked for
    assert got == approx_log([("from 1", from_1), ("from 0, tag 7", from_1), ("from 0", from_1)])


def test_poll_returns_none_until_a_message_has_arrived(make_world, run_world):
    world = make_world(2, t0=T0, t1=T1)
    got = []

    def sender(rt):
        yield rt.send(1, 42)

    def poller(rt):
        got.append(rt.poll())  # t = 0: nothing has arrived
        yield rt.compute(None, Sized(1))  # long after the 8-byte message has landed
        message = rt.poll(src=0)
        got.append((message.payload, message.nbytes))
        got.append(rt.poll())  # taken: the mailbox is empty again

    run_world(world, {0: sender, 1: poller})
    assert got == [None, (42, 8), None]


def test_a_receive_of_a_queued_message_returns_it_at_once_without_an_event(make_world, run_world):
    world = make_world(2, t0=T0, t1=T1)
    got = []

    def sender(rt):
        rt.send(1, "first")
        rt.send(1, "second")
        return
        yield

    def receiver(rt):
        yield rt.compute(None, Sized(10))  # both messages land meanwhile
        first = rt.recv()
        got.append((first.finished, first.ready_value.payload))
        message = yield first
        second = rt.recv()
        event = second.event  # asked for: an event that has succeeded with the message
        got.append((second.finished, event.triggered, event.value.payload))
        yield second
        got.append((message.payload, rt.now()))

    run_world(world, {0: sender, 1: receiver})
    assert got == [(True, "first"), (False, True, "second"), ("first", pytest.approx(T0 + T1 * 10))]
    assert [s.kind for s in world.recorder.spans if s.rank == 1] == ["compute"]  # no wait was recorded


# -- compute ------------------------------------------------------------------------------------------


def test_a_gradient_sent_unread_is_evaluated_when_its_receiver_reads_it(make_world, run_world):
    evaluated = []

    def source(rank, replica, batch):
        def evaluate():
            evaluated.append(rank)
            return torch.arange(4.0), 0.25
        return evaluate

    world = make_world(2, gradient_source=source)
    got = {}

    def worker(rt):
        result = yield rt.compute(SimpleNamespace(params=torch.zeros(4)), Sized(4))
        rt.send(1, {"grad": result.grad_for_message(1, 3), "loss": result.loss_for_message()}, handover=True)
        got["sent, evaluated"] = list(evaluated)

    def receiver(rt):
        message = yield rt.recv()
        got["nbytes"] = message.nbytes
        got["received, evaluated"] = list(evaluated)
        got["values"] = yield rt.busy(0.0, "read", run=lambda grad, loss: (grad.tolist(), loss),
                                      inputs=(message.payload["grad"], message.payload["loss"]))

    run_world(world, {0: worker, 1: receiver})
    assert got == {"sent, evaluated": [], "nbytes": 2 * 4 + 8, "received, evaluated": [],
                   "values": ([1.0, 2.0], 0.25)}
    assert evaluated == [0]  # once, for both values


def test_a_gradient_read_before_the_send_travels_as_its_value(make_world, run_world):
    world = make_world(2, gradient_source=lambda rank, replica, batch: lambda: (torch.arange(4.0), 0.5))
    got = {}

    def worker(rt):
        result = yield rt.compute(SimpleNamespace(params=torch.zeros(4)), Sized(4))
        assert result.loss == 0.5
        rt.send(1, {"grad": result.grad_for_message(0, 2), "loss": result.loss_for_message()}, handover=True)

    def receiver(rt):
        got["payload"] = (yield rt.recv()).payload

    run_world(world, {0: worker, 1: receiver})
    assert got["payload"]["grad"].tolist() == [0.0, 1.0] and got["payload"]["loss"] == 0.5


def test_a_handed_over_tensor_is_sent_without_a_copy_and_sized_as_itself(make_world, run_world):
    world = make_world(2)
    weights, header = torch.arange(250.0), [1.0, 2.0]
    got = {}

    def sender(rt):
        rt.send(1, {"params": weights, "version": 3, "times": header}, handover=True)
        header.append(3.0)  # containers are still copied: only tensors are handed over
        yield from ()

    def receiver(rt):
        got["message"] = yield rt.recv()

    run_world(world, {0: sender, 1: receiver})
    payload = got["message"].payload
    assert payload["params"] is weights and payload["version"] == 3 and payload["times"] == [1.0, 2.0]
    assert got["message"].nbytes == 1000 + 8 + 16


def test_lazy_work_on_an_unevaluated_gradient_waits_until_its_value_is_read(make_world, run_world):
    evaluated = []

    def source(rank, replica, batch):
        def evaluate():
            evaluated.append(rank)
            return torch.arange(4.0), 0.25
        return evaluate

    world = make_world(2, gradient_source=source)
    got = {}

    def worker(rt):
        result = yield rt.compute(SimpleNamespace(params=torch.zeros(4)), Sized(4))
        rt.send(1, {"grad": result.grad_for_message(0, 4), "loss": result.loss_for_message()}, handover=True)

    def receiver(rt):
        payload = (yield rt.recv()).payload
        doubled = yield rt.busy(0.0, "double", run=lambda grad: grad * 2, inputs=(payload["grad"],), lazy=True)
        got["after lazy work, evaluated"] = list(evaluated)
        got["values"] = yield rt.busy(0.0, "read", run=lambda total: total.tolist(), inputs=(doubled,))
        rt.record("update", worker=0, step=1, version=1, staleness=0, batch_size=4, loss=payload["loss"])

    run_world(world, {0: worker, 1: receiver})
    assert got == {"after lazy work, evaluated": [], "values": [0.0, 2.0, 4.0, 6.0]}
    assert evaluated == [0]
    assert world.recorder.updates[0]["loss"] == 0.25  # a loss sent unevaluated is recorded as its value


def test_at_fraction_fires_inside_the_compute(make_world, run_world):
    world = make_world(1, t0=T0, t1=T1)
    log = []

    def worker(rt):
        computing = rt.compute(None, Sized(10))  # 2 ms
        yield computing.at_fraction(0.5)
        log.append(("half", rt.now()))
        yield computing.at_fraction(0.25)  # already past: completes at once
        log.append(("quarter", rt.now()))
        partial = computing.partial_result()
        result = yield computing
        log.append(("done", rt.now(), result is partial, result.grad.tolist()))
        yield computing.at_fraction(2.0)  # clamped to the end, which has passed
        log.append(("after", rt.now()))

    run_world(world, {0: worker})
    c = T0 + T1 * 10
    assert log == approx_log([("half", c / 2), ("quarter", c / 2), ("done", c, True, [0.0, 0.0, 0.0]), ("after", c)])
    assert [s.kind for s in world.recorder.spans] == ["compute"]  # progress waits are not communication


def test_compute_uses_the_gradient_source_of_the_rank(make_world, run_world):
    calls = []

    def source(rank, replica, batch):
        calls.append((rank, replica, batch.size))
        return lambda: (torch.tensor([float(rank)]), 0.5 * rank)

    world = make_world(2, gradient_source=source)
    got = {}

    def worker(rt):
        result = yield rt.compute(f"replica{rt.rank}", Sized(4))
        got[rt.rank] = (result.grad.tolist(), result.loss, result.batch_size)

    run_world(world, {0: worker, 1: worker})
    assert calls == [(0, "replica0", 4), (1, "replica1", 4)]
    assert got == {0: ([0.0], 0.0, 4), 1: ([1.0], 0.5, 4)}


def test_busy_is_compute_time_the_algorithm_models_itself(make_world, run_world):
    world = make_world(2, t0=T0, t1=T1)
    log = []

    def server(rt):
        yield rt.busy(1e-3, "apply update")
        log.append((rt.rank, "applied", rt.now()))
        yield rt.busy(-5.0)  # nothing to do takes no time
        log.append((rt.rank, "idle", rt.now()))
        rt.send(1, 7.0)

    def client(rt):
        message = yield rt.recv(src=0)
        log.append((rt.rank, "got", rt.now(), message.payload))

    run_world(world, {0: server, 1: client})
    arrival = 1e-3 + LATENCY_S + 8 / BANDWIDTH_BPS
    assert log == approx_log([(0, "applied", 1e-3), (0, "idle", 1e-3), (1, "got", arrival, 7.0)])
    assert [(s.rank, s.kind, s.name, s.start_s, s.end_s) for s in world.recorder.spans] == approx_log([
        (0, "compute", "apply update", 0.0, 1e-3),
        (1, "wait", "recv", 0.0, 1e-3),
        (1, "comm", "recv", 1e-3, arrival),
    ])


def test_inference_does_the_math_at_the_call_and_costs_a_third_of_a_forward_backward(make_world, run_world):
    world = make_world(2, t0=T0, t1=T1)
    log, math_done = [], []

    def evaluator(rt):
        accuracy = yield rt.inference(30, lambda: math_done.append(rt.now()) or 0.75, "evaluation")
        log.append((rt.rank, accuracy, rt.now()))
        nothing = yield rt.inference(30)  # the time alone
        log.append((rt.rank, nothing, rt.now()))

    run_world(world, {0: evaluator})
    forward = (T0 + T1 * 30) / 3
    assert math_done == [0.0]
    assert log == approx_log([(0, 0.75, forward), (0, None, 2 * forward)])
    assert [(s.kind, s.name, s.start_s, s.end_s) for s in world.recorder.spans] == approx_log([
        ("compute", "evaluation", 0.0, forward), ("compute", "inference", forward, 2 * forward)])


# -- records ------------------------------------------------------------------------------------------


def test_updates_go_to_the_recorder_and_listeners_with_the_time(make_world, run_world):
    world = make_world(1, t0=T0, t1=T1)
    heard = []
    world.update_listeners.append(heard.append)

    def worker(rt):
        yield rt.compute(None, Sized(0))
        rt.record("update", worker=0, step=1, version=1, staleness=0, batch_size=0, loss=None)
        rt.record("phase", name="warm-up")

    run_world(world, {0: worker})
    row = dict(time_s=T0, worker=0, step=1, version=1, staleness=0, batch_size=0, loss=None)
    assert world.recorder.updates == heard == [row]
    assert world.recorder.events == [dict(kind="phase", time_s=T0, rank=0, name="warm-up")]


# -- what the runtime refuses --------------------------------------------------------------------------


def test_a_collective_mismatch_is_a_simulation_error(make_world, run_world):
    world = make_world(2)
    group = world.runtime(0).group([0, 1])

    def reducer(rt):
        yield rt.allreduce(group, torch.ones(2))

    def broadcaster(rt):
        yield rt.broadcast(group, torch.ones(2), root=0)

    with pytest.raises(SimulationError, match=r"collective mismatch on group \(0, 1\) \(call #0\): rank 1 calls "
                                              r"broadcast.*another member called allreduce"):
        run_world(world, {0: reducer, 1: broadcaster})


def test_allreduces_with_different_algorithms_do_not_match(make_world, run_world):
    world = make_world(2)
    group = world.runtime(0).group([0, 1])

    def member(rt):
        yield rt.allreduce(group, torch.ones(2), algorithm="ring" if rt.rank == 0 else "tree")

    with pytest.raises(SimulationError, match="collective mismatch"):
        run_world(world, {0: member, 1: member})


def test_yielding_something_else_than_a_request_is_a_simulation_error(make_world, run_world):
    world = make_world(1)

    def sleeper(rt):
        yield 0.5

    with pytest.raises(SimulationError, match="rank 0 yielded 0.5; algorithms may only yield runtime requests"):
        run_world(world, {0: sleeper})


def test_a_collective_on_a_group_the_rank_is_not_in_is_a_simulation_error(make_world, run_world):
    world = make_world(3)

    def outsider(rt):
        yield rt.barrier(rt.group([0, 1]))

    with pytest.raises(SimulationError, match=r"rank 2 calls barrier on group \(0, 1\) it is not a member of"):
        run_world(world, {2: outsider})


def test_bad_ranks_and_fidelities_are_refused(make_world):
    world = make_world(2)
    with pytest.raises(SimulationError, match="rank 2 does not exist"):
        world.runtime(2)
    with pytest.raises(SimulationError, match="rank 0 sends to rank 5, which does not exist"):
        world.runtime(0).send(5, 1.0)
    with pytest.raises(ValueError, match="unknown collective fidelity 'exact'; known: analytic, flows"):
        make_world(2, fidelity="exact")


def test_a_rank_waiting_for_a_message_that_never_comes_leaves_the_run_unfinished(make_world):
    world = make_world(2)
    process = world.spawn(1, (lambda rt: (yield rt.recv(src=0)))(world.runtime(1)))
    world.env.run()
    assert not process.triggered  # no event left: SimPy stops; the caller sees a stalled run


def test_a_broadcast_from_a_root_outside_the_group_is_a_simulation_error(make_world, run_world):
    world = make_world(3)
    group = world.runtime(0).group([0, 1])

    def member(rt):
        yield rt.broadcast(group, torch.ones(2), root=2)

    with pytest.raises(SimulationError, match=r"rank 0 calls broadcast with root 2, which is not in group \(0, 1\)"):
        run_world(world, {0: member, 1: member})


def test_the_runtime_layer_imports_nothing_from_training():
    """simdist/runtime sits below the training layer: payload rules and phantoms live in it."""
    import ast
    from pathlib import Path

    import simdist.runtime

    offenders = []
    for path in sorted(Path(simdist.runtime.__file__).parent.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else \
                [a.name for a in node.names] if isinstance(node, ast.Import) else []
            level = getattr(node, "level", 0)
            if any((level == 2 and name.startswith("training")) or name.startswith("simdist.training")
                   for name in names):
                offenders.append(f"{path.name}:{node.lineno}")
    assert offenders == []
