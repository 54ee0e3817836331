"""Measurement files → tables: format detection and the registry of trace parsers.

``parse_trace(path)`` reads a file (gzip transparently), finds which registered format it
is in and returns a :class:`~simdist.calibrate.parsed.ParsedTrace`; ``format=`` forces one.
A file no parser recognises, or one cut short, is an :class:`~simdist.errors.InputError`
whose message is one line naming the file and what was expected.

Registered formats (``TRACE_FORMATS``; ``simdist calibrate trace --format NAME``):

==================  ==================================================================================================
``nccl-tests``      ``all_reduce_perf`` and the other ``*_perf`` tools (:mod:`.nccl_tests`)
``osu``             OSU micro-benchmarks: latency, bw, bibw, collectives (:mod:`.osu`)
``torch-profiler``  PyTorch profiler Chrome traces, per-step compute/collectives (:mod:`.torch_trace`)
``simdist-trace``   simdist's ``trace.json`` (simulated or real MPI runs) (:mod:`.simdist_trace`)
``simdist-steps``   simdist's ``steps.csv`` (:mod:`.simdist_trace`)
``collective-csv``  collective timings measured with the user's own tools, as a CSV (:mod:`.collective_csv`)
==================  ==================================================================================================
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ..errors import InputError
from ..inputfile import read_input_bytes
from ..registry import Registry
from .collective_csv import looks_like_collective_csv, parse_collective_csv
from .nccl_tests import looks_like_nccl_tests, parse_nccl_tests
from .osu import looks_like_osu, parse_osu
from .parsed import ParsedTrace, TraceError, shorten
from .simdist_trace import looks_like_simdist_trace, looks_like_steps_csv, parse_simdist_trace, parse_steps_csv
from .torch_trace import looks_like_torch_trace, parse_torch_trace

__all__ = ["TraceFormat", "TRACE_FORMATS", "read_input", "detect_format", "parse_trace", "ParsedTrace"]

_MAX_BYTES = 512 * 1024 * 1024


@dataclass(frozen=True)
class TraceFormat:
    """One parser: ``json`` formats get the decoded JSON, the others the text."""

    name: str
    json: bool
    looks_like: Callable[[Any], bool]
    parse: Callable[[str, Any], ParsedTrace]


TRACE_FORMATS: Registry[TraceFormat] = Registry("trace format")


def _add(fmt: TraceFormat, description: str, citation: str) -> None:
    TRACE_FORMATS.add(fmt.name, fmt, description, citation=citation)


_add(TraceFormat("nccl-tests", False, looks_like_nccl_tests, parse_nccl_tests),
     "nccl-tests *_perf output: per-size time, algbw, busbw", "github.com/NVIDIA/nccl-tests (src/common.cu, PERFORMANCE.md)")
_add(TraceFormat("osu", False, looks_like_osu, parse_osu),
     "OSU micro-benchmark output: latency, bw, bibw, collective latency per size", "mvapich.cse.ohio-state.edu/benchmarks")
_add(TraceFormat("torch-profiler", True, looks_like_torch_trace, parse_torch_trace),
     "PyTorch profiler Chrome trace: compute and collective time per ProfilerStep", "pytorch.org/docs/stable/profiler.html")
_add(TraceFormat("simdist-trace", True, looks_like_simdist_trace, parse_simdist_trace),
     "simdist trace.json (simulated or real MPI run): per-rank compute/comm/wait", "ARCHITECTURE.md, results contract")
_add(TraceFormat("simdist-steps", False, looks_like_steps_csv, parse_steps_csv),
     "simdist steps.csv: per-worker iteration time, batch size, staleness", "ARCHITECTURE.md, results contract")
_add(TraceFormat("collective-csv", False, looks_like_collective_csv, parse_collective_csv),
     "CSV of collective timings: collective, ranks, bytes, time per operation (or busbw)",
     "docs/calibration.md, 'Collective timings from a CSV'")

# detection order: JSON traces by content (simdist before torch: both are Chrome traces)
_JSON_ORDER = ("simdist-trace", "torch-profiler")
# the CSV first: its test reads only the header, while nccl-tests' looks anywhere (a comment may quote it)
_TEXT_ORDER = ("collective-csv", "nccl-tests", "osu", "simdist-steps")
_KNOWN = "nccl-tests *_perf output, OSU micro-benchmark output, a PyTorch profiler trace, simdist trace.json or " \
         "steps.csv, a collective CSV (header: collective, ranks, bytes, time_s)"


def read_input(path: str | Path) -> tuple[str, Any]:
    """``("json", object)`` or ``("text", str)`` of the file at ``path`` (gzip is unpacked)."""
    try:
        raw = read_input_bytes(path, "trace", _MAX_BYTES)
    except InputError as exc:
        raise TraceError(str(path), exc.message) from None
    if raw[:2] == b"\x1f\x8b":
        raw = _gunzip(str(path), raw)
    if b"\x00" in raw[:4096]:
        raise TraceError(str(path), f"a binary file, not a measurement trace; expected {_KNOWN}")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise TraceError(str(path), f"not UTF-8 text; expected {_KNOWN}") from None
    stripped = text.lstrip()
    if stripped.startswith(("{", "[")):
        try:
            return "json", json.loads(text)
        except json.JSONDecodeError as exc:
            raise TraceError(str(path), f"truncated or invalid JSON ({exc.msg} at line {exc.lineno} column "
                                        f"{exc.colno}); the trace was cut or is not a trace file") from None
    return "text", text


def _gunzip(path: str, raw: bytes) -> bytes:
    """Unpack gzip data, refusing more than _MAX_BYTES unpacked (a small bomb must not fill memory)."""
    unpacker = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    try:
        data = unpacker.decompress(raw, _MAX_BYTES + 1)
    except zlib.error:
        raise TraceError(path, "truncated or corrupt gzip data") from None
    if len(data) > _MAX_BYTES:
        raise TraceError(path, f"unpacks to more than {_MAX_BYTES >> 20} MiB; cut the trace to a few steps")
    if not unpacker.eof:
        raise TraceError(path, "truncated or corrupt gzip data")
    return data


def detect_format(path: str, kind: str, content: Any) -> str:
    """The name of the registered format ``content`` is in (InputError listing the formats if none)."""
    for name in _JSON_ORDER if kind == "json" else _TEXT_ORDER:
        if TRACE_FORMATS.get(name).looks_like(content):
            return name
    if kind == "json":
        what = "JSON without 'traceEvents'" if not (isinstance(content, dict) and "traceEvents" in content) \
            else "a Chrome trace from neither PyTorch's profiler nor simdist"
        raise TraceError(path, f"unrecognised trace format: {what}; expected {_KNOWN}")
    first = next((line for line in content.splitlines() if line.strip()), "(empty file)")
    raise TraceError(path, f"unrecognised trace format (first line {shorten(first)!r}); expected {_KNOWN}")


def parse_trace(path: str | Path, format: str = "auto") -> ParsedTrace:
    """Parse the measurement file at ``path`` in ``format`` (``"auto"``: detect it)."""
    source = str(path)
    kind, content = read_input(path)
    try:
        name = detect_format(source, kind, content) if format == "auto" else TRACE_FORMATS.entry(format).name
    except InputError as err:
        raise err if err.source else err.at(source="--format") from None
    fmt = TRACE_FORMATS.get(name)
    if fmt.json != (kind == "json"):
        raise TraceError(source, f"not {name} input: expected {'a JSON trace' if fmt.json else 'text output'}, "
                                 f"found {'JSON' if kind == 'json' else 'text'}")
    return fmt.parse(source, content)
