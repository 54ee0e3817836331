"""The Runtime seam: the only thing algorithms talk to.

Every algorithm is written once as generator processes (``def worker(rt): ...``) that
yield requests obtained from a :class:`Runtime` and receive their values back::

    result = yield rt.compute(replica, batch)          # GradResult: real gradient and loss
    total  = yield rt.allreduce(group, result.grad)    # blocking collective
    req    = rt.iallreduce(group, delta)               # non-blocking: yield req later
    rt.send(dst, payload); msg = yield rt.recv(src=ANY)

Two implementations drive the same generators: :class:`~simdist.runtime.sim.SimRuntime`
(virtual time, SimPy, flows on the platform) and an MPI runtime (wall time, one process per
rank). Algorithms never import either engine; a request is opaque to them.

Each process gets a per-rank view: ``rt.rank`` is the caller, so collectives and messages
know who is calling. Collectives match like MPI's: the k-th collective call on a group by
each member forms one operation, and every member must make the same kind of call.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Protocol, runtime_checkable

__all__ = ["ANY", "Group", "Message", "GradResult", "Runtime"]

ANY = -1  # matches any source rank or any tag


@dataclass(frozen=True)
class Group:
    """A communicator: an ordered tuple of ranks (order fixes ring neighbours and roots)."""

    ranks: tuple[int, ...]
    name: str = ""

    @property
    def size(self) -> int:
        return len(self.ranks)

    def index(self, rank: int) -> int:
        return self.ranks.index(rank)

    def __contains__(self, rank: object) -> bool:
        return rank in self.ranks


@dataclass(frozen=True)
class Message:
    """A delivered point-to-point message."""

    src: int
    dst: int
    tag: int
    payload: Any
    nbytes: int
    sent_s: float
    arrived_s: float


@dataclass(frozen=True)
class GradResult:
    """The value of a compute request: the mean gradient over the batch, and the batch loss."""

    grad: Any  # flat torch tensor (or a PhantomTensor in timing-only runs)
    loss: float | None
    batch_size: int
    start_s: float = 0.0
    end_s: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Runtime(Protocol):
    """What an algorithm process may ask of the world (one view per rank)."""

    rank: int
    world_size: int

    def now(self) -> float:
        """Current time in seconds (virtual in the simulator, wall-clock for real runs)."""

    def compute(self, replica: Any, batch: Any) -> Any:
        """Start forward/backward of ``replica`` on ``batch``; its value is a :class:`GradResult`.

        The request also offers ``at_fraction(f)``: a request completing when fraction ``f``
        of the compute time has passed (gradient buckets ready during backward).
        """

    def busy(self, duration_s: float, name: str = "busy") -> Any:
        """The rank works for ``duration_s`` on something the algorithm models (a server's update)."""

    def send(self, dst: int, payload: Any, tag: int = 0) -> Any:
        """Send ``payload`` (copied at the call); yield the request to wait for delivery."""

    def recv(self, src: int = ANY, tag: int = ANY) -> Any:
        """A request whose value is the next matching :class:`Message`."""

    def poll(self, src: int = ANY, tag: int = ANY) -> Message | None:
        """The next matching message already delivered, or None (never waits)."""

    def allreduce(self, group: Group, tensor: Any, *, algorithm: str | None = None) -> Any:
        """Sum of every member's ``tensor``; yield it right away (blocking use)."""

    def iallreduce(self, group: Group, tensor: Any, *, algorithm: str | None = None) -> Any:
        """Non-blocking allreduce(sum): yield the request when the result is needed."""

    def broadcast(self, group: Group, tensor: Any, root: int) -> Any:
        """``root``'s tensor to every member (the others pass anything of the same size)."""

    def allgather(self, group: Group, tensor: Any) -> Any:
        """The list of every member's tensor, in group order."""

    def barrier(self, group: Group) -> Any:
        """Completes when every member has arrived."""

    def group(self, ranks: Iterable[int], name: str = "") -> Group:
        """A communicator over ``ranks`` (every member must build it with the same ranks)."""

    def record(self, kind: str, **fields: Any) -> None:
        """A metric event; kind ``"update"`` is an applied gradient (a row of steps.csv)."""
