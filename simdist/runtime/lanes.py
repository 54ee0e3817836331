"""Collectives that join lockstep lanes (:class:`~simdist.algorithms.base.LockstepForm`).

An algorithm whose workers differ by role runs as several lockstep groups, one per role
(DASO: one per local rank, its members the GPUs of that local rank on every node). Each
lane's generator is its first member's program; the lanes list their members in the same
order, so member ``i`` of every lane belongs together (DASO: the GPUs of node ``i``).

A collective a lane's generator calls on a group that is not the lane itself is one of:

* **per member**: the group holds only the lanes' first members (DASO's node group, as node 0
  builds it). It stands for one collective per position ``i`` over the lanes' ``i``-th
  members (every node's own node group), each starting when its last member has called it;
* **whole lanes**: the group is every member of the lanes it touches (DASO's world group for
  the epoch loss): one collective over all of them.

Any other group raises :class:`~simdist.errors.SimulationError`. Calls match in order, as one
rank's calls on a group do (:meth:`SimWorld.collective`).

The lanes' collectives are all the traffic, each alone on its links (a node's own links
carry its node's collectives only, one at a time; links of fixed capacity: the simulator
forms lanes that join only then, ``network_exclusive``), so every one takes the time it takes
alone: those of all positions are priced at once from their phases' first runs
(:meth:`~.sim_alone.AloneReplay.run_alone`), with no process and no timer per node.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Generator, Sequence

import numpy as np
import simpy

from ..errors import SimulationError
from .group_requests import GroupRequest, member_values
from .payloads import payload_nbytes

__all__ = ["LaneSet", "CrossLane"]


@dataclass(frozen=True)
class _Shape:
    """How a group given by a lane's generator maps onto the lanes' members."""

    lanes: tuple[int, ...]  # the lanes taking part, in the group's order of first appearance
    instances: tuple[tuple[int, ...], ...]  # the ranks of each collective it stands for
    per_member: bool  # instance i is position i of every lane (else one instance, every member)

    def root_of(self, lanes: Sequence[Any], where: dict[int, tuple[int, int]], root: int | None) -> list[int | None]:
        """The root of each instance: the root's lane's member at the instance's position."""
        if root is None or not self.per_member:
            return [root] * len(self.instances)
        lane, _position = where[root]
        return [int(r) for r in lanes[lane].ranks]


@dataclass(eq=False)
class _Call:
    kind: str
    algorithm: str | None
    root: int | None
    shape: _Shape
    clocks: dict[int, np.ndarray] = field(default_factory=dict)  # lane -> its members' clocks at the call
    tensors: dict[int, Any] = field(default_factory=dict)  # lane -> its tensor (one for every member)
    requests: dict[int, "CrossLane"] = field(default_factory=dict)


class CrossLane(GroupRequest):
    """A lane's part in a collective joining lanes: yielded, each member waits for its own instance."""

    def __init__(self, event: simpy.Event, kind: str, args: dict[str, Any]):
        self.event, self.kind, self.args = event, kind, args
        self.value: Any = None
        self.start_s: Any = None  # each member's instance's start (an array, or one time for all)
        self.end_s: Any = None

    def wait(self, group: Any) -> Generator:
        group.entering_call()
        if not self.event.processed:
            yield self.event
        group.blocked(np.maximum(group.clock, self.end_s), self.start_s, self.args, name=self.kind)
        yield from group.until_earliest()
        return self.value


class LaneSet:
    """The lanes of one run and the collectives that join them."""

    def __init__(self, world: Any, lanes: Sequence[Any]):
        self.world, self.lanes = world, list(lanes)
        self.where = {int(rank): (i, position) for i, lane in enumerate(self.lanes)
                      for position, rank in enumerate(lane.ranks)}
        self._shapes: dict[tuple[int, ...], _Shape] = {}
        self._calls_made: dict[tuple[tuple[int, ...], int], int] = {}  # (group, lane) -> calls made
        self._open: dict[tuple[tuple[int, ...], int], _Call] = {}
        self._pieces: dict[tuple, list] = {}  # (first instance, kind, bytes, algorithm, root) -> replays

    def shape(self, ranks: tuple[int, ...]) -> _Shape:
        """How ``ranks`` (a group as a lane's generator names it) maps onto the lanes."""
        shape = self._shapes.get(ranks)
        if shape is None:
            shape = self._shapes[ranks] = self._classify(ranks)
        return shape

    def _classify(self, ranks: tuple[int, ...]) -> _Shape:
        where = self.where
        if any(r not in where for r in ranks):
            raise SimulationError(f"a lockstep lane calls a collective on group {ranks[:8]} with ranks outside "
                                  "every lane")
        lanes = tuple(dict.fromkeys(where[r][0] for r in ranks))
        if set(ranks) == {int(r) for lane in lanes for r in self.lanes[lane].ranks}:
            return _Shape(lanes, (ranks,), per_member=False)
        sizes = {len(self.lanes[lane].ranks) for lane in lanes}
        if all(where[r][1] == 0 for r in ranks) and len(sizes) == 1:
            size = sizes.pop()
            instances = tuple(tuple(int(self.lanes[where[r][0]].ranks[i]) for r in ranks) for i in range(size))
            return _Shape(lanes, instances, per_member=True)
        raise SimulationError(f"a lockstep lane of ranks {list(self.lanes[lanes[0]].ranks[:4])}... can only join "
                              f"collectives over whole lanes or over the lanes' first members, not over group "
                              f"{list(ranks[:8])}")

    def call(self, lane: Any, kind: str, group: Any, tensor: Any, *, algorithm: str | None = None,
             root: int | None = None) -> CrossLane:
        """``lane``'s call of a collective on ``group``; it runs once every lane taking part has called it."""
        ranks = tuple(int(r) for r in group.ranks)
        shape = self.shape(ranks)
        index = self.lanes.index(lane)
        if index not in shape.lanes:
            raise SimulationError(f"lane {index} calls {kind} on group {list(ranks[:8])} it has no member in")
        seq = self._calls_made.get((ranks, index), 0)
        self._calls_made[(ranks, index)] = seq + 1
        call = self._open.setdefault((ranks, seq), _Call(kind, algorithm, root, shape))
        if (call.kind, call.algorithm, call.root) != (kind, algorithm, root):
            raise SimulationError(f"collective mismatch on group {list(ranks[:8])} (call #{seq}): a lane calls "
                                  f"{kind}(algorithm={algorithm}, root={root}) but another called {call.kind}"
                                  f"(algorithm={call.algorithm}, root={call.root})")
        values = member_values(tensor, 1)
        args = {"bytes": int(payload_nbytes(values[0])), "group_size": len(ranks)}
        request = call.requests[index] = CrossLane(self.world.env.event(), kind, args)
        call.clocks[index], call.tensors[index] = lane.clock.copy(), tensor
        if len(call.requests) == len(shape.lanes):
            del self._open[(ranks, seq)]
            self._start(call)
        return request

    def _start(self, call: _Call) -> None:
        """Every lane has called: each instance starts at its last member's call."""
        shape, world = call.shape, self.world
        if shape.per_member:
            starts = np.max(np.stack([call.clocks[lane] for lane in shape.lanes]), axis=0)
        else:
            starts = np.array([max(float(call.clocks[lane].max()) for lane in shape.lanes)])
        value, nbytes = self._value(call)
        signature = (shape.instances[0], call.kind, nbytes, call.algorithm, call.root)
        if not world.network_exclusive:
            raise SimulationError("collectives joining lockstep lanes need links of fixed capacity with no other "
                                  "traffic (network_exclusive)")
        pieces = self._pieces.get(signature)
        if pieces is None:  # every instance's replays, once per signature
            pieces = self._pieces[signature] = self._instance_pieces(call, nbytes)
        self._finish(call, starts, world.run_alone(pieces, starts), value)

    def _instance_pieces(self, call: _Call, nbytes: int) -> list[list[tuple[float, tuple]]]:
        """Every instance's replays: the first measured alone, each other one moved from the
        first where it is the same collective on links and devices like the first's (another
        node's), else measured itself."""
        world, plans = self.world, self._plans(call, nbytes)
        first_ranks = call.shape.instances[0]
        pieces = [world.alone_pieces(*plans[0])]
        for ranks, plan in zip(call.shape.instances[1:], plans[1:]):
            moved = world.translated_pieces(plans[0], plan, dict(zip(first_ranks, ranks)))
            pieces.append(moved if moved is not None else world.alone_pieces(*plan))
        used = [{i for _seconds, outcome in instance for i, _busy in outcome[2]} for instance in pieces]
        if sum(map(len, used)) != len(set().union(*used)):
            raise SimulationError(f"the {call.kind}s a lockstep lane joins over group {list(first_ranks[:8])} share "
                                  "links between instances (they run at once): each must be alone on its links")
        return pieces

    def _plans(self, call: _Call, nbytes: int) -> list[tuple[Any, Any]]:
        """(key, schedule) of every instance."""
        roots = call.shape.root_of(self.lanes, self.where, call.root)
        return [self.world.collective_plan(call.kind, ranks, nbytes, call.algorithm, root)
                for ranks, root in zip(call.shape.instances, roots)]

    def _value(self, call: _Call) -> tuple[Any, int]:
        """What the collective delivers (one value for every instance: a lane's tensor stands for
        each of its members') and its size in bytes."""
        if call.kind == "allreduce":
            ordered = [call.tensors[self.where[r][0]] for r in call.shape.instances[0]]  # in group order
            return self.world.reduce_sum(ordered), max(payload_nbytes(t) for t in ordered)
        if call.kind == "broadcast":
            value = call.tensors[self.where[call.root][0]]
            return value, payload_nbytes(value)
        raise SimulationError(f"lockstep lanes cannot join a {call.kind}")

    def _finish(self, call: _Call, starts: np.ndarray, ends: np.ndarray, value: Any) -> None:
        """Hand each lane its members' instance times and the value."""
        for lane, request in call.requests.items():
            if call.shape.per_member:
                request.start_s, request.end_s = starts, ends
            else:
                request.start_s, request.end_s = float(starts[0]), float(ends[0])
            request.value = value
            request.event.succeed()
