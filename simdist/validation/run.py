"""Real run vs simulation of one scenario: ``validation.csv``, a summary and a timeline overlay.

:func:`validate` runs the scenario for real under mpiexec (:mod:`simdist.real.launch`), with the ranks
placed on the host's cores (:mod:`simdist.real.placement`), then simulates it with the same seed and data
order on ``laptop-cpu`` described as the real run was: the same cores shared the same way,
and a compute profile, host work, server work and link calibrated either from a short *pilot*
run of the same scenario and placement launched first (``calibrate="pilot"``, the default:
:mod:`simdist.real.pilot`; the compared run lends the simulation nothing) or from timings around the
compared run plus its own CPU accounting (``calibrate="isolated"``: :mod:`simdist.real.calibration`).
Then it compares the two result directories iteration by iteration (:mod:`.tables`):

* ``validation.csv``: per worker and iteration, measured and predicted iteration time,
  compute, comm, wait, staleness and loss, and the iteration time's % error;
* ``validation_ledger.csv`` (and ``ledger`` in the summary): the two runs' time ledgers
  (:mod:`simdist.ledger`) part by part — mean seconds per step of every part over the
  workers, measured and predicted, the error and the part's share of the real step;
* summary (``validation.json``): median and p90 absolute % error of iteration time (the
  first iteration of every worker left out: it pays one-off costs — communicator creation,
  first-touch allocations — that are not the steady state the simulator models), error of
  total time, final-loss difference at the common step budget, the largest per-step loss
  difference (sync: the same math, so float noise only), mean staleness of both runs; and
  what the simulation was given (``calibration``) and how busy the host was with other work
  during the real run (``host_foreign_load_cores``, from ``/proc/stat``);
* with ``repeat_real``, a second real run of the same scenario, seed and placement
  (``real-again/``, ``validation_real_again.csv``) compared with the first in the same way
  (:func:`~.tables.repeatability`): how far the machine repeats itself iteration by iteration, the
  floor under any prediction's per-iteration error;
* a diagnostic, ``replay``: the comparison repeated with the simulation given the compute cost
  the real run itself measured (its forward/backwards' CPU time, and the CPU other processes
  took from it; ``sim_replay/``, ``validation_replay.csv``). Not a prediction: it shows what
  is left once the compute model is out of the question.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Sequence

import pandas as pd

from ..errors import InputError
from ..ledger import compare_ledgers
from ..outdir import check_out_dir, open_container, write_file_atomically, write_text_atomically
from ..real.pilot import PILOT_WARMUP
from ..resources import shipped_file
from .tables import compare, plot_timelines, repeatability, summarize

__all__ = ["validate", "compare_run_ledgers", "StageProgress", "DEFAULT_OVERLAY", "CALIBRATION_REPEATS", "CALIBRATIONS"]

DEFAULT_OVERLAY = shipped_file("calibration/platforms/host-shm.yaml") or Path("calibration/platforms/host-shm.yaml")
CALIBRATION_REPEATS = 12  # timed forward/backwards per batch size and worker before the real run
StageProgress = Callable[[int, int, str], None]  # (stages done, stages in all, the stage starting now)
CALIBRATIONS = ("pilot", "isolated")  # where the simulation's figures come from (see validate)


def _simulate(scenario: str | Path, overrides: list[str], out: Path, plots: bool) -> Path:
    from ..results import write_result_dir
    from ..scenario import load_scenario
    from ..simulate import simulate

    return write_result_dir(simulate(load_scenario(scenario, overrides)), out, overwrite=True, plots=plots)


def _written_table(real_dir: Path, other_dir: Path, csv: Path) -> pd.DataFrame:
    """:func:`~.tables.compare` of the two runs, written to ``csv``."""
    table = compare(real_dir, other_dir)
    write_file_atomically(csv, lambda tmp: table.to_csv(tmp, index=False, float_format="%.9g"))
    return table


def compare_run_ledgers(real_dir: str | Path, other_dir: str | Path) -> pd.DataFrame | None:
    """Two result directories' time ledgers part by part (:func:`simdist.ledger.compare_ledgers`),
    over the real run's workers; None where either has no ``ledger.csv``."""
    ledgers = [Path(d) / "ledger.csv" for d in (real_dir, other_dir)]
    if not all(path.is_file() for path in ledgers):
        return None
    workers = [int(w) for w in pd.read_csv(Path(real_dir) / "workers.csv")["worker"]]
    return compare_ledgers(pd.read_csv(ledgers[0]), pd.read_csv(ledgers[1]), workers)


def _compared(real_dir: Path, sim_dir: Path, csv: Path) -> dict[str, Any]:
    """Compare the two runs, write the table to ``csv`` and their ledgers part by part beside it
    (``<csv stem>_ledger.csv``), return the summary (with ``ledger``: part, measured, predicted, error)."""
    summary = summarize(_written_table(real_dir, sim_dir, csv), real_dir, sim_dir)
    table = compare_run_ledgers(real_dir, sim_dir)
    if table is not None:
        out = csv.with_name(f"{csv.stem}_ledger.csv")
        write_file_atomically(out, lambda tmp: table.to_csv(tmp, index=False, float_format="%.9g"))
        summary["ledger"] = table.to_dict(orient="records")
    return summary


def _replay(scenario: str | Path, workload: Any, overrides: list[str], real_dir: Path, sim_dir: Path, out: Path,
            calibrated: dict[str, Any], plots: bool) -> dict[str, Any]:
    """The comparison again, the simulation given the compute cost the real run measured (a diagnostic).

    The profile is fitted to the CPU time of the run's own forward/backwards (plus the same host
    work per step), and where they ran slower in wall time than the simulated sharing of the
    cores predicts — other processes took CPU — every rank's speed is scaled down by the ratio.
    Only the compute model is taken from the run: whatever error is left is communication,
    waiting, sharing and the algorithm's dynamics.
    """
    from ..real.calibration import fit_run_compute, write_profile
    from ..real.describe import real_slowdown, sim_slowdown

    fit = fit_run_compute(real_dir, calibrated["forward_backward"])
    profile = write_profile(out / "calibration" / "host-cpu-replay.yaml", workload, fit,
                            calibrated["host_cpu_per_step_s"], calibrated["threads"],
                            "simdist validate (replay: forward/backward CPU time of the real run's own steps)")
    real = real_slowdown(real_dir)
    sim = sim_slowdown(sim_dir, calibrated["profile_t0_s"], calibrated["forward_backward"]["t1_s"])
    speed = min(1.0, sim / real) if real and sim else 1.0
    replay = _simulate(scenario, [*overrides, f"compute.profiles=[{profile.resolve()}]",
                                  f"platform.node.device.speed={speed:.6g}"], out / "sim_replay", plots)
    figures = _compared(real_dir, replay, out / "validation_replay.csv")
    keys = ("median_abs_iteration_error_pct", "p90_abs_iteration_error_pct", "predicted_total_s",
            "total_time_error_pct", "predicted_mean_staleness")
    return {"speed": speed, "forward_backward_t0_s": fit["t0_s"], "forward_backward_t1_s": fit["t1_s"],
            **{k: figures[k] for k in keys}}


def _real_again(real_dir: Path, again_dir: Path, load: Any, csv: Path) -> dict[str, Any]:
    """The second real run against the first (:func:`~.tables.repeatability`); the table goes to ``csv``."""
    table = _written_table(real_dir, again_dir, csv)
    first = json.loads((real_dir / "summary.json").read_text())
    second = json.loads((again_dir / "summary.json").read_text())
    t_first, t_again = float(first["virtual_time_s"]), float(second["virtual_time_s"])
    return {**repeatability(table), "dir": str(again_dir),
            "total_time_difference_pct": 100.0 * (t_again - t_first) / t_first if t_first > 0 else None,
            "mean_staleness": second.get("mean_staleness"),
            "host_foreign_load_cores": load.cores, "host_steal_cores": load.steal_cores}


def _checked(scenario: str | Path, overrides: list[str], profile: str | Path | None,
             overlay: str | Path | None) -> tuple[Any, Path | None]:
    """The loaded scenario and the network overlay, or an InputError naming what is wrong."""
    from ..scenario import load_scenario

    scenario_obj = load_scenario(scenario, list(overrides))
    if scenario_obj.workload.timing_only:
        raise InputError("real runs need tensors; timing_only is not supported", source=str(scenario),
                         field="workload.timing_only")
    if profile is not None and not Path(profile).is_file():
        raise InputError(f"compute profile {str(profile)!r} not found", source="--profile")
    overlay = Path(overlay) if overlay else (DEFAULT_OVERLAY if DEFAULT_OVERLAY.is_file() else None)
    if overlay is not None and not overlay.is_file():
        raise InputError(f"network overlay {str(overlay)!r} not found", source="--network-overlay")
    return scenario_obj, overlay


def _run_pilot(scenario: str | Path, scenario_obj: Any, ranks: int, out: Path, overrides: list[str],
               threads: int | None, affinity: str | None, iterations: int | None, timeout_s: float) -> dict[str, Any]:
    """The pilot run (:mod:`simdist.real.pilot`): the same scenario and placement, a few iterations per worker."""
    from ..real.describe import HostLoad
    from ..real.launch import run_real
    from ..real.pilot import PILOT_ITERATIONS, PILOT_REPEATS, pilot_steps

    steps = pilot_steps(scenario_obj, iterations or PILOT_ITERATIONS)
    with HostLoad() as load:
        run_real(scenario, ranks, out, overrides=[*overrides, f"stop.steps={steps}"], threads=threads,
                 affinity=affinity, timeout_s=timeout_s, plots=False, calibrate=PILOT_REPEATS)
    return {"steps": steps, "dir": str(out), "host_foreign_load_cores": load.cores,
            "host_steal_cores": load.steal_cores}


def validate(scenario: str | Path, ranks: int, out: str | Path, *, overrides: Sequence[str] = (),
             threads: int | None = None, affinity: str | None = "auto", overlay: str | Path | None = None,
             profile: str | Path | None = None, cores: float | None = None, calibrate: str = "pilot",
             pilot_iterations: int | None = None, pilot_runs: int = 2, repeat_real: bool = False,
             timeout_s: float = 600.0, plots: bool = True, progress: StageProgress | None = None) -> dict[str, Any]:
    """Real run + simulation of ``scenario`` on ``ranks`` ranks; writes ``out`` and returns the summary.

    ``affinity``: ``auto``, ``none`` or cores per rank (:func:`simdist.real.placement.plan`); the
    simulation is told the same sharing. ``calibrate``: ``pilot`` (default: a short real run
    of the same scenario and placement, launched first, calibrates the simulation; see
    :mod:`simdist.real.pilot`) or ``isolated`` (forward/backward and network timed around the compared
    run, host work read from its trace: quicker, and labelled so in the summary);
    ``pilot_iterations``: per worker (default :data:`simdist.real.pilot.PILOT_ITERATIONS`); ``pilot_runs``:
    1 (a pilot before the compared run) or 2 (default: one before and one after, whose figures
    are averaged, so that a host speed drifting steadily is bracketed, as the isolated timing
    brackets it). ``repeat_real``: run the scenario for real a second time, last, and compare
    the two real runs (summary ``real_again``, :func:`~.tables.repeatability`).
    ``profile``: a compute profile to simulate with instead of calibrating one; ``overlay``:
    the network fit used when the run is not calibrated (default host-shm.yaml); ``cores``:
    the cores per node the simulation shares among ranks, instead of what the placement gives.
    ``progress``: called as ``progress(done, total, stage)`` before each stage (pilot, real run,
    simulation ...), e.g. to draw a progress bar: a validation takes a minute or more.
    """
    from ..assembly import assemble_run
    from ..real.describe import HostLoad, describe_run, link_overrides, real_slowdown, sim_slowdown
    from ..real.launch import run_real
    from ..real.placement import plan, rank_spins

    if calibrate not in CALIBRATIONS:
        raise InputError(f"unknown calibration {calibrate!r}; known: {', '.join(CALIBRATIONS)}", source="--calibrate")
    if pilot_runs not in (1, 2):
        raise InputError(f"must be 1 or 2, got {pilot_runs}", source="--pilot-runs")
    if pilot_iterations is not None and pilot_iterations < PILOT_WARMUP + 2:
        raise InputError(f"must be at least {PILOT_WARMUP + 2} (the first {PILOT_WARMUP} are warm-up)",
                         source="--pilot-iterations")
    out = Path(out)
    check_out_dir(out, kind="validate", container=True)  # before anything runs
    overrides = [f"platform.node.devices={ranks}", *overrides, *([f"compute.threads={threads}"] if threads else [])]
    scenario_obj, overlay = _checked(scenario, overrides, profile, overlay)
    open_container(out, kind="validate")
    spec, n_threads = scenario_obj.platform, threads or scenario_obj.compute.threads
    placement = plan(affinity, ranks, nodes=spec.nodes, workers=range(scenario_obj.worker_count), threads=n_threads)
    piloted = profile is None and calibrate == "pilot"
    stage = _stages(progress, pilots=pilot_runs if piloted else 0, again=repeat_real, replay=profile is None)

    def pilot(name: str) -> dict[str, Any]:
        return _run_pilot(scenario, scenario_obj, ranks, out / name, overrides, threads, placement.affinity,
                          pilot_iterations, timeout_s)

    pilots = [stage("pilot run", pilot, "pilot")] if piloted else []

    def real_run(name: str, with_plots: bool) -> tuple[Path, HostLoad]:
        with HostLoad() as load:
            run_dir = run_real(scenario, ranks, out / name, overrides=overrides, threads=threads,
                               affinity=placement.affinity, timeout_s=timeout_s, plots=with_plots,
                               calibrate=0 if profile else CALIBRATION_REPEATS)
        return run_dir, load

    real_dir, load = stage("real run", real_run, "real", plots)
    if piloted and pilot_runs == 2:  # after the compared run too: the two bracket the host's drift
        pilots.append(stage("pilot run after", pilot, "pilot-after"))
    again = stage("real run again", real_run, "real-again", False) if repeat_real else None
    setup = assemble_run(scenario_obj)  # the workers and workload the simulation will have
    if profile is None:
        own_cores = all(rank_spins(r, ranks, placement.affinity) for r in range(scenario_obj.worker_count))
        profile, extra, figures = describe_run(scenario_obj, setup, real_dir, out, n_threads, overlay,
                                               [Path(p["dir"]) for p in pilots], wall_level=own_cores)
        if pilots:
            figures["pilot"] = pilots[0]
            figures.update({"pilot_after": pilots[1]} if len(pilots) > 1 else {})
    else:
        extra, figures = link_overrides(None, overlay, spec.nodes, spec.node.devices), \
            {"profile": str(profile)}
    sim_overrides = [*overrides, f"compute.profiles=[{Path(profile).resolve()}]", *placement.overrides(), *extra,
                     *(["platform.node.core_sets=null", f"platform.node.cores={cores:g}"] if cores else [])]
    sim_dir = stage("simulation", _simulate, scenario, sim_overrides, out / "sim", plots)
    summary = _compared(real_dir, sim_dir, out / "validation.csv")
    summary.update(affinity=placement.affinity or "not pinned", simulated_platform=placement.overrides(),
                   calibration=figures, host_foreign_load_cores=load.cores, host_steal_cores=load.steal_cores,
                   measured_compute_wall_over_cpu=real_slowdown(real_dir))
    if "profile_t0_s" in figures:
        summary["predicted_compute_wall_over_work"] = sim_slowdown(sim_dir, figures["profile_t0_s"],
                                                                   figures["forward_backward"]["t1_s"])
        summary["replay"] = stage("replay simulation", _replay, scenario, setup.workload, sim_overrides, real_dir,
                                  sim_dir, out, figures, plots)
    if again is not None:
        summary["real_again"] = _real_again(real_dir, *again, out / "validation_real_again.csv")
    write_text_atomically(out / "validation.json", json.dumps(summary, indent=2) + "\n")
    if plots:
        plot_timelines(real_dir, sim_dir, out / "timeline_overlay.png")
    stage.finish()
    return summary


class _Stages:
    """Runs a validation's stages one by one, telling ``progress`` which is next (and when all are done)."""

    def __init__(self, progress: StageProgress | None, total: int):
        self.progress, self.total, self.done = progress, total, 0

    def __call__(self, name: str, work: Callable[..., Any], *args: Any) -> Any:
        if self.progress is not None:
            self.progress(self.done, self.total, name)
        result = work(*args)
        self.done += 1
        return result

    def finish(self) -> None:
        if self.progress is not None:
            self.progress(self.total, self.total, "done")


def _stages(progress: StageProgress | None, *, pilots: int, again: bool, replay: bool) -> _Stages:
    """The stage runner of one validation: pilots, the real run (again), the simulation, its replay."""
    return _Stages(progress, pilots + 1 + int(again) + 1 + int(replay))
