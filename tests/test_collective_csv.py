"""The collective-csv trace format: users' own collective timings as a CSV (docs/calibration.md)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from simdist.calibrate.collective_csv import check_ranks, looks_like_collective_csv
from simdist.calibrate.traces import TRACE_FORMATS, parse_trace
from simdist.errors import InputError

ROOT = Path(__file__).resolve().parents[1]
REF = ROOT / "calibration" / "traces"
EXAMPLE = REF / "example_collectives.csv"
COLUMNS = ["collective", "ranks", "nodes", "algorithm", "dtype", "size_bytes", "time_s", "line"]

GOOD = """\
# measured with our own harness
collective, ranks, nodes, algorithm, bytes, time_us, note

all_reduce, 4,     1,     ring,      1024,  10.5,    warm
all_reduce, 4,     1,     ring,      64KiB, 20,
bcast,      8,     ,      ,          4096,  7.25,    ""
bcast,      8,     ,      ,          1MiB,  125,     cold
all_reduce, 4,     1,     ring,      1MiB,  250.0,   interleaved rows keep file order
"""


def write(tmp_path: Path, text: str, name: str = "timings.csv") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def error_of(path: Path, fmt: str = "auto") -> str:
    with pytest.raises(InputError) as info:
        parse_trace(path, fmt)
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"{path}: "), message
    return message


# -- good files -------------------------------------------------------------------------------

def test_two_tables_parse_to_the_documented_columns_in_file_order(tmp_path):
    parsed = parse_trace(write(tmp_path, GOOD))
    assert parsed.format == "collective-csv" and parsed.kind == "collectives"
    table = parsed.table
    assert list(table.columns) == COLUMNS
    assert table["collective"].tolist() == ["allreduce", "allreduce", "broadcast", "broadcast", "allreduce"]
    assert table["ranks"].tolist() == [4, 4, 8, 8, 4] and table["ranks"].dtype == "int64"
    assert str(table["nodes"].dtype) == "Int64"
    assert table["nodes"].iloc[0] == 1 and table["nodes"].iloc[2:4].isna().all()
    assert table["algorithm"].tolist() == ["ring", "ring", "", "", "ring"]
    assert table["dtype"].tolist() == ["float32"] * 5
    assert table["size_bytes"].tolist() == [1024.0, 65536.0, 4096.0, 1048576.0, 1048576.0]
    assert table["time_s"].tolist() == pytest.approx([10.5e-6, 20e-6, 7.25e-6, 125e-6, 250e-6])
    assert table["line"].tolist() == [4, 5, 6, 7, 8]
    assert parsed.meta["time_column"] == "time_us" and parsed.meta["ignored_columns"] == ["note"]
    assert parsed.meta["collectives"] == ["allreduce", "broadcast"] and parsed.meta["ranks"] == [4, 8]
    assert [(t["collective"], t["ranks"], t["nodes"], t["algorithm"], t["rows"]) for t in parsed.meta["tables"]] == \
        [("allreduce", 4, 1, "ring", 3), ("broadcast", 8, None, "", 2)]


def test_busbw_becomes_the_time_nccl_tests_defines(tmp_path):
    text = ("collective,ranks,size_bytes,busbw_GBps,dtype\n"
            "allreduce,4,1MiB,10,float16\nallreduce,4,2MiB,20,float16\n"
            "broadcast,4,1MiB,10,\nbroadcast,4,2MiB,20,\n"
            "allgather,4,1MiB,10,\nallgather,4,2MiB,20,\n")
    table = parse_trace(write(tmp_path, text)).table
    mib = 1048576
    # allreduce: busbw = algbw * 2(n-1)/n = (S/t) * 1.5; broadcast: busbw = algbw = S/t;
    # allgather: busbw = (n*S/t) * (n-1)/n = 3S/t with S each rank's part
    assert table["time_s"].tolist() == pytest.approx([1.5 * mib / 10e9, 1.5 * mib / 10e9, mib / 10e9, mib / 10e9,
                                                      3 * mib / 10e9, 3 * mib / 10e9])
    assert table["dtype"].tolist() == ["float16", "float16"] + ["float32"] * 4


def test_time_s_bom_crlf_and_quoted_fields(tmp_path):
    text = '\ufeff# exported from a spreadsheet\r\nCollective,Ranks,Bytes,Time_S\r\n' \
           '"allgather", 2, "1 KiB", 1e-5\r\nallgather,2,2KiB,0.00002\r\n'
    path = write(tmp_path, text)
    parsed = parse_trace(path)
    assert parsed.format == "collective-csv"
    assert parsed.table["size_bytes"].tolist() == [1024.0, 2048.0]
    assert parsed.table["time_s"].tolist() == pytest.approx([1e-5, 2e-5])
    assert parsed.table["line"].tolist() == [3, 4]


def test_the_example_file_is_labelled_and_parses():
    assert "not a measurement" in EXAMPLE.read_text().splitlines()[1].lower()
    parsed = parse_trace(EXAMPLE)
    assert parsed.format == "collective-csv" and len(parsed.meta["tables"]) == 2
    assert (parsed.table["time_s"] > 0).all()


def test_registered_and_detected_without_claiming_other_reference_files():
    assert "collective-csv" in TRACE_FORMATS.names()
    assert TRACE_FORMATS.entry("collective-csv").description
    others = [p for p in sorted(REF.glob("*.txt")) if p.is_file()]
    assert any(p.name.startswith("nccl-tests") for p in others) and any(p.name.startswith("osu") for p in others)
    for path in others:
        assert not looks_like_collective_csv(path.read_text()), path.name
    assert not looks_like_collective_csv((REF / "simdist_dbs_5ranks" / "steps.csv").read_text())
    assert parse_trace(REF / "nccl-tests_all_reduce_2x8xA100-40GB_roce.txt").format == "nccl-tests"
    assert parse_trace(REF / "osu_bw_2nodes_tcp_ethernet.txt").format == "osu"
    assert not looks_like_collective_csv("") and not looks_like_collective_csv("# collective,bytes\n")
    assert not looks_like_collective_csv("collective,ranks,time_s\n")  # no size column
    assert looks_like_collective_csv("\n# c\n  collective , SIZE_BYTES\n")


def test_check_ranks(tmp_path):
    parsed = parse_trace(write(tmp_path, GOOD))
    with pytest.raises(InputError) as info:
        check_ranks(parsed, 4)
    assert str(info.value) == f"{parsed.path}: rows name 4 and 8 ranks but --ranks says 4"
    example = parse_trace(EXAMPLE)
    one = parse_trace(write(tmp_path, "collective,ranks,bytes,time_s\nallreduce,4,1,1e-6\nallreduce,4,2,2e-6\n", "4.csv"))
    check_ranks(one, 4)
    with pytest.raises(InputError, match=r"rows name 4 ranks but --ranks says 8$"):
        check_ranks(one, 8)
    with pytest.raises(InputError, match=r"rows name 8 and 16 ranks but --ranks says 8$"):
        check_ranks(example, 8)


# -- bad files: one line naming the file, the line and the column --------------------------------

HEAD = "# comment\ncollective,ranks,nodes,bytes,time_us\n"
BAD = [
    ("missing_ranks", "collective,bytes,time_s\nallreduce,1,1\n",
     ["line 1: ", "missing column ranks", "required: collective, ranks, bytes", "the header has: 'collective, bytes, time_s'"]),
    ("no_time", "collective,ranks,bytes\nallreduce,2,1\n", ["line 1: ", "none of the time columns", "time_s, time_us, busbw_GBps"]),
    ("two_times", "collective,ranks,bytes,time_s,time_us\nallreduce,2,1,1,1\n", ["line 1: ", "both time_s and time_us"]),
    ("two_sizes", "collective,ranks,bytes,size_bytes,time_s\n", ["line 1: ", "both bytes and size_bytes"]),
    ("repeated_column", "collective,ranks,bytes,time_s,ranks\n", ["line 1: ", "column ranks appears twice"]),
    ("bad_ranks", HEAD + "allreduce,four,1,1KiB,3\n", ["line 3: column ranks: ", "'four'"]),
    ("one_rank", HEAD + "allreduce,1,1,1KiB,3\n", ["line 3: column ranks: ", "from 2", "'1'"]),
    ("bad_nodes", HEAD + "allreduce,4,0,1KiB,3\n", ["line 3: column nodes: ", "'0'"]),
    ("nodes_over_ranks", HEAD + "allreduce,4,8,1KiB,3\n", ["line 3: column nodes: ", "8 nodes for 4 ranks", "cannot exceed"]),
    ("bad_size", HEAD + "allreduce,4,1,lots,3\n", ["line 3: column bytes: ", "'lots'"]),
    ("fractional_size", HEAD + "allreduce,4,1,1.5,3\n", ["line 3: column bytes: ", "whole number of bytes", "'1.5'"]),
    ("zero_size", HEAD + "allreduce,4,1,0,3\n", ["line 3: column bytes: ", "'0'"]),
    ("bad_time", HEAD + "allreduce,4,1,1KiB,fast\n", ["line 3: column time_us: expected a number", "'fast'"]),
    ("nan_time", HEAD + "allreduce,4,1,1KiB,nan\n", ["line 3: column time_us: ", "greater than zero", "'nan'"]),
    ("inf_time", HEAD + "allreduce,4,1,1KiB,inf\n", ["line 3: column time_us: ", "greater than zero", "'inf'"]),
    ("negative_time", HEAD + "allreduce,4,1,1KiB,-2\n", ["line 3: column time_us: ", "greater than zero", "'-2'"]),
    ("zero_time", HEAD + "allreduce,4,1,1KiB,0\n", ["line 3: column time_us: ", "greater than zero", "'0'"]),
    ("zero_busbw", "collective,ranks,bytes,busbw_GBps\nallreduce,4,1KiB,0\n", ["line 2: column busbw_GBps: ", "'0'"]),
    ("hour_time", "collective,ranks,bytes,time_s\nallreduce,4,1,1\nallreduce,4,2,4000\n",
     ["line 3: column time_s: ", "over an hour"]),
    ("unknown_collective", HEAD + "alltoall,4,1,1KiB,3\n",
     ["line 3: column collective: unknown collective 'alltoall'", "allreduce, broadcast, allgather"]),
    ("short_row", HEAD + "allreduce,4,1,1KiB\n", ["line 3: 4 fields, the header has 5"]),
    ("repeated_size", HEAD + "allreduce,4,1,1KiB,3\nbroadcast,4,1,1,2\nbroadcast,4,1,2,2\n\n# note\n"
                             "allreduce,4,1,1024,4\n",
     ["line 8: column bytes: size 1024 B repeats the row before (1024 B); sizes must strictly increase",
      "allreduce on 4 ranks over 1 node table", "line 3"]),
    ("smaller_size", HEAD + "allreduce,4,1,2KiB,3\nallreduce,4,1,1KiB,4\n",
     ["line 4: column bytes: size 1024 B is smaller than the row before (2048 B)"]),
    ("one_size", "collective,ranks,bytes,time_s\nallreduce,4,1,1\nallreduce,4,2,2\nallreduce,8,1,1\n",
     ["line 4: allreduce on 8 ranks has only one size; a table needs at least two"]),
    ("header_only", "# nothing measured yet\ncollective,ranks,bytes,time_s\n", ["line 2: ", "header but no rows"]),
]


@pytest.mark.parametrize("name,text,phrases", BAD, ids=[b[0] for b in BAD])
def test_bad_file_is_one_line_naming_line_and_column(tmp_path, name, text, phrases):
    message = error_of(write(tmp_path, text, f"{name}.csv"))
    for phrase in phrases:
        assert phrase in message, message


def test_empty_or_comment_only_files_are_refused(tmp_path):
    for text in ("", "# only a comment\n\n"):
        path = write(tmp_path, text)
        assert "no CSV header" in error_of(path, "collective-csv")
        assert "unrecognised trace format" in error_of(path)


def test_forcing_the_format_on_another_file_names_the_missing_columns():
    path = REF / "osu_bw_2nodes_tcp_ethernet.txt"
    message = error_of(path, "collective-csv")
    assert "missing column collective, ranks, bytes" in message and "the header has" in message


def test_cli_refuses_a_bad_csv_in_one_line_with_status_2(tmp_path):
    bad = write(tmp_path, HEAD + "allreduce,4,1,1KiB,3\nallreduce,4,1,1KiB,4\n", "bad.csv")
    done = subprocess.run([sys.executable, "-m", "simdist", "calibrate", "trace", str(bad)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert str(bad) in lines[0] and "line 4: column bytes: size 1024 B repeats" in lines[0]

