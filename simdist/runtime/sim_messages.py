"""Point-to-point messages of a simulation: mailboxes, matched receives, and what a send costs.

:class:`MessageExecution` is the point-to-point half of :class:`~simdist.runtime.sim.SimWorld`
(a mixin over its environment, network, platform and crash state). A send copies its payload
(what the receiver reads is what was sent at that instant; tensors handed over are not copied,
:mod:`.payloads`), crosses the route as a flow, and lands in the receiver's mailbox, or wakes a
receive already waiting for it. With ``platform.messages`` every message also pays LogGP costs:
the sender's injection gap and CPU overhead ``o_s``, the rendezvous handshake above the eager
limit, and the receiver's ``o_r``; and LogGOPS's per-byte CPU overheads, the sender's with
``o_s`` and the receiver's once it takes the message in (less what a blocking receive waited
for it). They overlap the message's transfer, which ends no earlier than the sender's copy. The
first send, and the first message taken in, after a forward/backward pay the overheads measured
with cold caches where the platform has them; the first send after a blocking wait what a send
costs after such a wait (``send_overhead_after_wait``, ``send_overhead_per_byte_after_wait``).
A rank pays the CPU it owes before its next compute or busy work, or at the start of a blocking
receive (:meth:`~.sim_compute.ComputeExecution.spend_owed_cpu`). Under ``progress: on_call`` a
rendezvous message goes only once the receiver is inside a runtime call (:mod:`.progress`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from ..errors import SimulationError
from ..platform.cost_spec import MessageCostSpec
from .base import ANY, Message
from .payloads import sent_copy
from .requests import ReadyReceive, Request, SendRequest
from .wait_loop import ReceiveWakeups, WaitLoop

__all__ = ["MessageExecution"]

_NO_MESSAGE_COSTS = MessageCostSpec()  # a platform without ``messages`` whose route still copies per byte


@dataclass(eq=False)
class _RecvWaiter:
    src: int
    tag: int
    request: Request
    posted_s: float  # when the receive began to wait


class MessageExecution:
    """The point-to-point messages of :class:`~simdist.runtime.sim.SimWorld`."""

    def _init_messages(self) -> None:
        ranks = range(self.platform.size)
        self._mailboxes: dict[int, list[Message]] = {r: [] for r in ranks}
        self._recv_waiters: dict[int, list[_RecvWaiter]] = {r: [] for r in ranks}
        self._next_injection_s: dict[int, float] = {}  # rank -> earliest time its next message may leave
        self._cpu_owed_s: dict[int, float] = {}  # rank -> send overhead not yet charged to its CPU
        # ranks whose last work was a forward/backward: their next message call runs with cold caches
        self._after_compute: set[int] = set()
        # ranks whose last blocking wait has not been followed by a send or a compute: how long it was
        self._waited_s: dict[int, float] = {}
        self._wakeups = self._receive_wakeups()

    def _receive_wakeups(self) -> ReceiveWakeups | None:
        """When blocked receives notice their messages (``platform.messages.wait_loop``), or None: at once."""
        loop = self.message_costs.wait_loop if self.message_costs is not None else None
        if loop is None:
            return None
        spec, sleepers = self.platform.spec, set()
        for n in range(spec.nodes):
            for cores, local_ranks in spec.node_at(n).core_pools():
                if len(local_ranks) > cores:  # more ranks than cores: the runtime sleeps from the start
                    sleepers.update(spec.first_rank(n) + r for r in local_ranks)
        return ReceiveWakeups(WaitLoop(loop.first_sleep, loop.max_sleep, loop.sleep_overshoot, loop.spin), sleepers,
                              self.message_costs.eager_limit)

    def send(self, src: int, dst: int, payload: Any, tag: int = 0, *, handover: bool = False) -> Request:
        if not 0 <= dst < self.platform.size:
            raise SimulationError(f"rank {src} sends to rank {dst}, which does not exist")
        data, nbytes = sent_copy(payload, handover)
        sent = self.env.now
        request = SendRequest(self.env, sent)
        request.span_args = {"bytes": int(nbytes), "dst": int(dst)}
        if self.on_call is not None:
            self.on_call.called(src)

        def deliver() -> None:
            self._deliver(Message(src, dst, tag, data, nbytes, sent, self.env.now))
            request.delivered()

        if self._wakeups is not None:
            self._wakeups.sent(src, nbytes)

        route = self.platform.route(src, dst)
        after_compute = self._first_call_after_compute(src)
        waited_s = self._waited_s.pop(src, 0.0)
        per_byte_s = self.platform.copies.per_byte_s(src, dst)[0]
        if waited_s and self.message_costs is not None:  # the first send after a wait: its copy too
            per_byte_s = self.message_costs.send_per_byte_s(per_byte_s, waited_s)
        copy_s = per_byte_s * nbytes
        if self.message_costs is None and not copy_s:
            self.network.transfer_then(route, nbytes, deliver, src=src, dst=dst)
        else:
            self._send_with_costs(src, dst, route, nbytes, deliver, copy_s, after_compute, waited_s)
        return request

    def waited(self, rank: int, waited_s: float) -> None:
        """``rank`` was blocked for ``waited_s`` until now: its next send pays what a send costs after
        such a wait (``messages.send_overhead_after_wait``), unless a forward/backward comes first."""
        if waited_s > 0:
            self._waited_s[rank] = waited_s

    def _first_call_after_compute(self, rank: int) -> bool:
        """Whether this message call is the rank's first since a forward/backward (its caches cold)."""
        if rank in self._after_compute:
            self._after_compute.discard(rank)
            return True
        return False

    def _send_with_costs(self, src: int, dst: int, route, nbytes: int, deliver: Callable[[], None],
                         copy_s: float, after_compute: bool, waited_s: float = 0.0) -> None:
        """A message paying LogGP costs (``platform.messages``) around its links.

        The sender injects it once its previous message is ``max(g, o_s + O_s · bytes)`` behind
        (``copy_s``: ``O_s · bytes``, the route's, :mod:`simdist.platform.message_copies`),
        spends ``o_s + O_s · bytes`` of CPU on it (owed, :meth:`_owe_cpu`;
        the copy overlaps the transfer, which ends no earlier than the copy does), a message above
        the eager limit pays the rendezvous handshake, and the receiver spends ``o_r`` before
        the message is in its mailbox (and ``O_r · bytes`` once it takes it in, :meth:`_taken_in`).
        The first send after a forward/backward (``after_compute``) pays the ``o_s`` measured
        with cold caches, where the platform has one; the first after a blocking wait of
        ``waited_s`` the ``o_s`` measured after such a wait (``send_overhead_after_wait``).
        Under ``progress: on_call`` a message above the eager limit goes only once the receiver
        answers the handshake (:mod:`.progress`).
        """
        costs, now = self.message_costs or _NO_MESSAGE_COSTS, self.env.now
        inject_s = max(now, self._next_injection_s.get(src, 0.0))
        send_overhead = costs.send_overhead_s(after_compute, waited_s)
        cpu_s = send_overhead + copy_s
        self._next_injection_s[src] = inject_s + max(costs.gap, cpu_s)  # its CPU copies one message at a time
        self._owe_cpu(src, cpu_s)
        delay_s = inject_s - now + send_overhead + costs.handshake_s(nbytes) + \
            self.platform.route_latency_s(src, dst)
        if costs.recv_overhead > 0:
            def arrived() -> None:
                self.env.timeout(costs.recv_overhead).callbacks.append(lambda _event: deliver())
        else:
            arrived = deliver

        def transfer() -> None:
            done = arrived if not copy_s else self._not_before(self.env.now + delay_s + copy_s, arrived)
            self.network.transfer_then(route, nbytes, done, src=src, dst=dst, latency_s=delay_s)

        if self.on_call is not None and costs.eager_limit is not None and nbytes > costs.eager_limit:
            self.on_call.answer(dst, transfer)
            return
        transfer()

    def _not_before(self, floor_s: float, then: Callable[[], None]) -> Callable[[], None]:
        """``then``, called no earlier than ``floor_s``: a message whose sender copies it more slowly
        than its links carry it arrives once the copy is done (the last byte leaves after it)."""
        def call() -> None:
            if floor_s > self.env.now:
                self.env.timeout(floor_s - self.env.now).callbacks.append(lambda _event: then())
            else:
                then()
        return call

    def _owe_cpu(self, rank: int, seconds: float) -> None:
        """CPU time of the rank's message calls, paid before its next compute or busy work, or at the
        start of its next blocking receive."""
        if seconds > 0:
            self._cpu_owed_s[rank] = self._cpu_owed_s.get(rank, 0.0) + seconds

    def _owed_cpu_s(self, rank: int) -> float:
        """CPU time the rank's message calls owe (LogGP ``o_s``, LogGOPS ``O_s``/``O_r``, the cold
        extras), now paid."""
        return self._cpu_owed_s.pop(rank, 0.0) if self._cpu_owed_s else 0.0

    def _taken_in(self, message: Message, waited_s: float = 0.0) -> Message:
        """A message its receiver takes in: the receiver owes its per-byte receive overhead (and,
        the first after a forward/backward, what a receive with cold caches costs beyond
        ``o_r``), less the time it waited in a blocking receive while the message was on its way
        (the work overlapped the transfer there; a message found by a poll or already in the
        mailbox owes it whole)."""
        per_byte_s = self.platform.copies.per_byte_s(message.src, message.dst)[1]
        cold_s = 0.0
        if self._first_call_after_compute(message.dst) and self.message_costs is not None:
            cold_s = self.message_costs.recv_extra_after_compute_s()
        if per_byte_s or cold_s:
            self._owe_cpu(message.dst, per_byte_s * message.nbytes + cold_s - waited_s)
        return message

    @staticmethod
    def _matches(message: Message, src: int, tag: int) -> bool:
        return (src == ANY or message.src == src) and (tag == ANY or message.tag == tag)

    def _deliver(self, message: Message) -> None:
        if message.dst in self.crashed:  # the bytes crossed the links; nobody is there to read them
            self._count_drop("messages", message.dst, 1)
            self._count_drop("bytes", message.dst, message.nbytes)
            return
        waiters = self._recv_waiters[message.dst]
        for i, waiter in enumerate(waiters):
            if self._matches(message, waiter.src, waiter.tag):
                del waiters[i]
                waiter.request.started_s = message.sent_s
                waiter.request.span_args = {"bytes": int(message.nbytes), "src": int(message.src)}
                taken = self._taken_in(message, waited_s=self.env.now - max(waiter.posted_s, message.sent_s))
                self._receive_done(waiter, taken)
                return
        self._mailboxes[message.dst].append(message)

    def _receive_done(self, waiter: _RecvWaiter, message: Message) -> None:
        """The blocked receive is done: now, or at its rank's next test (:mod:`.wait_loop`)."""
        wakeups, now = self._wakeups, self.env.now
        at = now if wakeups is None else wakeups.noticed_s(message.dst, waiter.posted_s, now)
        if wakeups is not None:
            wakeups.taken_in(message.src, message.nbytes, at)
        if at > now:
            self.env.timeout(at - now).callbacks.append(lambda _event: waiter.request.event.succeed(message))
        else:
            waiter.request.event.succeed(message)

    def poll(self, rank: int, src: int = ANY, tag: int = ANY) -> Message | None:
        if self.on_call is not None:
            self.on_call.called(rank)
        box = self._mailboxes[rank]
        for i, message in enumerate(box):
            if self._matches(message, src, tag):
                if self._wakeups is not None:
                    self._wakeups.taken_in(message.src, message.nbytes, self.env.now)
                return self._taken_in(box.pop(i))
        return None

    def recv(self, rank: int, src: int = ANY, tag: int = ANY) -> Request:
        message = self.poll(rank, src, tag)
        if message is not None:
            return ReadyReceive(self.env, message)
        request = Request("comm", "recv", self.env.event())
        self._recv_waiters[rank].append(_RecvWaiter(src, tag, request, self.env.now))
        return request
