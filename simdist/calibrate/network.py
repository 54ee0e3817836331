"""``simdist calibrate network``: MPI sweeps on this machine (or allocation) → a platform overlay.

Launches ``mpiexec -n RANKS python -m simdist.calibrate.mpi_worker`` (mpi4py and the mpich
wheel: ``pip install simdist[mpi]``), reads its JSON and fits, per link class:

* ``intra`` (ranks on one host) → ``node.intra_link`` (kind ``shm`` by default);
* ``inter`` (ranks on different hosts) → ``node.nic_link`` (kind ``ethernet-tcp`` by default);

each from the ping-pong one-way times: a piecewise alpha–beta fit by message-size range
(MPI switches from eager to rendezvous protocol as messages grow) goes to ``provenance``,
and the alpha–beta fit of the large messages (≥ 64 KiB) becomes the link's latency and
bandwidth (:func:`~simdist.calibrate.overlay.fit_p2p_link`), with the eager/rendezvous split
the small messages show as ``messages``. The allreduce and broadcast sweeps become cost tables
(``collectives.tables``), and with ``--after-compute`` the allreduce timed right after the
scenario's step a third (``after_compute``): the simulator prices those collectives from them
(:mod:`simdist.runtime.collective_pricing`). The allreduce's ring-model fit is recorded beside it. The
host's reduction rate (gamma, ``collectives.reduce_bandwidth``) is measured too.

``--path runtime`` times the same sweep through simdist's own MPI runtime
(:mod:`.runtime_sweep`): the overlay then prices what a message or allreduce costs a run of
``simdist validate``, its pickling, arrival agreement and waiting included, and adds the
platform's ``calls``: the CPU of the runtime driver's turn between two requests, with warm
caches and right after a forward/backward (:func:`calls_section`), and what the turn and a
send cost right after a blocking wait, by how long it lasted (``calls.overhead_after_wait``,
``messages.send_overhead_after_wait`` and ``send_overhead_per_byte_after_wait``:
:mod:`.idle_sweep`).

With the defaults (0 B – 4 MiB, 0.25 s per size and sweep) two ranks finish in about 15–20 s.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..errors import InputError
from ..units import format_bytes, format_time
from .collective_fit import CollectiveFit
from .cost_tables import after_compute_table_from_sweep, collectives_section, table_from_sweep
from .idle_sweep import after_idle_section
from .mpi_worker import DEFAULT_SIZES
from .runtime_sweep import wait_loop_section
from .overlay import LinkFit, apply_overheads, build_overlay, cold_words, columns, fit_p2p_link, per_size_table

__all__ = ["find_mpiexec", "run_sweep", "fit_sweep", "network_overlay", "measure_reduce_bandwidth"]

_CLASS_FIELD = {"intra": "intra_link", "inter": "nic_link"}


def find_mpiexec() -> str:
    """Path of ``mpiexec`` on PATH, and mpi4py importable here (InputError otherwise)."""
    path = shutil.which("mpiexec") or shutil.which("mpirun")
    if path is None:
        raise InputError("mpiexec not found on PATH; install the mpi extra (pip install 'simdist[mpi]': "
                         "mpi4py and the mpich wheel) or an MPI library", source="simdist calibrate network")
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        raise InputError("mpi4py is not importable; install the mpi extra (pip install 'simdist[mpi]')",
                         source="simdist calibrate network") from None
    return path


def run_sweep(ranks: int = 2, sizes: Sequence[int] = DEFAULT_SIZES, budget_s: float = 0.25, batches: int = 7,
              allreduce: bool = True, timeout_s: float = 300.0, mpiexec: str | None = None,
              extra_args: Sequence[str] = (), path: str = "mpi", after_compute: str | None = None) -> dict[str, Any]:
    """Run the MPI worker on ``ranks`` processes and return its JSON document. ``path``: ``mpi`` times
    the library's calls, ``runtime`` simdist's MPI runtime (:mod:`.runtime_sweep`); ``after_compute``:
    a scenario whose training step precedes each call timed with cold caches (:func:`.mpi_worker.cold_state`)."""
    launcher = mpiexec or find_mpiexec()
    with tempfile.TemporaryDirectory(prefix="simdist-net-") as tmp:
        out = Path(tmp) / "sweep.json"
        command = [launcher, *extra_args, "-n", str(ranks), sys.executable, "-m", "simdist.calibrate.mpi_worker",
                   "--out", str(out), "--sizes", ",".join(str(int(s)) for s in sizes), "--budget-s", str(budget_s),
                   "--batches", str(batches), "--path", path] + ([] if allreduce else ["--no-allreduce"]) + \
                  ([] if after_compute is None else ["--after-compute", str(after_compute)])
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, env=env)
        except subprocess.TimeoutExpired:
            raise InputError(f"the MPI sweep did not finish within {timeout_s:.0f} s; use fewer sizes or a smaller "
                             "--budget-s", source="simdist calibrate network") from None
        if done.returncode != 0 or not out.is_file():
            tail = " | ".join((done.stderr or done.stdout).strip().splitlines()[-3:])
            raise InputError(f"mpiexec failed (exit {done.returncode}): {tail or 'no output'}",
                             source="simdist calibrate network")
        document = json.loads(out.read_text())
    document["command"] = shlex.join(command).replace(str(out), "SWEEP.json")
    return document


def fit_sweep(document: dict[str, Any], *, large_message_bytes: float = 65536, intra_kind: str = "shm",
              nic_kind: str = "ethernet-tcp", max_segments: int = 3, tolerance: float = 0.05) -> list[LinkFit]:
    """One :class:`LinkFit` per link class measured in the sweep ``document``."""
    links = []
    for link_class, measured in document.get("pingpong", {}).items():
        rows = measured["rows"]
        sizes = np.array([r["size_bytes"] for r in rows], dtype=float)
        times = np.array([r["median_s"] for r in rows], dtype=float)
        field_name = _CLASS_FIELD[link_class]
        kind = intra_kind if field_name == "intra_link" else nic_kind
        link, _piecewise, _table = fit_p2p_link(sizes, times, field_name=field_name, kind=kind,
                                                source=f"MPI ping-pong rank 0 <-> rank {measured['peer']}",
                                                large_message_bytes=large_message_bytes,
                                                max_segments=max_segments, tolerance=tolerance)
        link.details["spread"] = [{"size_bytes": r["size_bytes"], "min_s": r["min_s"], "max_s": r["max_s"],
                                   "reps": r["reps"]} for r in rows]
        apply_overheads(link, measured.get("overheads"))
        links.append(link)
    return links


def _allreduce_check(document: dict[str, Any], links: list[LinkFit]) -> dict[str, Any] | None:
    rows, n = document.get("allreduce") or [], int(document.get("ranks", 0))
    if len(rows) < 4 or n < 2:
        return None
    sizes = np.array([r["size_bytes"] for r in rows], dtype=float)
    times = np.array([r["median_s"] for r in rows], dtype=float)
    fit = CollectiveFit("all_reduce", n, max_segments=3).fit(sizes, times)
    hosts = document.get("hosts", [])
    slowest = next((l for l in links if l.field == "nic_link"), None) if len(set(hosts)) > 1 else None
    slowest = slowest or next((l for l in links if l.field == "intra_link"), None)
    predicted = {"piecewise": fit.predict(sizes)}
    if slowest is not None:
        predicted["ring_with_link"] = fit.predict_with(sizes, slowest.latency_s, slowest.bandwidth_Bps)
    return {"fit": fit.export(), "per_size": columns(per_size_table(sizes, times, **predicted)),
            "note": "MPI picks its own allreduce algorithm (recursive doubling, Rabenseifner ...) and adds the "
                    "reduction's arithmetic; ring_with_link is what the simulator's ring charges with the fitted link"}


def measure_reduce_bandwidth(nbytes: int = 4 << 20, budget_s: float = 0.2) -> dict[str, Any]:
    """Gamma of this host: bytes/s at which one core sums a float32 buffer into another.

    An MPI allreduce sums what it receives into the rank's buffer on the host CPU (a
    streaming ``a += b`` loop); numpy's ``add(out=a)`` is the same loop. Median of repeated
    runs over ``budget_s`` on 4 MiB buffers (a gradient bucket's order of size).
    """
    a = np.ones(nbytes // 4, dtype=np.float32)
    b = np.ones_like(a)
    np.add(a, b, out=a)  # warm the pages
    times, end = [], time.perf_counter() + budget_s
    while time.perf_counter() < end or len(times) < 5:
        start = time.perf_counter()
        np.add(a, b, out=a)
        times.append(time.perf_counter() - start)
    rate = nbytes / float(np.median(times))
    return {"reduce_bandwidth": rate,
            "reduce_source": f"simdist calibrate network: numpy float32 add(out=) of {nbytes >> 20} MiB buffers on "
                             f"this host, median of {len(times)} runs ({rate / 1e9:.3g} GB/s of reduced data)"}


def network_overlay(document: dict[str, Any], links: list[LinkFit], command: str,
                    reduce: dict[str, Any] | None = None) -> dict[str, Any]:
    """The overlay document of a sweep: its fitted links, its allreduce as a cost table the
    simulator prices from, and the reduction rate (``reduce``) where measured."""
    sweep = {k: document.get(k) for k in ("ranks", "hosts", "path", "mpi_library", "mpi4py", "budget_s", "batches",
                                          "elapsed_s")}
    extra = {"measurement": {**sweep, "launched": document.get("command")},
             "allreduce_check": _allreduce_check(document, links)}
    tables = [t for t in (table_from_sweep(document, command), table_from_sweep(document, command, "broadcast"),
                          after_compute_table_from_sweep(document, command)) if t]
    schedule = library_schedule(document.get("mpi_library"))
    collectives = (collectives_section(tables, {**(reduce or {}), **schedule})
                   if (tables or reduce or schedule) else None)
    overlay = build_overlay(links, command=command, inputs=(), extra_provenance=extra, collectives=collectives)
    loop = wait_loop_section(document)
    if loop is not None:
        overlay["messages"] = {**overlay.get("messages", {}), "wait_loop": loop}
    calls = calls_section(document)
    after_wait = after_idle_section(document)
    if after_wait is not None:
        calls = calls and {**calls, "overhead_after_wait": after_wait["turn"],
                           "overhead_after_work": after_wait["turn_after_work"],
                           "source": f"{calls['source']}; overhead_after_wait and (the turn after the update, "
                                     f"with no idle) overhead_after_work: {after_wait['source']}"}
        messages = overlay.get("messages")
        if messages and messages.get("send_overhead"):  # o_s was split out of the links' latency
            overlay["messages"] = {**messages, "send_overhead_after_wait": after_wait["send"],
                                   "send_overhead_per_byte_after_wait": after_wait["send_per_byte"],
                                   "source": f"{messages['source']}; send_overhead_after_wait: {after_wait['source']}"}
    return overlay if calls is None else {"calls": calls, **overlay}


def library_schedule(mpi_library: str | None) -> dict[str, str]:
    """The platform's ``collectives.schedule`` for the MPI library a sweep ran on: MPICH's own
    choice of allreduce algorithm by size (``mpich``) for MPICH itself; nothing for other
    libraries, whose choices simdist does not model (their collectives are priced from the
    measured tables, else a ring)."""
    if not mpi_library or not mpi_library.startswith("MPICH Version"):
        return {}
    return {"schedule": "mpich",
            "schedule_source": f"calibrate network ran on {' '.join(mpi_library.split())}: allreduce as MPICH's "
                               "default selection runs it (src/mpi/coll/coll_selection.json)"}


def calls_section(document: dict[str, Any]) -> dict[str, Any] | None:
    """The platform's ``calls`` from a runtime-path sweep's timed driver turns (None without them)."""
    calls = document.get("calls")
    if not calls:
        return None
    return {"overhead": float(calls["overhead_s"]), "overhead_after_compute": float(calls["overhead_after_compute_s"]),
            "source": (f"simdist's MPI runtime driver on rank 0 ({document.get('mpi_library', 'MPI')}): median turn "
                       f"between two requests of no work over {calls['turns']} turns (overhead), and over "
                       f"{calls['cold_turns']} turns each {cold_words(calls)} (overhead_after_compute)")}


def call_cost_lines(overlay: dict[str, Any]) -> list[str]:
    """What an overlay charges per call, one line each, as ``calibrate network`` prints it: the
    messages' LogGP figures, the runtime's turns, and the turn's and the send's after a wait."""
    lines = []
    messages, calls = overlay.get("messages") or {}, overlay.get("calls") or {}
    if messages:
        parts = [f"{name} {format_time(messages[key])}" for name, key in (
            ("send overhead", "send_overhead"), ("receive overhead", "recv_overhead"),
            ("send overhead after compute", "send_overhead_after_compute"),
            ("receive overhead after compute", "recv_overhead_after_compute"), ("gap", "gap"),
            ("rendezvous handshake", "rendezvous_latency")) if messages.get(key)]
        parts += [f"{name} {messages[key] * 1e9:.3g} ns/B" for name, key in (
            ("send per byte", "send_overhead_per_byte"), ("receive per byte", "recv_overhead_per_byte"))
            if messages.get(key)]
        eager = f"eager up to {format_bytes(messages['eager_limit'])}, " \
            if messages.get("eager_limit") is not None else ""
        lines.append(f"messages: {eager}{', '.join(parts)}")
    if calls:
        after_work = f", {format_time(calls['overhead_after_work'])} right after an update" \
            if calls.get("overhead_after_work") is not None else ""
        lines.append(f"runtime calls: {format_time(calls['overhead'])} a turn, "
                     f"{format_time(calls['overhead_after_compute'])} right after compute{after_work}")
    for name, rows, unit in (("runtime call", calls.get("overhead_after_wait"), format_time),
                             ("send", messages.get("send_overhead_after_wait"), format_time),
                             ("send per byte", messages.get("send_overhead_per_byte_after_wait"),
                              lambda rate: f"{rate * 1e9:.3g} ns/B")):
        if rows:
            lines.append(f"{name} after a wait of " + ", ".join(f"{format_time(w)}: {unit(t)}" for w, t in rows))
    return lines


def after_step_lines(overlay: dict[str, Any]) -> list[str]:
    """Per table timed right after a training step, one line: its time at each size the table
    of the same collective timed without one also measured, against that, and the ratio."""
    tables = (overlay.get("collectives") or {}).get("tables") or []
    lines = []
    for after in (t for t in tables if t.get("after_compute")):
        warm = next((t for t in tables if not t.get("after_compute") and t["op"] == after["op"]
                     and t["ranks"] == after["ranks"]), None)
        back = dict(map(tuple, warm["rows"])) if warm else {}
        pairs = [(size, t, back[size]) for size, t in after["rows"] if size in back]
        if pairs:
            lines.append(f"{after['op']} right after a training step against without one: " + ", ".join(
                f"{format_bytes(s)} {format_time(t)} / {format_time(w)} (x{t / w:.2f})" for s, t, w in pairs))
    return lines
