"""Published collective-benchmark tables in calibration/traces/: each parses to what its source says.

The files are copies of nccl-tests and OSU outputs published by others (sources and checksums in
calibration/traces/README.md). They come in layouts the first reference file did not have: the
older nccl-tests columns, launcher labels on every line, job logs and library messages around
the table. The parser tests below use those files, rewrapped, so that a wrapper never changes
the table read from them.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest

from simdist.calibrate.traces import parse_trace
from simdist.errors import InputError

ROOT = Path(__file__).resolve().parents[1]
REF = ROOT / "calibration" / "traces"
GiB, MiB = 2**30, 2**20

# file -> (ranks, nodes, ranks per node, device, rows, first size, last size, last out-of-place time in us)
NCCL_TABLES = {
    "nccl-tests_all_reduce_1x4xGH200_alps.txt": (4, 1, 4, "NVIDIA GH200 120GB", 30, 8, 4 * GiB, 18997),
    "nccl-tests_all_reduce_2x4xGH200_slingshot_alps.txt": (8, 2, 4, "NVIDIA GH200 120GB", 30, 8, 4 * GiB, 47485),
    "nccl-tests_all_reduce_2x8xH100_gcp-a3mega.txt": (16, 2, 8, "NVIDIA H100 80GB HBM3", 31, 8, 8 * GiB, 47535),
    "nccl-tests_all_reduce_2x8xA100-40GB_ib-sharp_abci.txt": (16, 2, 8, "NVIDIA A100-SXM4-40GB", 29, 8, 2 * GiB, 38180),
    "nccl-tests_all_reduce_1x8xV100-16GB_nvlink.txt": (8, 1, 8, "Tesla V100-SXM2-16GB", 25, 8, 128 * MiB, 1818.8),
    "nccl-tests_all_reduce_1x2xRTX4090_pcie.txt": (2, 1, 2, "NVIDIA GeForce RTX 4090", 29, 8, 2 * GiB, 957746),
}
# file -> (op, OSU version, rows, first size, last size, last average latency in us)
OSU_TABLES = {
    "osu_allreduce_64ranks_2nodes_ib100g.txt": ("all_reduce", "5.6.2", 19, 4, MiB, 3730.69),
    "osu_bcast_64ranks_2nodes_ib-hdr_azure-hbv3.txt": ("broadcast", "7.0", 21, 1, MiB, 253.97),
}
PLAIN = REF / "nccl-tests_all_reduce_1x2xRTX4090_pcie.txt"  # no labels, nothing around the table


@pytest.mark.parametrize("name", sorted(NCCL_TABLES))
def test_published_nccl_tests_tables(name):
    ranks, nodes, per_node, device, rows, first, last, last_us = NCCL_TABLES[name]
    parsed = parse_trace(REF / name)
    assert parsed.format == "nccl-tests" and parsed.kind == "all_reduce"
    meta = parsed.meta
    assert (meta["n_ranks"], meta["nodes"], meta["ranks_per_node"], meta["device"]) == (ranks, nodes, per_node, device)
    assert meta["bus_ratio"] == pytest.approx(2 * (ranks - 1) / ranks, rel=0.01)  # busbw = algbw * 2(n-1)/n
    table = parsed.table
    assert len(table) == rows and table["size_bytes"].iloc[0] == first and table["size_bytes"].iloc[-1] == last
    assert (table["size_bytes"].diff().dropna() > 0).all()
    assert table["time_s"].iloc[-1] == pytest.approx(last_us * 1e-6)
    assert table["count"].iloc[-1] == last // 4 and (table["type"] == "float").all()


@pytest.mark.parametrize("name", sorted(OSU_TABLES))
def test_published_osu_tables(name):
    op, version, rows, first, last, last_us = OSU_TABLES[name]
    parsed = parse_trace(REF / name)
    assert parsed.format == "osu" and parsed.kind == "collective"
    assert parsed.meta["op"] == op and parsed.meta["version"] == version
    table = parsed.table
    assert len(table) == rows and table["size_bytes"].iloc[0] == first and table["size_bytes"].iloc[-1] == last
    assert table["time_s"].iloc[-1] == pytest.approx(last_us * 1e-6)


def test_readme_lists_each_published_table_with_its_checksum():
    readme = (REF / "README.md").read_text()
    for name in [*NCCL_TABLES, *OSU_TABLES]:
        row = next((line for line in readme.splitlines() if line.startswith(f"| `{name}`")), None)
        assert row is not None, f"{name} has no row in calibration/traces/README.md"
        digest = hashlib.sha256((REF / name).read_bytes()).hexdigest()
        head, tail = re.search(r"`([0-9a-f]{8})…([0-9a-f]{4,6})`\s*\|\s*$", row).groups()
        assert digest.startswith(head) and digest.endswith(tail), f"{name}: sha256 {digest} is not the README's"
        assert "https://github.com/" in row


# -- layouts of published outputs -----------------------------------------------------------------

def _same_table(a, b):
    assert a.table.equals(b.table)
    assert {k: a.meta[k] for k in ("n_ranks", "nodes", "hosts", "device")} == \
           {k: b.meta[k] for k in ("n_ranks", "nodes", "hosts", "device")}


def _write(tmp_path, name, lines):
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return path


def test_older_layout_rank_lines_without_group_and_rows_without_root():
    """nccl-tests before 2.10: `#   Rank  0 Pid ..` and `size count type redop time algbw busbw error ..`."""
    parsed = parse_trace(REF / "nccl-tests_all_reduce_2x8xA100-40GB_ib-sharp_abci.txt")
    assert parsed.meta["hosts"] == ["a0000", "a0001"]  # from the rank lines, not guessed from busbw/algbw
    first = parsed.table.iloc[0]
    assert first["root"] == -1 and first["redop"] == "sum"
    assert first["wrong"] == pytest.approx(4e-7)  # this layout prints the largest error, not a count
    v100 = parse_trace(REF / "nccl-tests_all_reduce_1x8xV100-16GB_nvlink.txt")
    assert v100.meta["hosts"] == ["9a417caaf03b"] and v100.meta["op_from"] == "the file name"


@pytest.mark.parametrize("label", ["0: ", " 0: ", "[1,0]<stdout>:", "[1,0]<stdout>: "])
def test_launcher_labels_and_job_log_around_the_table(tmp_path, label):
    """srun --label / mpirun --tag-output: only the stream carrying the table is read."""
    plain = parse_trace(PLAIN)
    other = "1: " if "stdout" not in label else "[1,1]<stdout>:"
    lines = ["+ export NCCL_DEBUG=WARN", "+ srun -l all_reduce_perf -b 8 -e 2G -f 2 -g 2",
             other + "cpu-bind=MASK - node, task  1  1 [2]: mask 0x2 set"]
    for i, line in enumerate(PLAIN.read_text().splitlines()):
        lines.append(label + line)
        if i == 20:  # between rows: another rank's log line and rank 0's NCCL debug line
            lines += [other + "node:2:2 [1] NCCL INFO comm 0x1 rank 1 nranks 2 - Init COMPLETE",
                      label + "node:1:7 [0] NCCL INFO Channel 00/02 :    0   1"]
    lines += [label + "", label + "MPICH Slingshot Network Summary: 0 network timeouts", "srun: job done"]
    _same_table(parse_trace(_write(tmp_path, "all_reduce_perf.out", lines)), plain)


def test_the_published_srun_label_files_read_as_their_unlabelled_tables(tmp_path):
    source = REF / "nccl-tests_all_reduce_2x4xGH200_slingshot_alps.txt"
    text = source.read_text().splitlines()
    table = [line[3:] for line in text if line.startswith("0: ")]
    table = table[table.index(next(t for t in table if t.startswith("# nThread"))):]
    table = table[: next(i for i, t in enumerate(table) if t.startswith("# Avg bus bandwidth")) + 1]
    _same_table(parse_trace(source), parse_trace(_write(tmp_path, "all_reduce_perf.txt", table)))


def test_messages_before_the_column_header_are_not_rows(tmp_path):
    lines = PLAIN.read_text().splitlines()
    header = next(i for i, line in enumerate(lines) if line.lstrip("#").split()[:2] == ["size", "count"])
    lines[header - 1:header - 1] = ["NCCL version 2.19.3+cuda12.3", "[a0000:0:2916721 - context.c:589] INFO job",
                                    "--(snip)--"]
    _same_table(parse_trace(_write(tmp_path, "all_reduce_perf.txt", lines)), parse_trace(PLAIN))


def test_a_foreign_line_between_rows_is_still_refused(tmp_path):
    lines = PLAIN.read_text().splitlines()
    lines.insert(20, "1 more process has sent help message help-mtl-ofi.txt / OFI call fail")
    with pytest.raises(InputError, match="line 21: expected an nccl-tests row"):
        parse_trace(_write(tmp_path, "all_reduce_perf.txt", lines))


def test_a_labelled_output_cut_before_the_footer_is_still_truncated(tmp_path):
    lines = (REF / "nccl-tests_all_reduce_1x4xGH200_alps.txt").read_text().splitlines()
    cut = next(i for i, line in enumerate(lines) if "# Out of bounds" in line)
    with pytest.raises(InputError, match="truncated"):
        parse_trace(_write(tmp_path, "all_reduce_perf.out", lines[:cut]))
    other_rank_footer = lines[:cut] + ["4: # Avg bus bandwidth    : 1.0"]  # not the table's stream
    with pytest.raises(InputError, match="truncated"):
        parse_trace(_write(tmp_path, "all_reduce_perf.out", other_rank_footer))
