"""Where and how simdist writes its output: what it may replace, atomic writes, and kills.

**What may be replaced.** Every folder simdist writes holds a marker file :data:`MARKER`
(JSON: ``kind``, one of :data:`KINDS`, and ``simdist_version``). An existing folder is
replaced only if simdist wrote it: it holds the marker, or it is a result folder from before
the marker (``manifest.json`` holding ``simdist_version``; other kinds: :data:`LEGACY_FILES`).
Replacing needs ``overwrite`` (``--overwrite``), except where a command only redraws its
own kind of folder (``regenerate``: reports, figures). The current directory and its
ancestors, the home directory and its ancestors and the filesystem root are never written
over, marker or not; paths are compared after resolving ``..`` and symbolic links. An
empty folder may be used. Anything else, and any ``OSError`` (name too long, permission
denied, read-only or full filesystem), is an :class:`~simdist.errors.InputError` naming the
path: commands call :func:`check_out_dir` before any simulation, and the check runs again
just before the final rename.

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
import secrets
import shutil
import stat
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator

from . import __version__
from .errors import InputError
from .osatomic import alive, exchange as _exchange, signals_held, writer_record

__all__ = ["MARKER", "KINDS", "LEGACY_FILES", "GRACE_S", "default_out_dir", "output_kind", "check_out_dir",
           "check_out_file", "staged_dir", "open_container", "write_file_atomically", "write_text_atomically",
           "tidy"]

MARKER = ".simdist-output"
_SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+=-]*")


def default_out_dir(name: str, source: str) -> Path:
    """``results/<name>`` (a command's folder when ``--out`` is not given), refusing a name that would
    write outside ``results/``."""
    if not _SAFE_NAME.fullmatch(name) or ".." in name:
        raise InputError(f"{name!r} would be the result folder results/<name>; use letters, digits and _.+=- "
                         "(no '/' or '..'), or pass --out", source=source, field="name")
    return Path("results") / name
KINDS = ("run", "sweep", "compare", "report", "plots", "validate")
LEGACY_FILES = {"sweep": ("sweep.json",), "compare": ("compare.csv",), "report": ("index.md", "ranking.csv"),
                "validate": ("validation.json",)}
GRACE_S = 60.0  # a temporary without a writer record younger than this may be mid-write: left alone
_TEMP = re.compile(r"^\.(?P<name>.+)\.(?P<what>tmp|old)-[0-9a-z_]{8}$")
_TEMP_EXTRA_BYTES = len(".") + len(".tmp-") + 8


def output_kind(path: str | os.PathLike[str]) -> str | None:
    """The kind of simdist output folder at ``path`` (marker, else a pre-marker signature), or None."""
    folder = Path(path)
    marker = _read_json(folder / MARKER)
    if marker is not None and marker.get("kind") in KINDS:
        return str(marker["kind"])
    manifest = _read_json(folder / "manifest.json")
    if manifest is not None and "simdist_version" in manifest:
        return "run"
    for kind, names in LEGACY_FILES.items():
        if all((folder / name).is_file() for name in names):
            return kind
    if folder.name == "plots" and folder.parent != folder and output_kind(folder.parent) in ("run", "compare"):
        return "plots"  # the figures folder inside a run or comparison
    return None


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.loads(handle.read(1 << 16))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _protected(target: Path) -> str | None:
    """What ``target`` (resolved) is, if simdist must never write over it."""
    places = [("the filesystem root", Path(target.anchor))]
    with contextlib.suppress(OSError):
        places.append(("the current directory", Path.cwd().resolve()))
    places.append(("the home directory", Path(os.path.expanduser("~")).resolve()))
    for label, place in places:
        if target == place:
            return label
    for label, place in places[1:]:
        if target in place.parents:
            return f"an ancestor of {label}"
    return None


def _refusal(target: Path, kind: str, *, overwrite: bool, regenerate: bool, container: bool) -> str | None:
    """Why simdist may not write the folder ``kind`` at ``target`` (resolved), or None."""
    label = _protected(target)
    if label:
        return f"is {label} ({target}), which simdist never writes over; name a new folder inside it"
    try:
        mode = os.stat(target).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return None  # nothing there (an ancestor that is a file is found by the probe)
    if not stat.S_ISDIR(mode):
        return "exists and is not a directory; choose another folder"
    if _empty(target):
        return None
    found = output_kind(target)
    if found is None:
        return (f"holds files simdist did not write (no {MARKER} marker); simdist writes only to a new or empty "
                "folder or one it wrote, and --overwrite does not change that")
    if (found == kind and (container or regenerate)) or (overwrite and not container):
        return None
    if container or regenerate:
        return f"is a simdist {found} folder, not a {kind} folder; choose another folder"
    return f"simdist {found} folder already exists; pass --overwrite to replace it"


def _empty(folder: Path) -> bool:
    with os.scandir(folder) as entries:
        return next(entries, None) is None


# --------------------------------------------------------------------------- checks


def check_out_dir(path: str | os.PathLike[str], *, kind: str, overwrite: bool = False, regenerate: bool = False,
                  container: bool = False, source: str | None = None) -> Path:
    """Refuse, as an :class:`InputError`, a folder simdist may not write; returns it resolved.

    ``overwrite``: an existing simdist folder of any kind may be replaced; ``regenerate``:
    one of the same ``kind`` may; ``container``: the folder is written into, not replaced,
    and must be new, empty or of the same ``kind``. Also checks that the names fit and that
    a folder can be created beside it. ``source`` names the path in errors (default: itself).
    """
    shown = source or str(path)
    with _os_errors(shown, "cannot use this folder"):
        target = Path(os.path.realpath(os.fspath(path)))
        _check_names(target, shown)
        problem = _refusal(target, kind, overwrite=overwrite, regenerate=regenerate, container=container)
        if problem:
            raise InputError(problem, source=shown)
        _probe(target, shown)
    return target


def check_out_file(path: str | os.PathLike[str], *, source: str | None = None) -> Path:
    """Refuse, as an :class:`InputError`, a file path simdist cannot write (a directory, a name too long,
    an unwritable folder); returns it resolved."""
    shown = source or str(path)
    with _os_errors(shown, "cannot write this file"):
        target = Path(os.path.realpath(os.fspath(path)))
        if target.is_dir():
            raise InputError("is a directory; name a file", source=shown)
        _check_names(target, shown)
        _probe(target, shown)
    return target


def _existing_ancestor(path: Path) -> Path:
    while not os.path.lexists(path) and path != path.parent:
        path = path.parent
    return path


def _check_names(target: Path, shown: str) -> None:
    """Every folder still to be created, and the temporary sibling of ``target``, must fit a file name."""
    anchor = _existing_ancestor(target)
    try:
        name_max = os.pathconf(anchor if anchor.is_dir() else anchor.parent, "PC_NAME_MAX")
    except (OSError, ValueError, AttributeError):
        name_max = 255
    missing = target.relative_to(anchor).parts if anchor != target else ()
    for part in missing[:-1]:
        if len(os.fsencode(part)) > name_max:
            raise InputError(f"the folder name {part[:16]}... is {len(os.fsencode(part))} bytes long; at most "
                             f"{name_max} fit here", source=shown)
    size = len(os.fsencode(target.name))
    if size + _TEMP_EXTRA_BYTES > name_max:
        raise InputError(f"the name is {size} bytes long; at most {name_max - _TEMP_EXTRA_BYTES} fit here (the "
                         f"filesystem allows {name_max}, and simdist's temporary name adds {_TEMP_EXTRA_BYTES})",
                         source=shown)


def _probe(target: Path, shown: str) -> None:
    """Create and remove a temporary folder where ``target``'s first missing folder would go."""
    anchor = _existing_ancestor(target.parent)
    if not anchor.is_dir():
        raise InputError(f"{anchor} is not a directory", source=shown)
    probe = anchor / _temp_name(target.name, "tmp")
    with _os_errors(shown, f"cannot create a folder in {anchor}"):
        os.mkdir(probe)
        os.rmdir(probe)


@contextlib.contextmanager
def _os_errors(shown: str, doing: str) -> Iterator[None]:
    try:
        yield
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise InputError(f"{doing}: {reason}", source=shown) from None


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


def _temp_name(name: str, what: str) -> str:
    return f".{name}.{what}-{secrets.token_hex(4)}"


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


