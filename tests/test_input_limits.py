"""The input boundary: strict types, YAML rules, regular files only, physical ranges, divergence.

Each rule is checked at the level it lives (the YAML loader, the file reader, the scenario
model) and once through the command line, where it must be one line and exit status 2.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from simdist.cli import main
from simdist.errors import InputError
from simdist.inputfile import CAPS, read_input_bytes
from simdist.scenario import apply_overrides, scenario_from_dict
from simdist.scenario_files import set_dotted
from simdist.yamlio import MAX_DEPTH, parse_scalar, safe_load_limited

PROFILE = str((Path(__file__).parent / "data" / "tiny_profile.yaml").resolve())


def tiny(**changes) -> dict:
    data = {
        "name": "limits",
        "platform": {"preset": "laptop-cpu", "node": {"devices": 2}},
        "workload": {"model": {"name": "mlp", "hidden": [4]},
                     "dataset": {"name": "synthetic", "samples": 60, "features": 3, "classes": 2},
                     "batch_size": 4, "optimizer": {"name": "sgd", "lr": 0.1}},
        "algorithm": "sync",
        "stop": {"steps": 3},
        "compute": {"profiles": [PROFILE]},
        "outputs": {"plots": False, "trace": False},
    }
    for key, value in changes.items():
        set_dotted(data, key, value)
    return data


# -- YAML -------------------------------------------------------------------------------


def test_yaml12_floats_are_numbers_and_quoted_ones_stay_strings():
    data = safe_load_limited("a: 1e-3\nb: 2E6\nc: -1e5\nd: '1e3'\ne: 12\nf: 1.5")
    assert data == {"a": 0.001, "b": 2e6, "c": -1e5, "d": "1e3", "e": 12, "f": 1.5}
    assert parse_scalar("1e6") == 1e6 and parse_scalar("") == ""


def test_duplicate_keys_are_refused_with_both_lines():
    with pytest.raises(yaml.YAMLError, match=r"duplicate key 'lr' \(first at line 2\)"):
        safe_load_limited("opt:\n  lr: 0.1\n  lr: 0.2\n")


def test_nesting_is_bounded():
    safe_load_limited("[" * MAX_DEPTH + "]" * MAX_DEPTH)
    with pytest.raises(yaml.YAMLError, match="nested more than"):
        safe_load_limited("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1))


def test_set_path_depth_is_bounded():
    with pytest.raises(InputError, match="at most") as err:
        apply_overrides({}, [".".join(["a"] * 500) + "=1"])
    assert err.value.source == "--set"


# -- files --------------------------------------------------------------------------------


def test_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "scenario.yaml"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match="FIFO"):
        read_input_bytes(fifo, "scenario")


def test_character_device_is_refused():
    with pytest.raises(InputError, match="character device"):
        read_input_bytes("/dev/zero", "scenario")


def test_directory_is_refused(tmp_path):
    with pytest.raises(InputError, match="is a directory"):
        read_input_bytes(tmp_path, "scenario")


def test_oversized_file_is_refused_by_size(tmp_path):
    big = tmp_path / "big.yaml"
    big.write_bytes(b"#" * (CAPS["scenario"] + 1))
    with pytest.raises(InputError, match="at most"):
        read_input_bytes(big, "scenario")


def test_proc_file_reporting_size_zero_is_read_up_to_the_cap():
    data = read_input_bytes("/proc/self/status", "scenario")
    assert b"Name:" in data


@pytest.mark.parametrize("path", ["/dev/zero", "FIFO"])
def test_cli_refuses_devices_and_fifos_fast(path, tmp_path):
    if path == "FIFO":
        path = str(tmp_path / "pipe.yaml")
        os.mkfifo(path)
    done = subprocess.run([sys.executable, "-m", "simdist", "run", path, "--out", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    line, = done.stderr.strip().splitlines()
    assert "regular file" in line and "Traceback" not in done.stderr
    assert not (tmp_path / "out").exists()


# -- strict types and ranges ---------------------------------------------------------------

@pytest.mark.parametrize("key, value, phrase", [
    ("workload.batch_size", True, "must be an integer, got true (a boolean)"),
    ("workload.batch_size", 8.0, "must be an integer, got 8.0 (a float)"),
    ("platform.nodes", 1e6, "must be an integer"),
    ("platform.nodes", 4e9, "must be an integer"),
    ("workload.optimizer.lr", float("inf"), "finite"),
    ("workload.optimizer.lr", float("nan"), "finite"),
    ("workload.optimizer.lr", 1e308, "less than or equal to 1000000"),
    ("workload.optimizer.lr", "0.1", "must be a number, got '0.1' (a string)"),
    ("platform.node.cores", 1e-300, "greater than or equal to 0.01"),
    ("platform.node.intra_link.bandwidth", float("inf"), "bandwidth"),
    ("platform.node.intra_link.bandwidth", "1e20GBps", "between"),
    ("platform.node.intra_link.latency", "2h", "between"),
    ("evaluation.every_time", 1e-300, "between 1e-09 s"),
    ("platform.node.device.speed", 1e-300, "greater than or equal to 0.001"),
    ("compute.noise_sigma", True, "must be a number"),
])
def test_invalid_values_are_refused_naming_the_field(key, value, phrase):
    data = tiny()
    if key.startswith("platform.node.intra_link."):
        data["platform"]["node"]["intra_link"] = {"kind": "shm", key.rsplit(".", 1)[1]: value}
    else:
        data = tiny(**{key: value})
    with pytest.raises(InputError) as err:
        scenario_from_dict(data, source="s.yaml")
    assert key.rsplit(".", 1)[0] in str(err.value) and phrase in str(err.value)


def test_platform_with_more_than_a_million_devices_is_refused():
    with pytest.raises(InputError, match="at most 1048576"):
        scenario_from_dict(tiny(**{"platform.nodes": 1_000_000, "platform.node.devices": 4}), source="s.yaml")


def test_integers_still_go_where_floats_go():
    scenario = scenario_from_dict(tiny(**{"workload.optimizer.lr": 1, "compute.noise_sigma": 0}))
    assert scenario.workload.optimizer.lr == 1.0


# -- divergence ----------------------------------------------------------------------------


def test_a_diverging_run_stops_with_status_diverged_and_no_nan_in_outputs(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(tiny(**{"workload.optimizer.lr": 1e5, "stop.steps": 40})))
    assert main(["run", str(path), "--out", str(tmp_path / "out"), "--quiet"]) == 0
    summary = json.loads((tmp_path / "out" / "summary.json").read_text(),
                         parse_constant=lambda c: pytest.fail(f"{c} in summary.json"))
    assert summary["status"] == "diverged" and summary["steps"] < 40
    for name in ("steps.csv", "evals.csv", "workers.csv"):
        text = (tmp_path / "out" / name).read_text().lower()
        assert "nan" not in text and "inf" not in text, name


def test_a_sweep_grid_of_millions_of_points_is_refused_before_expanding():
    grid = {f"seed{i}": list(range(30)) for i in range(6)}
    with pytest.raises(InputError, match="729,000,000 points") as err:
        scenario_from_dict(tiny(sweep={"grid": grid}), source="s.yaml")
    assert err.value.field == "sweep"


def test_lone_surrogates_are_not_text():
    with pytest.raises(yaml.YAMLError, match="lone surrogate"):
        safe_load_limited('description: "\\udc80"')


def test_too_few_samples_for_the_workers_names_the_scenario(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(tiny(**{"workload.dataset.samples": 2})))
    assert main(["run", str(path), "--out", str(tmp_path / "out"), "--quiet"]) == 2
    line, = capsys.readouterr().err.strip().splitlines()
    assert str(path) in line and "workload.dataset" in line and "cannot be shared by 2 workers" in line


def test_a_model_of_thousands_of_layers_is_refused():
    with pytest.raises(InputError, match="at most 1024 items") as err:
        scenario_from_dict(tiny(**{"workload.model": {"name": "mlp", "hidden": [1] * 2000}}), source="s.yaml")
    assert "workload.model.hidden" in str(err.value)


def test_a_link_degraded_below_a_millionth_is_refused():
    faults = {"link_degradation": [{"links": ["*"], "factor": 5e-324, "start": 0.0}]}
    with pytest.raises(InputError, match="greater than or equal to 0.000001") as err:
        scenario_from_dict(tiny(faults=faults), source="s.yaml")
    assert "faults.link_degradation[0].factor" in str(err.value)


def test_a_profile_name_too_long_for_the_filesystem_is_an_input_error(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(tiny(compute={"profiles": ["x" * 5000]})))
    assert main(["run", str(path), "--out", str(tmp_path / "out"), "--quiet"]) == 2
    line, = capsys.readouterr().err.strip().splitlines()
    assert "compute.profiles[0]" in line and "not found" in line


def test_reading_a_small_file_does_not_reserve_the_cap(tmp_path):
    """Under an address-space limit below the 512 MiB trace cap a small trace still reads: the reader
    does not ask for cap + 1 bytes up front (a worker with ulimit -v failed with MemoryError)."""
    small = tmp_path / "trace.txt"
    small.write_text("# OSU\n")
    code = ("import resource, sys; from simdist.inputfile import read_input_bytes; "
            "vm = int(next(l for l in open('/proc/self/status') if l.startswith('VmSize')).split()[1]) * 1024; "
            "resource.setrlimit(resource.RLIMIT_AS, (vm + (256 << 20), resource.RLIM_INFINITY)); "
            "sys.stdout.write(read_input_bytes(sys.argv[1], 'trace').decode())")
    done = subprocess.run([sys.executable, "-c", code, str(small)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "# OSU\n"
