"""The time ledger: each rank's step as the sum of named parts.

A step is cut into the parts ARCHITECTURE.md names — ``data``, ``forward_backward``,
``pack``, ``comm_cpu``, ``comm_wire``, ``wait``, ``unpack``, ``update``, ``eval``,
``checkpoint`` — from the spans a run recorded. Simulated and real runs record spans under
the same kinds and names (the MPI runtime writes the same recorder rows), so one derivation
serves both and the two ledgers compare part by part.

Steps. A rank's step *k* runs from the start of its *k*-th step-opening span to the start of
the next: a worker's forward/backward; for a rank that never computes one (a parameter
server), its update work (not the simulated runtime's turns between requests, which a real
run has no span for: a server's step is one update in both). Time before the first opener
(start-up, the first broadcast) belongs to step 0; the last step ends with the rank's last span. Blocking spans of a rank
never overlap, so every span falls inside one step.

Parts. A span's part comes from its kind and name (:data:`PART_OF_NAME`, then
:data:`PART_OF_KIND`): forward/backward → ``forward_backward``; the CPU time a rank spends in
sending (LogGP ``o``, span ``message overhead``; in a real run also taking in a polled
message, and converting a collective's tensor and posting it) → ``comm_cpu``; data moving while the rank is
blocked on it → ``comm_wire``; blocked on peers → ``wait``; an algorithm's own busy work →
``update`` (averaging, applying, merging) or ``eval`` (its evaluations); the simulated
runtime's turn between two requests (``platform.calls``, span ``runtime call``) → ``update``. Non-blocking
communication overlaps other work and is not a part. Time no span covers is ``wait`` in a
simulation (the rank was idle until something arrived) and ``update`` in a real run (the
algorithm's own host work between runtime calls). So the parts add up to the step exactly in
a simulation (floating-point sums aside) and, in a real run, to within the timer's resolution.
An algorithm's own work (``rt.busy(seconds, name, part=..., run=...)``) is charged to the part
its span name starts with (``pack gradient`` → ``pack``; ``unpack``, ``update``, ``data``,
``eval``, ``checkpoint`` alike), else ``update``. Parts a run never charges stay zero columns:
the column set is the contract.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .errors import InputError

__all__ = ["PARTS", "HOST_PARTS", "OVERHEAD_SPAN", "CALL_SPAN", "LEDGER_COLUMNS", "part_of", "work_span_name", "ledger_table", "compare_ledgers"]

PARTS = ("data", "forward_backward", "pack", "comm_cpu", "comm_wire", "wait", "unpack", "update", "eval",
         "checkpoint")
LEDGER_COLUMNS = ("rank", "step", "start_s", "step_s", *PARTS)

OVERHEAD_SPAN = "message overhead"  # a rank's own CPU time in a send, receive or collective call: comm_cpu
# the runtime's turn between two of an algorithm's requests (platform.calls): host work between runtime
# calls, which a real run's ledger counts as update (the time no span covers there)
CALL_SPAN = "runtime call"
# span names with a part of their own (the runtimes' and algorithms' names)
PART_OF_NAME = {
    "forward/backward": "forward_backward",
    OVERHEAD_SPAN: "comm_cpu",
    CALL_SPAN: "update",
    "data": "data", "pack": "pack", "unpack": "unpack", "checkpoint": "checkpoint",
}
PART_OF_KIND = {"comm": "comm_wire", "wait": "wait"}
# the parts an algorithm's own work (``rt.busy``) may be charged to; its span name's first word
HOST_PARTS = ("data", "pack", "unpack", "update", "eval", "checkpoint")
_EVAL_WORDS = ("evaluation", "inference", "eval")
_OPENER = "forward/backward"


def part_of(kind: str, name: str) -> str:
    """The ledger part of a span of ``kind`` named ``name``."""
    part = PART_OF_NAME.get(name) or PART_OF_KIND.get(kind)
    if part is not None:
        return part
    first = name.split(" ", 1)[0].rstrip(":")
    if first in HOST_PARTS:
        return first
    return "eval" if any(word in name for word in _EVAL_WORDS) else "update"


def work_span_name(name: str, part: str | None) -> str:
    """The span name of an algorithm's own work ``name`` charged to ledger ``part``.

    ``part`` None: the name decides (:func:`part_of`). Otherwise the name is prefixed with the
    part unless its first word already is it; an unknown part is refused, naming the known ones.
    """
    if part is None:
        return name
    if part not in HOST_PARTS:
        raise InputError(f"ledger part {part!r} (work {name!r}) is unknown; an algorithm's own work is one of: "
                         f"{', '.join(HOST_PARTS)}", source="algorithm")
    return name if name.split(" ", 1)[0].rstrip(":") == part else f"{part}: {name}"


def ledger_table(spans: pd.DataFrame, *, uncovered: str = "wait") -> pd.DataFrame:
    """One row per (rank, step): ``rank, step, start_s, step_s`` and one column per part, seconds.

    ``spans``: the run's spans (:func:`simdist.metrics.spans_table`: ``rank, kind, name,
    start_s, end_s, blocking``). ``uncovered``: the part of time no span covers — ``wait`` in a
    simulation (a rank only leaves its spans to wait for something); ``update`` in a real run,
    where the time between runtime calls is the algorithm's own host work (flattening,
    copying back, applying updates), not yet timed apart. Vectorized over ranks (a 1,024-rank
    run has hundreds of thousands of spans).
    """
    spans = spans[spans["blocking"].astype(bool) & (spans["end_s"] > spans["start_s"])]
    if spans.empty:
        return pd.DataFrame(columns=list(LEDGER_COLUMNS))
    pairs = spans[["kind", "name"]].drop_duplicates()
    parts = {(k, n): part_of(k, n) for k, n in zip(pairs["kind"], pairs["name"])}
    spans = spans.assign(part=[parts[(k, n)] for k, n in zip(spans["kind"], spans["name"])],
                         duration_s=spans["end_s"] - spans["start_s"], rank=spans["rank"].astype("int64"))
    steps = _step_starts(spans)
    located = pd.merge_asof(spans.sort_values("start_s", kind="stable"),
                            steps[["rank", "start_s", "step"]].sort_values("start_s", kind="stable"),
                            on="start_s", by="rank", direction="backward")
    located["step"] = located["step"].fillna(0).astype("int64")
    sums = located.groupby(["rank", "step", "part"])["duration_s"].sum().unstack("part", fill_value=0.0)
    out = steps.set_index(["rank", "step"]).join(sums, how="left").fillna(0.0).reset_index()
    for part in PARTS:
        if part not in out:
            out[part] = 0.0
    covered = out[list(PARTS)].to_numpy().sum(axis=1)
    out[uncovered] += np.maximum(out["step_s"].to_numpy() - covered, 0.0)  # time no span covers
    return out[list(LEDGER_COLUMNS)].astype({"rank": "int64", "step": "int64"})


def _step_starts(spans: pd.DataFrame) -> pd.DataFrame:
    """Per rank and step: ``rank, step, start_s, step_s`` (the first step starts at 0, the last
    ends with the rank's last span)."""
    fb = _with_its_data(spans, spans[(spans["kind"] == "compute") & (spans["name"] == _OPENER)])
    others = spans[~spans["rank"].isin(fb["rank"].unique()) & (spans["part"] == "update")
                   & (spans["name"] != CALL_SPAN)]  # the runtime's turns are between an update's requests
    openers = pd.concat([fb, others])[["rank", "start_s"]].sort_values(["rank", "start_s"], kind="stable")
    alone = np.setdiff1d(spans["rank"].unique(), openers["rank"].unique())
    openers = pd.concat([openers, pd.DataFrame({"rank": alone, "start_s": 0.0})], ignore_index=True)
    openers = openers.sort_values(["rank", "start_s"], kind="stable").reset_index(drop=True)
    openers["step"] = openers.groupby("rank").cumcount()
    openers.loc[openers["step"] == 0, "start_s"] = 0.0  # start-up belongs to the first step
    last_end = spans.groupby("rank")["end_s"].max()
    following = openers.groupby("rank")["start_s"].shift(-1)
    ends = following.fillna(openers["rank"].map(last_end))
    openers["step_s"] = np.maximum(ends.to_numpy() - openers["start_s"].to_numpy(), 0.0)
    return openers


def _with_its_data(spans: pd.DataFrame, fb: pd.DataFrame) -> pd.DataFrame:
    """Forward/backward spans, each starting where the ``data`` span getting its batch began
    (one that ends exactly where it starts): a step opens with getting its batch."""
    data = spans[spans["part"] == "data"]
    if data.empty or fb.empty:
        return fb
    lead = data[["rank", "start_s", "end_s"]].rename(columns={"start_s": "data_start_s", "end_s": "start_s"})
    joined = fb[["rank", "start_s"]].merge(lead.drop_duplicates(["rank", "start_s"]), on=["rank", "start_s"],
                                           how="left")
    return fb.assign(start_s=joined["data_start_s"].fillna(joined["start_s"]).to_numpy())


def compare_ledgers(measured: pd.DataFrame, predicted: pd.DataFrame, ranks: list[int] | None = None, *,
                    skip_first: int = 1) -> pd.DataFrame:
    """Part by part, the mean seconds per step of a real run (``measured``) against its simulation.

    Over the given ranks' steps (all by default), each rank's first ``skip_first`` steps left
    out (start-up). Columns: ``part, measured_s, predicted_s, error_pct`` (None where the real
    part is zero) and ``share_pct`` (the part's share of the real step: which errors matter).
    The last row, ``step``, compares whole steps.
    """
    def means(ledger: pd.DataFrame) -> pd.Series:
        rows = ledger if ranks is None else ledger[ledger["rank"].isin(ranks)]
        rows = rows[rows["step"] >= skip_first]
        return rows[[*PARTS, "step_s"]].mean() if not rows.empty else pd.Series(0.0, index=[*PARTS, "step_s"])

    real, sim = means(measured), means(predicted)
    table = []
    for part in (*PARTS, "step_s"):
        r, p = float(real[part]), float(sim[part])
        table.append({"part": "step" if part == "step_s" else part, "measured_s": r, "predicted_s": p,
                      "error_pct": 100.0 * (p - r) / r if r > 0 else None,
                      "share_pct": 100.0 * r / float(real["step_s"]) if real["step_s"] > 0 else None})
    return pd.DataFrame(table)
