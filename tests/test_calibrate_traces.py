"""Trace parsers: the reference files parse; truncated and foreign files fail with one line naming the file."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from simdist.calibrate.trace_fit import TraceOptions, fit_trace
from simdist.calibrate.traces import TRACE_FORMATS, parse_trace
from simdist.errors import InputError

ROOT = Path(__file__).resolve().parents[1]
REF = ROOT / "calibration" / "traces"
BAD = Path(__file__).parent / "data" / "traces"
NCCL = REF / "nccl-tests_all_reduce_2x8xA100-40GB_roce.txt"
PROFILER = REF / "torch_profiler_ddp_gloo_2ranks_rank0.json"
SIMDIST = REF / "simdist_dbs_5ranks"


def assert_one_line_error(path: Path, match: str, fmt: str = "auto") -> str:
    with pytest.raises(InputError) as info:
        parse_trace(path, fmt)
    message = str(info.value)
    assert "\n" not in message and message.startswith(str(path)), message
    assert match in message, message
    return message


# -- the reference files ---------------------------------------------------------------------

def test_nccl_tests_reference_table():
    parsed = parse_trace(NCCL)
    assert parsed.format == "nccl-tests" and parsed.kind == "all_reduce"
    assert parsed.meta["n_ranks"] == 16 and parsed.meta["nodes"] == 2 and parsed.meta["ranks_per_node"] == 8
    assert parsed.meta["device"] == "NVIDIA A100-SXM4-40GB"
    assert parsed.meta["bus_ratio"] == pytest.approx(2 * 15 / 16, rel=0.01)  # busbw = algbw * 2(n-1)/n
    table = parsed.table
    assert len(table) == 31 and table["size_bytes"].iloc[0] == 8 and table["size_bytes"].iloc[-1] == 8 * 2**30
    assert table["time_s"].iloc[-1] == pytest.approx(67689e-6)
    assert table["inplace_time_s"].iloc[-1] == pytest.approx(67811e-6)


def test_nccl_fit_on_the_reference_table_is_within_ten_percent_from_one_mib():
    report = fit_trace(parse_trace(NCCL), TraceOptions(nic_kind="ethernet-100g"))
    table = report.table
    big = table["size_bytes"] >= 2**20
    assert np.abs(table.loc[big, "piecewise_error"]).max() <= 0.10
    (link,) = report.links
    assert link.field == "nic_link" and link.kind == "ethernet-100g"
    regime = (table["size_bytes"] >= 2**20) & (table["size_bytes"] <= 2**29)  # the 64 MiB regime
    assert np.abs(table.loc[regime, "simulator_error"]).max() <= 0.10  # the simulator's own ring, fitted link
    assert 100e9 < link.bandwidth_Bps < 240e9 and 1e-6 < link.latency_s < 5e-6
    assert report.node_fields == {"devices": 8, "device": {"kind": "a100"}, "nics": 1}


@pytest.mark.parametrize("name,kind", [("osu_latency", "p2p_latency"), ("osu_bw", "p2p_bw"),
                                       ("osu_bibw", "p2p_bibw"), ("osu_allreduce", "collective")])
def test_osu_reference_files(name, kind):
    parsed = parse_trace(REF / f"{name}_2nodes_tcp_ethernet.txt")
    assert parsed.format == "osu" and parsed.kind == kind and parsed.meta["version"] == "5.8"
    assert (parsed.table["time_s"] > 0).all()
    report = fit_trace(parsed)
    assert report.scores["max_relative_error"] < 0.15
    if kind == "p2p_latency":
        assert parsed.table["time_s"].iloc[0] == pytest.approx(19.17e-6)
        (link,) = report.links
        assert link.field == "nic_link" and 5e9 < link.bandwidth_Bps < 8e9  # TCP over cloud Ethernet
    if kind == "p2p_bw":  # 6243.19 MB/s at 512 KiB: time of one 512 KiB message
        row = parsed.table[parsed.table["size_bytes"] == 524288].iloc[0]
        assert row["time_s"] == pytest.approx(524288 / 6243.19e6)


def test_torch_profiler_reference_trace():
    parsed = parse_trace(PROFILER)
    assert parsed.format == "torch-profiler" and parsed.meta["backend"] == "gloo" and parsed.meta["world_size"] == 2
    table = parsed.table
    assert list(table["step"]) == [2, 3, 4]
    assert (table["compute_s"] > 0).all() and (table["comm_s"] > 0).all() and (table["comm_calls"] >= 1).all()
    assert (table["compute_s"] <= table["duration_s"] + 1e-9).all()


def gpu_trace() -> dict:
    """A profiler trace in Kineto's GPU layout: CPU step windows, runtime launches, kernels by correlation."""
    ev = [{"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{s}", "pid": 1, "tid": 1,
           "ts": 1000.0 * s, "dur": 900.0} for s in (1, 2)]
    for s in (1, 2):
        base = 1000.0 * s
        for i, (name, start, dur) in enumerate([("volta_sgemm_128x64_nn", 100, 200), ("elementwise_kernel", 250, 100),
                                                ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 300, 400)]):
            corr = 10 * s + i
            ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                       "ts": base + 10 * i, "dur": 5, "args": {"correlation": corr}})
            ev.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7 if "nccl" in name else 8,
                       "ts": base + start, "dur": dur, "args": {"correlation": corr, "device": 0}})
    return {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA A100-SXM4-40GB"}],
            "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 8}, "traceEvents": ev}


def test_torch_profiler_gpu_kernels_and_nccl(tmp_path):
    path = tmp_path / "gpu_trace.json.gz"
    path.write_bytes(gzip.compress(json.dumps(gpu_trace()).encode()))
    parsed = parse_trace(path)
    assert parsed.meta["on_gpu"] and parsed.meta["device"] == "NVIDIA A100-SXM4-40GB"
    row = parsed.table.iloc[0]
    assert row["compute_s"] == pytest.approx(250e-6)  # sgemm 100-300 and elementwise 250-350 overlap: union
    assert row["comm_s"] == pytest.approx(400e-6) and row["comm_calls"] == 1


def test_simdist_trace_and_steps_reference_files():
    trace = parse_trace(SIMDIST / "trace.json")
    assert trace.format == "simdist-trace" and trace.meta["algorithm"] == "dbs" and trace.meta["ranks"] == 5
    report = fit_trace(trace)
    fits = report.fit["compute_fits"]
    # ranks 0 and 1 run at 1.5 CPUs: the measured cnn profile divided by 1.5 comes back
    assert fits[0]["t1_s"] == pytest.approx(fits[1]["t1_s"], rel=1e-6)
    assert fits[2]["t1_s"] / fits[0]["t1_s"] == pytest.approx(1.5, rel=0.01)
    assert fits[2]["t0_s"] / fits[0]["t0_s"] == pytest.approx(1.5, rel=0.01)
    steps = parse_trace(SIMDIST / "steps.csv")
    assert steps.format == "simdist-steps" and steps.meta["workers"] == 4
    assert (steps.table["median_iteration_s"] > 0).all()


def test_every_format_is_registered_with_a_description():
    assert set(TRACE_FORMATS.names()) == {"nccl-tests", "osu", "collective-csv", "torch-profiler", "simdist-trace",
                                          "simdist-steps"}
    assert all(entry.description and entry.citation for entry in TRACE_FORMATS)


# -- truncated and foreign files ----------------------------------------------------------------

TRUNCATED = [
    ("all_reduce_perf_truncated.txt", "truncated"),
    ("all_reduce_perf_no_footer.txt", "Avg bus bandwidth"),
    ("osu_latency_truncated.txt", "truncated"),
    ("osu_bw_header_only.txt", "truncated"),
    ("torch_profiler_truncated.json", "truncated or invalid JSON"),
    ("simdist_trace_truncated.json", "truncated or invalid JSON"),
    ("steps_truncated.csv", "truncated"),
]


@pytest.mark.parametrize("name,match", TRUNCATED)
def test_truncated_files_are_refused(name, match):
    assert_one_line_error(BAD / name, match)


@pytest.mark.parametrize("name", ["foreign.csv", "foreign.txt", "foreign.json", "foreign_chrome_trace.json",
                                  "foreign.bin"])
def test_foreign_files_are_refused_by_detection(name):
    message = assert_one_line_error(BAD / name, "")
    assert "expected nccl-tests" in message or "binary" in message


FOREIGN_FOR = {  # each parser, forced, on a file of another kind
    "nccl-tests": REF / "osu_latency_2nodes_tcp_ethernet.txt",
    "osu": NCCL,
    "torch-profiler": SIMDIST / "trace.json",
    "simdist-trace": PROFILER,
    "simdist-steps": REF / "osu_bw_2nodes_tcp_ethernet.txt",
}


@pytest.mark.parametrize("fmt", sorted(FOREIGN_FOR))
def test_each_parser_refuses_a_foreign_file(fmt):
    assert_one_line_error(FOREIGN_FOR[fmt], "not", fmt)


@pytest.mark.parametrize("fmt", sorted(FOREIGN_FOR))
def test_each_parser_refuses_a_truncated_file(fmt, tmp_path):
    source = {"nccl-tests": NCCL, "osu": REF / "osu_bibw_2nodes_tcp_ethernet.txt", "torch-profiler": PROFILER,
              "simdist-trace": SIMDIST / "trace.json", "simdist-steps": SIMDIST / "steps.csv"}[fmt]
    data = source.read_bytes()
    cut = tmp_path / f"cut{source.suffix}"
    cut.write_bytes(data[: int(len(data) * 0.6) + 3])  # mid-line, mid-value
    assert_one_line_error(cut, "", fmt)


def test_missing_file_and_unknown_format(tmp_path):
    assert_one_line_error(tmp_path / "nope.txt", "file not found")
    with pytest.raises(InputError, match="--format: unknown trace format .nccl.; known: collective-csv, nccl-tests"):
        parse_trace(NCCL, "nccl")


def test_nccl_other_tools_and_op_detection(tmp_path):
    text = NCCL.read_text().replace("# nThread", "# Collective test starting: all_gather_perf\n# nThread")
    # an all_gather table on the same ranks: busbw = algbw * (n-1)/n
    lines = []
    for line in text.splitlines():
        parts = line.split()
        if line.strip() and not line.startswith("#") and len(parts) == 13:
            algbw = float(parts[6])
            parts[7] = f"{algbw * 15 / 16:.2f}"
            parts[11] = f"{float(parts[10]) * 15 / 16:.2f}"
            line = "  ".join(parts)
        lines.append(line)
    path = tmp_path / "gather.txt"
    path.write_text("\n".join(lines) + "\n")
    parsed = parse_trace(path)
    assert parsed.kind == "all_gather" and parsed.meta["op_from"] == "the 'Collective test starting' line"
    report = fit_trace(parsed)
    assert not report.links and "only all_reduce sets link values" in report.notes[0]
    wrong = tmp_path / "broadcast_perf.txt"  # the file name says broadcast, the numbers say allreduce
    wrong.write_text(NCCL.read_text())
    assert_one_line_error(wrong, "does not match broadcast")
