"""Where a large message's time goes, real against simulated: the sender's call, then the rest.

    python benchmarks/message_anatomy.py POINT_DIR [--min-bytes 65536]
    python benchmarks/message_anatomy.py REAL_DIR SIM_DIR [--min-bytes 65536]

A blocked receive's ``comm`` time (the ledger's ``comm_wire`` on the receiver) runs from the
moment its message was sent to the moment it was taken in. Both runtimes start it where the
sender's send call starts (the message's send time), so it splits into the sender's call (its
``message overhead`` span: packing, the copy into MPI's buffer, the progress its tests make)
and what follows the call (the transfer, the receiver noticing the message in its waiting
loop, the receiver taking it in). Only receives whose receiver was already waiting when the
message was sent are counted: for the others the time includes the message lying unread.

``POINT_DIR`` is a point of ``benchmarks/predictive_validation.py`` (its ``validate/real`` and
``validate/sim``); or give the two result directories. Printed per direction (worker to
worker, worker to server, server to worker; ``workers.csv`` of the real run says which ranks
are workers): messages, and the median and 90th percentile of the receive's ``comm``, of the
sender's call and of the rest, microseconds, real then simulated.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from simdist.ledger import OVERHEAD_SPAN
from simdist.tracefile import ASYNC_TID_OFFSET, span_events

SAME_INSTANT_US = 2.0  # a receive's comm and its sender's call start together (trace times in µs)
COLUMNS = ["src", "dst", "bytes", "comm_us", "call_us"]


def message_rows(events: Sequence[dict[str, Any]], min_bytes: int) -> pd.DataFrame:
    """One row per blocked receive of at least ``min_bytes`` whose sender's call started as its
    ``comm`` did: ``src, dst, bytes, comm_us, call_us``."""
    calls: dict[int, list[tuple[float, float]]] = {}
    for e in events:
        if e.get("name") == OVERHEAD_SPAN and e.get("tid", 0) < ASYNC_TID_OFFSET:
            calls.setdefault(int(e["tid"]), []).append((float(e["ts"]), float(e.get("dur", 0.0))))
    starts = {rank: np.array(sorted(c)) for rank, c in calls.items()}
    rows = []
    for e in events:
        args = e.get("args") or {}
        if e.get("cat") != "comm" or e.get("name") != "recv" or args.get("bytes", 0) < min_bytes or "src" not in args:
            continue
        sender = starts.get(int(args["src"]))
        if sender is None:
            continue
        i = int(np.argmin(np.abs(sender[:, 0] - e["ts"])))
        if abs(sender[i, 0] - e["ts"]) <= SAME_INSTANT_US:
            rows.append((int(args["src"]), int(e["tid"]), int(args["bytes"]), float(e["dur"]), sender[i, 1]))
    return pd.DataFrame(rows, columns=COLUMNS)


def direction(src: int, dst: int, workers: set[int]) -> str:
    """``worker -> worker``, ``worker -> server`` or ``server -> worker`` (a non-worker is a server)."""
    role = {True: "worker", False: "server"}
    return f"{role[src in workers]} -> {role[dst in workers]}"


def anatomy(rows: pd.DataFrame, workers: set[int]) -> pd.DataFrame:
    """Per direction: messages, and median and p90 of ``comm``, the sender's call and the rest (µs)."""
    if rows.empty:
        return pd.DataFrame(columns=["direction", "messages"])
    rows = rows.assign(rest_us=rows["comm_us"] - rows["call_us"],
                       direction=[direction(s, d, workers) for s, d in zip(rows["src"], rows["dst"])])
    out = []
    for name, group in rows.groupby("direction", sort=True):
        figures = {"direction": name, "messages": len(group)}
        for column in ("comm_us", "call_us", "rest_us"):
            figures[f"{column[:-3]}_median"] = float(group[column].median())
            figures[f"{column[:-3]}_p90"] = float(group[column].quantile(0.9))
        out.append(figures)
    return pd.DataFrame(out)


def _dirs(paths: Sequence[str], parser: argparse.ArgumentParser) -> tuple[Path, Path]:
    if len(paths) == 1:
        real, sim = Path(paths[0]) / "validate" / "real", Path(paths[0]) / "validate" / "sim"
    elif len(paths) == 2:
        real, sim = Path(paths[0]), Path(paths[1])
    else:
        parser.error("give a point directory, or a real and a simulated result directory")
    for d in (real, sim):
        if not (d / "trace.json").is_file():
            parser.error(f"{d}: no trace.json (a result directory of simdist run or validate)")
    if not (real / "workers.csv").is_file():
        parser.error(f"{real}: no workers.csv")
    return real, sim


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dirs", nargs="+", help="a point directory, or REAL_DIR SIM_DIR")
    parser.add_argument("--min-bytes", type=int, default=65536, help="smallest message counted (default 65536)")
    args = parser.parse_args(argv)
    if args.min_bytes < 0:
        parser.error("--min-bytes must be >= 0")
    real, sim = _dirs(args.dirs, parser)
    workers = {int(w) for w in pd.read_csv(real / "workers.csv")["worker"]}
    tables = {name: anatomy(message_rows(span_events(d), args.min_bytes), workers)
              for name, d in (("real", real), ("sim", sim))}
    print(f"# blocked receives of >= {args.min_bytes} B whose receiver waited: µs, median / p90; {real} against {sim}")
    print(f"{'direction':18} {'run':4} {'messages':>8} {'comm':>15} {'sender call':>15} {'rest':>15}")
    for name in sorted(set().union(*(set(t.get("direction", [])) for t in tables.values()))):
        for run, table in tables.items():
            row = table[table["direction"] == name]
            if row.empty:
                print(f"{name:18} {run:4} {0:8d}")
                continue
            r = row.iloc[0]
            cells = " ".join(f"{r[f'{c}_median']:7.0f}/{r[f'{c}_p90']:<7.0f}" for c in ("comm", "call", "rest"))
            print(f"{name:18} {run:4} {int(r['messages']):8d} {cells}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
