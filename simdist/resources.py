"""Files shipped with simdist: compute profiles, platform overlays and example scenarios.

What: one place that finds them, in a source checkout (an editable install) and in an
installed wheel alike, and the rule by which a scenario names one.

Why: the repository keeps them in top-level folders (``calibration/profiles``,
``calibration/platforms``, ``scenarios``) that tests, docs and benchmarks use by path, and
outside the package, so a wheel built from the folders alone would lack them. The wheel
build (``setup.py``) copies :data:`SHIPPED` into the package as ``simdist/_shipped/``, read
here through :mod:`importlib.resources`; a source checkout has no such folder and is read in
place, so an editable install sees edits to the top-level files at once, as before.

The rule for a scenario: a file it names (``platform: FILE``, ``platform.file``,
``platform.overlays``, ``compute.profiles``) is a path relative to the scenario's folder. If
no file is there and the path is a *shipped name* (the file's path in the repository, e.g.
``calibration/platforms/host-shm.yaml``), the shipped copy is used. So
``platform: {preset: laptop-cpu, overlays: [calibration/platforms/host-shm.yaml]}`` works
from any folder, with any kind of install; a local file of the same name takes precedence.
Every profile in ``calibration/profiles`` is read by every run (a device kind picks its
profile by name, ``simdist list devices``), so a shipped profile needs no reference at all.

The lookup reads files on disk: an installed package must be unpacked (pip always does so).
This module imports only the standard library: ``setup.py`` loads it to learn :data:`SHIPPED`.
"""

from __future__ import annotations

import fnmatch
import os
from importlib import resources
from pathlib import Path, PurePosixPath

__all__ = ["SHIPPED", "PACKAGED_FOLDER", "shipped_root", "shipped_file", "shipped_files", "shipped_profiles",
           "is_shipped_name", "resolve_reference"]

# (folder in the repository, file pattern): what a wheel carries. Measured traces
# (calibration/traces) are inputs of `simdist calibrate trace`, not of a scenario, and stay out.
SHIPPED: tuple[tuple[str, str], ...] = (
    ("calibration/profiles", "*.yaml"),   # every run reads all of them
    ("calibration/platforms", "*.yaml"),  # platform files and overlays a scenario may name
    ("scenarios", "**/*.yaml"),           # the examples (simdist examples)
)
PACKAGED_FOLDER = "_shipped"  # simdist/_shipped/<folder>/... inside an installed wheel


def shipped_root() -> Path | None:
    """The folder holding :data:`SHIPPED`'s folders: the package's ``_shipped`` copy in an
    installed wheel, else the source checkout the package was imported from (or None)."""
    packaged = resources.files("simdist") / PACKAGED_FOLDER
    if isinstance(packaged, Path) and packaged.is_dir():
        return packaged
    checkout = Path(__file__).resolve().parent.parent
    if (checkout / "pyproject.toml").is_file() and (checkout / SHIPPED[0][0]).is_dir():
        return checkout
    return None


def is_shipped_name(name: str) -> bool:
    """Whether ``name`` has the form of a shipped file: relative, normalized, under a folder
    of :data:`SHIPPED` and matching its pattern (whether that file exists is another matter)."""
    path = PurePosixPath(name)
    if path.is_absolute() or ".." in path.parts or "." in path.parts or "\\" in name or str(path) != name:
        return False
    for folder, pattern in SHIPPED:
        inside = _relative_to(path, folder)
        if inside is not None and _matches(inside, pattern):
            return True
    return False


def shipped_file(name: str) -> Path | None:
    """The shipped file of that shipped name (``calibration/platforms/host-shm.yaml``), or None."""
    root = shipped_root()
    if root is None or not is_shipped_name(name):
        return None
    path = root / name
    return path if path.is_file() else None


def shipped_files(folder: str) -> list[Path]:
    """The files of one folder of :data:`SHIPPED` (``"scenarios"``), sorted by shipped name."""
    pattern = dict(SHIPPED)[folder]
    root = shipped_root()
    if root is None or not (root / folder).is_dir():
        return []
    return sorted((p for p in (root / folder).glob(pattern) if p.is_file()), key=lambda p: p.as_posix())


def shipped_profiles() -> list[Path]:
    """The shipped compute profiles, in the order runs read them (later ones override)."""
    return shipped_files("calibration/profiles")


def resolve_reference(base_dir: Path, reference: str | os.PathLike[str]) -> Path:
    """The file a scenario in ``base_dir`` means by ``reference`` (the module docstring's rule):
    ``base_dir / reference`` if it exists, else the shipped file of that name if there is one,
    else ``base_dir / reference`` (whose absence the caller reports)."""
    local = base_dir / reference
    try:
        if local.exists():
            return local
    except OSError:  # a name the filesystem cannot hold (too long): the caller reports it
        return local
    shipped = shipped_file(str(reference))
    return shipped if shipped is not None else local


def _relative_to(path: PurePosixPath, folder: str) -> PurePosixPath | None:
    try:
        return path.relative_to(folder)
    except ValueError:
        return None


def _matches(inside: PurePosixPath, pattern: str) -> bool:
    """``pathlib.glob`` semantics for the two pattern shapes of :data:`SHIPPED`."""
    if pattern.startswith("**/"):
        return fnmatch.fnmatchcase(inside.name, pattern[3:])
    return len(inside.parts) == 1 and fnmatch.fnmatchcase(inside.name, pattern)
