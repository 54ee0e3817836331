"""Provenance: every generated calibration file records inputs (sha256), command, scores and date; edits show."""

from __future__ import annotations

import datetime as dt
import hashlib
from pathlib import Path

import pytest
import yaml

from simdist.calibrate.cli import main
from simdist.calibrate.provenance import content_sha256, make_provenance, rounded, verify_content, write_yaml
from simdist.errors import InputError
from simdist.platform.spec import PlatformSpec
from simdist.platform.topology import Platform
from simdist.scenario import scenario_from_dict

ROOT = Path(__file__).resolve().parents[1]
NCCL = ROOT / "calibration" / "traces" / "nccl-tests_all_reduce_2x8xA100-40GB_roce.txt"
GENERATED = sorted((ROOT / "calibration" / "platforms").glob("*.yaml")) + \
    sorted((ROOT / "calibration" / "cpu_share").glob("*.yaml")) + [ROOT / "calibration" / "profiles" / "host-cpu.yaml"]


def check_provenance(provenance: dict, command_start: str) -> None:
    assert provenance["generated_by"].startswith(command_start)
    assert dt.datetime.fromisoformat(provenance["date"]).tzinfo is not None
    assert isinstance(provenance["scores"], dict) and provenance["scores"]
    assert {"python", "simdist", "numpy", "torch"} <= set(provenance["versions"])
    assert len(provenance["content_sha256"]) == 64


def test_trace_overlay_records_its_inputs_command_scores_and_date(tmp_path, capsys):
    out = tmp_path / "oci.yaml"
    assert main(["calibrate", "trace", str(NCCL), "--nic-kind", "ethernet-100g", "--out", str(out)]) == 0
    document = yaml.safe_load(out.read_text())
    provenance = document["provenance"]
    check_provenance(provenance, "simdist calibrate trace ")
    assert f"--out {out}" in provenance["generated_by"] and "--nic-kind ethernet-100g" in provenance["generated_by"]
    (record,) = provenance["inputs"]
    assert record["sha256"] == hashlib.sha256(NCCL.read_bytes()).hexdigest() and record["bytes"] == NCCL.stat().st_size
    assert provenance["scores"]["nic_link"]["regime_max_relative_error"] < 0.1
    per_size = provenance["fits"]["nic_link"]["per_size"]
    assert len(per_size["size_bytes"]) == 31 and len(per_size["piecewise_error"]) == 31
    assert "busbw" in provenance["link_values"]["nic_link"]["basis"]
    assert out.read_text().startswith("# Platform overlay fitted from measurements")
    assert "Do not hand-edit" in out.read_text()
    assert verify_content(out)


def test_a_hand_edit_is_detected(tmp_path):
    out = tmp_path / "overlay.yaml"
    assert main(["calibrate", "trace", str(NCCL), "--out", str(out)]) == 0
    text = out.read_text()
    bandwidth = yaml.safe_load(text)["node"]["nic_link"]["bandwidth"]
    out.write_text(text.replace(f"bandwidth: {bandwidth}", "bandwidth: 2.0e+11", 1))
    assert yaml.safe_load(out.read_text())["node"]["nic_link"]["bandwidth"] == 2.0e11
    assert not verify_content(out)
    (tmp_path / "plain.yaml").write_text("node: {}\n")
    with pytest.raises(InputError, match="no provenance"):
        verify_content(tmp_path / "plain.yaml")


@pytest.mark.parametrize("path", GENERATED, ids=lambda p: p.name)
def test_committed_calibration_files_are_untouched_and_complete(path):
    document = yaml.safe_load(path.read_text())
    assert "provenance" in document, f"{path} has no provenance"
    assert verify_content(path), f"{path} was edited after it was generated"
    check_provenance(document["provenance"], "simdist calibrate " if "profiles" not in str(path) else "")
    for record in document["provenance"]["inputs"]:
        source = ROOT / record["path"]
        assert hashlib.sha256(source.read_bytes()).hexdigest() == record["sha256"], f"{source} changed"


@pytest.mark.parametrize("path", sorted((ROOT / "calibration" / "platforms").glob("*.yaml")), ids=lambda p: p.name)
def test_committed_overlays_load_as_platform_overlays(path):
    preset = "dgx-a100" if "a100" in path.name else "laptop-cpu"
    scenario = scenario_from_dict({"name": "overlay", "platform": {"preset": preset, "nodes": 2, "overlays": [str(path)]},
                                   "workload": {"model": "mlp", "dataset": "digits", "batch_size": 8},
                                   "algorithm": "sync", "stop": {"steps": 1}}, base_dir=ROOT)
    node = yaml.safe_load(path.read_text())["node"]
    spec = scenario.platform if isinstance(scenario.platform, PlatformSpec) else PlatformSpec.model_validate(scenario.platform)
    for field in ("intra_link", "nic_link"):
        if field in node:
            link = getattr(spec.node, field)
            assert link.kind == node[field]["kind"]
            assert link.latency_s == pytest.approx(node[field]["latency"])
            assert link.bandwidth_Bps == pytest.approx(node[field]["bandwidth"])
    Platform(spec)


def test_write_yaml_rounds_and_hashes(tmp_path):
    document = {"value": 1.23456789123, "array": [1e-7, float("inf")], "provenance": make_provenance("cmd", [NCCL], {"r2": 1.0})}
    path = write_yaml(tmp_path / "x.yaml", document, "header line\nsecond")
    text = path.read_text()
    assert text.startswith("# header line\n# second\n")
    loaded = yaml.safe_load(text)
    assert loaded["value"] == 1.23457 and loaded["array"] == [1e-07, None]
    assert loaded["provenance"]["content_sha256"] == content_sha256(rounded(document))
    assert verify_content(path)
