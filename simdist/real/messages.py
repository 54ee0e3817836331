"""Point-to-point messages of a real run: what :class:`~.runtime.MPIWorld` sends, and how it probes.

Messages travel on an mpi4py ``pkl5`` communicator, tensors out of band, not pickled
(:mod:`.wire`). A send is buffered (``ibsend``), so it completes at the call like a delivery
into the simulator's mailbox, and a sender never waits for its receiver (which may be inside a
blocking ``Create_group``: a deadlock with standard sends). The receiving side takes messages
with a matched probe. A message carries its send time so a receive splits into ``wait`` (the
sender not there yet) and ``comm``; the receive's ``comm`` span records ``bytes``, ``src`` and
``sent_s``, and every send call is a non-blocking ``comm``/``send`` span (``bytes``, ``dst``), so
that a pilot run's messages can calibrate the link (:mod:`.pilot`). The call itself, and a poll
taking in a message, is also a blocking ``message overhead`` span: the rank's CPU in
communication (ledger ``comm_cpu``, the simulator's LogGP ``o``).

MPI moves a message only inside MPI calls of *both* ranks: the receiver's probe finds it, and
above the eager limit the sender's next call sends the data (rendezvous; the buffered copy
too). So after a send the rank posts ``MPI_Buffer_iflush`` (MPI 4.1; done once every buffered
message has left) and, while that is not done (:meth:`PointToPoint.sends_in_flight`), its
waiting loop keeps its shortest sleep (:mod:`.driver`); and a probe that finds nothing probes
once more at once: MPICH's probe makes progress and returns, and what that progress delivered
is seen by the next probe only (on this host a first probe never saw a message that had
arrived while its receiver slept). Together these took a small message's one-way time, two
ranks sleeping between tests, from 1.8 ms to 0.12–0.14 ms, and a 340 KB one's from 2.9 ms to
0.3 ms (docs/network.md, "A real run's waiting loop").
"""

from __future__ import annotations

from typing import Any

from ..errors import SimulationError
from ..ledger import OVERHEAD_SPAN
from ..runtime.base import ANY, Message
from ..runtime.payloads import payload_nbytes
from .requests import SendRequest
from .wire import pack, unpack

__all__ = ["PointToPoint", "BSEND_BUFFER_BYTES"]

BSEND_BUFFER_BYTES = 1 << 30  # room for messages not yet received (pages are touched only when used)


class PointToPoint:
    """The point-to-point half of :class:`~.runtime.MPIWorld` (a mixin over its communicator,
    MPI module, clock, spans, rank and size)."""

    def _init_messages(self) -> None:
        self._sends: list = []  # fire-and-forget sends stay referenced until complete
        self._flushes: list | None = []  # MPI_Buffer_iflush after each send: done once its data has left
        self._bsend_buffer = bytearray(BSEND_BUFFER_BYTES)
        self.MPI.Attach_buffer(self._bsend_buffer)

    def send(self, dst: int, payload: Any, tag: int, record: bool = True) -> SendRequest:
        if not 0 <= dst < self.size:
            raise SimulationError(f"rank {self.rank} sends to rank {dst}, which does not exist")
        sent = self.now()
        nbytes = payload_nbytes(payload)
        request = self.comm.ibsend((pack(payload), sent, nbytes), dest=dst, tag=tag)
        self._sends = [r for r in self._sends if not r.test()[0]]
        self._sends.append(request)
        self.sends_in_flight()  # drop the flushes already done: a rank that never waits keeps few
        if self._flushes is not None:
            try:
                self._flushes.append(self.MPI.Iflush_buffer())
            except NotImplementedError:  # an MPI before 4.1: in-flight sends cannot be seen
                self._flushes = None
        # the whole call is the sender's CPU (comm_cpu, LogGP's o_s): packing, the copy into the buffer,
        # and the tests and the flush it posts (MPI progress); a calibration times the call as a whole
        if record:
            posted = self.now()
            self.span("comm", OVERHEAD_SPAN, sent, posted)
            self.span("comm", "send", sent, posted, blocking=False, bytes=nbytes, dst=dst)
        return SendRequest(request, sent)

    def sends_in_flight(self) -> bool:
        """Whether a message this rank sent has not left the send buffer yet (testing makes MPI
        progress); False where the library cannot tell (no ``MPI_Buffer_iflush``)."""
        if not self._flushes:
            return False
        self._flushes = [r for r in self._flushes if not r.Test()]
        return bool(self._flushes)

    def poll(self, rank: int, src: int, tag: int) -> Message | None:
        """A message from ``src`` with ``tag`` that has arrived, taken in; None if none has."""
        MPI = self.MPI
        status = MPI.Status()
        source, tag = MPI.ANY_SOURCE if src == ANY else src, MPI.ANY_TAG if tag == ANY else tag
        message = self.comm.improbe(source=source, tag=tag, status=status)
        if message is None:  # the probe made progress; what it delivered shows in the next one
            message = self.comm.improbe(source=source, tag=tag, status=status)
        if message is None:
            return None
        payload, sent, nbytes = message.recv()
        return Message(status.Get_source(), rank, status.Get_tag(), unpack(payload), nbytes, sent, self.now())
