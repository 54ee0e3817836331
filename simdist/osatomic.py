"""The operating-system pieces safe output rests on.

* :func:`exchange` swaps two paths in one step (Linux ``renameat2(RENAME_EXCHANGE)``), so a
  finished folder replaces an old one with no moment where neither is there;
* :func:`signals_held` keeps SIGINT and SIGTERM waiting while a swap and its clean-up run,
  and :func:`sigterm_as_interrupt` turns SIGTERM into :class:`Terminated` (a
  ``KeyboardInterrupt``) so that a command's clean-up runs on ``kill`` as on Ctrl-C;
* :func:`writer_record` and :func:`alive` tell a temporary folder whose writer still runs
  from one a killed writer left behind (pid, host and the process's start time, so a reused
  pid does not pass for the writer).

:mod:`simdist.outdir` decides what may be written where; this module only does the moves.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterator

__all__ = ["Terminated", "exchange", "signals_held", "sigterm_as_interrupt", "writer_record", "process_start",
           "alive"]


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised like Ctrl-C so that the same clean-up runs (see :func:`sigterm_as_interrupt`)."""


# --------------------------------------------------------------------------- recognising output


def exchange(a: Path, b: Path) -> bool:
    """Swap ``a`` and ``b`` atomically (Linux ``renameat2``); False where the OS or filesystem cannot."""
    renameat2 = _renameat2()
    if renameat2 is None:
        return False
    at_fdcwd, rename_exchange = -100, 2
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.ENOTSUP):
        return False
    raise OSError(code, os.strerror(code), os.fspath(b))


@functools.lru_cache(maxsize=None)
def _renameat2() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        function = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    function.restype = ctypes.c_int
    return function


def writer_record() -> dict[str, Any]:
    return {"pid": os.getpid(), "host": socket.gethostname(), "process_start": process_start(os.getpid()),
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}


def process_start(pid: int) -> int | None:
    """Start time of process ``pid`` in clock ticks since boot (Linux), to tell a reused pid apart."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return int(handle.read().rsplit(b")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def alive(writer: dict[str, Any]) -> bool:
    """Whether the process in a writer record still runs (True when that cannot be told: another host)."""
    if writer.get("host") != socket.gethostname() or os.name != "posix":
        return True
    pid = writer.get("pid")
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process
    started = writer.get("process_start")
    now = process_start(pid)
    return started is None or now is None or now == started


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """SIGINT and SIGTERM wait until the block ends (where the OS can hold signals back)."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Within the block SIGTERM raises :class:`Terminated`, so ``except``/``finally`` clean-up runs.

    Only the main thread can install signal handlers; elsewhere this does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminate(signum, frame):
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)
