"""Provenance of generated calibration files, and writing them.

Every file the calibration commands write (compute profiles, platform overlays, CPU-share
fits, trace summaries) carries a ``provenance`` mapping:

==================  =======================================================================
``generated_by``    the command line that wrote it (re-run it to regenerate the file)
``date``            when, ISO 8601 UTC
``inputs``          every input file: path, ``sha256``, size in bytes (measurements made on
                    the spot have none; their raw numbers are in the file itself)
``scores``          the fit scores (R², worst relative error ...) of every fit in the file
``versions``        Python, simdist and the libraries the numbers depend on
``host``            the machine the command ran on
``content_sha256``  SHA-256 of the rest of the file, so a hand edit is detectable
                    (:func:`verify_content`)
==================  =======================================================================

Files are written atomically (temporary file + rename, :mod:`simdist.outdir`) with floats at
6 significant digits; the content hash is taken over exactly the values written. An existing
file is replaced only if it carries a ``provenance`` mapping (simdist wrote it).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import importlib.metadata
import json
import os
import platform as _platform
import shlex
import sys
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np
import yaml

from ..errors import InputError
from ..outdir import check_out_file, write_text_atomically

__all__ = ["sha256_file", "input_record", "command_line", "calibrate_command", "library_versions", "make_provenance",
           "rounded", "content_sha256", "write_yaml", "check_output", "verify_content"]

_PACKAGES = ("numpy", "torch", "pyyaml", "mpi4py")
_DIGITS = 6


def sha256_file(path: str | os.PathLike) -> str:
    """Hex SHA-256 of the file at ``path``."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def input_record(path: str | os.PathLike) -> dict[str, Any]:
    """``{path, sha256, bytes}`` of one input file (path as given, POSIX separators)."""
    p = Path(path)
    return {"path": p.as_posix(), "sha256": sha256_file(p), "bytes": p.stat().st_size}


def command_line(argv: Sequence[str] | None = None, prog: str = "simdist") -> str:
    """The command as a user would type it: ``prog`` plus ``argv`` (default: this process's)."""
    args = list(sys.argv[1:] if argv is None else argv)
    return " ".join([prog, *(shlex.quote(str(a)) for a in args)])


_NOT_OPTIONS = {"func", "command", "calibrate_command"}  # argparse bookkeeping, not options a user typed


def calibrate_command(args: Any, sub: str, positional: Sequence[str] = ()) -> str:
    """The full ``simdist calibrate SUB`` command line that reproduces ``args`` (an argparse
    namespace; every option spelled out)."""
    words = ["simdist", "calibrate", sub]
    for name in positional:
        value = getattr(args, name)
        words += [str(v) for v in (value if isinstance(value, list) else [value])]
    for dest, value in vars(args).items():
        if dest in _NOT_OPTIONS or dest in positional or dest.startswith("_") or value is None or value is False:
            continue
        flag = "--" + dest.replace("_", "-")
        words += [flag] if value is True else [flag, str(value)]
    return " ".join(shlex.quote(w) for w in words)


def library_versions(extra: Iterable[str] = ()) -> dict[str, str]:
    """Versions of Python, simdist and the numeric libraries (``"missing"`` when not installed)."""
    from .. import __version__

    versions = {"python": _platform.python_version(), "simdist": __version__}
    for name in (*_PACKAGES, *extra):
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = "missing"
    return versions


def _host() -> str:
    return f"{_platform.node()} ({_platform.system()} {_platform.machine()}, {os.cpu_count()} logical CPUs)"


def make_provenance(command: str, inputs: Sequence[str | os.PathLike] = (), scores: dict | None = None,
                    **extra: Any) -> dict[str, Any]:
    """The ``provenance`` mapping (``content_sha256`` is added by :func:`write_yaml`)."""
    record = {
        "generated_by": command,
        "date": _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat(),
        "inputs": [input_record(p) for p in inputs],
        "scores": scores or {},
        "versions": library_versions(),
        "host": _host(),
    }
    record.update(extra)
    return record


def rounded(value: Any) -> Any:
    """``value`` with floats at 6 significant digits, numpy scalars/arrays as Python, inf/nan as None."""
    if isinstance(value, dict):
        return {str(k): rounded(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, np.ndarray)):
        return [rounded(v) for v in (value.tolist() if isinstance(value, np.ndarray) else value)]
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        x = float(value)
        return float(f"{x:.{_DIGITS}g}") if np.isfinite(x) else None
    return value


def content_sha256(document: dict[str, Any]) -> str:
    """SHA-256 of ``document`` without its ``provenance``, as canonical JSON."""
    body = {k: v for k, v in document.items() if k != "provenance"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


class _Dumper(yaml.SafeDumper):
    """SafeDumper writing short lists of numbers inline."""


def _represent_list(dumper: yaml.SafeDumper, data: list):
    flow = len(data) <= 64 and all(isinstance(x, (int, float, str, type(None))) for x in data)
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flow)


_Dumper.add_representer(list, _represent_list)


def write_yaml(path: str | os.PathLike, document: dict[str, Any], header: str) -> Path:
    """Write ``document`` (with its ``provenance``) as YAML at ``path``, atomically.

    Floats are rounded first and ``provenance.content_sha256`` is set over the rounded
    body. ``header`` becomes the leading comment (one or more lines). An existing file is
    replaced only if simdist wrote it (:func:`check_output`).
    """
    data = rounded(document)
    if isinstance(data.get("provenance"), dict):
        data["provenance"]["content_sha256"] = content_sha256(data)
    text = yaml.dump(data, Dumper=_Dumper, sort_keys=False, width=110, allow_unicode=False)
    comment = "".join(f"# {line}\n" for line in header.splitlines())
    check_output(path)
    return write_text_atomically(path, comment + text)


def check_output(path: str | os.PathLike, *, source: str | None = None) -> Path:
    """Refuse (:class:`InputError`) a calibration output path simdist cannot write or must not replace.

    An existing file is replaced only if it holds a ``provenance`` mapping, that is if
    simdist wrote it: a hand-written profile or any other file is never overwritten.
    """
    target = check_out_file(path, source=source)
    if not target.exists():
        return target
    try:
        data = yaml.safe_load(target.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        data = None
    if not (isinstance(data, dict) and isinstance(data.get("provenance"), dict)):
        raise InputError("exists and was not written by simdist (no provenance mapping); simdist replaces only "
                         "its own calibration files; choose another path", source=source or str(path))
    return target


def verify_content(path: str | os.PathLike) -> bool:
    """True if the file's body still hashes to its ``provenance.content_sha256`` (not hand-edited)."""
    try:
        data = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise InputError(f"cannot read calibration file ({type(exc).__name__})", source=str(path)) from None
    if not isinstance(data, dict) or not isinstance(data.get("provenance"), dict):
        raise InputError("no provenance mapping: not written by simdist calibrate", source=str(path))
    return data["provenance"].get("content_sha256") == content_sha256(data)
