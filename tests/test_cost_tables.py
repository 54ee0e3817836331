"""Measured collectives → platform cost tables, and the eager/rendezvous split of message sweeps."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from simdist.calibrate.cost_tables import collectives_section, table_from_sweep, tables_from_parsed
from simdist.calibrate.network import measure_reduce_bandwidth
from simdist.calibrate.overlay import fit_p2p_link
from simdist.calibrate.parsed import ParsedTrace
from simdist.calibrate.traces import parse_trace
from simdist.errors import InputError

REPO = Path(__file__).resolve().parent.parent
TRACES = REPO / "calibration" / "traces"
NCCL = TRACES / "nccl-tests_all_reduce_2x8xA100-40GB_roce.txt"
OSU_ALLREDUCE = TRACES / "osu_allreduce_2nodes_tcp_ethernet.txt"


def test_an_nccl_tests_allreduce_becomes_a_table_of_its_ranks_and_nodes():
    parsed = parse_trace(str(NCCL))
    (table,), notes = tables_from_parsed(parsed)
    assert (table["op"], table["ranks"], table["nodes"]) == ("allreduce", 16, 2) and not notes
    assert len(table["rows"]) == len(parsed.table)
    assert table["rows"][0] == [8, pytest.approx(parsed.table["time_s"].iloc[0])]
    assert "sha256 30d5f25d7f4fe7cc" in table["source"]


def test_an_osu_collective_takes_the_rank_count_it_is_told():
    (table,), notes = tables_from_parsed(parse_trace(str(OSU_ALLREDUCE)), osu_ranks=8)
    assert table["ranks"] == 8 and "nodes" not in table and "--osu-ranks" in notes[0]


def test_an_allgather_size_is_the_whole_output_and_becomes_each_ranks_part():
    frame = pd.DataFrame({"size_bytes": [4096, 8192], "time_s": [1e-5, 2e-5]})
    parsed = ParsedTrace("ag.txt", "nccl-tests", "all_gather", "", frame, {"op": "all_gather", "n_ranks": 4})
    (table,), _ = tables_from_parsed(parsed)
    assert table["op"] == "allgather" and [r[0] for r in table["rows"]] == [1024, 2048]


def test_collectives_the_simulator_does_not_issue_are_left_out_with_a_note():
    frame = pd.DataFrame({"size_bytes": [4096, 8192], "time_s": [1e-5, 2e-5]})
    parsed = ParsedTrace("a2a.txt", "nccl-tests", "alltoall", "", frame, {"op": "alltoall", "n_ranks": 4})
    tables, notes = tables_from_parsed(parsed)
    assert tables == [] and "alltoall" in notes[0]


def test_a_sweep_with_a_repeated_size_is_refused_naming_its_source():
    document = {"ranks": 2, "hosts": ["h"], "allreduce": [{"size_bytes": 8, "median_s": 1e-5},
                                                         {"size_bytes": 8, "median_s": 2e-5}]}
    with pytest.raises(InputError, match="repeats the row before") as caught:
        table_from_sweep(document, "simdist calibrate network")
    assert "simdist calibrate network" in str(caught.value)


def test_a_sweep_allreduce_becomes_a_table_and_two_tables_of_one_collective_are_refused():
    document = {"ranks": 2, "hosts": ["h", "h"], "mpi_library": "MPICH",
                "allreduce": [{"size_bytes": s, "median_s": 1e-5 + s / 1e9, "batches": 7} for s in (0, 4, 64, 1024)]}
    table = table_from_sweep(document, "cmd")
    assert table["nodes"] == 1 and [r[0] for r in table["rows"]] == [4, 64, 1024]  # size 0 left out
    with pytest.raises(InputError, match="two inputs measure allreduce on 2 ranks"):
        collectives_section([table, dict(table, source="other")])


def test_a_pingpong_with_a_rendezvous_jump_gives_the_eager_latency_and_the_handshake():
    sizes = np.array([2.0**k for k in range(0, 23)])
    eager = sizes <= 8192
    times = np.where(eager, 2e-6 + sizes / 5e9, 10e-6 + sizes / 5e9)
    link, _piecewise, _rows = fit_p2p_link(sizes, times, field_name="intra_link", kind="shm", source="sweep",
                                           large_message_bytes=65536)
    assert link.latency_s == pytest.approx(2e-6, rel=1e-3)
    assert link.messages["eager_limit"] == 8192
    assert link.messages["rendezvous_latency"] == pytest.approx(8e-6, rel=1e-3)


def test_a_pingpong_without_a_jump_has_no_message_costs():
    sizes = np.array([2.0**k for k in range(0, 23)])
    link, _p, _r = fit_p2p_link(sizes, 3e-6 + sizes / 5e9, field_name="intra_link", kind="shm", source="sweep")
    assert link.messages is None and link.latency_s == pytest.approx(3e-6, rel=1e-3)


def test_the_reduction_rate_is_measured_and_sourced():
    reduce = measure_reduce_bandwidth(nbytes=1 << 20, budget_s=0.02)
    assert 1e7 < reduce["reduce_bandwidth"] < 1e13 and "numpy float32" in reduce["reduce_source"]


def test_calibrate_trace_writes_a_table_the_simulation_prices_from(tmp_path):
    overlay = tmp_path / "nccl.yaml"
    done = subprocess.run([sys.executable, "-m", "simdist", "calibrate", "trace", str(NCCL), "--out", str(overlay)],
                          capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "cost table: allreduce on 16 ranks, 2 node(s), 31 sizes" in done.stdout
    document = yaml.safe_load(overlay.read_text())
    assert document["collectives"]["tables"][0]["ranks"] == 16
    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump({
        "platform": {"preset": "cluster-a100-hdr", "nodes": 2, "overlays": [str(overlay)]},
        "workload": {"model": "resnet50", "dataset": "imagenet-shape", "batch_size": 32, "timing_only": True},
        "algorithm": "sync", "stop": {"steps": 3}, "outputs": {"plots": False, "trace": False}}))
    out = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "simdist", "run", str(scenario), "--out", str(out)],
                          capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    pricing = json.loads((out / "manifest.json").read_text())["collective_pricing"]
    assert {p["basis"] for p in pricing} == {"table"} and pricing[0]["ranks"] == 16


@pytest.mark.parametrize("path, message", [
    (NCCL, "the file shows 16 ranks but --ranks says 8"),
    (TRACES / "example_collectives.csv", "rows name 8 and 16 ranks but --ranks says 8"),
])
def test_a_file_of_another_communicator_size_than_ranks_is_refused(tmp_path, path, message):
    out = tmp_path / "o.yaml"
    done = subprocess.run([sys.executable, "-m", "simdist", "calibrate", "trace", str(path), "--ranks", "8", "--out",
                           str(out)], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and not out.exists()


def test_a_csv_gives_one_table_per_collective_and_size(tmp_path):
    out = tmp_path / "csv.yaml"
    done = subprocess.run([sys.executable, "-m", "simdist", "calibrate", "trace", str(TRACES / "example_collectives.csv"),
                           "--out", str(out)], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    tables = yaml.safe_load(out.read_text())["collectives"]["tables"]
    assert {(t["op"], t["ranks"]) for t in tables} == {("allreduce", 8), ("broadcast", 16)}
    assert next(t for t in tables if t["op"] == "allreduce")["algorithm"] == "ring"


def test_measured_overheads_leave_the_link_and_become_message_costs():
    from simdist.calibrate.overlay import apply_overheads

    sizes = np.array([2.0**k for k in range(0, 23)])
    times = np.where(sizes <= 8192, 2e-6 + sizes / 5e9, 10e-6 + sizes / 5e9)
    link, _p, _r = fit_p2p_link(sizes, times, field_name="intra_link", kind="shm", source="sweep")
    apply_overheads(link, {"send_overhead_s": 0.4e-6, "recv_overhead_s": 0.6e-6, "gap_s": 0.3e-6,
                           "size_bytes": 8, "messages": 2000})
    assert link.latency_s == pytest.approx(1e-6, rel=1e-3)  # 2 us eager intercept - o_s - o_r
    m = link.messages
    assert (m["send_overhead"], m["recv_overhead"], m["gap"], m["eager_limit"]) == (0.4e-6, 0.6e-6, 0.3e-6, 8192)
    assert "LogP overheads of 2000 messages" in m["source"] and "large-message intercept" in m["source"]
    from simdist.platform.cost_spec import MessageCostSpec
    assert MessageCostSpec(**m).handshake_s(65536) == pytest.approx(8e-6, rel=1e-3)


def test_the_rise_of_the_overheads_per_byte_up_to_large_messages_is_the_per_byte_overhead():
    from simdist.calibrate.overlay import apply_overheads

    sizes = np.array([2.0**k for k in range(0, 23)])
    link, _p, _r = fit_p2p_link(sizes, 2e-6 + sizes / 5e9, field_name="intra_link", kind="shm", source="sweep")
    small = {"send_overhead_s": 0.4e-6, "recv_overhead_s": 0.6e-6, "gap_s": 0.3e-6, "size_bytes": 8, "messages": 2000}
    # a 1 MiB receive takes 0.1 ms more than an 8 B one; the send call only posts it (a little less time)
    large = {"send_overhead_s": 0.3e-6, "recv_overhead_s": 0.6e-6 + 1e-4, "gap_s": 1e-4,
             "size_bytes": 1 << 20, "messages": 64}
    apply_overheads(link, {**small, "large": large})
    m = link.messages
    assert m["recv_overhead_per_byte"] == pytest.approx(1e-4 / ((1 << 20) - 8))
    assert "send_overhead_per_byte" not in m and "64 messages of 1048576 B" in m["source"]
    assert link.bandwidth_Bps == pytest.approx(5e9, rel=1e-3)  # the copies overlap the transfer: the link stays


def test_the_per_byte_rise_is_taken_from_the_large_messages_own_baseline_where_measured_alike():
    from simdist.calibrate.overlay import apply_overheads

    sizes = np.array([2.0**k for k in range(0, 23)])
    link, _p, _r = fit_p2p_link(sizes, 2e-6 + sizes / 5e9, field_name="intra_link", kind="shm", source="sweep")
    stream = {"send_overhead_s": 0.4e-6, "recv_overhead_s": 0.6e-6, "gap_s": 0.3e-6, "size_bytes": 8, "messages": 2000}
    # drained messages (each taken in before the next) cost more per call than a back-to-back stream: the slope
    # is measured against small messages sent the same way, not against the stream
    baseline = {"send_overhead_s": 1.0e-6, "recv_overhead_s": 1.5e-6, "size_bytes": 8, "messages": 64, "drained": True}
    large = {"send_overhead_s": 1.0e-6 + 5e-5, "recv_overhead_s": 1.5e-6 + 1e-4, "size_bytes": 1 << 20,
             "messages": 64, "drained": True, "baseline": baseline}
    apply_overheads(link, {**stream, "large": large})
    m = link.messages
    assert m["send_overhead_per_byte"] == pytest.approx(5e-5 / ((1 << 20) - 8))
    assert m["recv_overhead_per_byte"] == pytest.approx(1e-4 / ((1 << 20) - 8))
    assert m["send_overhead"] == 0.4e-6  # the LogP overheads stay the stream's
    assert "each taken in before the next was posted, less those of 64 such messages of 8 B" in m["source"]


def test_overheads_larger_than_the_intercept_stay_in_the_latency():
    from simdist.calibrate.overlay import apply_overheads

    sizes = np.array([2.0**k for k in range(0, 23)])
    link, _p, _r = fit_p2p_link(sizes, 2e-6 + sizes / 5e9, field_name="intra_link", kind="shm", source="sweep")
    apply_overheads(link, {"send_overhead_s": 1.5e-6, "recv_overhead_s": 1.5e-6, "gap_s": 4e-6,
                           "size_bytes": 8, "messages": 2000})
    assert link.latency_s == pytest.approx(2e-6, rel=1e-3) and "overlap the transfer" in link.basis
    assert link.messages["gap"] == 4e-6 and "send_overhead" not in link.messages


def _osu_tcp_overlay(tmp_path, *options: str) -> dict:
    out = tmp_path / "osu.yaml"
    files = [str(TRACES / f"osu_{test}_2nodes_tcp_ethernet.txt") for test in ("latency", "bw", "bibw")]
    done = subprocess.run([sys.executable, "-m", "simdist", "calibrate", "trace", *files, "--out", str(out), *options],
                          capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    document = yaml.safe_load(out.read_text())
    from simdist.platform.spec import PlatformSpec
    PlatformSpec.model_validate({"node": {k: v for k, v in document["node"].items()}, "messages": document["messages"]})
    return document


def test_osu_bw_and_bibw_over_tcp_give_the_gap_and_each_rank_s_per_byte_copy(tmp_path):
    document = _osu_tcp_overlay(tmp_path)
    messages = document["messages"]
    # osu_bibw peaks at 3.0 GB/s per direction: 5997 MB/s both ways together, below twice the 6.47 GB/s
    # one-way link. Full-duplex Ethernet does not share its directions; each rank's CPU copying what it
    # sends and what it receives does: O_s = O_r = 1 / 5997 MB/s
    assert messages["send_overhead_per_byte"] == pytest.approx(1 / 5996.96e6, rel=1e-3)
    assert messages["recv_overhead_per_byte"] == messages["send_overhead_per_byte"]
    assert "aggregate_bandwidth" not in document["node"]["nic_link"] and "osu_bibw" in messages["source"]
    assert messages["gap"] == pytest.approx(3.448e-6, rel=1e-3) and "osu_bw" in messages["source"]


def test_osu_bibw_put_down_to_the_link_caps_both_directions_instead(tmp_path):
    document = _osu_tcp_overlay(tmp_path, "--bibw-limit", "link")
    link = document["node"]["nic_link"]
    # 6.0 GB/s both ways is below the 6.47 GB/s one-way link: the cap is clamped to its bandwidth
    assert link["aggregate_bandwidth"] == pytest.approx(link["bandwidth"])
    assert "send_overhead_per_byte" not in document["messages"]


def test_a_sweep_broadcast_becomes_a_table_of_its_own_naming_the_call_it_timed():
    rows = [{"size_bytes": s, "median_s": 1e-5 + s / 1e9, "batches": 7} for s in (0, 4, 64, 1024)]
    document = {"ranks": 4, "hosts": ["h"] * 4, "mpi_library": "MPICH", "allreduce": rows, "broadcast": rows}
    table = table_from_sweep(document, "cmd", "broadcast")
    assert table["op"] == "broadcast" and "MPI_Bcast from rank 0" in table["source"]
    runtime = table_from_sweep({**document, "path": "runtime"}, "cmd", "broadcast")
    assert "simdist's runtime broadcast from rank 0" in runtime["source"]
    assert "simdist's runtime allreduce of" in table_from_sweep({**document, "path": "runtime"}, "cmd")["source"]
    assert len(collectives_section([table_from_sweep(document, "cmd"), table])["tables"]) == 2
    assert table_from_sweep({**document, "broadcast": []}, "cmd", "broadcast") is None
