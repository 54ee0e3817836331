"""``simdist calibrate ...`` handlers through argparse: files written, bad input one line + exit 2."""

from __future__ import annotations

import argparse
import importlib.util
import shutil
from pathlib import Path

import pytest
import torch
import yaml

from simdist.calibrate import compute_profile, network
from simdist.calibrate.cli import add_calibrate_parser, main
from simdist.platform.spec import PlatformSpec
from simdist.calibrate.provenance import verify_content
from simdist.errors import InputError

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT / "calibration" / "traces"
NCCL = TRACES / "nccl-tests_all_reduce_2x8xA100-40GB_roce.txt"
HAVE_MPI = shutil.which("mpiexec") is not None and importlib.util.find_spec("mpi4py") is not None


class OneLineParser(argparse.ArgumentParser):
    """Stands for the main CLI's parser class."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


def parse(argv):
    parser = OneLineParser(prog="simdist")
    add_calibrate_parser(parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser))
    return parser, parser.parse_args(argv)


def test_calibrate_parser_uses_the_callers_parser_class_and_sets_func():
    parser, args = parse(["calibrate", "trace", str(NCCL)])
    assert callable(args.func) and args.files == [str(NCCL)]
    sub = next(a for a in parser._subparsers._group_actions if isinstance(a, argparse._SubParsersAction))
    calibrate = sub.choices["calibrate"]
    assert isinstance(calibrate, OneLineParser)
    inner = next(a for a in calibrate._subparsers._group_actions if isinstance(a, argparse._SubParsersAction))
    assert set(inner.choices) == {"compute", "network", "trace", "cpu-share", "noise"}
    assert all(isinstance(p, OneLineParser) for p in inner.choices.values())
    with pytest.raises(SystemExit) as info:
        parse(["calibrate"])
    assert info.value.code == 2


def test_trace_handler_prints_the_error_table_and_writes_overlay_and_summary(tmp_path, capsys):
    out, summary = tmp_path / "o.yaml", tmp_path / "s.yaml"
    _, args = parse(["calibrate", "trace", str(NCCL), str(TRACES / "osu_bw_2nodes_tcp_ethernet.txt"),
                     "--out", str(out), "--summary", str(summary)])
    assert args.func(args) == 0
    printed = capsys.readouterr().out
    assert "piecewise" in printed and "simulator" in printed and "-> node.nic_link" in printed and "8GiB" in printed
    assert yaml.safe_load(out.read_text())["node"]["nic_link"]["kind"] == "ib-hdr"
    files = yaml.safe_load(summary.read_text())["files"]
    assert [f["format"] for f in files] == ["nccl-tests", "osu"] and len(files[0]["table"]) == 31
    assert verify_content(summary)


def test_trace_handler_errors_are_one_line(tmp_path, capsys):
    bad = tmp_path / "notes.txt"
    bad.write_text("just some notes\n")
    assert main(["calibrate", "trace", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and str(bad) in err and "unrecognised trace format" in err
    assert main(["calibrate", "trace", str(TRACES / "osu_bw_2nodes_tcp_ethernet.txt"), "--out", str(tmp_path / "x.yaml")]) == 2
    assert "none of the inputs gives link values" in capsys.readouterr().err
    assert main(["calibrate", "trace", str(NCCL), "--link-size", "lots"]) == 2
    assert "--link-size" in capsys.readouterr().err
    assert main(["calibrate", "trace", str(NCCL), "--nic-kind", "infiniband"]) == 2
    assert "unknown link kind 'infiniband'" in capsys.readouterr().err


def test_compute_handler_writes_a_profile_the_simulator_reads(tmp_path, capsys):
    from simdist.platform.compute import load_profiles

    out = tmp_path / "host.yaml"
    assert main(["calibrate", "compute", "--models", "mlp", "--batch-sizes", "8,256", "--repeats", "4",
                 "--rounds", "2", "--warmup", "1", "--out", str(out)]) == 0
    assert "wrote" in capsys.readouterr().out
    document = yaml.safe_load(out.read_text())
    assert document["device"] == "host-cpu" and document["timer"] == "perf_counter"
    mlp = document["models"]["mlp"]
    assert len(mlp["iqr_s"]) == 2 and mlp["samples"] == [4, 4] and "r2" in mlp
    assert document["provenance"]["generated_by"].startswith("simdist calibrate compute")
    assert document["versions"]["torch"] == torch.__version__.split("+")[0] or document["versions"]["torch"]
    timing = load_profiles([out])[("host-cpu", "mlp")]
    assert timing.t1_s == pytest.approx(mlp["t1_s"])
    assert main(["calibrate", "compute", "--models", "resnet"]) == 2
    assert "--models must be among" in capsys.readouterr().err


class FakeEvent:
    """torch.cuda.Event stand-in: records host time; elapsed_time in milliseconds."""

    recorded = 0

    def __init__(self, enable_timing=False):
        assert enable_timing
        self.t = None

    def record(self, stream=None):
        import time

        FakeEvent.recorded += 1
        self.t = time.perf_counter()

    def elapsed_time(self, end):
        return (end.t - self.t) * 1e3


def test_compute_cuda_path_with_cuda_mocked(tmp_path, monkeypatch):
    syncs = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: syncs.append(1))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(torch.version, "cuda", "12.4")
    monkeypatch.setattr(torch.backends.cudnn, "version", lambda: 90100)
    placed = []
    monkeypatch.setattr(compute_profile, "_place", lambda obj, device: placed.append(device) or obj)
    FakeEvent.recorded = 0
    out = tmp_path / "gpu.yaml"
    assert main(["calibrate", "compute", "--device", "auto", "--models", "mlp", "--batch-sizes", "8,256",
                 "--repeats", "3", "--rounds", "1", "--warmup", "1", "--out", str(out)]) == 0
    document = yaml.safe_load(out.read_text())
    assert document["device"] == "h100" and document["timer"] == "cuda-events"
    assert "NVIDIA H100 80GB HBM3" in document["description"] and "CUDA 12.4" in document["description"]
    assert document["versions"]["cuda"] == "12.4" and document["versions"]["cudnn"] == "90100"
    assert FakeEvent.recorded == 2 * 2 * 3 and syncs  # a start and an end event per timed step, then synchronize
    assert set(placed) == {"cuda"}  # model, batch and parameters were moved to the device
    assert all(t > 0 for t in document["models"]["mlp"]["median_s"])


def test_compute_cuda_requested_without_a_gpu_is_an_input_error(monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main(["calibrate", "compute", "--device", "cuda", "--models", "mlp"]) == 2
    assert "torch.cuda.is_available() is False" in capsys.readouterr().err


def test_network_without_mpiexec_is_an_input_error(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(network.shutil, "which", lambda name: None)
    with pytest.raises(InputError, match="mpiexec not found on PATH"):
        network.find_mpiexec()
    assert main(["calibrate", "network", "--out", str(tmp_path / "x.yaml")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pip install 'simdist[mpi]'" in err


@pytest.mark.skipif(not HAVE_MPI, reason="needs mpiexec on PATH and mpi4py (pip install 'simdist[mpi]')")
def test_network_runs_a_tiny_mpi_sweep(tmp_path, capsys):
    out = tmp_path / "host-shm.yaml"
    assert main(["calibrate", "network", "--ranks", "2", "--sizes", "0,1KiB,16KiB,64KiB,128KiB,256KiB,512KiB",
                 "--budget-s", "0.02", "--batches", "2", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "node.intra_link (shm)" in printed and "MPI sweep: 2 ranks on 1 host(s)" in printed
    document = yaml.safe_load(out.read_text())
    link = document["node"]["intra_link"]
    assert link["kind"] == "shm" and link["latency"] >= 0 and link["bandwidth"] > 1e8
    provenance = document["provenance"]
    assert provenance["generated_by"].startswith("simdist calibrate network --ranks 2")
    assert provenance["measurement"]["ranks"] == 2 and "MPICH" in provenance["measurement"]["mpi_library"]
    assert provenance["fits"]["intra_link"]["piecewise"]["regimes"]
    assert provenance["allreduce_check"]["per_size"]["size_bytes"]
    assert verify_content(out)


@pytest.mark.skipif(not HAVE_MPI, reason="needs mpiexec on PATH and mpi4py (pip install 'simdist[mpi]')")
def test_network_through_the_runtime_times_what_a_real_run_pays(tmp_path, capsys):
    sizes = "0,1KiB,64KiB,1MiB,4MiB"  # large sizes megabytes apart: under load 64-256 KiB were not told apart
    out = {}
    for path in ("mpi", "runtime"):
        out[path] = tmp_path / f"{path}.yaml"
        assert main(["calibrate", "network", "--ranks", "2", "--sizes", sizes, "--budget-s", "0.02", "--batches", "2",
                     "--path", path, "--out", str(out[path])]) == 0
    capsys.readouterr()
    measured = {path: yaml.safe_load(file.read_text())["provenance"] for path, file in out.items()}
    assert {path: m["measurement"]["path"] for path, m in measured.items()} == {"mpi": "mpi", "runtime": "runtime"}
    assert "--path runtime" in measured["runtime"]["generated_by"]

    def small_message_s(provenance):  # the fitted one-way time of a 1 KiB message
        per_size = provenance["fits"]["intra_link"]["per_size"]
        return per_size["measured_s"][per_size["size_bytes"].index(1024)]

    # a pickled, buffered send taken in by a matched probe costs more than MPI_Send/MPI_Recv alone
    assert small_message_s(measured["runtime"]) > small_message_s(measured["mpi"])
    assert verify_content(out["runtime"])
    # the runtime's send pickles and copies its payload, its receive unpickles it: both cost the CPU per
    # byte (LogGOPS O), measured from 1 MiB messages against 8 B ones, each taken in before the next is posted
    messages = yaml.safe_load(out["runtime"].read_text())["messages"]
    assert messages["send_overhead_per_byte"] > 0 and messages["recv_overhead_per_byte"] > 0
    large = measured["runtime"]["fits"]["intra_link"]["overheads"]["large"]
    assert large["size_bytes"] == 1 << 20 and large["drained"] and large["baseline"]["size_bytes"] == 8
    assert "each taken in before the next was posted, less those of 64 such messages of 8 B" in messages["source"]
    # the driver's turn between two requests: only the runtime has one, and a cold turn costs more
    calls = {path: yaml.safe_load(file.read_text()).get("calls") for path, file in out.items()}
    assert calls["mpi"] is None
    assert 0 < calls["runtime"]["overhead"] < calls["runtime"]["overhead_after_compute"]
    # how the runtime waits (test, sleep, test): its constants and the host's sleep overshoot; the library's path
    # waits inside MPI and has none
    loop = messages["wait_loop"]
    assert (loop["first_sleep"], loop["max_sleep"]) == (50e-6, 1e-3) and loop["sleep_overshoot"] >= 0
    assert "wait_loop" not in (yaml.safe_load(out["mpi"].read_text()).get("messages") or {})


def test_network_path_must_be_known(capsys, tmp_path):
    with pytest.raises(SystemExit) as exit_info:
        main(["calibrate", "network", "--path", "nccl", "--out", str(tmp_path / "x.yaml")])
    assert exit_info.value.code == 2 and "--path" in capsys.readouterr().err


def test_network_argument_errors(capsys, tmp_path):
    assert main(["calibrate", "network", "--ranks", "1", "--out", str(tmp_path / "x.yaml")]) == 2
    assert "--ranks" in capsys.readouterr().err
    assert main(["calibrate", "network", "--sizes", "1,2,4", "--out", str(tmp_path / "x.yaml")]) == 2
    assert "at least two sizes >= --large-from" in capsys.readouterr().err
    missing = tmp_path / "nope.yaml"
    assert main(["calibrate", "network", "--after-compute", str(missing), "--out", str(tmp_path / "x.yaml")]) == 2
    err = capsys.readouterr().err.strip()
    assert str(missing) in err and "not found" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "x.yaml").exists()  # checked before anything runs or is written


@pytest.mark.skipif(not HAVE_MPI, reason="needs mpiexec on PATH and mpi4py (pip install 'simdist[mpi]')")
def test_network_times_the_calls_after_compute_right_after_the_scenarios_training_step(tmp_path, capsys):
    out = tmp_path / "net.yaml"
    assert main(["calibrate", "network", "--ranks", "2", "--sizes", "0,1KiB,64KiB,1MiB", "--budget-s", "0.02",
                 "--batches", "2", "--path", "runtime", "--after-compute",
                 "scenarios/quickstart.yaml", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    overlay = yaml.safe_load(out.read_text())
    # the allreduce right after the scenario's step on both ranks, entering together: a table of its own
    warm, broadcast, after = overlay["collectives"]["tables"]
    assert (warm["op"], broadcast["op"], after["op"]) == ("allreduce", "broadcast", "allreduce")
    assert not warm.get("after_compute") and not broadcast.get("after_compute") and after["after_compute"] is True
    assert "runtime broadcast from rank 0" in broadcast["source"] and "runtime allreduce" in warm["source"]
    assert [r[0] for r in after["rows"]] == [4**k for k in range(1, 11)] and all(t > 0 for _, t in after["rows"])
    assert "runtime allreduce" in after["source"] and "training step of quickstart (batch 32)" in after["source"]
    assert "allreduce on 2 ranks, 1 node(s), right after a training step, 10 sizes" in printed
    assert "allreduce right after a training step against without one: 1KiB " in printed
    assert len(PlatformSpec.model_validate({"collectives": overlay["collectives"]}).collectives.tables) == 3
    said = "right after a training step of the workload of scenario quickstart (batch 32"
    assert overlay["calls"]["overhead_after_compute"] > 0 and said in overlay["calls"]["source"]
    cold = next(fit["overheads"]["cold"] for fit in overlay["provenance"]["fits"].values() if "overheads" in fit)
    assert cold["send_overhead_s"] > 0 and cold["recv_overhead_s"] > 0 and cold["after_compute"] == "quickstart"
    if "send_overhead" in overlay["messages"]:  # split out of the latency: the cold calls are charged too
        assert overlay["messages"]["send_overhead_after_compute"] == cold["send_overhead_s"]
        assert said in overlay["messages"]["source"]
    else:  # a host whose call times are not below the latency intercept: none of them is charged apart
        assert "send_overhead_after_compute" not in overlay["messages"]
    assert "--after-compute scenarios/quickstart.yaml" in overlay["provenance"]["generated_by"]
    # the turn and the send right after a blocking wait, by how long it lasted, while the peer ran the scenario's
    # training steps; the turn right after an update
    turns = overlay["calls"]["overhead_after_wait"]
    assert len(turns) >= 2 and all(b[0] > a[0] > 0 for a, b in zip(turns, turns[1:]))
    assert all(seconds > 0 for _, seconds in turns) and overlay["calls"]["overhead_after_work"] > 0
    assert "training steps of scenarios/quickstart.yaml" in overlay["calls"]["source"]
    if "send_overhead" in overlay["messages"]:
        sends = overlay["messages"]["send_overhead_after_wait"]
        per_byte = overlay["messages"]["send_overhead_per_byte_after_wait"]
        assert [w for w, _ in sends] == [w for w, _ in turns] == [w for w, _ in per_byte]
        assert all(seconds > 0 for _, seconds in sends) and all(rate >= 0 for _, rate in per_byte)
    measured = PlatformSpec.model_validate({"calls": overlay["calls"], "messages": overlay["messages"]})
    assert measured.calls.seconds(False, 1.0) == pytest.approx(max(turns[-1][1], overlay["calls"]["overhead"]))


def test_cpu_share_handler(tmp_path, capsys):
    out = tmp_path / "share.yaml"
    assert main(["calibrate", "cpu-share", "--ranks", "1,2", "--cores", "1", "--duration-s", "0.15", "--rounds", "1",
                 "--out", str(out)]) == 0
    assert "contention factor" in capsys.readouterr().out
    document = yaml.safe_load(out.read_text())
    assert document["contention_factor"] > 0.5 and len(document["measurements"]) == 2
    two = next(m for m in document["measurements"] if m["ranks"] == 2)
    assert two["processor_sharing"] == 2.0 and two["slowdown"] > 1.2  # two ranks on one core: about twice as slow
    assert document["provenance"]["generated_by"].startswith("simdist calibrate cpu-share")
    assert main(["calibrate", "cpu-share", "--cores", "999", "--out", str(out)]) == 2
    assert "--cores" in capsys.readouterr().err


def test_cpu_share_of_a_scenarios_own_workload(tmp_path, capsys):
    scenario = tmp_path / "job.yaml"
    scenario.write_text(yaml.safe_dump({
        "name": "job", "platform": {"preset": "laptop-cpu", "node": {"devices": 2}},
        "workload": {"model": {"name": "mlp", "hidden": [32]},
                     "dataset": {"name": "synthetic", "samples": 400, "features": 16, "classes": 2},
                     "batch_size": 48}, "algorithm": "sync", "stop": {"steps": 2}}))
    out, overlay = tmp_path / "share.yaml", tmp_path / "co_run.yaml"
    assert main(["calibrate", "cpu-share", "--scenario", str(scenario), "--ranks", "2", "--cores", "1",
                 "--duration-s", "0.15", "--rounds", "1", "--out", str(out), "--overlay", str(overlay)]) == 0
    capsys.readouterr()
    document = yaml.safe_load(out.read_text())
    assert document["batch_size"] == 48 and document["model"] == f"mlp of {scenario}"  # the job's, not the zoo's
    assert {m["ranks"] for m in document["measurements"]} == {1, 2}
    co_run = yaml.safe_load(overlay.read_text())["node"]["co_run"]
    assert co_run["oversubscribed_factor"] >= 1.0
    # the woken rank's run alone beside a busy core-mate: one of the measured bursts, or 0 (processor sharing)
    bursts = [r["burst_s"] for r in document["wake_run_ratios"]]
    assert co_run["wake_run_s"] == document["wake_run_s"] and (co_run["wake_run_s"] in bursts or co_run["wake_run_s"] == 0)
    # the scheduler's slice: the two ranks on one core ran a positive time below their whole run at a time
    assert co_run["slice_s"] == document["slice_s"] and 0 < co_run["slice_s"] < 0.15
    assert document["slice_runs"] == [{"ranks": 2, "cores": 1, "mean_run_s": co_run["slice_s"]}]
    alone = next(m for m in document["measurements"] if m["ranks"] == 1)
    assert alone["mean_run_s"] is None or alone["mean_run_s"] > co_run["slice_s"]  # alone it is rarely switched out
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"name": "bad", "workload": {"model": "nosuchmodel"}}))
    assert main(["calibrate", "cpu-share", "--scenario", str(bad), "--out", str(tmp_path / "x.yaml")]) == 2
    assert "bad.yaml" in capsys.readouterr().err and not (tmp_path / "x.yaml").exists()


def test_the_main_cli_dispatches_calibrate(tmp_path, capsys):
    """`simdist calibrate ...` through the main CLI behaves as the calibrate parser alone."""
    from simdist import cli

    out = tmp_path / "o.yaml"
    assert cli.main(["calibrate", "trace", str(NCCL), "--out", str(out)]) == 0
    assert yaml.safe_load(out.read_text())["node"]["nic_link"]["bandwidth"] > 1e11
    capsys.readouterr()
    assert cli.main(["calibrate", "trace", str(tmp_path / "missing.txt")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "missing.txt: trace file not found" in err
