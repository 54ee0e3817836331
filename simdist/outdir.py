"""How simdist writes its output: atomic writes, and what kills leave behind.

What it may replace, and the checks made before any write, are :mod:`simdist.outcheck`'s
(its public names are re-exported here).

**Atomic writes.** :func:`staged_dir` writes a folder into a temporary sibling
``.<name>.tmp-<random>`` and moves it into place: a plain rename when nothing (or an empty
folder) is there, else Linux ``renameat2(RENAME_EXCHANGE)`` swaps the two and the old one is
deleted (elsewhere: the old one renamed aside to ``.<name>.old-<random>``, the new one
renamed in, the old one deleted). :func:`write_file_atomically` does the same for one file
(temporary sibling + ``os.replace``). Folders that grow over several commands (sweeps,
comparisons, validations) are opened with :func:`open_container`; each thing written inside
them is atomic on its own.

**Kills.** While a temporary folder is being written its marker also names its writer (pid,
host, process start time). :func:`tidy`, run before each write into a folder's parent,
removes temporaries whose writer is gone (ones without a writer once older than
:data:`GRACE_S`), puts an aside folder back where its target is missing, and leaves the
temporaries of running writers, saying so on stderr. SIGINT and SIGTERM are held back while
a folder is swapped in and the old one deleted (the operating-system pieces: :mod:`simdist.osatomic`).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator

from . import __version__
from .errors import InputError
from .osatomic import alive, exchange as _exchange, signals_held, writer_record
from .outcheck import (KINDS, LEGACY_FILES, MARKER, _empty, _os_errors, _read_json, _refusal, _temp_name,
                       check_out_dir, check_out_file, default_out_dir, output_kind)

__all__ = ["MARKER", "KINDS", "LEGACY_FILES", "GRACE_S", "default_out_dir", "output_kind", "check_out_dir",
           "check_out_file", "staged_dir", "open_container", "write_file_atomically", "write_text_atomically",
           "tidy"]

GRACE_S = 60.0  # a temporary without a writer record younger than this may be mid-write: left alone
_TEMP = re.compile(r"^\.(?P<name>.+)\.(?P<what>tmp|old)-[0-9a-z_]{8}$")


# --------------------------------------------------------------------------- writing


@contextlib.contextmanager
def staged_dir(path: str | os.PathLike[str], *, kind: str, overwrite: bool = False, regenerate: bool = False,
               source: str | None = None) -> Iterator[Path]:
    """Yield a temporary sibling of ``path`` to fill; on a clean exit it replaces ``path``.

    The rules of :func:`check_out_dir` apply at entry and again just before the swap. On
    any error (or interruption) the temporary folder, and the parents this call created, are
    removed and whatever was at ``path`` is left as it was.
    """
    shown = source or str(path)
    target = check_out_dir(path, kind=kind, overwrite=overwrite, regenerate=regenerate, source=shown)
    created: list[Path] = []
    tmp: Path | None = None
    try:
        with _os_errors(shown, "cannot write the output folder"):
            _make_parents(target.parent, created)
            tidy(target.parent, target.name)
            tmp = _make_temp_dir(target, kind)
            yield tmp
            with signals_held():
                problem = _refusal(target, kind, overwrite=overwrite, regenerate=regenerate, container=False)
                if problem:
                    raise InputError(problem, source=shown)
                _write_marker(tmp, kind)  # without the writer record
                _move_into_place(tmp, target)
    except BaseException:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        _remove_empty(created)
        raise


def open_container(path: str | os.PathLike[str], *, kind: str, source: str | None = None) -> Path:
    """Check (as :func:`check_out_dir` with ``container``), create and mark a folder that a command
    fills piece by piece; clears what killed writers left inside it. Returns it resolved."""
    shown = source or str(path)
    target = check_out_dir(path, kind=kind, container=True, source=shown)
    with _os_errors(shown, "cannot create the output folder"):
        target.mkdir(parents=True, exist_ok=True)
        if (_read_json(target / MARKER) or {}).get("kind") != kind:
            _write_marker(target, kind)
        tidy(target)
    return target


def write_file_atomically(path: str | os.PathLike[str], write: Callable[[Path], object], *,
                          source: str | None = None) -> Path:
    """Call ``write(temporary path)``, then rename the temporary over ``path``; returns ``Path(path)``.

    The temporary is a sibling ``.<name>.tmp-<random>`` (so ``write`` must not infer a format
    from the suffix); on any error it is removed and ``path`` is left as it was.
    """
    target = Path(path)
    shown = source or str(path)
    created: list[Path] = []
    tmp: Path | None = None
    try:
        with _os_errors(shown, "cannot write this file"):
            if target.is_dir():
                raise InputError("is a directory; name a file", source=shown)
            _make_parents(target.parent, created)
            tmp = _make_temp_file(target)
            write(tmp)
            os.replace(tmp, target)
    except BaseException:
        if tmp is not None:
            with contextlib.suppress(OSError):
                tmp.unlink()
        _remove_empty(created)
        raise
    return target


def write_text_atomically(path: str | os.PathLike[str], text: str, *, source: str | None = None) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically (:func:`write_file_atomically`)."""
    return write_file_atomically(path, lambda tmp: tmp.write_text(text, encoding="utf-8"), source=source)


def _make_parents(folder: Path, created: list[Path]) -> None:
    """``mkdir -p folder``, adding each folder it creates to ``created`` (outermost first)."""
    missing = []
    while not os.path.lexists(folder) and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    for item in reversed(missing):
        with contextlib.suppress(FileExistsError):
            os.mkdir(item)
            created.append(item)


def _remove_empty(created: list[Path]) -> None:
    for item in reversed(created):
        with contextlib.suppress(OSError):
            os.rmdir(item)


def _make_temp_dir(target: Path, kind: str) -> Path:
    while True:
        tmp = target.parent / _temp_name(target.name, "tmp")
        with contextlib.suppress(FileExistsError):
            os.mkdir(tmp)
            break
    try:
        _write_marker(tmp, kind, writer=writer_record())
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return tmp


def _make_temp_file(target: Path) -> Path:
    while True:
        tmp = target.parent / _temp_name(target.name, "tmp")
        with contextlib.suppress(FileExistsError):
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
            return tmp


def _write_marker(folder: Path, kind: str, writer: dict[str, Any] | None = None) -> None:
    data: dict[str, Any] = {"kind": kind, "simdist_version": __version__}
    if writer is not None:
        data["writer"] = writer
    write_text_atomically(folder / MARKER, json.dumps(data, indent=2) + "\n")


def _move_into_place(tmp: Path, target: Path) -> None:
    """Put ``tmp`` at ``target``; an old non-empty ``target`` is swapped out and deleted."""
    if not os.path.lexists(target) or _empty(target):
        os.rename(tmp, target)  # replaces an empty directory atomically
        return
    if _exchange(tmp, target):
        shutil.rmtree(tmp, ignore_errors=True)  # tmp now holds the old folder
        return
    aside = target.parent / _temp_name(target.name, "old")
    os.rename(target, aside)
    try:
        os.rename(tmp, target)
    except BaseException:
        os.rename(aside, target)
        raise
    shutil.rmtree(aside, ignore_errors=True)


# --------------------------------------------------------------------------- kills and signals


def tidy(parent: str | os.PathLike[str], name: str | None = None) -> list[str]:
    """Clear what killed writers left in ``parent``; returns the temporaries of live writers, left alone.

    Those of ``name`` (of any name when None) are reported on stderr in one line.
    """
    folder = Path(parent)
    live: list[tuple[str, dict[str, Any]]] = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return []
    for entry in entries:
        match = _TEMP.match(entry.name)
        if not match:
            continue
        with contextlib.suppress(OSError):
            if match["what"] == "old":
                _settle_aside(Path(entry.path), folder / match["name"])
                continue
            is_dir = entry.is_dir(follow_symlinks=False)
            writer = (_read_json(Path(entry.path) / MARKER) or {}).get("writer") if is_dir else None
            if isinstance(writer, dict) and alive(writer):
                live.append((entry.name, writer))
            elif isinstance(writer, dict) or time.time() - entry.stat(follow_symlinks=False).st_mtime > GRACE_S:
                if is_dir:
                    shutil.rmtree(entry.path)
                else:
                    os.unlink(entry.path)
    shown = [(n, w) for n, w in live if name is None or _TEMP.match(n)["name"] == name]
    if shown:
        print("simdist: note: " + "; ".join(f"{folder / n} is being written by process {w.get('pid')} on "
                                            f"{w.get('host')}" for n, w in shown) + "; left alone",
              file=sys.stderr, flush=True)
    return [n for n, _ in live]


def _settle_aside(aside: Path, target: Path) -> None:
    """An old folder renamed aside by an interrupted replacement: restored if its target is missing."""
    if os.path.lexists(target):
        shutil.rmtree(aside)
    else:
        os.rename(aside, target)


