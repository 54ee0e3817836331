"""Run the variants of a scenario side by side and overlay their results.

A scenario may list ``compare:`` variants, each a label and the fields it changes::

    compare:
      - {label: sync, set: {algorithm: {name: sync}}}
      - {label: nsoftsync-n2, set: {algorithm: {name: nsoftsync, n: 2}}}
      - {label: dbs-8-workers, set: {workers: 8, platform.node.devices: 9}}

``simdist compare SCENARIO --out DIR`` runs every variant (same seed, same data order) into
``DIR/<label>/`` (the usual result directory), then writes ``DIR/compare.csv`` (one row per
variant: label + summary) and ``DIR/plots/`` (accuracy against virtual time and against steps,
staleness distributions overlaid). Plots read the written results; nothing is simulated twice.
"""

from __future__ import annotations

import copy
import os
import tempfile
from pathlib import Path
from typing import Callable

import pandas as pd

from .errors import InputError
from .metrics import SUMMARY_KEYS, summarize
from .plots import plot_comparison
from .results import load_result_dir, write_result_dir
from .scenario import Scenario, apply_overrides, read_scenario_file, scenario_from_dict, set_dotted
from .simulate import Progress, simulate

__all__ = ["variant_scenarios", "run_comparison"]


def variant_scenarios(path: str | Path, overrides: list[str] | None = None,
                      only: list[str] | None = None) -> list[tuple[str, Scenario]]:
    """(label, validated scenario) of every ``compare`` variant of the scenario file at ``path``."""
    path = Path(path)
    data = apply_overrides(read_scenario_file(path), list(overrides or []))
    base = scenario_from_dict(copy.deepcopy(data), source=str(path), base_dir=path.parent)
    if not base.compare:
        raise InputError("has no 'compare' variants; add a list of {label, set} or use 'simdist run'",
                         source=str(path), field="compare")
    labels = [p.label for p in base.compare]
    unknown = sorted(set(only or []) - set(labels))
    if unknown:
        raise InputError(f"no variant labelled {unknown[0]!r}; labels: {', '.join(labels)}", source="--only")
    variants = []
    for i, point in enumerate(base.compare):
        if only and point.label not in only:
            continue
        variant = copy.deepcopy(data)
        variant.pop("compare", None)
        for key, value in point.set.items():
            set_dotted(variant, key, copy.deepcopy(value))
        try:
            scenario = scenario_from_dict(variant, source=str(path), base_dir=path.parent)
        except InputError as exc:
            raise InputError(f"variant {point.label!r}: {exc.message}", source=exc.source,
                             field=f"compare[{i}].set -> {exc.field}" if exc.field else f"compare[{i}].set") from None
        variants.append((point.label, scenario.model_copy(update={"name": f"{scenario.name}-{point.label}"})))
    return variants


def _write_csv_atomically(table: pd.DataFrame, path: Path) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    os.close(fd)
    try:
        table.to_csv(tmp, index=False, float_format="%.12g")
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def run_comparison(path: str | Path, out_dir: str | Path, *, overrides: list[str] | None = None,
                   only: list[str] | None = None, overwrite: bool = False, plots: bool = True,
                   progress: Callable[[str], Progress | None] | None = None,
                   announce: Callable[[str], None] | None = None) -> Path:
    """Simulate every variant into ``out_dir/<label>/`` and write ``compare.csv`` and overlay plots."""
    out = Path(out_dir)
    variants = variant_scenarios(path, overrides, only)
    for label, _ in variants:  # refuse before simulating anything
        target = out / label
        if target.exists() and any(target.iterdir()) and not overwrite:
            raise InputError(f"result directory {str(target)!r} already exists; pass --overwrite to replace it",
                             source="--out")
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for label, scenario in variants:
        result = simulate(scenario, progress=progress(label) if progress else None)
        write_result_dir(result, out / label, overwrite=overwrite, plots=plots and scenario.outputs.plots)
        rows.append({"label": label, **summarize(result)})
        if announce:
            announce(label)
    _write_csv_atomically(pd.DataFrame(rows, columns=["label", *SUMMARY_KEYS]), out / "compare.csv")
    if plots:
        plot_comparison([load_result_dir(out / label) for label, _ in variants], out / "plots")
    return out
