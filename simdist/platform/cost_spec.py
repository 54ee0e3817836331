"""Platform fields for measured communication costs: collective tables and per-message costs.

Two optional sections of a platform file, both filled by ``simdist calibrate`` from what
users measure (nccl-tests, OSU, ``calibrate network``, a CSV of their own):

``collectives``
    ``tables``: time against message size for one collective on one communicator size,
    as measured (each row ``[size, time]``; sizes strictly increasing). The simulator prices
    an uncontended collective from the table by log–log interpolation and outside it by the
    alpha–beta–gamma model fitted to it (:mod:`.collective_cost`). ``reduce_bandwidth``:
    gamma, the rate at which the device that reduces sums incoming data (bytes/s at the
    collective's dtype), used by the link model where no table applies.

``messages``
    LogGP per-message costs (Culler et al., "LogP: towards a realistic model of parallel
    computation", PPoPP 1993; Alexandrov et al., "LogGP", SPAA 1995): the sender's and the
    receiver's CPU time per message (``o``), the least interval between two messages one rank
    injects (``g``), and the eager/rendezvous switch of MPI libraries (a rendezvous message
    first pays a request-to-send/clear-to-send handshake).

``calls``
    The host CPU of the runtime's own turn between two of an algorithm's requests: the driver
    takes the request back, checks for a stop, records its span and resumes the algorithm.
    ``overhead`` with the caches warm, ``overhead_after_compute`` for the turn right after a
    forward/backward, whose data have displaced the runtime's code and objects from the
    caches (``calibrate network --path runtime`` times both through the runtime's driver),
    ``overhead_after_work`` for the turn right after the rank's own work (an update, a pack),
    ``overhead_after_wait`` for the turn right after the rank waited.

After a wait
    A rank blocked on others leaves its core idle, and what its next calls need leaves the
    core's caches meanwhile, the more the longer it idled. ``calls.overhead_after_wait``,
    ``messages.send_overhead_after_wait`` and ``send_overhead_per_byte_after_wait`` are
    tables of ``[waited, seconds]`` rows (seconds per byte for the last), the waited times
    strictly increasing: what the turn right after a blocking wait, and the first send after
    it, cost after waiting that long (``calibrate network --path runtime`` times
    them in a parameter server's order, :mod:`simdist.calibrate.idle_sweep`). Between rows
    the cost is interpolated linearly in the time waited, from the warm figure at no wait up
    to the first row, held at the last row beyond it and never below the warm figure
    (:func:`after_wait_s`).

Sizes follow what the simulator's collective call carries: an allreduce's or a broadcast's
buffer per rank, an allgather's contribution per rank (nccl-tests' ``all_gather`` size is the
whole output: divide by the ranks).
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, Field, field_validator, model_validator

from ..config import USER_CONFIG
from ..units import parse_size, parse_time
from .quantities import MAX_DEVICES, BytesPerSecond, LatencySeconds

__all__ = ["TABLE_OPS", "canonical_op", "table_row_problem", "CostTableSpec", "CollectiveCostSpec",
           "MessageCostSpec", "CallCostSpec", "after_wait_s", "calls_basis"]

TABLE_OPS = ("allreduce", "broadcast", "allgather")
_OP_ALIASES = {"all_reduce": "allreduce", "allreduce": "allreduce", "broadcast": "broadcast", "bcast": "broadcast",
               "all_gather": "allgather", "allgather": "allgather"}
MAX_TABLE_ROWS = 4096
MAX_TABLE_TIME_S = 3600.0  # an hour for one collective: a misplaced unit


def canonical_op(name: str) -> str:
    """The simulator's name of collective ``name`` (``all_reduce`` → ``allreduce``); ValueError if unknown."""
    op = _OP_ALIASES.get(str(name).lower())
    if op is None:
        raise ValueError(f"unknown collective {name!r}; tables can price: {', '.join(TABLE_OPS)} "
                         "(also spelled all_reduce, bcast, all_gather)")
    return op


def table_row_problem(sizes_bytes: list[float], times_s: list[float]) -> tuple[int, str, str] | None:
    """The first bad row of a cost table as (row index, field, what is wrong), or None.

    Sizes must be at least one byte and strictly increase (a duplicate or a step back is
    refused: interpolation needs one time per size); times must be finite and positive.
    Shared by the platform loader and the calibration parsers so both refuse the same rows.
    """
    for i, (size, time) in enumerate(zip(sizes_bytes, times_s)):
        if not math.isfinite(size) or size < 1:
            return i, "size", f"size must be a finite number of bytes >= 1, got {size!r}"
        if not math.isfinite(time) or time <= 0:
            return i, "time", f"time must be finite and greater than zero, got {time!r}"
        if time > MAX_TABLE_TIME_S:
            return i, "time", f"time {time:g} s is over an hour for one collective; is the unit right?"
        if i and size <= sizes_bytes[i - 1]:
            word = "repeats" if size == sizes_bytes[i - 1] else "is smaller than"
            return i, "size", (f"size {size:g} B {word} the row before ({sizes_bytes[i - 1]:g} B); "
                               "sizes must strictly increase")
    return None


def _row(value):
    """``[size, time]`` with units at the edge (``["1MiB", "35us"]`` or numbers in B and s)."""
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise ValueError(f"a row is [size, time], e.g. ['1MiB', '35us'] or [1048576, 3.5e-05], got {value!r}")
    return float(parse_size(value[0])), float(parse_time(value[1]))


def _wait_row(value):
    """``[waited, seconds]`` with units at the edge (``["10ms", "150us"]`` or numbers in s)."""
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise ValueError(f"a row is [waited, seconds], e.g. ['10ms', '150us'] or [0.01, 1.5e-04], got {value!r}")
    return float(parse_time(value[0])), float(parse_time(value[1]))


WaitRow = Annotated[tuple[float, float], BeforeValidator(_wait_row)]
MAX_WAIT_ROWS = 64


def _wait_rows_problem(rows: list[tuple[float, float]]) -> str | None:
    """What is wrong with an after-wait table (None: nothing): waited times finite, above zero and
    strictly increasing; costs finite and not negative."""
    for i, (waited, seconds) in enumerate(rows):
        if not math.isfinite(waited) or waited <= 0:
            return f"rows[{i}]: the time waited must be finite and above zero, got {waited!r}"
        if not math.isfinite(seconds) or seconds < 0:
            return f"rows[{i}]: the cost must be finite and not negative, got {seconds!r}"
        if i and waited <= rows[i - 1][0]:
            return f"rows[{i}]: the time waited ({waited:g} s) must be above the row before's ({rows[i - 1][0]:g} s)"
    return None


def after_wait_s(rows: list[tuple[float, float]] | None, warm_s: float, waited_s: float) -> float:
    """A call's cost right after waiting ``waited_s``: linear in the time waited from ``warm_s`` at
    no wait through the measured ``rows`` (``[waited, seconds]``), the last row's beyond them,
    and never below ``warm_s`` (after a wait the caches are no warmer than back to back: a row
    below it is the noise of its medians); ``warm_s`` without rows or without a wait."""
    if not rows or waited_s <= 0:
        return warm_s
    before_s, before_cost = 0.0, warm_s
    for waited, seconds in rows:
        if waited_s <= waited:
            return max(warm_s, before_cost + (seconds - before_cost) * (waited_s - before_s) / (waited - before_s))
        before_s, before_cost = waited, seconds
    return max(warm_s, rows[-1][1])


def _checked_wait_rows(cls, rows):
    """``rows`` if they make an after-wait table, else ValueError saying which row is wrong."""
    problem = None if rows is None else _wait_rows_problem(list(rows))
    if problem is not None:
        raise ValueError(problem)
    return rows


def _op(value):
    return canonical_op(value) if isinstance(value, str) else value


class _Frozen(BaseModel):
    model_config = USER_CONFIG


class CostTableSpec(_Frozen):
    """One measured collective: time against size on ``ranks`` ranks."""

    op: Annotated[Literal["allreduce", "broadcast", "allgather"], BeforeValidator(_op)] = Field(
        description="the collective measured: allreduce, broadcast or allgather (all_reduce, bcast, all_gather also)")
    ranks: int = Field(ge=2, le=MAX_DEVICES, description="communicator size the table was measured on")
    nodes: int | None = Field(None, ge=1, le=MAX_DEVICES, description=(
        "nodes the ranks spanned; a table of one node prices only groups inside one node, a table of several "
        "nodes only groups that span nodes (default: any group)"))
    algorithm: str | None = Field(None, description=(
        "the collective algorithm measured (ring, tree, halving_doubling, hierarchical); default: whatever the "
        "library chose, which prices a call of any algorithm"))
    dtype: str = Field("float32", description="element type of the measurement (informational)")
    after_compute: bool = Field(False, description=(
        "timed with every member calling it right after a training step (the caches full of the step's data, "
        "the first call's code cold; the source names the step): prices a collective that every member calls "
        "as its first after a forward/backward; default: timed without one, which prices every other call"))
    source: str = Field(min_length=1, description="where the numbers come from: a file, a command, a URL")
    rows: list[Annotated[tuple[float, float], BeforeValidator(_row)]] = Field(
        min_length=2, max_length=MAX_TABLE_ROWS, description=(
            "[size, time] per measured size: bytes per rank (allgather: each rank's part) and seconds, sizes "
            "strictly increasing, e.g. ['1MiB', '35us']"))

    @model_validator(mode="after")
    def _rows_usable(self):
        problem = table_row_problem([r[0] for r in self.rows], [r[1] for r in self.rows])
        if problem is not None:
            index, _field, message = problem
            raise ValueError(f"rows[{index}]: {message}")
        if self.nodes is not None and self.nodes > self.ranks:
            raise ValueError(f"nodes ({self.nodes}) cannot exceed ranks ({self.ranks})")
        return self  # ``algorithm`` names a registered collective: checked by the scenario loader

    @property
    def sizes_bytes(self) -> list[float]:
        return [r[0] for r in self.rows]

    @property
    def times_s(self) -> list[float]:
        return [r[1] for r in self.rows]


class CollectiveCostSpec(_Frozen):
    """Measured collective costs of a platform."""

    tables: list[CostTableSpec] = Field(default_factory=list, max_length=1024,
                                        description="measured collectives (see CostTableSpec)")
    reduce_bandwidth: BytesPerSecond | None = Field(None, description=(
        "gamma: bytes/s at which a rank sums received data into its buffer at the collective's dtype "
        "(measured by calibrate network); default: the reduction is not charged where no table applies"))
    reduce_source: str = Field("", description="where reduce_bandwidth comes from")
    schedule: str | None = Field(None, description=(
        "the allreduce schedule the platform's communication library runs where no table applies (simdist list "
        "collectives; e.g. mpich: MPICH's own choice by size), used when the scenario's network.collective names "
        "none; calibrate network writes it from the library it measured (default: ring)"))
    schedule_source: str = Field("", description="where schedule comes from")

    @model_validator(mode="after")
    def _sourced(self):
        if self.reduce_bandwidth is not None and not self.reduce_source:
            raise ValueError("reduce_bandwidth needs reduce_source: say where the figure comes from")
        if self.schedule is not None and not self.schedule_source:
            raise ValueError("schedule needs schedule_source: say which library runs it")
        seen: dict[tuple, int] = {}
        for i, table in enumerate(self.tables):
            key = (table.op, table.ranks, table.nodes, table.algorithm, table.after_compute)
            if key in seen:
                raise ValueError(f"tables[{i}] measures the same collective as tables[{seen[key]}] "
                                 f"({table.op}, ranks {table.ranks}, nodes {table.nodes}, algorithm "
                                 f"{table.algorithm}, after_compute {table.after_compute}); keep one")
            seen[key] = i
        return self


class WaitLoopSpec(_Frozen):
    """How a real run's ranks wait for a message: test, sleep, test again (:mod:`simdist.runtime.wait_loop`)."""

    first_sleep: LatencySeconds = Field(description="first sleep between two tests, e.g. '50us'")
    max_sleep: LatencySeconds = Field(description="longest sleep: a rank sharing its cores doubles its sleep up to it")
    sleep_overshoot: LatencySeconds = Field(0.0, description="how much longer than asked a sleep lasts on the host")
    spin: LatencySeconds = Field(0.0, description="how long a rank with a core to itself tests without sleeping")
    source: str = Field(description="where the loop and the overshoot come from")

    @model_validator(mode="after")
    def _ordered(self):
        if not 0 < self.first_sleep <= self.max_sleep:
            raise ValueError("wait_loop: first_sleep must be > 0 and at most max_sleep")
        return self


class MessageCostSpec(_Frozen):
    """LogGP costs of one point-to-point message, on top of the links' latency and bandwidth.

    The per-byte overheads are LogGOPS's ``O`` (Hoefler, Schneider and Lumsdaine, "LogGOPSim",
    HPDC 2010): CPU time a rank spends per byte in its send or receive calls, such as MPI over
    TCP copying every byte between the user's buffer and the socket's. They overlap the
    message's transfer (a ping-pong's time per byte already holds them), so they take the
    rank's CPU and delay the message only where the copy is slower than its links.
    """

    send_overhead: LatencySeconds = Field(0.0, description="o_s: sender CPU time per message, e.g. '0.4us'")
    recv_overhead: LatencySeconds = Field(0.0, description="o_r: receiver CPU time per message, e.g. '0.4us'")
    send_overhead_per_byte: LatencySeconds | None = Field(None, description=(
        "O_s: sender CPU time per byte (LogGOPS), e.g. '0.17ns' for a copy into a socket buffer; it overlaps "
        "the transfer, so it delays the sender's next work, and the message only where it is slower than the "
        "links (default: the route's link kinds' figure, 0 for DMA transports; docs/network.md)"))
    recv_overhead_per_byte: LatencySeconds | None = Field(None, description=(
        "O_r: receiver CPU time per byte (LogGOPS), e.g. '0.17ns', charged to the receiver when it takes the "
        "message in (default as send_overhead_per_byte)"))
    send_overhead_after_compute: LatencySeconds | None = Field(None, description=(
        "o_s of the first send call a rank makes after a forward/backward, whose data has displaced the "
        "library's code and buffers from the caches (calibrate network times it with cold caches); "
        "default send_overhead"))
    recv_overhead_after_compute: LatencySeconds | None = Field(None, description=(
        "o_r of the first receive a rank takes in after a forward/backward, charged to its CPU like "
        "send_overhead_after_compute (default recv_overhead)"))
    send_overhead_after_wait: list[WaitRow] | None = Field(None, max_length=MAX_WAIT_ROWS, description=(
        "o_s of the first send call a rank makes after a blocking wait, by how long it waited: rows [waited, "
        "seconds], waited strictly increasing, e.g. [['1ms', '130us'], ['10ms', '160us']]; interpolated from "
        "send_overhead at no wait, the last row beyond (calibrate network --path runtime times it); default "
        "send_overhead"))
    send_overhead_per_byte_after_wait: list[WaitRow] | None = Field(None, max_length=MAX_WAIT_ROWS, description=(
        "O_s of the first send call after a blocking wait, by how long the rank waited: rows [waited, seconds per "
        "byte], e.g. [['1ms', '0.3ns'], ['10ms', '0.5ns']]; interpolated from the route's O_s at no wait, the last "
        "row beyond (calibrate network --path runtime times it); default: the route's O_s"))
    gap: LatencySeconds = Field(0.0, description="g: least interval between two messages one rank injects")
    eager_limit: Annotated[float, BeforeValidator(parse_size)] | None = Field(None, description=(
        "largest message sent eagerly; larger ones pay rendezvous_latency first (default: all eager)"))
    rendezvous_latency: LatencySeconds = Field(0.0, description=(
        "extra time of the rendezvous handshake (request-to-send, clear-to-send) above eager_limit"))
    wait_loop: WaitLoopSpec | None = Field(None, description=(
        "how a real run's blocked receive waits (tests with sleeps between): the receive is done at the first test "
        "after its message lands (calibrate network --path runtime writes it); default: at once"))
    source: str = Field("", description="where these figures come from")

    @model_validator(mode="after")
    def _sourced(self):
        charged = (self.send_overhead, self.recv_overhead, self.send_overhead_per_byte or 0.0,
                   self.recv_overhead_per_byte or 0.0, self.send_overhead_after_compute or 0.0,
                   self.recv_overhead_after_compute or 0.0, self.gap, self.rendezvous_latency)
        if (any(charged) or self.send_overhead_after_wait or self.send_overhead_per_byte_after_wait) \
                and not self.source:
            raise ValueError("messages needs source: say where the per-message figures come from")
        if self.rendezvous_latency and self.eager_limit is None:
            raise ValueError("rendezvous_latency needs eager_limit (the size above which it is paid)")
        return self

    _rows_usable = field_validator("send_overhead_after_wait", "send_overhead_per_byte_after_wait")(_checked_wait_rows)

    def send_overhead_s(self, after_compute: bool, waited_s: float = 0.0) -> float:
        """``o_s`` of a send call: the first after a forward/backward, the first after a blocking
        wait of ``waited_s`` (:func:`after_wait_s`), or warm."""
        if after_compute and self.send_overhead_after_compute is not None:
            return self.send_overhead_after_compute
        return after_wait_s(self.send_overhead_after_wait, self.send_overhead, waited_s)

    def send_per_byte_s(self, warm_per_byte_s: float, waited_s: float = 0.0) -> float:
        """``O_s`` of a send call: the route's ``warm_per_byte_s``, or the first after a blocking wait
        of ``waited_s`` (:func:`after_wait_s`)."""
        return after_wait_s(self.send_overhead_per_byte_after_wait, warm_per_byte_s, waited_s)

    def send_extra_after_compute_s(self) -> float:
        """What the first send call after a forward/backward costs its CPU beyond ``o_s``."""
        if self.send_overhead_after_compute is None:
            return 0.0
        return max(self.send_overhead_after_compute - self.send_overhead, 0.0)

    def recv_extra_after_compute_s(self) -> float:
        """What the first receive after a forward/backward costs its CPU beyond ``o_r``."""
        if self.recv_overhead_after_compute is None:
            return 0.0
        return max(self.recv_overhead_after_compute - self.recv_overhead, 0.0)

    def handshake_s(self, nbytes: float) -> float:
        """The rendezvous handshake a message of ``nbytes`` pays (0 when sent eagerly)."""
        return self.rendezvous_latency if self.eager_limit is not None and nbytes > self.eager_limit else 0.0


class CallCostSpec(_Frozen):
    """Host CPU of the runtime's turn between two requests of an algorithm (its driver's dispatch).

    A rank pays it after each request it waited on, before its algorithm runs on: the driver
    takes the result back, checks for a stop, records the span and resumes the algorithm's
    generator. The simulator charges it as the rank's own work (span ``runtime call``, ledger
    part ``update``, where a real run's time between its runtime calls goes).
    """

    overhead: LatencySeconds = Field(description="CPU time of one turn with warm caches, e.g. '7us'")
    overhead_after_compute: LatencySeconds | None = Field(None, description=(
        "CPU time of the turn right after a forward/backward, with the caches full of the step's data, "
        "e.g. '50us' (default overhead)"))
    overhead_after_work: LatencySeconds | None = Field(None, description=(
        "CPU time of the turn right after the rank's own work (an update, a pack: an algorithm's busy work), "
        "whose data have displaced part of the runtime's from the caches, e.g. '20us' (default overhead)"))
    overhead_after_wait: list[WaitRow] | None = Field(None, max_length=MAX_WAIT_ROWS, description=(
        "CPU time of the turn right after a blocking wait, by how long the rank waited: rows [waited, seconds], "
        "waited strictly increasing, e.g. [['1ms', '14us'], ['30ms', '30us']]; interpolated from overhead at no "
        "wait, the last row beyond (default overhead)"))
    source: str = Field(min_length=1, description="where these figures come from")

    _rows_usable = field_validator("overhead_after_wait")(_checked_wait_rows)

    def seconds(self, after_compute: bool, waited_s: float = 0.0, after_work: bool = False) -> float:
        """One turn's CPU time: right after a forward/backward, right after a blocking wait of
        ``waited_s`` (:func:`after_wait_s`), right after the rank's own work, or warm."""
        if after_compute and self.overhead_after_compute is not None:
            return self.overhead_after_compute
        if after_work and self.overhead_after_work is not None:
            return self.overhead_after_work
        return after_wait_s(self.overhead_after_wait, self.overhead, waited_s)


def calls_basis(calls: CallCostSpec | None) -> dict[str, Any]:
    """What the runtime's turn between two requests cost the ranks (``platform.calls``), for the
    manifest: its figures and their source, or that the turns were not charged and what measures them."""
    if calls is None:
        return {"charged": False, "why": "platform.calls absent: the runtime's turns between requests cost "
                                         "nothing (simdist calibrate network --path runtime measures them)"}
    basis = {"charged": True, "overhead_s": calls.overhead, "overhead_after_compute_s": calls.seconds(True),
             "source": calls.source}
    if calls.overhead_after_work is not None:
        basis["overhead_after_work_s"] = calls.overhead_after_work
    if calls.overhead_after_wait:
        basis["overhead_after_wait"] = [[waited, seconds] for waited, seconds in calls.overhead_after_wait]
    return basis
