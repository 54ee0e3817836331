"""A model change scored on real runs already made: re-simulate saved points, compare with the same real run.

    python benchmarks/resimulate_points.py results/pv_again [--set KEY=VALUE ...] [--points sync-4,asgd-4] [--parts]

``benchmarks/predictive_validation.py`` leaves, per point, the real run and the simulation it
was compared with (``OUT/<point>/validate/{real,sim}``; the simulation's ``manifest.json``
holds its whole resolved scenario). A second real run of the same point differs from the
first by as much as the targets allow (reports/validation.md), so comparing a model change
across two tables mixes the change with the host. This script keeps the real runs fixed:
for every saved point it simulates the saved scenario again, as it is and with ``--set``
overrides applied (dotted keys into the resolved scenario, values as YAML, e.g. ``--set
platform.node.co_run.wake_run_s=0``), and scores both against the one real run exactly as
the table does (median / p90 |error| per iteration, the ledger target). A simulation is
deterministic, so the difference between the two columns is the change's alone; the saved
simulation's own figures are printed too, which the unchanged re-simulation reproduces as
long as the code behind it has not changed.

Prints one line per point and the count of points within each target, both ways; with
``--parts``, under each point the ledger parts of at least 1 % of the real step, in ms per
step: real, then each simulation's.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent))
from predictive_validation import errors, ledger_target  # noqa: E402

from simdist.errors import InputError  # noqa: E402
from simdist.results import write_result_dir  # noqa: E402
from simdist.scenario import scenario_from_dict  # noqa: E402
from simdist.scenario_files import apply_overrides  # noqa: E402
from simdist.simulate import simulate  # noqa: E402
from simdist.validation.run import compare_run_ledgers  # noqa: E402
from simdist.validation.tables import compare  # noqa: E402
from simdist.validation.verdict import TARGET_MEDIAN_PCT, TARGET_P90_PCT  # noqa: E402


def saved_points(root: Path, names: Sequence[str] | None = None) -> list[Path]:
    """The point directories under ``root`` that hold a real run and its simulation's manifest."""
    points = sorted(p for p in root.iterdir()
                    if (p / "validate" / "real").is_dir() and (p / "validate" / "sim" / "manifest.json").is_file())
    if names:
        points = [p for p in points if any(p.name.startswith(name) for name in names)]
    return points


def score(real: Path, sim: Path) -> dict[str, Any]:
    """The table's figures of ``sim`` against ``real``: median and p90 |error| per iteration, the ledger target."""
    row, _ = errors(compare(real, sim))
    figures = {"median_pct": row["median_pct"], "p90_pct": row["p90_pct"]}
    figures["within_target"] = figures["median_pct"] <= TARGET_MEDIAN_PCT and figures["p90_pct"] <= TARGET_P90_PCT
    table = compare_run_ledgers(real, sim)
    if table is not None:
        figures.update(ledger_target(table))
    return figures


def resimulate(point: Path, overrides: Sequence[str], scratch: Path) -> Path:
    """The point's saved scenario simulated again with ``overrides``; its result directory."""
    manifest = json.loads((point / "validate" / "sim" / "manifest.json").read_text(encoding="utf-8"))
    scenario = apply_overrides(manifest["scenario"], list(overrides))
    out = scratch / point.name
    write_result_dir(simulate(scenario_from_dict(scenario, source=f"{point.name} (resolved)")), out)
    return out


def part_lines(real: Path, sims: Sequence[Path]) -> list[str]:
    """The ledger parts of at least 1 % of the real step: ms per step, real then each of ``sims``."""
    tables = [compare_run_ledgers(real, sim) for sim in sims]
    if any(table is None for table in tables):
        return []
    tables = [table.set_index("part") for table in tables]
    lines = []
    for part, row in tables[0].iterrows():
        if row["share_pct"] >= 1.0 or part == "step":
            cells = " ".join(f"{table.loc[part, 'predicted_s'] * 1e3:9.2f}" for table in tables)
            lines.append(f"    {part:20} {row['measured_s'] * 1e3:9.2f} | {cells}")
    return lines


def _line(name: str, figures: Sequence[dict[str, Any]]) -> str:
    cells = []
    for f in figures:
        ledger = f"{f.get('ledger_parts_within', '?')}/{f.get('ledger_parts_checked', '?')}"
        cells.append(f"{f['median_pct']:6.1f} {f['p90_pct']:6.1f} {ledger:>5} {str(f.get('ledger_worst_part') or ''):>24}")
    return f"{name:24} " + " | ".join(cells)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", help="a predictive_validation.py output directory")
    parser.add_argument("--set", action="append", default=[], dest="overrides", metavar="KEY=VALUE",
                        help="an override of the resolved scenario (repeatable)")
    parser.add_argument("--points", default="", help="comma-separated point name prefixes (default: all)")
    parser.add_argument("--parts", action="store_true",
                        help="under each point, its ledger parts in ms per step: real | saved, as is, changed")
    args = parser.parse_args(argv)
    root = Path(args.out)
    if not root.is_dir():
        parser.error(f"{root}: no such directory")
    points = saved_points(root, [p for p in args.points.split(",") if p.strip()])
    if not points:
        parser.error(f"{root}: no saved point (a validate/real run and validate/sim/manifest.json)")
    print(f"# against the saved real runs of {root}; changed: {' '.join(args.overrides) or 'nothing'}")
    print(f"{'point':24} {'saved: median p90 ledger worst':>45} | {'as is':>45} | {'changed':>45}")
    counts = [[0, 0], [0, 0], [0, 0]]
    with tempfile.TemporaryDirectory() as scratch:
        for point in points:
            real = point / "validate" / "real"
            try:
                runs = [point / "validate" / "sim", resimulate(point, [], Path(scratch) / "as-is"),
                        resimulate(point, args.overrides, Path(scratch) / "changed")]
            except InputError as exc:
                print(f"simdist: error: {exc}", file=sys.stderr)
                return 2
            figures = [score(real, sim) for sim in runs]
            for count, f in zip(counts, figures):
                count[0] += bool(f["within_target"])
                count[1] += bool(f.get("ledger_within_target"))
            print(_line(point.name, figures), flush=True)
            if args.parts:
                print("\n".join(part_lines(real, runs)), flush=True)
    for label, (within, ledger) in zip(("saved", "as is", "changed"), counts):
        print(f"# {label}: iteration target at {within} of {len(points)} points, ledger target at {ledger}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
