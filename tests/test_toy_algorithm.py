"""An algorithm of one's own, written here, run through the same seam as the built-in ones.

``LocalAveraging`` (local SGD: every worker steps on its own gradient, and every ``period``
steps the workers average their parameters with an allreduce) is defined in this file only.
A scenario names it by import path (``algorithm: {name: "test_toy_algorithm:LocalAveraging"}``,
with ``workload.allow_code_import``), and ``simdist run`` simulates it and ``mpiexec`` runs it
for real, without a line of simdist knowing it. Both runs happen in processes of their own,
so this test session's registry stays as it was.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from pydantic import Field

from simdist.algorithms.base import AlgorithmConfig, PeerAlgorithm
from simdist.real.launch import mpi_available
from simdist.runtime.base import Runtime
from simdist.tracefile import span_events

HERE = Path(__file__).resolve().parent
PATH = f"{Path(__file__).stem}:LocalAveraging"


class LocalAveragingConfig(AlgorithmConfig):
    """Options of local SGD with periodic averaging."""

    period: int = Field(2, ge=1, description="average the workers' parameters every this many steps")


class LocalAveraging(PeerAlgorithm):
    """Local SGD: each worker steps alone; every ``period`` steps the parameters are averaged."""

    Config = LocalAveragingConfig

    def _worker(self, rt: Runtime, index: int):
        ctx, replica, data = self.ctx, self.replicas[index], self.data[index]
        group = rt.group(ctx.workers, "world")
        update_s = ctx.op_seconds(rt.rank, "update", ctx.workload.param_count)
        step = 0
        while (batch := data.next_batch(ctx.batch_size)) is not None:
            result = yield rt.compute(replica, batch)
            yield rt.busy(update_s, "update", run=lambda: replica.apply_gradient(result.grad))
            step += 1
            if step % self.config.period == 0:
                total = yield rt.allreduce(group, replica.params)
                replica.load(total / ctx.n_workers)
            rt.record("update", worker=rt.rank, step=step, version=step, staleness=0, batch_size=batch.size,
                      loss=result.loss)


def _scenario(tmp_path: Path, allow: bool = True) -> Path:
    data = {
        "name": "toy", "seed": 1,
        "platform": {"nodes": 1, "node": {"devices": 2}},
        "workload": {"model": {"name": "mlp", "hidden": [16]}, "dataset": "digits", "batch_size": 64,
                     "allow_code_import": allow},
        "algorithm": {"name": PATH, "period": 3},
        "stop": {"steps": 12},
    }
    path = tmp_path / "toy.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _simdist(*words: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "simdist", *words], capture_output=True, text=True, env=env,
                          timeout=300)


def _allreduces(out: Path) -> pd.Series:
    """Allreduces per rank in the run's timeline (their data phases: a wait before one is a span of its own)."""
    return pd.Series([e["tid"] for e in span_events(out) if e["name"] == "allreduce" and e["cat"] == "comm"
                      and not e.get("args", {}).get("nonblocking")]).value_counts()


def test_an_algorithm_of_one_s_own_runs_in_the_simulator(tmp_path):
    done = _simdist("run", str(_scenario(tmp_path)), "--out", str(tmp_path / "sim"), "--no-plots")
    assert done.returncode == 0, done.stderr
    steps = pd.read_csv(tmp_path / "sim" / "steps.csv")
    assert sorted(steps["worker"].unique()) == [0, 1] and steps.groupby("worker")["step"].max().min() >= 6
    assert (steps["staleness"] == 0).all()
    assert (_allreduces(tmp_path / "sim") == steps.groupby("worker")["step"].max().min() // 3).all()
    ledger = pd.read_csv(tmp_path / "sim" / "ledger.csv")
    assert (ledger.loc[ledger["step"] > 0, "update"] > 0).all()  # its own work is charged like anyone's


def test_importing_an_algorithm_needs_the_scenario_s_permission(tmp_path):
    done = _simdist("run", str(_scenario(tmp_path, allow=False)), "--out", str(tmp_path / "sim"))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert "algorithm.name" in line and "allow_code_import" in line
    assert not (tmp_path / "sim").exists()


@pytest.mark.parametrize("name, says", [("test_toy_algorithm:Missing", "has no attribute"),
                                        ("no_such_module_here:Thing", "cannot import module"),
                                        ("test_toy_algorithm:LocalAveragingConfig", "subclass")])
def test_a_bad_algorithm_import_path_is_one_line(tmp_path, name, says):
    path = _scenario(tmp_path)
    path.write_text(path.read_text().replace(PATH, name))
    done = _simdist("run", str(path), "--out", str(tmp_path / "sim"))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert "algorithm.name" in line and says in line


@pytest.mark.skipif(mpi_available() is not None, reason=f"no MPI here: {mpi_available()}")
def test_the_same_algorithm_runs_for_real_under_mpiexec(tmp_path, monkeypatch):
    from simdist.real.launch import run_real

    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]))
    out = run_real(_scenario(tmp_path), 2, tmp_path / "real", timeout_s=120, plots=False)
    steps = pd.read_csv(out / "steps.csv")
    assert sorted(steps["worker"].unique()) == [0, 1]
    assert (_allreduces(out) == steps.groupby("worker")["step"].max().min() // 3).all()
