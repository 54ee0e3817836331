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

Payloads are the runtime's business (:mod:`.payloads`): a send sizes its payload and copies
it, unless the sender gives its tensors away (``rt.send(dst, payload, handover=True)``: sent
without a copy, read-only for receivers). A gradient can go into a message before it is
evaluated (:meth:`GradResult.grad_for_message`): the simulator evaluates gradients lazily,
batched, and a receiver's work on such values (``rt.busy(..., run=f, inputs=(...))``) reads
them, or with ``lazy=True`` waits for its own value to be read. A real run has the values at
once: there they are simply the tensors, and both options change nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, NamedTuple, Protocol, Sequence, runtime_checkable

from .payloads import Deferred

__all__ = ["ANY", "Group", "Ranks", "Message", "GradResult", "Runtime"]

ANY = -1  # matches any source rank or any tag


class Ranks(tuple):
    """A group's ranks as a tuple that hashes once and finds a rank without a scan.

    Every member of a collective looks its group up (membership, position, keys holding the
    ranks): with a plain tuple each of those reads all the ranks, so a collective over N ranks
    cost O(N²). Equal to, and hashing like, the plain tuple of the same ranks.
    """

    def __new__(cls, ranks: Iterable[int]) -> "Ranks":
        self = super().__new__(cls, ranks)
        self._hash = tuple.__hash__(self)
        position: dict[int, int] = {}
        for i, rank in enumerate(self):
            position.setdefault(rank, i)
        self._position = position
        return self

    def __hash__(self) -> int:
        return self._hash

    def __contains__(self, rank: object) -> bool:
        try:
            return rank in self._position
        except TypeError:  # unhashable: compare as a tuple does
            return tuple.__contains__(self, rank)

    def index(self, rank: Any, *bounds: Any) -> int:
        position = None if bounds else self._position.get(rank)
        return tuple.index(self, rank, *bounds) if position is None else position

    def __reduce__(self):  # copies and pickles are rebuilt from the ranks
        return (Ranks, (tuple(self),))


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


class Message(NamedTuple):
    """A delivered point-to-point message (a named tuple: made for every message, cheaply)."""

    src: int
    dst: int
    tag: int
    payload: Any
    nbytes: int
    sent_s: float
    arrived_s: float


class GradResult:
    """The value of a compute request: the mean gradient over the batch, and the batch loss.

    ``grad`` is a flat torch tensor (a PhantomTensor in timing-only runs). The simulator
    evaluates gradients lazily, batched with other ranks' requests: there ``resolve`` gives
    ``(grad, loss)`` on first read. A message can carry them unread (:meth:`grad_for_message`,
    :meth:`loss_for_message`); the receiver's first read evaluates them then, so that more
    requests are batched together. The values are the same whenever they are read.
    """

    __slots__ = ("_grad", "_loss", "_resolve", "_nbytes_per_element", "_numel", "batch_size", "start_s", "end_s",
                 "extra")

    def __init__(self, grad: Any = None, loss: float | None = None, batch_size: int = 0, start_s: float = 0.0,
                 end_s: float = 0.0, extra: dict[str, Any] | None = None, *,
                 resolve: Callable[[], tuple[Any, float | None]] | None = None, like: Any = None):
        """``resolve`` defers ``grad`` and ``loss`` until first read; ``like`` (a tensor of the
        gradient's dtype) lets messages carry the gradient unevaluated."""
        self._grad, self._loss, self._resolve = grad, loss, resolve
        self._nbytes_per_element = like.element_size() if like is not None else 0
        self._numel = like.numel() if like is not None else 0
        self.batch_size, self.start_s, self.end_s = batch_size, start_s, end_s
        self.extra = {} if extra is None else extra

    @property
    def grad(self) -> Any:
        if self._resolve is not None:
            self._evaluate()
        return self._grad

    @property
    def loss(self) -> float | None:
        if self._resolve is not None:
            self._evaluate()
        return self._loss

    def _evaluate(self) -> None:
        self._grad, self._loss = self._resolve()
        self._resolve = None

    def grad_for_message(self, start: int, stop: int) -> Any:
        """Elements ``start:stop`` of the gradient, to send with ``handover=True`` (the sender
        never writes them): the slice, or in the simulator, while the gradient is not evaluated
        yet, a stand-in of its size that the receiver's first read evaluates.

        Until the receiver reads it, the replica's parameters the gradient is computed on
        must not be written in place (adopt new weights as a new tensor); the simulator
        refuses a request whose parameters changed before it was evaluated."""
        if self._resolve is None or not self._nbytes_per_element:
            return self.grad[start:stop]
        if start == 0 and stop == self._numel:  # the whole gradient: no slice to take
            return Deferred(lambda: self.grad, stop * self._nbytes_per_element)
        return Deferred(lambda: self.grad[start:stop], (stop - start) * self._nbytes_per_element)

    def loss_for_message(self) -> Any:
        """The loss, to send: in the simulator, while not evaluated yet, a stand-in (8 bytes)
        that the receiver's first read evaluates."""
        if self._resolve is None:
            return self._loss
        return Deferred(lambda: self.loss, 8)

    def __repr__(self) -> str:
        state = "not evaluated" if self._resolve is not None else f"loss={self._loss!r}"
        return f"GradResult(batch_size={self.batch_size}, {state}, {self.start_s}..{self.end_s} s)"


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

    def busy(self, duration_s: float, name: str = "busy", *, part: str | None = None,
             run: Callable[..., Any] | None = None, inputs: Sequence[Any] = (), lazy: bool = False) -> Any:
        """The rank does its own work (a server's update, flattening a gradient); the value is ``run(*inputs)``.

        The simulator charges ``duration_s`` (the algorithm's cost model) and calls ``run`` (the
        math) at the call; a real run times ``run`` as it happens. The work is ledger ``part``
        (pack, unpack, update, data, eval, checkpoint; default: the name's first word if it is
        one, else update).

        ``inputs`` are the values ``run`` works on, as messages brought them: a gradient sent
        before it was evaluated (:meth:`GradResult.grad_for_message`) reaches ``run`` evaluated.
        ``lazy=True`` says ``run`` only computes its value (no other effect): the simulator then
        leaves inputs not evaluated yet as they are, and computes the value when it is first
        read (as an input again), so that gradient evaluations stay batched.
        """

    def inference(self, samples: int, run: Callable[[], Any] | None = None, name: str = "inference") -> Any:
        """The rank runs a forward pass over ``samples`` samples (its own evaluation); the value is ``run()``.

        ``run`` does the math (a test-set evaluation) at the call; the simulator charges the
        compute model's forward time, a real run times ``run`` as it happens.
        """

    def send(self, dst: int, payload: Any, tag: int = 0, *, handover: bool = False) -> Any:
        """Send ``payload`` (copied at the call); yield the request to wait for delivery.

        ``handover=True``: the payload's tensors are given away (the sender never writes them
        again) and travel without a copy; receivers may share them and must only read them."""

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

    def record(self, kind: str, *, run_wide: bool = False, **fields: Any) -> None:
        """A metric event; kind ``"update"`` is an applied gradient (a row of steps.csv).

        Fields may be values a message brought unevaluated (a pushed loss): they are read now.
        ``run_wide``: an event about the whole run that one rank records for all (the
        algorithm picks which); a lockstep group standing for that rank records it once."""
