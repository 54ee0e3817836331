"""``platform.progress: on_call`` for a lockstep group's non-blocking collective.

One rank at a time (:class:`~simdist.runtime.progress.OnCallProgress`), a collective that a
member called non-blocking starts at the first moment every member is inside a runtime call:
blocked on a communication request, with no compute of its own in flight. A lockstep group
knows when each member is inside a call as intervals, one per request it blocks on, each
member's own (:meth:`GroupRuntime.blocked`), and it knows them ahead of the run's clock. An
:class:`InsideGate` collects those intervals for one collective and finds that first moment:
the earliest time, from the collective's last call, inside an interval of every member.

A member's intervals arrive in the order of its own time, so the earliest moment every
member's known intervals share is final (a member's next interval can only come later); the
collective's own wait is open-ended (the member is
inside until the collective ends, which is after the start the gate decides), so the gate
always opens once every member waits on it, as it would rank by rank.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np

__all__ = ["InsideGate"]


class InsideGate:
    """The first moment from ``after_s`` at which all ``n`` members are inside a call."""

    def __init__(self, after_s: float, n: int, event: Any):
        self.after_s, self.event = float(after_s), event
        self._intervals: list[deque[tuple[float, float]]] = [deque() for _ in range(n)]
        self.start_s: float | None = None

    def inside(self, starts: Any, ends: Any) -> None:
        """Each member inside a call over [start, end) (arrays, or one value for all; ``inf``:
        until the collective itself ends; start = end: a call that returned at once), its next
        such interval after those it gave before."""
        n = len(self._intervals)
        starts, ends = np.broadcast_to(starts, (n,)), np.broadcast_to(ends, (n,))
        for member, (start, end) in enumerate(zip(starts.tolist(), ends.tolist())):
            if end >= start and end >= self.after_s:
                self._intervals[member].append((start, end))

    def resolve(self) -> float | None:
        """The moment, once it is final (then also kept in ``start_s``), else None."""
        if self.start_s is not None:
            return self.start_s
        t, moved = self.after_s, True
        while moved:
            moved = False
            for intervals in self._intervals:
                while intervals and _over(intervals[0], t):
                    intervals.popleft()
                if not intervals:
                    return None  # this member's next call is not known yet
                if intervals[0][0] > t:
                    t, moved = intervals[0][0], True
        self.start_s = t  # every move above crossed a gap some member's known calls leave: nothing earlier
        return t


def _over(interval: tuple[float, float], t: float) -> bool:
    """Whether a member inside a call over ``interval`` is no longer in it at ``t``: [start, end)
    has ended by ``end``; a call that returned at once ([t0, t0]) counts at its instant only,
    as a rank entering a call opens a gate that waits for it even if it leaves at once."""
    start, end = interval
    return end < t or (end == t and start < end)
