"""When a rank blocked in a receive notices its message: the waiting loop of a real run.

simdist's MPI runtime waits by testing what it waits for and sleeping between tests
(:mod:`simdist.real.driver`): a rank that shares its cores with other ranks sleeps from the
start, ``first_sleep`` doubling up to ``max_sleep``; a rank with a core of its own spins for
``spin``, then sleeps ``first_sleep`` at a time. Each sleep lasts its length plus the host's
``sleep_overshoot`` (``time.sleep`` returns late: timer slack and the wake-up). While a message
the rank sent above the eager limit has not left (its receiver has not taken it in), the rank
keeps its shortest sleep: that receiver needs the sender's next MPI call.

With ``platform.messages.wait_loop`` (``simdist calibrate network --path runtime`` writes it:
the loop's constants from the runtime, the overshoot timed on the host) a blocked receive is
done at the first test at or after its message lands, not the instant it lands. Without it
the receiver is taken to notice at once, as a library's own blocking receive does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["WaitLoop", "ReceiveWakeups"]


@dataclass(frozen=True)
class WaitLoop:
    """A waiting loop's schedule of tests (seconds)."""

    first_sleep_s: float
    max_sleep_s: float
    overshoot_s: float
    spin_s: float

    def next_test_s(self, since_s: float, arrived_s: float, *, spins: bool, short_until_s: float = -math.inf) -> float:
        """The first test at or after ``arrived_s`` of a loop that began at ``since_s`` (a rank that
        ``spins`` has a core to itself: it spins, then sleeps the shortest sleep). A rank that
        shares its cores sleeps its shortest sleep until ``short_until_s`` (a send of its own in
        flight), and its doubling starts again from the test after which it saw the send gone."""
        if arrived_s <= since_s:
            return arrived_s
        short = self.first_sleep_s + self.overshoot_s
        if spins:  # it spins, then sleeps the shortest sleep, whether or not a send is in flight
            if arrived_s <= since_s + self.spin_s:
                return arrived_s
            return _on_grid(since_s + self.spin_s, arrived_s, short)
        sleep = self.first_sleep_s
        if short_until_s > since_s:
            if arrived_s <= short_until_s:
                return _on_grid(since_s, arrived_s, short)
            since_s = _on_grid(since_s, short_until_s, short)  # the test after which the send was seen gone
            if arrived_s <= since_s:
                return since_s
            sleep = min(2.0 * sleep, self.max_sleep_s)  # the runtime doubles its sleep on seeing it gone
        t = since_s
        while sleep < self.max_sleep_s:
            t += sleep + self.overshoot_s
            if t >= arrived_s:
                return t
            sleep = min(2.0 * sleep, self.max_sleep_s)
        return _on_grid(t, arrived_s, self.max_sleep_s + self.overshoot_s)


def _on_grid(start_s: float, at_s: float, period_s: float) -> float:
    """The first of ``start_s + k * period_s`` (k >= 1) at or after ``at_s``."""
    return start_s + max(1, math.ceil((at_s - start_s) / period_s - 1e-9)) * period_s


class ReceiveWakeups:
    """Per rank of a simulation: when its blocked receives notice their messages (:class:`WaitLoop`).

    ``sleepers``: the ranks that share their cores (they sleep from the start of a wait; the
    others spin first). ``eager_limit``: messages above it keep their sender on its shortest
    sleep until their receiver takes them in.
    """

    def __init__(self, loop: WaitLoop, sleepers: set[int], eager_limit: float | None):
        self.loop, self.sleepers, self.eager_limit = loop, sleepers, eager_limit
        self._out: dict[int, int] = {}  # rank -> its messages above the eager limit not taken in yet
        self._left_s: dict[int, float] = {}  # rank -> when the last of them was taken in

    def _rendezvous(self, nbytes: float) -> bool:
        return self.eager_limit is not None and nbytes > self.eager_limit

    def sent(self, src: int, nbytes: float) -> None:
        if self._rendezvous(nbytes):
            self._out[src] = self._out.get(src, 0) + 1

    def taken_in(self, src: int, nbytes: float, at_s: float) -> None:
        """A message of ``src`` was taken in by its receiver at ``at_s``: it has left its sender."""
        if self._rendezvous(nbytes) and self._out.get(src):
            self._out[src] -= 1
            self._left_s[src] = max(self._left_s.get(src, -math.inf), at_s)

    def noticed_s(self, rank: int, waiting_since_s: float, arrived_s: float) -> float:
        """When ``rank``, blocked in a receive since ``waiting_since_s``, tests and finds the
        message that landed at ``arrived_s``."""
        short_until = math.inf if self._out.get(rank) else self._left_s.get(rank, -math.inf)
        return self.loop.next_test_s(waiting_since_s, arrived_s, spins=rank not in self.sleepers,
                                     short_until_s=short_until)
