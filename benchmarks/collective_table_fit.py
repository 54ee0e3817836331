"""How well a collective cost table predicts sizes it was not given.

For every nccl-tests and OSU collective output under calibration/traces/, the table is
built from every other size (sizes 0, 2, 4 ... of the file) and the remaining sizes are
priced by the simulator's pricing (:class:`simdist.runtime.collective_pricing.TableModel`):
log–log interpolation inside, the fitted alpha–beta model at the ends. Beside it, the best
single alpha–beta line through the same sizes (what one latency and one bandwidth per link
can do). Target: |error| <= 10 % at >= 1 MiB and <= 20 % below, at every held-out size.

    python benchmarks/collective_table_fit.py [--traces DIR] [--verbose]

Prints one line per table (worst error in each size range, pass/fail) and, with
``--verbose``, every held-out size. Exit status 1 if any table misses the target.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import numpy as np

from simdist.calibrate.cost_tables import tables_from_parsed
from simdist.fitting import AlphaBetaFit
from simdist.calibrate.traces import parse_trace
from simdist.errors import InputError
from simdist.platform.cost_spec import CostTableSpec
from simdist.runtime.collective_pricing import TableModel

MIB = 1 << 20
TARGET_LARGE, TARGET_SMALL = 0.10, 0.20


def held_out_errors(table: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(held-out sizes, table-model errors, single-line errors) for one table."""
    rows = table["rows"]
    train, test = rows[0::2], rows[1::2]
    if len(train) < 2 or not test:
        return np.array([]), np.array([]), np.array([])
    model = TableModel(CostTableSpec.model_validate({**table, "rows": train}))
    sizes = np.array([s for s, _ in test], dtype=float)
    measured = np.array([t for _, t in test], dtype=float)
    predicted = np.array([model.price(s)[0] for s in sizes])
    line = AlphaBetaFit().fit([s for s, _ in train], [t for _, t in train]).predict(sizes)
    return sizes, predicted / measured - 1, line / measured - 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--traces", default=str(Path(__file__).resolve().parent.parent / "calibration" / "traces"))
    parser.add_argument("--verbose", action="store_true", help="print every held-out size")
    parser.add_argument("--markdown", action="store_true", help="print the summary as a Markdown table")
    args = parser.parse_args(argv)
    if args.markdown:
        print("| table (file) | sizes | worst < 1 MiB | worst ≥ 1 MiB | best single line, worst | target |\n"
              "|---|---|---|---|---|---|")
    else:
        print(f"{'table':<58} {'sizes':>5} {'<1MiB worst':>11} {'>=1MiB worst':>12} {'1-line worst':>12}  target")
    failures = 0
    for path in sorted(Path(args.traces).glob("*.txt")):
        try:
            parsed = parse_trace(str(path))
        except InputError:
            continue
        ranks = re.search(r"_(\d+)ranks_", path.name)  # OSU does not record it; the file name says
        tables, _notes = tables_from_parsed(parsed, osu_ranks=int(ranks.group(1)) if ranks else 2)
        for table in tables:
            sizes, errors, line_errors = held_out_errors(table)
            if not len(sizes):
                continue
            small, large = errors[sizes < MIB], errors[sizes >= MIB]
            worst_small = float(np.max(np.abs(small))) if len(small) else 0.0
            worst_large = float(np.max(np.abs(large))) if len(large) else 0.0
            ok = worst_small <= TARGET_SMALL and worst_large <= TARGET_LARGE
            failures += not ok
            label = f"{path.name} ({table['op']}, {table['ranks']} ranks)"
            if args.markdown:
                print(f"| `{path.name}` ({table['op']}, {table['ranks']} ranks) | {len(table['rows'])} | "
                      f"{worst_small:.1%} | {worst_large:.1%} | {float(np.max(np.abs(line_errors))):.1%} | "
                      f"{'ok' if ok else 'missed'} |")
                continue
            print(f"{label[:58]:<58} {len(table['rows']):>5} {worst_small:>11.1%} {worst_large:>12.1%} "
                  f"{float(np.max(np.abs(line_errors))):>12.1%}  {'ok' if ok else 'MISSED'}")
            if args.verbose:
                for size, err, line_err in zip(sizes, errors, line_errors):
                    print(f"    {int(size):>12} B  table {err:+7.1%}   one line {line_err:+8.1%}")
    print(f"\n{failures} table(s) missed the target (<= {TARGET_SMALL:.0%} below 1 MiB, <= {TARGET_LARGE:.0%} "
          "from 1 MiB, every held-out size)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
