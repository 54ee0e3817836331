"""Golden summaries of every shipped scenario: a restructuring must keep each one's numbers.

Each top-level ``scenarios/*.yaml`` runs small through :func:`simdist.run` (the overrides in
:data:`OVERRIDES` cut the stop criterion, and the node count of a huge platform, while keeping
the scenario's algorithm, platform kind and options: noise, progress mode, epoch-end work, DBS
pool, NNT topology, DASO schedule, timing-only ResNet). A sweep or comparison scenario runs its
base point. The run's fingerprint is compared with the one recorded in
``tests/data/golden_summaries/golden_summaries.json``:

* the summary without ``wall_time_s`` (the host's clock, not the simulation's);
* ``steps`` and ``ledger``: the number of rows and the sum of every numeric column;
* ``events``: the number of events of each kind.

Integers, strings, booleans and None must match exactly; floats within
``rel=1e-6, abs=1e-12``, except the fields in :data:`CPU_SENSITIVE`, which a CPU whose float32
kernels round differently moves further (measured, with the host named there). A scenario without a recorded entry fails: a new scenario gets its
golden entry when it is added.

Re-recording, when a change of behaviour is intended: run this file with
``SIMDIST_RECORD_GOLDEN=1`` and it writes the runs' fingerprints instead of comparing (the
commit they were recorded at goes in ``recorded_at``); review the JSON diff, then run it again
without the variable.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import simdist

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = sorted((ROOT / "scenarios").glob("*.yaml"))
GOLDEN = Path(__file__).resolve().parent / "data" / "golden_summaries" / "golden_summaries.json"
RECORD = os.environ.get("SIMDIST_RECORD_GOLDEN") == "1"
REL, ABS = 1e-6, 1e-12
# fields that amplify last-bit differences of the float32 kernels, with the relative tolerance they need across
# CPUs: dc-s3gd's variance-control lambda is a ratio of gradient norms; on an Intel Xeon VM reporting a 480 MiB
# L3 its sum over the run moved by 6.0e-5 from the figure recorded on an AMD EPYC VM (every other field within 1e-6)
CPU_SENSITIVE: dict[str, float] = {"steps.sums.lambda_": 1e-4}

SHORT = {"stop.epochs": None, "stop.virtual_time": None}
OVERRIDES: dict[str, dict[str, Any]] = {
    "cluster_sync_timing": {"stop.steps": 10},
    "daso_ablation": {**SHORT, "stop.steps": 16},             # 4 fixed cycles of B = 4
    "daso_parameter_study": {**SHORT, "stop.steps": 16},
    "daso_small": {**SHORT, "stop.steps": 80},                # past the 4 warm-up epochs (48 steps) into cycling
    "daso_vs_horovod": {**SHORT, "stop.steps": 24},   # adaptive schedule, still in its warm-up
    "dbs_heterogeneous": {**SHORT, "stop.steps": 60},         # several batch resizes of the pool
    "dcs3gd_compensation": {**SHORT, "stop.steps": 24},
    "dcs3gd_scaling": {"stop.steps": 10, "platform.nodes": 8},  # through the 5-iteration warm-up into decay
    "epoch_end_costs": {},                                     # already small: 2 epochs of validation + checkpoint
    "nnt_paper_cpu_cluster": {**SHORT, "stop.steps": 25},     # past one epoch: one NNT sync
    "nnt_topologies": {**SHORT, "stop.steps": 12},
    "nsoftsync_staleness": {**SHORT, "stop.steps": 20},
    "quickstart": {**SHORT, "stop.steps": 30},
    "resnet50_horovod_timing": {"stop.steps": 10},
    "scaling_showcase": {**SHORT, "stop.steps": 20},
}
DEFAULT_OVERRIDES = {**SHORT, "stop.steps": 10}  # a scenario not listed yet


def _sum(column: pd.Series) -> int | float:
    total = column.sum()
    return int(total) if pd.api.types.is_integer_dtype(column) else float(total)


def _table_print(table: pd.DataFrame | None) -> dict[str, Any]:
    """Rows and the sum of every numeric (not boolean) column."""
    if table is None:
        return {"rows": 0, "sums": {}}
    numeric = [name for name in table.columns
               if pd.api.types.is_numeric_dtype(table[name]) and not pd.api.types.is_bool_dtype(table[name])]
    return {"rows": len(table), "sums": {str(name): _sum(table[name]) for name in numeric}}


def _event_counts(events: pd.DataFrame | None) -> dict[str, int]:
    if events is None or events.empty:
        return {}
    return {str(kind): int(count) for kind, count in events["kind"].value_counts().sort_index().items()}


def fingerprint(stem: str) -> dict[str, Any]:
    """What the golden file holds for scenario ``stem``: its overrides, summary and table prints."""
    overrides = OVERRIDES.get(stem, DEFAULT_OVERRIDES)
    result = simdist.run(ROOT / "scenarios" / f"{stem}.yaml", set=overrides)
    summary = {key: value for key, value in result.summary.items() if key != "wall_time_s"}
    return {"overrides": overrides, "summary": summary, "steps": _table_print(result.steps),
            "ledger": _table_print(result.ledger), "events": _event_counts(result.events)}


def _flat(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        flat: dict[str, Any] = {}
        for key, item in value.items():
            flat.update(_flat(item, f"{prefix}.{key}" if prefix else str(key)))
        return flat or {prefix: {}}
    return {prefix: value}


def _same(expected: Any, actual: Any, rel: float = REL) -> bool:
    numbers = (int, float)
    if (isinstance(expected, numbers) and isinstance(actual, numbers)
            and not isinstance(expected, bool) and not isinstance(actual, bool)):
        if isinstance(expected, int) and isinstance(actual, int):
            return expected == actual
        if math.isnan(expected) or math.isnan(actual):
            return math.isnan(expected) and math.isnan(actual)
        return actual == pytest.approx(expected, rel=rel, abs=ABS)
    return type(expected) is type(actual) and expected == actual


def differences(expected: dict[str, Any], actual: dict[str, Any]) -> list[str]:
    """One line per field that differs: its dotted name, the recorded and the new value."""
    want, got = _flat(expected), _flat(actual)
    missing = object()
    lines = []
    for field in sorted(set(want) | set(got)):
        old, new = want.get(field, missing), got.get(field, missing)
        if old is missing or new is missing or not _same(old, new, CPU_SENSITIVE.get(field, REL)):
            show = lambda v: "(absent)" if v is missing else repr(v)  # noqa: E731
            lines.append(f"{field}: golden {show(old)}, now {show(new)}")
    return lines


def _commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return out.stdout.strip()


def _record(stem: str, entry: dict[str, Any]) -> None:
    """Write ``entry`` as ``stem``'s golden entry; entries of scenarios no longer shipped are dropped."""
    data = json.loads(GOLDEN.read_text(encoding="utf-8")) if GOLDEN.is_file() else {}
    shipped = {path.stem for path in SCENARIOS}
    scenarios = {name: item for name, item in data.get("scenarios", {}).items() if name in shipped}
    scenarios[stem] = entry
    GOLDEN.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps({"recorded_at": _commit(), "scenarios": scenarios}, indent=1, sort_keys=True, allow_nan=False)
    tmp = GOLDEN.with_suffix(".json.tmp")
    tmp.write_text(text + "\n", encoding="utf-8")
    tmp.replace(GOLDEN)


def test_every_shipped_scenario_is_found():
    assert len(SCENARIOS) >= 15, f"expected the shipped scenarios under {ROOT / 'scenarios'}, found {len(SCENARIOS)}"


@pytest.mark.parametrize("path", SCENARIOS, ids=[path.stem for path in SCENARIOS])
def test_golden_summary(path: Path):
    stem = path.stem
    actual = json.loads(json.dumps(fingerprint(stem), allow_nan=False))  # as the file would hold it
    if RECORD:
        _record(stem, actual)
        return
    assert GOLDEN.is_file(), f"no golden file {GOLDEN.name}; record it with SIMDIST_RECORD_GOLDEN=1"
    recorded = json.loads(GOLDEN.read_text(encoding="utf-8"))["scenarios"]
    assert stem in recorded, f"no golden entry for scenario {stem!r}; record it with SIMDIST_RECORD_GOLDEN=1"
    diff = differences(recorded[stem], actual)
    assert not diff, f"scenario {stem!r} differs from its golden summary:\n  " + "\n  ".join(diff)
