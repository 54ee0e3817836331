"""NNT against synchronous SGD on the NNT paper's kind of CPU cluster: epoch time, ordering, ledger.

The NNT paper (docs/algorithms.md §7: ResNet-18 on CIFAR-10, 16 CPU nodes, an Ethernet-class
network) reports that Nearest-Neighbours Training "is less hurt than sync by large per-node
batches (1024), while sync SGD remains fastest at batch 128". Read per epoch, which is what a
timing-only run can check (it has no accuracy, so the paper's convergence claims are not
checked here): sync SGD is the faster at per-node batch 128 and 1024, and NNT only draws level
at batch 32. This benchmark runs
``scenarios/nnt_paper_cpu_cluster.yaml`` (timing-only, one epoch of CIFAR-10's 50,000 images
less a 10 % validation split, the same for every algorithm;
16 dual-socket Skylake nodes on 10 Gigabit Ethernet; every cost from its cited source, none
fitted to the paper) for each per-node batch with ``nnt`` (ring), ``sync`` (ring allreduce)
and ``asgd`` (one parameter server on a 17th node), and reports

* the time of the epoch (virtual seconds) and the ordering of the three algorithms;
* NNT against sync per batch, next to the paper's ordering, and whether they agree
  ("level": the two epoch times within ``LEVEL_TOLERANCE`` of the slower one, a definition
  of the word, not a fitted value);
* each algorithm's time ledger (``simdist.ledger``): per worker, the seconds of the epoch spent
  in each part (data, forward_backward, pack, comm_cpu, comm_wire, wait, unpack, update,
  eval), averaged over the workers, and for the parameter server its own; and, per batch, the
  parts in which NNT's epoch differs most from sync's, so a reader sees where NNT's time goes;
* how robust the NNT-vs-sync ordering is to the two figures the paper's text does not fix here
  (``ROBUSTNESS``): the same runs on 1 Gigabit Ethernet, and on nodes computing half as fast.
  These are checks of the conclusion, not alternatives to pick from.

It prints a progress line per run and writes the Markdown report (default
``reports/nnt_vs_sync.md``). ``--measure-loading`` instead times the per-sample CIFAR-10
augmentation the scenario's ``workload.data_loading.per_sample`` comes from.

    python benchmarks/nnt_vs_sync.py [--batches 32 128 1024] [--out reports/nnt_vs_sync.md] [--no-robustness]
    python benchmarks/nnt_vs_sync.py --measure-loading
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Iterable, Mapping

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SCENARIO = ROOT / "scenarios" / "nnt_paper_cpu_cluster.yaml"
DEFAULT_REPORT = ROOT / "reports" / "nnt_vs_sync.md"
ALGORITHMS = ("nnt", "sync", "asgd")
BATCHES = (32, 128, 1024)
# Who has the shorter epoch, NNT or sync, as the paper reports it (docs/algorithms.md §7).
PAPER_FASTER = {32: "level", 128: "sync", 1024: "sync"}
PAPER_QUOTE = ("docs/algorithms.md §7, the NNT paper's CPU cluster (ResNet-18 on CIFAR-10, 16 CPU nodes, "
               "Ethernet-class network): NNT \"is less hurt than sync by large per-node batches (1024), while "
               "sync SGD remains fastest at batch 128\". Read per epoch, which is what a timing-only run can check "
               "(it has no accuracy, so convergence is not compared): sync is the faster at per-node batch 128 "
               "and 1024, and NNT only draws level at batch 32.")
LEVEL_TOLERANCE = 0.10  # "draws level": the faster epoch is within 10% of the slower one
LEDGER_PARTS = ("data", "forward_backward", "pack", "comm_cpu", "comm_wire", "wait", "unpack", "update", "eval")
# Stand-ins the paper's cluster might differ in, run for NNT and sync only: label -> overrides.
ROBUSTNESS = {
    "1 Gigabit Ethernet (1000BASE-T, TCP/IPv4 goodput 941.5 Mb/s)": ["platform.node.nic_link.bandwidth=0.9415Gbps"],
    "nodes computing half as fast (device speed 0.5)": ["platform.node.device.speed=0.5"],
}


# --------------------------------------------------------------------------- pure functions


def faster(nnt_s: float, sync_s: float, tolerance: float = LEVEL_TOLERANCE) -> str:
    """``"level"`` when the two epoch times differ by at most ``tolerance`` of the slower one,
    else the algorithm with the shorter epoch (``"nnt"`` or ``"sync"``)."""
    if abs(nnt_s - sync_s) <= tolerance * max(nnt_s, sync_s):
        return "level"
    return "nnt" if nnt_s < sync_s else "sync"


def ordering(epoch_s: Mapping[str, float]) -> list[str]:
    """Algorithms from the shortest epoch to the longest (ties by name)."""
    return sorted(epoch_s, key=lambda name: (epoch_s[name], name))


def verdict_rows(epoch_s: Mapping[int, Mapping[str, float]], paper: Mapping[int, str] = PAPER_FASTER,
                 tolerance: float = LEVEL_TOLERANCE) -> list[dict]:
    """Per batch: NNT's and sync's epoch, their ratio, who is faster here and in the paper, and
    whether the two agree (a batch the paper does not cover has ``paper`` and ``agrees`` None)."""
    rows = []
    for batch in sorted(epoch_s):
        times = epoch_s[batch]
        simulated = faster(times["nnt"], times["sync"], tolerance)
        reported = paper.get(batch)
        rows.append({"batch": batch, "nnt_s": times["nnt"], "sync_s": times["sync"],
                     "ratio": times["nnt"] / times["sync"], "simulated": simulated, "paper": reported,
                     "agrees": None if reported is None else simulated == reported})
    return rows


def mean_parts(ledger: pd.DataFrame, ranks: Iterable[int]) -> dict[str, float]:
    """Seconds of the run each of ``ranks`` spent in each ledger part, averaged over those ranks."""
    ranks = list(ranks)
    rows = ledger[ledger["rank"].isin(ranks)]
    per_rank = rows.groupby("rank")[list(LEDGER_PARTS)].sum().reindex(ranks, fill_value=0.0)
    return {part: float(per_rank[part].mean()) for part in LEDGER_PARTS}


def part_differences(nnt: Mapping[str, float], sync: Mapping[str, float], top: int = 3) -> list[tuple[str, float]]:
    """The ``top`` ledger parts in which NNT's epoch differs most from sync's: (part, NNT − sync seconds),
    largest absolute difference first; parts that differ by nothing are left out."""
    differences = [(part, nnt.get(part, 0.0) - sync.get(part, 0.0)) for part in LEDGER_PARTS]
    differences = [d for d in differences if d[1] != 0.0]
    return sorted(differences, key=lambda d: (-abs(d[1]), d[0]))[:top]


# --------------------------------------------------------------------------- the runs


def point_overrides(algorithm: str, batch: int, extra: Iterable[str] = ()) -> list[str]:
    """Scenario overrides of one point; the parameter server gets a node of its own."""
    overrides = [f"algorithm={algorithm}", f"workload.batch_size={batch}", *extra]
    return overrides + (["platform.nodes=17"] if algorithm == "asgd" else [])


def run_point(scenario: Path, algorithm: str, batch: int, extra: Iterable[str] = ()) -> dict:
    """One simulated epoch: its virtual time, the workers' mean ledger parts and any server's."""
    from simdist.ledger import ledger_table
    from simdist.metrics import spans_table
    from simdist.scenario import load_scenario
    from simdist.simulate import simulate

    started = time.perf_counter()
    result = simulate(load_scenario(scenario, overrides=point_overrides(algorithm, batch, extra)))
    ledger = ledger_table(spans_table(result))
    servers = [r.rank for r in result.ranks if r.role != "worker"]
    return {"algorithm": algorithm, "batch": batch, "epoch_s": float(result.virtual_time_s),
            "status": result.status, "workers": mean_parts(ledger, result.workers),
            "server": mean_parts(ledger, servers) if servers else None, "param_count": result.extra["param_count"],
            "compute": next(iter(result.extra["compute_profiles"].values())),
            "wall_s": time.perf_counter() - started}


def run_all(scenario: Path, batches: Iterable[int], algorithms: Iterable[str] = ALGORITHMS,
            extra: Iterable[str] = (), label: str = "") -> list[dict]:
    """Every (batch, algorithm) point, printing a line per run."""
    points = [(batch, algorithm) for batch in batches for algorithm in algorithms]
    results = []
    for i, (batch, algorithm) in enumerate(points, 1):
        point = run_point(scenario, algorithm, batch, list(extra))
        print(f"[{i}/{len(points)}]{' ' + label if label else ''} batch {batch:>4} {algorithm:>4}: epoch "
              f"{point['epoch_s']:.3f} s ({point['status']}; {point['wall_s']:.1f} s wall)", flush=True)
        results.append(point)
    return results


# --------------------------------------------------------------------------- the report


def _epoch_table(results: list[dict]) -> dict[int, dict[str, float]]:
    table: dict[int, dict[str, float]] = {}
    for point in results:
        table.setdefault(point["batch"], {})[point["algorithm"]] = point["epoch_s"]
    return table


def _agrees(row: dict) -> str:
    return "—" if row["agrees"] is None else ("yes" if row["agrees"] else "**no**")


def _header_lines(first: dict, scenario: Path) -> list[str]:
    compute = first["compute"]
    where = scenario.relative_to(ROOT) if scenario.is_relative_to(ROOT) else scenario
    return ["# NNT against synchronous SGD on a 16-node CPU cluster", "",
            f"Generated by `python benchmarks/nnt_vs_sync.py` from `{where}` (timing-only, one epoch of CIFAR-10: "
            f"50,000 images less the 5,000 of the validation split NNT chooses on, 2,812 per node; ResNet-18, {first['param_count']:,} parameters; forward/backward "
            f"{compute['t0_s'] * 1e3:.2f} ms + {compute['t1_s'] * 1e3:.3f} ms per image per node, from "
            f"`{Path(compute['source']).name}`). No factor is fitted to the paper: every cost comes from the "
            "sources named in the scenario and the profile.", "", f"Paper: {PAPER_QUOTE}"]


def _epoch_lines(epochs: Mapping[int, Mapping[str, float]]) -> list[str]:
    lines = ["## Epoch time (virtual seconds) and ordering", "",
             "| batch per node | nnt | sync | asgd | ordering (fastest first) |", "|---:|---:|---:|---:|---|"]
    for batch, times in sorted(epochs.items()):
        lines.append(f"| {batch} | {times['nnt']:.3f} | {times['sync']:.3f} | {times['asgd']:.3f} | "
                     f"{' < '.join(ordering(times))} |")
    return lines


def _verdict_lines(verdicts: list[dict], tolerance: float) -> list[str]:
    lines = [f"## NNT against sync (\"level\": within {tolerance:.0%} of the slower epoch)", "",
             "| batch | nnt / sync | faster here | faster in the paper | agrees |", "|---:|---:|---|---|---|"]
    lines += [f"| {r['batch']} | {r['ratio']:.3f} | {r['simulated']} | {r['paper'] or '—'} | {_agrees(r)} |"
              for r in verdicts]
    judged = [r for r in verdicts if r["agrees"] is not None]
    if judged and all(r["agrees"] for r in judged):
        verdict = "the paper's NNT-vs-sync ordering comes out at every batch it reports."
    else:
        verdict = ("the ordering differs from the paper's at batch "
                   + ", ".join(str(r["batch"]) for r in judged if not r["agrees"])
                   + "; the parts below say where the time goes.")
    return lines + ["", f"Verdict: {verdict}"]


def _difference_lines(results: list[dict]) -> list[str]:
    by_key = {(p["batch"], p["algorithm"]): p for p in results}
    lines = ["## Where the time goes", "",
             "Parts in which NNT's epoch differs most from sync's (per worker, seconds of the epoch):", ""]
    for batch in sorted({p["batch"] for p in results}):
        nnt, sync = by_key[(batch, "nnt")], by_key[(batch, "sync")]
        text = ", ".join(f"{part} {delta:+.3f} s" for part, delta in part_differences(nnt["workers"], sync["workers"]))
        evaluation_s = nnt["workers"]["eval"]
        lines.append(f"* batch {batch}: NNT − sync: {text}. NNT's epoch-end evaluation is "
                     f"{evaluation_s / nnt['epoch_s']:.0%} of its epoch; NNT's epoch less it is "
                     f"{nnt['epoch_s'] - evaluation_s:.3f} s, against sync's {sync['epoch_s']:.3f} s")
    return lines + ["", "NNT's evaluation (every replica on the test set, then all restart from the best one) is "
                    "part of its protocol (docs/algorithms.md §7) and costs a forward pass over the test images; "
                    "sync's replicas are identical and need no such step, so the runs charge it none."]


def _ledger_lines(results: list[dict]) -> list[str]:
    lines = ["Time ledger per algorithm (seconds of the epoch per worker, mean over the 16 workers; the parameter "
             "server's own row for asgd; `simdist.ledger`):", "",
             "| batch | algorithm | ranks | epoch s | " + " | ".join(LEDGER_PARTS) + " |",
             "|---:|---|---|---:|" + "---:|" * len(LEDGER_PARTS)]
    for point in results:
        for who, parts in (("workers (mean)", point["workers"]), ("server", point["server"])):
            if parts is not None:
                lines.append(f"| {point['batch']} | {point['algorithm']} | {who} | {point['epoch_s']:.3f} | "
                             + " | ".join(f"{parts[p]:.3f}" for p in LEDGER_PARTS) + " |")
    return lines


def _robustness_lines(variants: Mapping[str, list[dict]], tolerance: float) -> list[str]:
    lines = ["## Robustness of the ordering", "",
             "The paper's node model and network speed are stand-ins here (see the scenario's header); the same NNT "
             "and sync runs with each changed alone:", "",
             "| variant | batch | nnt s | sync s | nnt / sync | faster here | faster in the paper | agrees |",
             "|---|---:|---:|---:|---:|---|---|---|"]
    for label, results in variants.items():
        lines += [f"| {label} | {r['batch']} | {r['nnt_s']:.3f} | {r['sync_s']:.3f} | {r['ratio']:.3f} | "
                  f"{r['simulated']} | {r['paper'] or '—'} | {_agrees(r)} |"
                  for r in verdict_rows(_epoch_table(results), tolerance=tolerance)]
    return lines


def render_report(results: list[dict], scenario: Path, tolerance: float = LEVEL_TOLERANCE,
                  variants: Mapping[str, list[dict]] | None = None) -> str:
    """The Markdown report of a set of runs (pure: reads only ``results`` and the ``variants`` runs)."""
    epochs = _epoch_table(results)
    sections = [_header_lines(results[0], scenario), _epoch_lines(epochs),
                _verdict_lines(verdict_rows(epochs, tolerance=tolerance), tolerance),
                _difference_lines(results), _ledger_lines(results)]
    if variants:
        sections.append(_robustness_lines(variants, tolerance))
    return "\n\n".join("\n".join(section) for section in sections) + "\n"


# --------------------------------------------------------------------------- data loading figure


def measure_loading_s(batches: int = 100, batch: int = 256, seed: int = 0) -> float:
    """Seconds one CIFAR-10 training sample's load + augmentation takes on one core, as torchvision's
    usual CIFAR transform does it per sample (RandomCrop(32, padding=4), RandomHorizontalFlip,
    ToTensor, Normalize), here in torch ops on an in-memory uint8 array; the fastest of ``batches``
    batches of ``batch`` samples (other processes only slow a batch down)."""
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(1)
    rng = torch.Generator().manual_seed(seed)
    images = torch.randint(0, 256, (50_000, 3, 32, 32), dtype=torch.uint8, generator=rng)
    mean = torch.tensor([0.4914, 0.4822, 0.4465]).view(3, 1, 1)  # CIFAR-10 channel means and deviations
    std = torch.tensor([0.2470, 0.2435, 0.2616]).view(3, 1, 1)

    def sample(index: int) -> torch.Tensor:
        x = F.pad(images[index], (4, 4, 4, 4))
        dy, dx = torch.randint(0, 9, (2,), generator=rng).tolist()
        x = x[:, dy:dy + 32, dx:dx + 32]
        if torch.rand(1, generator=rng).item() < 0.5:
            x = x.flip(2)
        return (x.float().div_(255) - mean) / std

    def one_batch() -> float:
        started = time.perf_counter()
        torch.stack([sample(i) for i in torch.randint(0, 50_000, (batch,), generator=rng).tolist()])
        return time.perf_counter() - started

    one_batch()  # warm-up
    return min(one_batch() for _ in range(batches)) / batch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", type=Path, default=DEFAULT_SCENARIO)
    parser.add_argument("--batches", type=int, nargs="+", default=list(BATCHES))
    parser.add_argument("--out", type=Path, default=DEFAULT_REPORT, help="Markdown report to write")
    parser.add_argument("--no-robustness", dest="robustness", action="store_false",
                        help="skip the robustness runs (1 GbE network, nodes half as fast)")
    parser.add_argument("--measure-loading", action="store_true",
                        help="only time one CIFAR-10 sample's augmentation on one core and print it")
    args = parser.parse_args()
    if args.measure_loading:
        print(f"CIFAR-10 load + augmentation: {measure_loading_s() * 1e6:.1f} us per sample on one core")
        return
    started = time.perf_counter()
    scenario = args.scenario.resolve()
    results = run_all(scenario, args.batches)
    variants = {label: run_all(scenario, args.batches, ("nnt", "sync"), extra, label=label.split(" (")[0])
                for label, extra in ROBUSTNESS.items()} if args.robustness else {}
    report = render_report(results, scenario, variants=variants)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(report, encoding="utf-8")
    print(report)
    print(f"wrote {args.out} ({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
