"""A real run's send call is the sender's CPU as a whole: its span covers the tests and the flush it posts.

The calibration (``calibrate network --path runtime``) times the runtime's send call from start to
end and the simulator charges that as ``comm_cpu``; the real run must record the same call the same
way, or the part of it after the ``ibsend`` lands in the real ledger's ``update`` (time no span covers).
No MPI here: a clock that only the fake library's calls move.
"""

from __future__ import annotations

import torch

from simdist.ledger import OVERHEAD_SPAN
from simdist.real.messages import PointToPoint


class _Request:
    def __init__(self, world, cost_s):
        self.world, self.cost_s = world, cost_s

    def test(self):
        self.world.t += self.cost_s
        return True, None

    def Test(self):
        return self.test()[0]


class _Comm:
    def __init__(self, world):
        self.world = world

    def ibsend(self, obj, dest, tag):
        self.world.t += 1.0  # packing and the copy into the attached buffer
        return _Request(self.world, 0.5)  # testing it later makes MPI progress: 0.5 s a test here


class _MPI:
    def __init__(self, world):
        self.world = world

    def Iflush_buffer(self):
        self.world.t += 0.25
        return _Request(self.world, 0.125)


class _World(PointToPoint):
    def __init__(self):
        self.t, self.rank, self.size, self.spans = 0.0, 0, 2, []
        self.comm, self.MPI = _Comm(self), _MPI(self)
        self._sends, self._flushes = [], []

    def now(self):
        return self.t

    def span(self, kind, name, start, end, **args):
        self.spans.append((kind, name, start, end))


def test_the_send_span_covers_the_whole_call_with_its_tests_and_flush():
    world = _World()
    world.send(1, torch.zeros(4), tag=3)
    # first send: nothing pending to test, the ibsend (1.0) and the flush it posts (0.25)
    assert world.spans == [("comm", OVERHEAD_SPAN, 0.0, 1.25), ("comm", "send", 0.0, 1.25)]
    world.spans.clear()
    world.send(1, torch.zeros(4), tag=3)
    # second: the ibsend (1.0), the test of the first send (0.5), the test of the first flush (0.125), a flush (0.25)
    assert world.spans[0] == ("comm", OVERHEAD_SPAN, 1.25, 1.25 + 1.875)
    assert world.now() == 1.25 + 1.875  # nothing the call did is left outside its span


def test_a_send_not_recorded_leaves_no_span():
    world = _World()
    world.send(1, torch.zeros(4), tag=3, record=False)
    assert world.spans == [] and world.now() == 1.25
