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
from pathlib import Path
from typing import Any, Callable

import pandas as pd

from .errors import InputError
from .estimate import refuse_excess_work
from .metrics import SUMMARY_KEYS, summarize
from .outdir import check_out_dir, open_container, staged_dir, write_file_atomically
from .plots import plot_comparison
from .result_files import PLOTS_DIR, load_result_dir
from .results import write_result_dir
from .scenario import Scenario, apply_overrides, read_scenario_file, scenario_from_dict, set_dotted
from .simulate import Progress, simulate

__all__ = ["variant_scenarios", "run_comparison"]


def variant_scenarios(path: str | Path, overrides: list[str] | None = None,
                      only: list[str] | None = None, *,
                      data: dict[str, Any] | None = None) -> list[tuple[str, Scenario]]:
    """(label, validated scenario) of every ``compare`` variant of the scenario file at ``path``.

    ``data``: the scenario's mapping where it was not read from a file (the Python API); ``path``
    then only names it in messages and locates the files it refers to (its folder).
    """
    path = Path(path)
    data = read_scenario_file(path) if data is None else copy.deepcopy(data)
    data = apply_overrides(data, list(overrides or []))
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


def run_comparison(path: str | Path, out_dir: str | Path, *, overrides: list[str] | None = None,
                   only: list[str] | None = None, overwrite: bool = False, plots: bool = True,
                   progress: Callable[[str], Progress | None] | None = None,
                   announce: Callable[[str], None] | None = None, force: bool = False,
                   data: dict[str, Any] | None = None) -> Path:
    """Simulate every variant into ``out_dir/<label>/`` and write ``compare.csv`` and overlay plots.

    ``out_dir`` must be new, empty or a comparison folder (:mod:`simdist.outdir`); every
    variant's folder and work estimate (:mod:`simdist.estimate`; ``force`` skips it) are
    checked before anything is simulated. ``data``: the scenario's mapping where there is no file
    to read (:func:`variant_scenarios`).
    """
    out = Path(out_dir)
    variants = variant_scenarios(path, overrides, only, data=data)
    for _, scenario in variants:
        refuse_excess_work(scenario, force=force)
    check_out_dir(out, kind="compare", container=True)  # refuse before simulating anything
    for label, _ in variants:
        check_out_dir(out / label, kind="run", overwrite=overwrite)
    if plots:
        check_out_dir(out / PLOTS_DIR, kind="plots", regenerate=True)
    open_container(out, kind="compare")
    rows = []
    for label, scenario in variants:
        result = simulate(scenario, progress=progress(label) if progress else None)
        write_result_dir(result, out / label, overwrite=overwrite, plots=plots and scenario.outputs.plots)
        rows.append({"label": label, **summarize(result)})
        if announce:
            announce(label)
    table = pd.DataFrame(rows, columns=["label", *SUMMARY_KEYS])
    write_file_atomically(out / "compare.csv", lambda tmp: table.to_csv(tmp, index=False, float_format="%.12g"))
    if plots:
        with staged_dir(out / PLOTS_DIR, kind="plots", regenerate=True) as tmp:
            plot_comparison([load_result_dir(out / label) for label, _ in variants], tmp)
    return out
