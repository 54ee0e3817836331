"""The compute-profile fit and the measuring script."""

from __future__ import annotations

import os

import numpy as np
import pytest
import yaml

from simdist.calibrate.compute_profile import fit_linear, main, measure_profile, profile_document, write_profile
from simdist.errors import InputError
from simdist.training import OptimizerConfig, build_workload


def test_fit_recovers_known_line_within_two_percent():
    rng = np.random.default_rng(0)
    batch = np.array([8, 16, 32, 64, 128, 256, 400, 512])
    t0, t1 = 2e-4, 3e-6
    times = (t0 + t1 * batch) * (1 + 0.002 * rng.standard_normal(len(batch)))
    fit = fit_linear(batch, times)
    assert fit["t0_s"] == pytest.approx(t0, rel=0.02)
    assert fit["t1_s"] == pytest.approx(t1, rel=0.02)
    assert fit["r2"] > 0.999 and len(fit["residuals_s"]) == len(batch)
    exact = fit_linear([1, 2, 3], [1.0, 2.0, 3.0])
    assert exact["t0_s"] == pytest.approx(0.0, abs=1e-12) and exact["r2"] == pytest.approx(1.0)
    with pytest.raises(ValueError):
        fit_linear([4, 4], [1.0, 2.0])


def test_measure_and_write_profile(tmp_path):
    workload = build_workload("mlp", {}, "digits", {}, OptimizerConfig(), seed=0)
    profile = measure_profile(workload, [4, 32], repeats=3, warmup=1)
    assert all(t > 0 for t in profile["median_s"]) and profile["batch_sizes"] == [4, 32]
    profile.update(dataset="digits", options={"hidden": [128]})
    out = tmp_path / "profiles" / "host.yaml"
    write_profile(out, profile_document({"mlp": profile}, threads=1), "pytest")
    text = out.read_text()
    assert text.startswith("# Compute profile measured with real kernels") and "do not hand-edit" in text
    doc = yaml.safe_load(text)
    assert {"device", "description", "measured_at", "torch_version", "threads", "models"} <= set(doc)
    mlp = doc["models"]["mlp"]
    for key in ("t0_s", "t1_s", "forward_flops_per_sample", "r2", "dataset", "options", "batch_sizes", "median_s"):
        assert key in mlp
    assert mlp["options"] == {"hidden": [128]} and mlp["forward_flops_per_sample"] == 18944.0


def test_command_line_writes_a_profile(tmp_path):
    out = tmp_path / "p.yaml"
    assert main(["--out", str(out), "--models", "mlp", "--batch-sizes", "2,8", "--repeats", "2", "--warmup", "0"]) == 0
    assert set(yaml.safe_load(out.read_text())["models"]) == {"mlp"}
    assert main(["--out", str(out), "--models", "resnet"]) == 2


def test_profiles_are_parsed_once_and_reread_when_the_file_changes(tmp_path):
    from simdist.platform.compute import load_profiles

    path = tmp_path / "host.yaml"
    path.write_text("device: cpu-test\nmodels:\n  mlp: {t0_s: 0.001, t1_s: 0.0001}\n")
    first = load_profiles([path])
    assert load_profiles([path]) == first and first[("cpu-test", "mlp")].t0_s == 0.001
    path.write_text("device: cpu-test\nmodels:\n  mlp: {t0_s: 0.002, t1_s: 0.0001}\n")
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))  # coarse clocks
    assert load_profiles([path])[("cpu-test", "mlp")].t0_s == 0.002
    path.write_text("device: cpu-test\nmodels:\n  mlp: {t0_s: -1, t1_s: 0.0001}\n")
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 2 * 10**9))
    with pytest.raises(InputError, match="t0_s must be >= 0"):
        load_profiles([path])
