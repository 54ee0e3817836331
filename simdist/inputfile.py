"""Reading a file a user named: regular files only, size-capped, never blocking.

Every file simdist reads on a user's word (scenario, platform, overlay, compute profile,
measurement trace) comes through :func:`read_input_bytes`, which

* refuses directories, FIFOs, character and block devices and sockets *before* opening them
  (a FIFO would block the reader until some writer appears; ``/dev/zero`` never ends);
* refuses a file larger than the caller's cap by its size, unread;
* opens without blocking and reads at most ``cap + 1`` bytes, so files whose size the
  kernel reports as 0 (``/proc``) or that grow while read cannot exhaust memory;
* turns every ``OSError`` (missing, permission, name too long, a loop of links) into an
  :class:`~simdist.errors.InputError` naming the file.

The caps callers use are in :data:`CAPS` (documented in docs/reliability.md).
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from .errors import InputError

__all__ = ["read_input_bytes", "read_input_text", "file_exists", "CAPS"]

CAPS = {
    "scenario": 1 << 20,  # a scenario is a few hundred lines
    "platform": 1 << 20,
    "platform overlay": 1 << 20,
    "compute profile": 1 << 20,  # a few lines per model
    "trace": 512 << 20,  # profiler traces of a few steps reach hundreds of MiB
}

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def _kind(mode: int) -> str | None:
    """What a non-regular file is, or None for a regular file."""
    for test, name in _KINDS:
        if test(mode):
            return name
    return None if stat.S_ISREG(mode) else "not a regular file"


def _os_error(exc: OSError, what: str, source: str) -> InputError:
    if exc.errno == errno.ENOENT:
        return InputError(f"{what} file not found (no such file)", source=source)
    reason = exc.strerror or str(exc)
    return InputError(f"cannot read {what} file ({reason})", source=source)


def file_exists(path: str | os.PathLike[str]) -> bool:
    """Whether anything is at ``path``; False, not an OSError, for names too long or otherwise unusable."""
    try:
        os.stat(path)
    except (OSError, ValueError):
        return False
    return True


_CHUNK_BYTES = 1 << 20


def read_input_bytes(path: str | os.PathLike[str], what: str, max_bytes: int | None = None) -> bytes:
    """The bytes of the regular file at ``path`` (at most ``max_bytes``, default ``CAPS[what]``).

    ``what`` names the kind of file in messages ("scenario", "compute profile" ...).
    """
    cap = CAPS[what] if max_bytes is None else max_bytes
    source = str(path)
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the name
        if isinstance(exc, ValueError):
            raise InputError(f"not a valid {what} file name", source=source) from None
        raise _os_error(exc, what, source) from None
    kind = _kind(mode)
    if kind is not None:
        raise InputError(f"is {kind}; a {what} must be a regular file", source=source)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise _os_error(exc, what, source) from None
    try:
        info = os.fstat(fd)  # the name may have been swapped for something else since the stat
        kind = _kind(info.st_mode)
        if kind is not None:
            raise InputError(f"is {kind}; a {what} must be a regular file", source=source)
        if info.st_size > cap:
            raise InputError(f"file is {info.st_size} bytes; a {what} file may be at most {cap} bytes", source=source)
        chunks, total = [], 0
        while total <= cap:  # in chunks: read(cap + 1) would allocate the whole cap up front
            chunk = os.read(fd, min(_CHUNK_BYTES, cap + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        data = b"".join(chunks)
    except OSError as exc:
        raise _os_error(exc, what, source) from None
    finally:
        os.close(fd)
    if len(data) > cap:
        raise InputError(f"file is larger than {cap} bytes; a {what} file may be at most {cap} bytes", source=source)
    return data


def read_input_text(path: str | os.PathLike[str], what: str, max_bytes: int | None = None) -> str:
    """:func:`read_input_bytes` decoded as UTF-8 (an InputError naming the file if it is not)."""
    raw = read_input_bytes(path, what, max_bytes)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(f"not a text file (expected a UTF-8 {what})", source=str(Path(path))) from None
