"""``platform.progress: on_call`` for a lockstep group's non-blocking collective.

One rank at a time (:class:`~simdist.runtime.progress.OnCallProgress`), a collective that a
member called non-blocking starts at the first moment every member is inside a runtime call:
blocked on a communication request, with no compute of its own in flight. A lockstep group
knows when each member enters a call (each member's own time, often ahead of the run's
clock) and, once the request ends, when it leaves. An :class:`InsideGate` collects those
intervals for one collective, a call still under way counted as lasting, and finds the
earliest moment, from the collective's last call, inside an interval of every member.

That moment is checked again when the run's clock reaches it: a request still under way
then ends after it (a request's end is never before the moment it is known), and one that
ended before has its true end, so the answer then is final; if it moved, the next check is
at the new moment. The collective's own wait lasts until it starts, so the gate opens at the
latest once every member waits on it, as it would rank by rank.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any

import numpy as np

__all__ = ["InsideGate"]


class InsideGate:
    """The first moment from ``after_s`` at which all ``n`` members are inside a call."""

    def __init__(self, after_s: float, n: int, event: Any):
        self.after_s, self.event = float(after_s), event
        self._intervals: list[deque[list[float]]] = [deque() for _ in range(n)]
        self.start_s: float | None = None  # once opened
        self.check_at: float | None = None  # the moment a check is due (see GroupRuntime._resolve_gates)

    def inside(self, starts: Any, ends: Any) -> None:
        """Each member inside a call over [start, end) (arrays, or one value for all; start =
        end: a call that returned at once; ``inf``: until a request ends that has not yet, see
        :meth:`ended`), its next such interval after those it gave before."""
        n = len(self._intervals)
        starts, ends = np.broadcast_to(starts, (n,)), np.broadcast_to(ends, (n,))
        for member, (start, end) in enumerate(zip(starts.tolist(), ends.tolist())):
            if end >= start and end >= self.after_s:
                self._intervals[member].append([start, end])

    def ended(self, ends: Any) -> None:
        """The request each member was inside until further notice ended at ``ends``."""
        ends = np.broadcast_to(ends, (len(self._intervals),)).tolist()
        for intervals, end in zip(self._intervals, ends):
            if intervals and intervals[-1][1] == math.inf:
                intervals[-1][1] = end
                if end < intervals[-1][0] or end < self.after_s:
                    intervals.pop()

    def earliest(self) -> float | None:
        """The earliest moment every member is inside a call by what is known now (an open
        interval counted as lasting), or None while some member's next call is unknown. It is
        final once the run's clock reaches it: every interval still open then lasts past it."""
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
        return t


def _over(interval: list[float], t: float) -> bool:
    """Whether a member inside a call over ``interval`` is no longer in it at ``t``: [start, end)
    has ended by ``end``; a call that returned at once ([t0, t0]) counts at its instant only,
    as a rank entering a call opens a gate that waits for it even if it leaves at once."""
    start, end = interval
    return end < t or (end == t and start < end)
