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

from .group_requests import delay_to as _delay_to

__all__ = ["InsideGate", "OnCallGates"]


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


class OnCallGates:
    """A lockstep group's gates still closed: what its members' calls tell them, and their checks."""

    def __init__(self, env: Any):
        self.env = env
        self._gates: list[InsideGate] = []

    def __bool__(self) -> bool:
        return bool(self._gates)

    def add(self, gate: InsideGate) -> InsideGate:
        self._gates.append(gate)
        return gate

    def inside(self, starts: Any, ends: Any) -> None:
        """Every member inside a call over [start, end) (:meth:`InsideGate.inside`)."""
        for gate in self._gates:
            gate.inside(starts, ends)
        self._resolve()

    def ended(self, ends: Any) -> None:
        """The call every member was inside until further notice ended (:meth:`InsideGate.ended`)."""
        for gate in self._gates:
            gate.ended(ends)
        self._resolve()

    def _resolve(self) -> None:
        """Check each gate at its earliest moment by what is known (final when the clock gets there)."""
        for gate in list(self._gates):
            t = gate.earliest()
            if t is None or gate.check_at == t:
                continue
            gate.check_at = t
            self.env.timeout(_delay_to(self.env.now, t)).callbacks.append(lambda _e, g=gate, t=t: self._check(g, t))

    def _check(self, gate: InsideGate, t: float) -> None:
        if gate.start_s is not None or gate.check_at != t:
            return  # opened already, or a later check replaced this one
        if gate.earliest() == t:
            gate.start_s = t
            self._gates.remove(gate)
            gate.event.succeed()
        else:
            gate.check_at = None
            self._resolve()


def _over(interval: list[float], t: float) -> bool:
    """Whether a member inside a call over ``interval`` is no longer in it at ``t``: [start, end)
    has ended by ``end``; a call that returned at once ([t0, t0]) counts at its instant only,
    as a rank entering a call opens a gate that waits for it even if it leaves at once."""
    start, end = interval
    return end < t or (end == t and start < end)
