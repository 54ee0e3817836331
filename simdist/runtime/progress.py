"""MPI progress: when non-blocking communication may advance (platform ``progress``).

``progress: async`` (the default) lets a non-blocking collective or a message move on its
own once it can: what NCCL, a communication thread, or MPI with an asynchronous progress
thread (MPICH ``MPIR_CVAR_ASYNC_PROGRESS=1``, Intel MPI ``I_MPI_ASYNC_PROGRESS=1``) give.

``progress: on_call`` is MPICH's and Open MPI's default on CPUs, with no progress thread: a
non-blocking operation advances only inside MPI calls of its ranks. A rank in a long
forward/backward makes none, so an ``MPI_Iallreduce`` posted before it moves when the rank
reaches ``MPI_Wait`` (Hoefler & Lumsdaine, "Message progression in parallel computing — to
thread or not to thread?", IEEE Cluster 2008; MPICH's ``MPIR_CVAR_ASYNC_PROGRESS``, default
off). :class:`OnCallProgress` keeps, per rank, whether it is *inside a call* and applies
two rules:

* **collectives** — a collective that any member called non-blocking starts its schedule
  (table-priced, analytic or flows) only at a moment when every member is inside a call:
  blocked on a communication request of any kind (this collective, another one, a receive,
  a send) with no compute of its own in flight. Once started it runs to its end: a schedule
  is not paused when a member leaves to compute (its data are taken to be posted to the
  network by then). Blocking collectives are unchanged: their members are inside them.
* **rendezvous messages** — a message above the platform's ``messages.eager_limit`` moves
  once its receiver answers the handshake, in its next runtime call of any kind (a wait, a
  poll, a send, posting a receive or a collective), or at once if it is inside a call when
  the message is sent; the whole message (injection, overheads, handshake, latency, bytes)
  is shifted by that wait. Eager messages (and every message where the platform has no
  eager limit) are buffered and leave at once, as under ``async``.

A rank whose process has ended counts as inside a call (``MPI_Finalize`` progresses what it
left behind); a crashed rank never is (a collective that needs it never starts), and messages
to it go at once, to be dropped on arrival and counted as ``docs/faults.md`` says. Both rules
only delay: an ``on_call`` run is never faster than the same run under ``async`` unless a
delay happens to ease contention.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

import simpy

__all__ = ["OnCallProgress"]

_FINAL = object()  # what a rank whose process has ended "waits on"


class _Gate:
    """An event that fires at the first moment all ``ranks`` are inside a call."""

    __slots__ = ("ranks", "event")

    def __init__(self, ranks: tuple[int, ...], event: simpy.Event):
        self.ranks, self.event = ranks, event


class OnCallProgress:
    """Which ranks are inside a runtime call now, and what waits for them to be."""

    def __init__(self, env: simpy.Environment):
        self.env = env
        self._inside: set[int] = set()
        self._blocked_on: dict[int, Any] = {}  # rank -> the request it waits on now
        self._cpu: dict[int, simpy.Event] = {}  # rank -> its latest compute (or busy work)
        self._gates: dict[int, list[_Gate]] = {}  # rank -> gates that wait for it (one missing rank each)
        self._answers: dict[int, list[Callable[[], None]]] = {}  # rank -> handshakes it has to answer
        self._crashed: set[int] = set()

    # -- what the ranks do ---------------------------------------------------------------

    def computing(self, rank: int, done: simpy.Event) -> None:
        """The rank computes until ``done``: a wait it starts meanwhile begins when ``done`` fires."""
        self._cpu[rank] = done

    def wait(self, rank: int, request: Any) -> None:
        """The rank blocks on a communication request (from now, or from the end of its compute)."""
        self._blocked_on[rank] = request
        cpu = self._cpu.get(rank)
        if cpu is not None and cpu.callbacks is not None:  # still computing: not in MPI before it is done
            cpu.callbacks.append(lambda _event: self._enter(rank, request))
        else:
            self._enter(rank, request)

    def resumed(self, rank: int) -> None:
        """The rank's wait is over: it leaves the call."""
        self._blocked_on.pop(rank, None)
        self._inside.discard(rank)

    def finished(self, rank: int) -> None:
        """The rank's process has ended: it stays in ``MPI_Finalize``, which progresses everything."""
        self._blocked_on[rank] = _FINAL
        self._enter(rank, _FINAL)

    def left(self, rank: int) -> None:
        """The rank crashed: it makes no calls any more; messages to it go now (to be dropped)."""
        self._blocked_on.pop(rank, None)
        self._inside.discard(rank)
        self._crashed.add(rank)
        self.called(rank)

    def called(self, rank: int) -> None:
        """The rank makes a runtime call (even one that returns at once): it answers its handshakes."""
        pending = self._answers.pop(rank, None)
        if pending:
            for start in pending:
                start()

    # -- what waits on them ------------------------------------------------------------------

    def all_inside(self, ranks: Iterable[int]) -> simpy.Event | None:
        """None if every rank is inside a call now, else an event for the first moment they all are."""
        ranks = tuple(ranks)
        missing = self._first_outside(ranks)
        if missing is None:
            return None
        gate = _Gate(ranks, self.env.event())
        self._gates.setdefault(missing, []).append(gate)
        return gate.event

    def answer(self, rank: int, start: Callable[[], None]) -> None:
        """``start()`` once ``rank`` answers a rendezvous handshake: now if it is inside a call."""
        if rank in self._inside or rank in self._crashed:
            start()
        else:
            self._answers.setdefault(rank, []).append(start)

    # -- bookkeeping -----------------------------------------------------------------------

    def _enter(self, rank: int, request: Any) -> None:
        if self._blocked_on.get(rank) is not request:  # the wait ended (or the rank crashed) first
            return
        self._inside.add(rank)
        self.called(rank)
        gates = self._gates.pop(rank, None)
        if gates:
            for gate in gates:
                missing = self._first_outside(gate.ranks)
                if missing is None:
                    gate.event.succeed()
                else:
                    self._gates.setdefault(missing, []).append(gate)

    def _first_outside(self, ranks: tuple[int, ...]) -> int | None:
        inside = self._inside
        for rank in ranks:
            if rank not in inside:
                return rank
        return None
