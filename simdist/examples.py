"""The ``simdist examples`` command: the shipped example scenarios, listed and copied out.

    simdist examples                    each example's name and one-line description
    simdist examples copy NAME [DEST]   write NAME's scenario (and any file it refers to that is
                                        not shipped) into DEST (default: the current folder)

Why: an installed wheel keeps the examples inside the package (``simdist/resources.py``), where
a user should neither edit nor look for them; a copy is theirs to change and run
(``simdist run quickstart.yaml``). A copy never overwrites: an existing file is an input error
(one line, exit 2) and nothing is written. Files the scenario names that are shipped
(``calibration/platforms/...``) are not copied: the copy finds them by their shipped name.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Iterator

from .errors import InputError
from .resources import is_shipped_name, resolve_reference, shipped_file, shipped_files, shipped_root

__all__ = ["Example", "examples", "example", "copy_example", "scenario_references", "add_examples_parser"]

DESCRIPTION_CHARS = 100  # a description longer than this is cut at a word, so each example fits one line


@dataclass(frozen=True)
class Example:
    """One shipped example: ``name`` is its path under ``scenarios/`` without ``.yaml``."""

    name: str
    path: Path
    description: str


def examples() -> list[Example]:
    """Every shipped example scenario, sorted by name."""
    root = shipped_root()
    found = []
    for path in shipped_files("scenarios"):
        name = path.relative_to(root / "scenarios").with_suffix("").as_posix()
        found.append(Example(name, path, _description(path.read_text(encoding="utf-8"))))
    return sorted(found, key=lambda e: e.name)


def example(name: str) -> Example:
    """The example called ``name`` (``quickstart``; ``quickstart.yaml`` is accepted too)."""
    wanted = name[:-5] if name.endswith(".yaml") else name
    known = examples()
    for candidate in known:
        if candidate.name == wanted:
            return candidate
    raise InputError(f"unknown example {name!r}; known: {', '.join(e.name for e in known) or 'none shipped'}",
                     source="examples copy")


def copy_example(name: str, dest: Path) -> list[Path]:
    """Copy example ``name`` into folder ``dest`` (created if missing) with every file it refers
    to that is not shipped; returns the files written. Refuses (InputError, nothing written)
    if any of them exists."""
    chosen = example(name)
    if dest.exists() and not dest.is_dir():
        raise InputError("not a folder; DEST must be a folder to copy into", source=str(dest))
    plan = [(chosen.path, dest / chosen.path.name)] + _referenced_copies(chosen, dest)
    for _source, target in plan:
        if target.exists() or target.is_symlink():
            raise InputError("already exists; simdist examples copy never overwrites (remove it or give another DEST)",
                             source=str(target))
    for source, target in plan:
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            with open(source, "rb") as src, open(target, "xb") as out:  # "x": never replace a file
                shutil.copyfileobj(src, out)
        except OSError as exc:
            raise InputError(f"cannot write ({exc.strerror or exc})", source=str(target)) from None
    return [target for _source, target in plan]


def scenario_references(data: Any) -> list[str]:
    """The file references of a scenario mapping: ``platform`` (a file), ``platform.file``,
    ``platform.overlays`` and ``compute.profiles``, in the scenario and in its ``compare``
    variants and ``sweep`` points and grid values."""
    if not isinstance(data, dict):
        return []
    found = list(_direct_references(data))
    for variant in _variants(data):
        nested: dict[str, Any] = {}
        for key, value in variant.items():
            if isinstance(key, str):
                _set_dotted(nested, key, value)
        found += _direct_references(nested)
    return list(dict.fromkeys(found))


def add_examples_parser(subparsers) -> None:
    """Add ``examples`` (and ``examples copy``) to the ``simdist`` sub-command parsers."""
    parser = subparsers.add_parser("examples", help="list the shipped example scenarios; "
                                                    "'simdist examples copy NAME [DEST]' copies one out")
    actions = parser.add_subparsers(dest="examples_command", parser_class=type(parser))
    copy = actions.add_parser("copy", help="copy an example scenario (and the files it needs) into DEST")
    copy.add_argument("name", help="example name, as 'simdist examples' lists it (e.g. quickstart)")
    copy.add_argument("dest", nargs="?", default=".", help="folder to copy into (default: the current folder)")
    parser.set_defaults(func=_cmd_examples)


def _cmd_examples(args) -> int:
    if args.examples_command == "copy":
        for path in copy_example(args.name, Path(args.dest)):
            print(path)
        return 0
    listed = examples()
    width = max((len(e.name) for e in listed), default=0)
    for entry in listed:
        print(f"{entry.name:<{width}}  {entry.description}")
    return 0


def _description(text: str) -> str:
    """The scenario's ``description`` field, else its opening comment, on one line."""
    from .yamlio import safe_load_limited

    data = safe_load_limited(text)
    described = data.get("description") if isinstance(data, dict) else None
    if not isinstance(described, str) or not described.strip():
        opening = []
        for line in text.splitlines():
            if not line.startswith("#") or not line.strip("# "):
                break
            opening.append(line.lstrip("# "))
        described = " ".join(opening)
    return _one_line(described)


def _one_line(text: str) -> str:
    line = re.sub(r"\s+", " ", text).strip()
    if len(line) <= DESCRIPTION_CHARS:
        return line
    return line[:DESCRIPTION_CHARS - 3].rsplit(" ", 1)[0].rstrip(",;:.") + "..."


def _referenced_copies(chosen: Example, dest: Path) -> list[tuple[Path, Path]]:
    """(source, target) for each file the example names that its copy cannot find as shipped."""
    from .yamlio import safe_load_limited

    copies = []
    for reference in scenario_references(safe_load_limited(chosen.path.read_text(encoding="utf-8"))):
        if is_shipped_name(reference) and shipped_file(reference) is not None:
            continue  # the copy resolves it by its shipped name
        source = resolve_reference(chosen.path.parent, reference)
        relative = PurePosixPath(reference)
        if relative.is_absolute() or ".." in relative.parts or not source.is_file():
            raise InputError(f"example {chosen.name!r} refers to {reference!r}, which is neither shipped nor a file "
                             "beside it; copy it by hand", source="examples copy")
        copies.append((source, dest / Path(*relative.parts)))
    return copies


def _direct_references(data: dict[str, Any]) -> Iterator[str]:
    platform = data.get("platform")
    if isinstance(platform, str) and platform.endswith((".yaml", ".yml")):
        yield platform
    if isinstance(platform, dict):
        if isinstance(platform.get("file"), str):
            yield platform["file"]
        yield from _strings(platform.get("overlays"))
    compute = data.get("compute")
    if isinstance(compute, dict):
        yield from _strings(compute.get("profiles"))


def _variants(data: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The override mappings of ``compare`` variants, ``sweep`` points and ``sweep`` grid values."""
    compare = data.get("compare")
    for variant in compare if isinstance(compare, list) else []:
        if isinstance(variant, dict) and isinstance(variant.get("set"), dict):
            yield variant["set"]
    sweep = data.get("sweep") if isinstance(data.get("sweep"), dict) else {}
    points = sweep.get("points")
    for point in points if isinstance(points, list) else []:
        if isinstance(point, dict):
            yield point
    grid = sweep.get("grid")
    for keys, values in grid.items() if isinstance(grid, dict) else []:
        names = str(keys).split(",")
        for value in values if isinstance(values, list) else []:
            row = value if len(names) > 1 and isinstance(value, list) else [value]
            yield dict(zip((n.strip() for n in names), row))


def _set_dotted(data: dict[str, Any], key: str, value: Any) -> None:
    from .scenario import set_dotted

    set_dotted(data, key, value)


def _strings(value: Any) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []

