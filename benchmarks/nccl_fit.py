"""Fit the shared nccl-tests table and re-predict it (target: error <= 10 % for every size >= 1 MiB).

    python benchmarks/nccl_fit.py [FILE] [--link-size 64MiB]

FILE defaults to ``calibration/traces/nccl-tests_all_reduce_2x8xA100-40GB_roce.txt``
(2 nodes x 8 A100, RoCE; out-of-place times). Three predictions per size:

* ``piecewise`` — the collective model ``t = 30·α + 1.875·S/B`` (ring allreduce on 16
  ranks, busbw = algbw·2(n−1)/n) with one (α, B) per size regime found by the fit: the
  figure the target applies to;
* ``link`` — one regime for every size: the one holding ``--link-size``, whose values the
  platform overlay gets (the simulator has one latency and bandwidth per link);
* ``simulator`` — the simulator's own analytic ring allreduce
  (:func:`simdist.calibrate.collective_fit.simulated_allreduce_s`) on a 2 × 8 platform with
  that overlay: the end-to-end check that the link values mean what the fit says.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from simdist.calibrate.trace_fit import TraceOptions, fit_trace
from simdist.calibrate.traces import parse_trace
from simdist.units import format_bytes, parse_size

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ROOT / "calibration" / "traces" / "nccl-tests_all_reduce_2x8xA100-40GB_roce.txt"
TARGET, FROM = 0.10, 2**20


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("file", nargs="?", default=str(DEFAULT))
    parser.add_argument("--link-size", default="64MiB")
    args = parser.parse_args()
    report = fit_trace(parse_trace(args.file), TraceOptions(link_size_bytes=parse_size(args.link_size)))
    fit, table, (link,) = report.fit, report.table, report.links
    print(f"{report.parsed.description}\nmodel: {fit['model']} (hop latency, bus bandwidth per regime)\n")
    print(f"{'regime':>25} {'hop latency':>12} {'bus bandwidth':>14} {'worst error':>12}")
    for r in fit["regimes"]:
        span = f"{format_bytes(r['from_bytes'])} - {format_bytes(r['to_bytes'])}"
        bw = f"{r['bus_bandwidth_Bps'] / 1e9:.1f} GB/s" if r["bus_bandwidth_Bps"] else "inf"
        print(f"{span:>25} {r['hop_latency_s'] * 1e6:>9.2f} us {bw:>14} {r['max_relative_error']:>11.1%}")
    print(f"\nlink values written to the overlay: node.{link.field} latency {link.latency_s * 1e6:.2f} us, "
          f"bandwidth {link.bandwidth_Bps / 1e9:.1f} GB/s\n")
    print(f"{'size':>8} {'measured':>10} {'piecewise':>10} {'err':>7} {'link':>10} {'err':>7} {'simulator':>10} {'err':>7}")
    for _, r in table.iterrows():
        mark = "" if r["size_bytes"] < FROM else (" ok" if abs(r["piecewise_error"]) <= TARGET else " OVER")
        print(f"{format_bytes(r['size_bytes']):>8} {r['measured_s'] * 1e6:>8.1f}us {r['piecewise_s'] * 1e6:>8.1f}us "
              f"{r['piecewise_error']:>+7.1%} {r['link_s'] * 1e6:>8.1f}us {r['link_error']:>+7.1%} "
              f"{r['simulator_s'] * 1e6:>8.1f}us {r['simulator_error']:>+7.1%}{mark}")
    big = table["size_bytes"] >= FROM
    worst = float(np.abs(table.loc[big, "piecewise_error"]).max())
    regime = link.details["link_regime"]
    in_regime = (table["size_bytes"] >= regime["from_bytes"]) & (table["size_bytes"] <= regime["to_bytes"])
    sim = float(np.abs(table.loc[in_regime, "simulator_error"]).max())
    print(f"\nsizes >= 1 MiB: worst piecewise error {worst:.1%} vs target {TARGET:.0%}: ratio {worst / TARGET:.2f} "
          f"-> {'PASS' if worst <= TARGET else 'FAIL'}")
    print(f"simulator with the overlay, sizes of the link regime ({format_bytes(regime['from_bytes'])}"
          f" - {format_bytes(regime['to_bytes'])}): worst error {sim:.1%}; outside it the single "
          f"link regime is off by up to {float(np.abs(table['link_error']).max()):.0%} (see the table)")
    return 0 if worst <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
