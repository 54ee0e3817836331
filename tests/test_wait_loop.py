"""A blocked receive in a real run is done at its rank's next test, not when its message lands."""

from __future__ import annotations

import math

import pytest
import torch
from pydantic import ValidationError

from simdist.platform.cost_spec import MessageCostSpec
from simdist.runtime.wait_loop import ReceiveWakeups, WaitLoop

from conftest import build_platform, build_world

LOOP = WaitLoop(first_sleep_s=50e-6, max_sleep_s=1e-3, overshoot_s=10e-6, spin_s=0.5e-3)


def test_a_rank_sharing_its_cores_tests_after_sleeps_that_double_up_to_the_longest():
    tests = [60e-6, 60e-6 + 110e-6, 60e-6 + 110e-6 + 210e-6]  # each sleep plus the overshoot
    assert LOOP.next_test_s(0.0, 1e-6, spins=False) == pytest.approx(tests[0])
    assert LOOP.next_test_s(0.0, tests[0] + 1e-6, spins=False) == pytest.approx(tests[1])
    assert LOOP.next_test_s(0.0, tests[1] + 1e-6, spins=False) == pytest.approx(tests[2])
    long_ago = LOOP.next_test_s(0.0, 0.1, spins=False)  # by then every sleep is the longest
    assert 0.1 <= long_ago < 0.1 + 1e-3 + 10e-6
    assert LOOP.next_test_s(5.0, 4.0, spins=False) == 4.0  # there before the wait began: taken at once


def test_a_rank_with_a_core_of_its_own_spins_then_sleeps_the_shortest_sleep():
    assert LOOP.next_test_s(0.0, 0.3e-3, spins=True) == 0.3e-3  # spinning: seen at once
    after = LOOP.next_test_s(0.0, 0.52e-3, spins=True)
    assert after == pytest.approx(0.5e-3 + 60e-6)
    assert LOOP.next_test_s(0.0, 0.1, spins=True) - 0.1 < 60e-6


def test_a_rank_whose_large_message_has_not_left_keeps_its_shortest_sleep():
    wakeups = ReceiveWakeups(LOOP, sleepers={0}, eager_limit=1024)
    wakeups.sent(0, 4096)  # rendezvous: its receiver needs rank 0's next call
    assert wakeups.noticed_s(0, 0.0, 5e-3) - 5e-3 < 60e-6 + 1e-12
    wakeups.taken_in(0, 4096, 1e-3)  # gone at 1 ms: seen at the test at 1.02 ms, then sleeps of 100 us, 200 us ...
    tests_after = [1.02e-3 + 110e-6, 1.13e-3 + 210e-6, 1.34e-3 + 410e-6, 1.75e-3 + 810e-6, 2.56e-3 + 1010e-6,
                   3.57e-3 + 1010e-6, 4.58e-3 + 1010e-6]
    assert wakeups.noticed_s(0, 0.0, 5e-3) == pytest.approx(tests_after[-1])
    assert wakeups.noticed_s(0, 0.0, 1.1e-3) == pytest.approx(tests_after[0])
    wakeups.sent(2, 4096)  # a rank with a core of its own spins first, its send in flight or not
    assert wakeups.noticed_s(2, 0.0, 0.3e-3) == 0.3e-3
    assert wakeups.noticed_s(2, 0.0, 0.52e-3) == pytest.approx(0.5e-3 + 60e-6)
    wakeups.sent(1, 100)  # eager: it leaves at once, nothing changes for its sender
    assert wakeups.noticed_s(1, 0.0, 5e-3) == LOOP.next_test_s(0.0, 5e-3, spins=True)


def test_the_wait_loop_must_be_ordered_and_sourced():
    with pytest.raises(ValidationError, match="first_sleep"):
        MessageCostSpec(wait_loop={"first_sleep": "2ms", "max_sleep": "1ms", "source": "x"})
    with pytest.raises(ValidationError, match="source"):
        MessageCostSpec(wait_loop={"first_sleep": "50us", "max_sleep": "1ms"})


def _receive_done_s(wait_loop: dict | None, cores: float | None) -> float:
    """When rank 1 (blocked in a receive since 0) has the message rank 0 sends at 3 ms."""
    messages = {"source": "test"} if wait_loop is None else {"source": "test", "wait_loop": wait_loop}
    node = {"devices": 2} if cores is None else {"devices": 2, "cores": cores}
    world = build_world(platform=build_platform("laptop-cpu", node=node, messages=messages))
    done = {}

    def receiver():
        message = yield world.recv(1, src=0).event
        done["s"] = world.env.now
        assert message.payload == "x"

    def sender():
        yield world.env.timeout(3e-3)
        world.send(0, 1, "x")

    world.env.process(receiver())
    world.env.process(sender())
    world.env.run()
    return done["s"]


def test_a_blocked_receive_is_done_at_the_next_test_of_its_ranks_loop():
    loop = {"first_sleep": "50us", "max_sleep": "1ms", "sleep_overshoot": "10us", "spin": "0.5ms", "source": "test"}
    at_once = _receive_done_s(None, cores=1)
    sharing = _receive_done_s(loop, cores=1)  # two ranks, one core: the receiver sleeps from the start
    own_core = _receive_done_s(loop, cores=None)  # its own cpus: it spins, then sleeps the shortest sleep
    arrived = at_once
    assert sharing == pytest.approx(LOOP.next_test_s(0.0, arrived, spins=False))
    assert own_core == pytest.approx(LOOP.next_test_s(0.0, arrived, spins=True))
    assert at_once < own_core < sharing
    assert not math.isclose(sharing, arrived)


def _allreduce_spans(wait_loop: dict | None, cores: float | None) -> dict[int, tuple[float, float, float]]:
    """Ranks 0 and 1 allreduce, rank 0 blocked in it from 0, rank 1 calling at 3 ms: per rank
    (when its wait ends, when the collective ends, when the data phase could have begun)."""
    messages = {"source": "test"} if wait_loop is None else {"source": "test", "wait_loop": wait_loop}
    node = {"devices": 2} if cores is None else {"devices": 2, "cores": cores}
    world = build_world(platform=build_platform("laptop-cpu", node=node, messages=messages))
    group = world.group([0, 1])
    ends = {}

    def member(rank, delay):
        if delay:
            yield world.env.timeout(delay)
        request = world.collective(rank, "allreduce", group, torch.ones(4))
        total = yield request.event
        assert torch.equal(total, torch.full((4,), 2.0))
        ends[rank] = (request.started_s, world.env.now)

    world.env.process(member(0, 0.0))
    world.env.process(member(1, 3e-3))
    world.env.run()
    return ends


def test_a_collective_starts_moving_once_every_blocked_member_has_tested_and_found_the_last_one_in():
    loop = {"first_sleep": "50us", "max_sleep": "1ms", "sleep_overshoot": "10us", "spin": "0.5ms", "source": "test"}
    at_once = _allreduce_spans(None, cores=1)
    sharing = _allreduce_spans(loop, cores=1)  # rank 0 sleeps from the start of its wait
    own_core = _allreduce_spans(loop, cores=None)  # rank 0 spins, then sleeps the shortest sleep
    moving_s = at_once[0][1] - 3e-3  # the data phase alone
    for ends in (at_once, sharing, own_core):
        assert ends[0][0] == ends[1][0] == pytest.approx(3e-3)  # the waits end when the last member arrived
        assert ends[0][1] == ends[1][1]  # a blocking collective ends for both at once
    assert sharing[0][1] == pytest.approx(LOOP.next_test_s(0.0, 3e-3, spins=False) + moving_s)
    assert own_core[0][1] == pytest.approx(LOOP.next_test_s(0.0, 3e-3, spins=True) + moving_s)
    assert at_once[0][1] < own_core[0][1] < sharing[0][1]


def test_a_waiting_loop_keeps_ranks_out_of_lockstep_groups():
    loop = {"first_sleep": "50us", "max_sleep": "1ms", "spin": "0.5ms", "source": "test"}
    world = build_world(platform=build_platform("laptop-cpu", node={"devices": 2},
                                                messages={"source": "test", "wait_loop": loop}))
    assert "messages.wait_loop" in world.lockstep_obstacle()
