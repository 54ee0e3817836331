"""What a lockstep group's generator yields and gets back (:mod:`.group`).

The requests (a forward/backward of every member, a point inside it, a member's own work, an
allreduce over all members) each know how to wait for every member (``wait``: move the
members' clocks, then the generator to the earliest of them); the values stand for every
member: :class:`GroupRank` for each member's rank, :class:`MemberTensor` for each member's
own tensor.
"""

from __future__ import annotations

import math
from typing import Any, Generator, Sequence

import numpy as np
import simpy

from .base import GradResult

__all__ = ["GroupRank", "MemberTensor", "member_values", "delay_to", "GroupRequest", "GroupCompute", "Busy",
           "Allreduce"]


class GroupRank(int):
    """Worker 0's rank, standing for every member's own rank (a record's ``worker=rt.rank``)."""


class MemberTensor:
    """Every member's own tensor (a replay gradient), in member order.

    Casts, slices and copies apply member by member; a group collective sums the members.
    Anything else has no meaning for a group and is refused (an attribute error), which keeps
    an algorithm that is not lockstep in replay from running as a group unnoticed.
    """

    __slots__ = ("members",)

    def __init__(self, members: Sequence[Any]):
        self.members = list(members)

    @property
    def dtype(self) -> Any:
        return self.members[0].dtype

    def to(self, dtype: Any) -> "MemberTensor":
        return MemberTensor([m.to(dtype) for m in self.members])

    def __getitem__(self, index: slice) -> "MemberTensor":
        return MemberTensor([m[index] for m in self.members])

    def clone(self) -> "MemberTensor":
        return MemberTensor([m.clone() for m in self.members])

    def numel(self) -> int:
        return self.members[0].numel()

    def element_size(self) -> int:
        return self.members[0].element_size()


def member_values(value: Any, n: int) -> list[Any]:
    """Every member's own value: a member tensor's parts, else one value standing for all."""
    return value.members if isinstance(value, MemberTensor) else [value] * n


def delay_to(now_s: float, target_s: float) -> float:
    """The delay that brings a clock at ``now_s`` to ``target_s`` exactly (SimPy adds it to now):
    ``target - now`` can miss by an ulp, and a member's clock is exact (the same sums one rank's
    own process makes), so the group's clock lands on it. 0 for a target already passed."""
    if target_s <= now_s:
        return 0.0
    delay = target_s - now_s
    for _ in range(4):
        reached = now_s + delay
        if reached == target_s:
            break
        delay = math.nextafter(delay, math.inf if reached < target_s else 0.0)
    return delay


class GroupRequest:
    """A request of the group's generator; the driver calls :meth:`wait` when it is yielded, with the
    :class:`~simdist.runtime.group.GroupRuntime` whose members' clocks it moves."""

    def wait(self, group: Any) -> Generator:
        raise NotImplementedError


class GroupCompute(GroupRequest):
    """Every member's forward/backward; yielded, each member waits for its own end."""

    def __init__(self, group: Any, start_s: Any, durations_s: np.ndarray, free_s: np.ndarray,
                 result: GradResult):
        self.start_s, self.durations_s, self.free_s = start_s, durations_s, free_s
        self._result = result

    def partial_result(self) -> GradResult:
        """The result before compute has finished, for gradient buckets backward has produced."""
        return self._result

    def at_fraction(self, fraction: float) -> "_Fraction":
        """A request completing, for each member, when ``fraction`` of its compute has passed."""
        return _Fraction(self, min(max(float(fraction), 0.0), 1.0))

    def wait(self, group: Any) -> Generator:
        group.clock = np.maximum(group.clock, self.free_s)
        yield from group.until_earliest()
        return self._result


class _Fraction(GroupRequest):
    def __init__(self, computing: GroupCompute, fraction: float):
        self.computing, self.fraction = computing, fraction

    def wait(self, group: Any) -> Generator:
        c = self.computing
        group.clock = np.maximum(group.clock, c.start_s + self.fraction * c.durations_s)
        yield from group.until_earliest()
        return None


class Busy(GroupRequest):
    def __init__(self, value: Any):
        self.value = value

    def wait(self, group: Any) -> Generator:
        yield from group.until_earliest()
        return self.value


class Allreduce(GroupRequest):
    """One allreduce over every member; started once the last member has called it."""

    def __init__(self, total: Any, nbytes: int, group_size: int, blocking: bool):
        self.total, self.blocking = total, blocking
        self.args = {"bytes": int(nbytes), "group_size": group_size, **({} if blocking else {"nonblocking": True})}
        self.start_s = self.end_s = math.nan
        self.done: simpy.Event | None = None
        self.gate: Any = None  # on_call: what holds a non-blocking one back (:mod:`.group_progress`)

    def wait(self, group: Any) -> Generator:
        group.entering_call()
        if not self.done.processed:
            yield self.done
        group.blocked(np.maximum(group.clock, self.end_s), self.start_s, self.args)
        yield from group.until_earliest()
        return self.total
