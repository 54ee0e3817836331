"""What a trace parser returns, and the one-line errors parsers raise.

A :class:`ParsedTrace` is the table a measurement file holds (one row per message size, per
step or per rank), plus what the file says about the system (ranks, nodes, devices) in
``meta``. Parsers never fit anything; :mod:`simdist.calibrate.trace_fit` does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from ..errors import InputError

__all__ = ["ParsedTrace", "TraceError", "shorten"]


@dataclass
class ParsedTrace:
    """One parsed measurement file.

    ``format``: the registered format name (``nccl-tests``, ``osu``, ``torch-profiler``,
    ``simdist-trace``, ``simdist-steps``); ``kind``: what was measured (``all_reduce``,
    ``p2p_latency``, ``steps`` ...); ``table``: the rows, SI units in the column names
    (``size_bytes``, ``time_s``); ``meta``: facts about the system and run.
    """

    path: str
    format: str
    kind: str
    description: str
    table: pd.DataFrame
    meta: dict[str, Any] = field(default_factory=dict)


def shorten(text: str, limit: int = 60) -> str:
    """``text`` on one line, cut to ``limit`` characters (for quoting file content in errors)."""
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def TraceError(path: str, message: str) -> InputError:  # noqa: N802 - reads as an exception type
    """The :class:`~simdist.errors.InputError` a parser raises about ``path`` (one line)."""
    return InputError(message, source=str(path))
