"""Parsed collective measurements → the platform's ``collectives.tables`` (what the simulator prices from).

nccl-tests, OSU collective outputs, ``simdist calibrate network`` sweeps and CSV files all
measure time against size for one collective on one communicator; each becomes one table
of :class:`~simdist.platform.cost_spec.CostTableSpec` rows, sizes converted to what the
simulator's collective call carries:

* nccl-tests ``all_reduce``/``broadcast`` size: the per-rank buffer, as is; ``all_gather``
  size is the whole output buffer, so each rank's part is ``size / n``;
* OSU ``osu_allreduce``/``osu_bcast``/``osu_allgather``: the message size per rank, as is
  (OSU does not record the process count: ``--osu-ranks``);
* size-0 rows (a no-op measured) are left out: a table prices at least one byte.

Each table names its file (and the file's SHA-256) as its ``source``. Tables of other
collectives (reduce_scatter, alltoall ...) are reported and left out: the simulator does not
issue them.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Sequence


from ..errors import InputError
from ..platform.cost_spec import CollectiveCostSpec, canonical_op, table_row_problem
from .parsed import ParsedTrace

__all__ = ["tables_from_parsed", "table_from_sweep", "after_compute_table_from_sweep", "collectives_section"]


def _source(path: str) -> str:
    try:
        digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]
        return f"{path} (sha256 {digest}…)"
    except OSError:
        return str(path)


def _table(op: str, ranks: int, nodes: int | None, sizes: Sequence[float], times: Sequence[float], source: str,
           algorithm: str | None = None, dtype: str = "float32", *, path: str | None = None) -> dict[str, Any]:
    """One table mapping; a bad row is an InputError naming ``path`` (the input file), else ``source``."""
    keep = [(float(s), float(t)) for s, t in zip(sizes, times) if s >= 1]
    problem = table_row_problem([s for s, _ in keep], [t for _, t in keep])
    if problem is not None:
        index, _field, message = problem
        raise InputError(f"row of size {keep[index][0]:.0f} B: {message}", source=path or source)
    table: dict[str, Any] = {"op": op, "ranks": int(ranks), "source": source, "dtype": dtype,
                             "rows": [[int(s) if float(s).is_integer() else s, t] for s, t in keep]}
    if nodes is not None:
        table["nodes"] = int(nodes)
    if algorithm:
        table["algorithm"] = algorithm
    return table


def tables_from_parsed(parsed: ParsedTrace, *, osu_ranks: int = 2) -> tuple[list[dict[str, Any]], list[str]]:
    """The cost tables one parsed file holds, and notes on what was left out."""
    if parsed.format == "nccl-tests":
        return _nccl_tables(parsed)
    if parsed.format == "osu" and parsed.kind == "collective":
        return _osu_tables(parsed, osu_ranks)
    if parsed.format == "collective-csv":
        return _csv_tables(parsed), []
    return [], []


def _nccl_tables(parsed: ParsedTrace) -> tuple[list[dict[str, Any]], list[str]]:
    meta, table = parsed.meta, parsed.table
    try:
        op = canonical_op(meta["op"])
    except ValueError:
        return [], [f"{meta['op']}: the simulator issues no such collective; no cost table"]
    n = meta.get("n_ranks")
    if not n:
        return [], ["the rank count is unknown (no '# Rank' lines, no busbw/algbw ratio): no cost table"]
    sizes = table["size_bytes"].to_numpy(float)
    if op == "allgather":
        sizes = sizes / n
    return [_table(op, n, meta.get("nodes"), sizes, table["time_s"].to_numpy(float), _source(parsed.path),
                   path=parsed.path)], []


def _osu_tables(parsed: ParsedTrace, ranks: int) -> tuple[list[dict[str, Any]], list[str]]:
    try:
        op = canonical_op(parsed.meta["op"])
    except ValueError:
        return [], [f"OSU {parsed.meta['test']}: the simulator issues no such collective; no cost table"]
    table = parsed.table
    return [_table(op, ranks, None, table["size_bytes"].to_numpy(float), table["time_s"].to_numpy(float),
                   _source(parsed.path), path=parsed.path)], [f"OSU does not record the process count: table for {ranks} ranks "
                                            "(--osu-ranks)"]


def _csv_tables(parsed: ParsedTrace) -> list[dict[str, Any]]:
    """One table per (collective, ranks, nodes, algorithm, dtype) group of a collective CSV
    (``nodes`` is nullable there: -1 stands for unknown while grouping)."""
    source = _source(parsed.path)
    frame = parsed.table.assign(_nodes=parsed.table["nodes"].fillna(-1).astype("int64"))
    return [_table(op, int(ranks), None if nodes < 1 else int(nodes), rows["size_bytes"], rows["time_s"], source,
                   algorithm or None, dtype, path=parsed.path)
            for (op, ranks, algorithm, dtype, nodes), rows in
            frame.groupby(["collective", "ranks", "algorithm", "dtype", "_nodes"], sort=False)]


def table_from_sweep(document: dict[str, Any], command: str, op: str = "allreduce") -> dict[str, Any] | None:
    """The ``op`` table (allreduce, or broadcast from rank 0) of a ``calibrate network`` sweep of
    float32 buffers, each call timed from a barrier the ranks leave together, or None."""
    rows = document.get(op) or []
    how = f"median of {rows[0].get('batches', '?')} batches" if rows else ""
    return _sweep_table(document, op, rows, command, "", how)


def after_compute_table_from_sweep(document: dict[str, Any], command: str) -> dict[str, Any] | None:
    """The allreduce table a ``calibrate network --after-compute`` sweep timed right after the
    scenario's training step on every rank (``after_compute``), or None."""
    timed = document.get("allreduce_after_compute") or {}
    rows = timed.get("rows") or []
    table = _sweep_table(document, "allreduce", rows, command,
                         f" right after a training step of {timed.get('after_compute')} (batch "
                         f"{timed.get('batch_size')}) on every rank, the ranks entering together",
                         f"slowest rank, median of {rows[0].get('rounds', '?')} rounds" if rows else "")
    return None if table is None else {**table, "after_compute": True}


def _sweep_table(document: dict[str, Any], op: str, rows: list[dict], command: str, when: str,
                 how: str) -> dict[str, Any] | None:
    """One table of a sweep document's ``rows`` of ``op`` (size 0 left out), its source naming the
    call timed (the MPI library's, or simdist's runtime's with ``--path runtime``); None with
    fewer than two sizes or ranks."""
    rows = [r for r in rows if r["size_bytes"] >= 1]
    ranks = int(document.get("ranks", 0))
    if len(rows) < 2 or ranks < 2:
        return None
    nodes = len(set(document.get("hosts") or [])) or None
    call = f"simdist's runtime {op}" if document.get("path") == "runtime" else \
        {"allreduce": "MPI_Allreduce", "broadcast": "MPI_Bcast"}[op]
    if op == "broadcast":
        call += " from rank 0"
    return _table(op, ranks, nodes, [r["size_bytes"] for r in rows], [r["median_s"] for r in rows],
                  f"{command}: {call} of float32 buffers{when}, {how} ({document.get('mpi_library', 'MPI')})")


def collectives_section(tables: list[dict[str, Any]], fields: dict[str, Any] | None = None) -> dict[str, Any]:
    """The overlay's ``collectives`` mapping, validated as the simulator will read it: the tables
    and ``fields`` (``reduce_bandwidth``, the library's ``schedule``, each with its source)."""
    section: dict[str, Any] = {"tables": tables}
    if fields:
        section.update(fields)
    seen = {}
    for table in tables:
        key = (table["op"], table["ranks"], table.get("nodes"), table.get("algorithm"), table.get("after_compute", False))
        if key in seen:
            raise InputError(f"two inputs measure {table['op']} on {table['ranks']} ranks ({seen[key]} and "
                             f"{table['source']}); fit them in separate runs", source="simdist calibrate")
        seen[key] = table["source"]
    CollectiveCostSpec.model_validate(section)
    return section
