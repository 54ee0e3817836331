"""What simdist may write over: output-folder markers and the checks made before any write.

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

These are the rules; :mod:`simdist.outdir` applies them while writing (and re-exports every
public name here).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import stat
from pathlib import Path
from typing import Any, Iterator

from .errors import InputError

__all__ = ["MARKER", "KINDS", "LEGACY_FILES", "default_out_dir", "output_kind", "check_out_dir", "check_out_file"]

MARKER = ".simdist-output"
KINDS = ("run", "sweep", "compare", "report", "plots", "validate")
LEGACY_FILES = {"sweep": ("sweep.json",), "compare": ("compare.csv",), "report": ("index.md", "ranking.csv"),
                "validate": ("validation.json",)}
_SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+=-]*")
_TEMP_EXTRA_BYTES = len(".") + len(".tmp-") + 8


def default_out_dir(name: str, source: str) -> Path:
    """``results/<name>`` (a command's folder when ``--out`` is not given), refusing a name that would
    write outside ``results/``."""
    if not _SAFE_NAME.fullmatch(name) or ".." in name:
        raise InputError(f"{name!r} would be the result folder results/<name>; use letters, digits and _.+=- "
                         "(no '/' or '..'), or pass --out", source=source, field="name")
    return Path("results") / name


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


def _temp_name(name: str, what: str) -> str:
    return f".{name}.{what}-{secrets.token_hex(4)}"
