"""LogGOPS per-byte CPU overheads (``platform.messages.send_overhead_per_byte``/``recv_overhead_per_byte``).

A rank's CPU copies every byte it sends and receives (MPI over TCP): the copy overlaps the
message's transfer, so it takes the rank's CPU (a ``message overhead`` span, the ledger's
``comm_cpu``, before its next work), delays the message only where it is slower than the
links, spaces the rank's back-to-back sends, and bounds a collective step from below.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml
from pydantic import ValidationError

from simdist.platform.cost_spec import MessageCostSpec
from simdist.training.replica import PhantomTensor

from conftest import build_platform, build_world
from helpers import assert_run_refuses, tiny_scenario

MIB = 1024 * 1024
PER_BYTE = {"send_overhead_per_byte": "2ns", "recv_overhead_per_byte": "3ns", "source": "hand-made"}


class _Batch:
    size = 4


def _world(fidelity: str = "analytic", **messages):
    platform = build_platform("laptop-cpu", node={"devices": 2}, **({"messages": messages} if messages else {}))
    return build_world(2, fidelity=fidelity, platform=platform)


def _overheads(world, rank: int) -> list[tuple[float, float]]:
    return [(s.start_s, s.end_s) for s in world.recorder.spans if s.rank == rank and s.name == "message overhead"]


def _one_message(world, nbytes: int, receive: str = "recv"):
    """Rank 0 sends ``nbytes`` and computes; rank 1 receives (blocking ``recv`` or a ``poll``
    after a sleep) and then does busy work. Returns when the message was in rank 1's hands."""
    taken = {}

    def sender(rt):
        rt.send(1, PhantomTensor(nbytes // 4))
        yield rt.compute(None, _Batch())

    def receiver(rt):
        if receive == "recv":
            yield rt.recv(0)
        else:
            yield rt.busy(1.0, "idle")
            assert rt.poll(0) is not None
        taken["s"] = rt.now()
        yield rt.busy(1e-3, "apply")

    world.spawn(0, sender(world.runtime(0)))
    world.spawn(1, receiver(world.runtime(1)))
    world.env.run()
    return taken["s"]


def test_the_sender_pays_its_copy_before_its_next_work():
    world = _world(**PER_BYTE)
    _one_message(world, 4 * MIB)
    [(start, end)] = _overheads(world, 0)
    assert (start, end - start) == (0.0, pytest.approx(2e-9 * 4 * MIB))
    compute = next(s for s in world.recorder.spans if s.rank == 0 and s.name == "forward/backward")
    assert compute.start_s == pytest.approx(end)


def test_a_copy_faster_than_the_wire_does_not_delay_the_message_and_a_slower_one_ends_it():
    plain = _one_message(_world(), 4 * MIB)
    fast = {"send_overhead_per_byte": "0.001ns", "recv_overhead_per_byte": "0.001ns", "source": "hand-made"}
    assert _one_message(_world(**fast), 4 * MIB) == pytest.approx(plain, rel=1e-12)
    # 2 ns/B is far slower than the laptop's shared memory: the last byte leaves once copied
    latency_s = _world().platform.route_latency_s(0, 1)
    assert _one_message(_world(**PER_BYTE), 4 * MIB) == pytest.approx(latency_s + 2e-9 * 4 * MIB, rel=1e-9)


@pytest.mark.parametrize("receive", ["recv", "poll"])
def test_the_receiver_pays_its_copy_once_it_takes_the_message_in(receive):
    """A poll finds the message long arrived and owes the whole copy; a blocking receive posted
    when the message was sent copied while it waited, and owes only the rest."""
    world = _world(**PER_BYTE)
    taken_s = _one_message(world, 4 * MIB, receive)
    waited_s = taken_s if receive == "recv" else 0.0
    [(start, end)] = _overheads(world, 1)
    assert start == pytest.approx(taken_s) and end - start == pytest.approx(3e-9 * 4 * MIB - waited_s)
    if receive == "recv":
        assert 0 < waited_s < 3e-9 * 4 * MIB
    apply = next(s for s in world.recorder.spans if s.rank == 1 and s.name == "apply")
    assert apply.start_s == pytest.approx(end)


def test_a_blocking_receive_that_waited_longer_than_its_copy_owes_nothing():
    world = _world(send_overhead_per_byte="1e-15s", recv_overhead_per_byte="1e-15s", source="hand-made")
    _one_message(world, 4 * MIB, "recv")
    assert _overheads(world, 1) == []


def test_back_to_back_sends_leave_one_copy_apart():
    world = _world(**PER_BYTE)
    arrivals = []

    def sender(rt):
        for _ in range(2):
            rt.send(1, PhantomTensor(MIB // 4))
        yield rt.compute(None, _Batch())

    def receiver(rt):
        for _ in range(2):
            yield rt.recv(0)
            arrivals.append(rt.now())

    world.spawn(0, sender(world.runtime(0)))
    world.spawn(1, receiver(world.runtime(1)))
    world.env.run()
    # the second message leaves once the first one's copy (2 ns/B) is done; both then cross one link
    # in turn, so the gap between arrivals is at least the copy
    assert arrivals[1] - arrivals[0] >= 2e-9 * MIB * (1 - 1e-9)
    [(_, end)] = _overheads(world, 0)
    assert end == pytest.approx(2 * 2e-9 * MIB)  # both copies before the compute


def _allreduce_s(world, nbytes: int) -> float:
    group = world.runtime(0).group(range(2))
    ends = {}

    def member(rt):
        yield rt.allreduce(group, PhantomTensor(nbytes // 4))
        ends[rt.rank] = rt.now()

    for rank in range(2):
        world.spawn(rank, member(world.runtime(rank)))
    world.env.run()
    return max(ends.values())


@pytest.mark.parametrize("fidelity", ["analytic", "flows"])
def test_a_collective_step_takes_the_longer_of_its_wire_and_its_ranks_copies(fidelity):
    plain = _allreduce_s(_world(fidelity), 4 * MIB)
    cheap = _allreduce_s(_world(fidelity, send_overhead_per_byte="1e-15s", recv_overhead_per_byte="1e-15s",
                                source="hand-made"), 4 * MIB)
    assert cheap == pytest.approx(plain, rel=1e-12)  # copies far faster than the wire: the wire decides
    slow = {us: _allreduce_s(_world(fidelity, send_overhead_per_byte=f"{us}us", recv_overhead_per_byte=f"{us}us",
                                    source="hand-made"), 4 * MIB) for us in (1, 2)}
    # copies far slower than the wire: a ring of 2 has two steps, each rank sending and receiving
    # 2 MiB in each, so every us per byte adds 2 steps x (send + receive) x 2 MiB
    assert slow[2] - slow[1] == pytest.approx(2 * 2 * 1e-6 * 2 * MIB, rel=1e-9)
    assert slow[1] > plain


def test_negative_or_unsourced_per_byte_overheads_are_refused():
    with pytest.raises(ValidationError, match="finite non-negative"):
        MessageCostSpec(send_overhead_per_byte="-1ns", source="x")
    with pytest.raises(ValidationError, match="source"):
        MessageCostSpec(recv_overhead_per_byte="1ns")
    unset = MessageCostSpec(send_overhead="1us", source="x")
    assert (unset.send_overhead_per_byte, unset.recv_overhead_per_byte) == (None, None)  # the route's kinds decide
    assert MessageCostSpec(send_overhead_per_byte=0, source="x").send_overhead_per_byte == 0.0


def test_a_scenario_with_a_bad_per_byte_overhead_exits_2_naming_the_field(tmp_path):
    data = tiny_scenario(platform={"preset": "laptop-cpu", "node": {"devices": 2},
                                   "messages": {"recv_overhead_per_byte": "fast", "source": "x"}})
    assert_run_refuses(tmp_path, data, "platform.messages.recv_overhead_per_byte")


# -- the link kinds' own figure ------------------------------------------------------------

TCP_PER_BYTE_S = 1 / 5996.96e6  # ethernet-tcp: the shipped osu_bibw over TCP (simdist.platform.links)


def _two_nodes(**platform_fields):
    platform = build_platform("laptop-cpu", nodes=2, node={"devices": 2, "nic_link": "ethernet-tcp"}, **platform_fields)
    return build_world(4, platform=platform)


def _send_and_compute(world, dst: int, nbytes: int) -> None:
    def sender(rt):
        rt.send(dst, PhantomTensor(nbytes // 4))
        yield rt.compute(None, _Batch())

    world.spawn(0, sender(world.runtime(0)))
    world.spawn(dst, (lambda rt: (yield rt.recv(0)))(world.runtime(dst)))
    world.env.run()


def test_a_message_over_tcp_costs_its_sender_the_kind_s_copy_without_a_messages_section():
    world = _two_nodes()
    assert world.platform.copies.per_byte_s(0, 2) == (TCP_PER_BYTE_S, TCP_PER_BYTE_S)
    assert world.platform.copies.per_byte_s(0, 1) == (0.0, 0.0)  # shared memory inside the node: no kind figure
    _send_and_compute(world, 2, 4 * MIB)
    [(start, end)] = _overheads(world, 0)
    assert end - start == pytest.approx(TCP_PER_BYTE_S * 4 * MIB)
    basis = world.platform.copies.basis()
    assert [(row["link_kind"], row["basis"]) for row in basis] == [("ethernet-tcp", "link kind default")]
    assert "osu_bibw" in basis[0]["source"]


def test_a_message_inside_the_node_or_a_measured_zero_costs_no_copy():
    world = _two_nodes()
    _send_and_compute(world, 1, 4 * MIB)
    assert _overheads(world, 0) == []
    measured = _two_nodes(messages={"send_overhead_per_byte": 0, "recv_overhead_per_byte": 0,
                                    "source": "RDMA-capable TCP offload measured"})
    _send_and_compute(measured, 2, 4 * MIB)
    assert _overheads(measured, 0) == [] and _overheads(measured, 2) == []
    assert [row["basis"] for row in measured.platform.copies.basis()] == ["platform.messages"] * 2


def test_the_run_manifest_says_where_the_per_byte_copies_come_from(tmp_path):
    import json

    data = tiny_scenario(platform={"preset": "laptop-cpu", "nodes": 2, "node": {"devices": 1}}, workers=2)
    path = tmp_path / "tcp.yaml"
    path.write_text(yaml.safe_dump(data))
    done = subprocess.run([sys.executable, "-m", "simdist", "run", str(path), "--out", str(tmp_path / "out"),
                           "--quiet"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert [row["link_kind"] for row in manifest["message_copies"]] == ["ethernet-tcp"]
