"""Scenario loading: valid files resolve, bad ones fail with one line naming file and field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from simdist.errors import InputError
from simdist.scenario import MAX_SCENARIO_BYTES, load_scenario, scenario_from_dict, scenario_json_schema

REPO = Path(__file__).resolve().parents[1]
TINY_PROFILE = str(Path(__file__).parent / "data" / "tiny_profile.yaml")


def base() -> dict:
    return {
        "name": "t",
        "platform": {"preset": "laptop-cpu", "node": {"devices": 2}},
        "workload": {"model": "mlp", "dataset": "digits", "batch_size": 16},
        "algorithm": {"name": "sync"},
        "stop": {"steps": 3},
        "compute": {"profiles": [TINY_PROFILE]},
    }


def write(tmp_path: Path, data, name="s.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data) if not isinstance(data, str) else data)
    return path


def test_quickstart_scenario_resolves_preset_and_defaults():
    scenario = load_scenario(REPO / "scenarios" / "quickstart.yaml")
    assert scenario.platform.name == "laptop-cpu"
    assert scenario.worker_count == 4
    assert scenario.algorithm["collective"] == "ring"
    assert scenario.network.collective_fidelity == "analytic"


def test_every_shipped_scenario_loads():
    for path in sorted((REPO / "scenarios").glob("*.yaml")):
        assert load_scenario(path).name


@pytest.mark.parametrize("path", sorted((REPO / "scenarios").glob("**/*.yaml")), ids=lambda p: p.stem)
def test_a_resolved_scenario_reads_back_as_itself(path):
    """The scenario a result's manifest.json records can be run again: it loads to the same scenario."""
    scenario = load_scenario(path)
    written = json.loads(json.dumps(scenario.resolved()))
    assert scenario_from_dict(written).resolved() == scenario.resolved()


def test_overrides_apply_by_dotted_path(tmp_path):
    path = write(tmp_path, base())
    scenario = load_scenario(path, ["workload.batch_size=64", "platform.nodes=2", "algorithm.collective=tree"])
    assert scenario.workload.batch_size == 64
    assert scenario.platform.nodes == 2
    assert scenario.algorithm["collective"] == "tree"


def test_units_in_platform_fields_become_si(tmp_path):
    data = base()
    data["platform"]["node"]["intra_link"] = {"kind": "shm", "bandwidth": "80Gbps", "latency": "2us"}
    scenario = load_scenario(write(tmp_path, data))
    assert scenario.platform.node.intra_link.bandwidth_Bps == pytest.approx(10e9)
    assert scenario.platform.node.intra_link.latency_s == pytest.approx(2e-6)


def test_one_field_of_a_preset_s_link_is_set_without_restating_its_kind():
    scenario = load_scenario(REPO / "scenarios" / "quickstart.yaml",
                             ["platform.node.intra_link.bandwidth=10GB/s", "platform.node.nic_link.latency=2 us"])
    assert scenario.platform.node.intra_link.kind == "shm"  # the preset's, named by kind alone
    assert scenario.platform.node.intra_link.bandwidth_Bps == pytest.approx(10e9)
    assert scenario.platform.node.nic_link.kind == "ethernet-tcp" and scenario.platform.node.nic_link.latency_s == 2e-6
    assert scenario.platform.node.intra_link.latency_s == load_scenario(
        REPO / "scenarios" / "quickstart.yaml").platform.node.intra_link.latency_s  # the rest stays the kind's

def test_platform_file_relative_to_scenario(tmp_path):
    (tmp_path / "plat.yaml").write_text(yaml.safe_dump({"nodes": 3, "node": {"devices": 2}}))
    data = base()
    data["platform"] = "plat.yaml"
    assert load_scenario(write(tmp_path, data)).platform.device_count == 6


def test_horovod_preset_fills_sync_options():
    data = base()
    data["algorithm"] = {"name": "sync", "preset": "horovod"}
    algo = scenario_from_dict(data).algorithm
    assert (algo["collective"], algo["overlap"], algo["compression"]) == ("ring", "backward", "fp16")
    assert algo["bucket_bytes"] == 64 * 2**20


@pytest.mark.parametrize(
    "mutate, field, words",
    [
        (lambda d: d.pop("workload"), "workload", "required"),
        (lambda d: d["workload"].__setitem__("batch_size", "many"), "workload.batch_size", "integer"),
        (lambda d: d["workload"].__setitem__("batch_size", 0), "workload.batch_size", "greater than or equal to 1"),
        (lambda d: d["algorithm"].__setitem__("name", "dasso"), "algorithm.name", "unknown algorithm 'dasso'; known: "),
        (lambda d: d["algorithm"].__setitem__("collective", "star"), "algorithm.collective", "unknown collective 'star'"),
        (lambda d: d["algorithm"].__setitem__("overlap", "forward"), "algorithm.overlap", "'none' or 'backward'"),
        (lambda d: d["platform"].__setitem__("preset", "cray"), "platform.preset", "known: cluster-a100-hdr"),
        (lambda d: d["platform"]["node"].__setitem__("intra_link", {"kind": "shm", "bandwidth": "-5Gbps"}),
         "platform.node.intra_link.bandwidth", "non-negative"),
        (lambda d: d["platform"]["node"].__setitem__("intra_link", {"kind": "shm", "bandwidth": 0}),
         "platform.node.intra_link.bandwidth", "greater than zero"),
        (lambda d: d["platform"]["node"].__setitem__("intra_link", {"kind": "shm", "latency": "3 parsecs"}),
         "platform.node.intra_link.latency", "expected a time"),
        (lambda d: d["platform"]["node"].__setitem__("intra_link", "warp-drive"), "platform.node.intra_link",
         "unknown link kind"),
        (lambda d: d.__setitem__("workers", 5), "workers", "only 2 devices"),
        (lambda d: d.__setitem__("stop", {"target_accuracy": 0.9}), "stop", "at least one of"),
        (lambda d: d.__setitem__("colour", "blue"), "colour", "unknown field"),
        (lambda d: d["workload"].__setitem__("model", "resnet9000"), "workload.model", "unknown model"),
        (lambda d: d["workload"].__setitem__("dataset", "imagenet"), "workload.dataset", "unknown dataset"),
        (lambda d: d["workload"].__setitem__("model", "os:system"), "workload", "allow_code_import"),
    ],
)
def test_bad_scenarios_fail_with_one_line_naming_file_and_field(tmp_path, mutate, field, words):
    data = base()
    mutate(data)
    path = write(tmp_path, data)
    with pytest.raises(InputError) as info:
        scenario = load_scenario(path)
        from simdist.simulate import simulate  # model/dataset names are checked when the workload is built

        simulate(scenario)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(str(path)) or info.value.source in (str(path), None)
    assert field in message, message
    assert words in message, message


@pytest.mark.parametrize(
    "content, words",
    [
        ("- just\n- a list\n", "must be a YAML mapping"),
        ("key: [unclosed\n", "not valid YAML at line"),
        ("!!python/object:os.system {}\n", "not valid YAML"),
        ("a: &a [*a, *a]\n", "not valid YAML"),
    ],
)
def test_malformed_files(tmp_path, content, words):
    with pytest.raises(InputError, match=words):
        load_scenario(write(tmp_path, content))


def test_binary_and_oversized_and_missing_files(tmp_path):
    binary = tmp_path / "b.yaml"
    binary.write_bytes(bytes(range(256)) * 4)
    with pytest.raises(InputError, match="not a text file|not valid YAML"):
        load_scenario(binary)
    big = tmp_path / "big.yaml"
    big.write_text("a: 1\n" * (MAX_SCENARIO_BYTES // 4))
    with pytest.raises(InputError, match="at most"):
        load_scenario(big)
    with pytest.raises(InputError, match="not found"):
        load_scenario(tmp_path / "nope.yaml")


def test_bad_override_syntax(tmp_path):
    path = write(tmp_path, base())
    with pytest.raises(InputError, match="--set: expected dotted.key=value"):
        load_scenario(path, ["workload.batch_size"])


def test_schema_lists_algorithm_options():
    schema = scenario_json_schema()
    assert "workload" in schema["properties"]
    algorithms = schema["properties"]["algorithm"]["oneOf"]
    assert any("collective" in a["properties"] for a in algorithms)


def test_platform_overlays_apply_in_order_under_inline_fields(tmp_path):
    (tmp_path / "fit.yaml").write_text(yaml.safe_dump({
        "provenance": {"command": "simdist calibrate network"},
        "node": {"intra_link": {"kind": "shm", "latency": 1.0e-6, "bandwidth": 9.0e9}}}))
    (tmp_path / "later.yaml").write_text(yaml.safe_dump({"node": {"intra_link": {"kind": "shm", "latency": 2.0e-6}}}))
    data = base()
    data["platform"] = {"preset": "laptop-cpu", "overlays": ["fit.yaml", "later.yaml"], "node": {"devices": 3}}
    platform = load_scenario(write(tmp_path, data)).platform
    assert platform.node.devices == 3
    assert platform.node.intra_link.latency_s == pytest.approx(2.0e-6)  # later overlay wins
    assert platform.node.intra_link.bandwidth_Bps == pytest.approx(9.0e9)
    data["platform"]["overlays"] = ["missing.yaml"]
    with pytest.raises(InputError, match="missing.yaml: platform overlay file not found"):
        load_scenario(write(tmp_path, data))
