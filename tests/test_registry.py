"""Registries: lookups by name, typos answered with the known names, one registration per name."""

from __future__ import annotations

import pytest

from simdist.algorithms import ALGORITHMS
from simdist.errors import InputError
from simdist.platform.devices import DEVICE_KINDS
from simdist.platform.links import LINK_KINDS
from simdist.platform.presets import PLATFORMS, preset
from simdist.registry import Registry
from simdist.runtime.collectives import COLLECTIVES
from simdist.scenario import scenario_from_dict


def test_unknown_algorithm_lists_the_known_ones():
    with pytest.raises(InputError) as info:
        ALGORITHMS.get("dasso")
    message = str(info.value)
    assert message.startswith("unknown algorithm 'dasso'; known: ")
    assert message == f"unknown algorithm 'dasso'; known: {', '.join(ALGORITHMS.names())}"
    assert "sync" in message.split("known: ")[1].split(", ")


@pytest.mark.parametrize("registry, must_know", [
    (COLLECTIVES, ["hierarchical", "halving_doubling", "ring", "tree"]),
    (LINK_KINDS, ["ib-hdr", "nvlink3", "shm"]),
    (DEVICE_KINDS, ["a100", "cpu", "h100"]),
    (PLATFORMS, ["cluster-a100-hdr", "dgx-a100", "laptop-cpu"]),
])
def test_every_registry_names_its_kind_and_lists_sorted_names_on_a_typo(registry, must_know):
    with pytest.raises(InputError) as info:
        registry.entry("no-such-thing")
    message = str(info.value)
    assert message.startswith(f"unknown {registry.kind} 'no-such-thing'; known: ")
    known = message.split("known: ")[1].split(", ")
    assert known == sorted(known) == registry.names()
    assert set(must_know) <= set(known)


def test_double_registration_raises():
    registry: Registry[int] = Registry("widget")
    registry.add("a", 1, "first")

    @registry.register("b", "second")
    def b():
        return 2

    with pytest.raises(ValueError, match="widget 'a' is registered twice"):
        registry.add("a", 3, "again")
    with pytest.raises(ValueError, match="widget 'b' is registered twice"):
        registry.register("b", "again")(lambda: 3)
    assert registry.get("a") == 1 and registry.get("b") is b  # the first registration survives


def test_builtin_names_cannot_be_registered_again():
    with pytest.raises(ValueError, match="registered twice"):
        COLLECTIVES.register("ring", "a second ring")(lambda ranks, nbytes, node_of: ())


def test_entries_keep_description_citation_and_config():
    registry: Registry[str] = Registry("thing")
    registry.add("x", "factory", "  a   description\n spread over lines ", citation="Someone 2020", config=dict)
    entry = registry.entry("x")
    assert (entry.name, entry.factory, entry.description, entry.citation, entry.config) == (
        "x", "factory", "a description spread over lines", "Someone 2020", dict)
    assert "x" in registry and "y" not in registry and len(registry) == 1
    assert [e.name for e in registry] == ["x"]


@pytest.mark.parametrize("name", [None, ["ring"], {"a": 1}])
def test_lookups_of_non_names_are_input_errors(name):
    with pytest.raises(InputError, match="unknown collective"):
        COLLECTIVES.get(name)


def test_every_model_of_the_world_cites_its_source():
    for registry in (COLLECTIVES, LINK_KINDS, DEVICE_KINDS):
        for entry in registry:
            assert entry.description and entry.citation, f"{registry.kind} {entry.name} has no description/citation"


def test_preset_returns_a_fresh_mapping_each_time():
    first = preset("laptop-cpu")
    first["node"]["devices"] = 99
    assert preset("laptop-cpu")["node"]["devices"] == 4


def test_a_scenario_with_a_typo_names_the_field_and_the_known_algorithms():
    data = {"platform": "laptop-cpu", "workload": {"model": "mlp"}, "algorithm": "dasso", "stop": {"steps": 1}}
    with pytest.raises(InputError) as info:
        scenario_from_dict(data, source="s.yaml")
    assert str(info.value) == f"s.yaml: algorithm.name: unknown algorithm 'dasso'; known: {', '.join(ALGORITHMS.names())}"


def test_a_scenario_with_an_unknown_platform_preset_lists_the_presets():
    data = {"platform": "laptop-gpu", "workload": {"model": "mlp"}, "algorithm": "sync", "stop": {"steps": 1}}
    with pytest.raises(InputError) as info:
        scenario_from_dict(data, source="s.yaml")
    assert str(info.value) == ("s.yaml: platform.preset: unknown platform preset 'laptop-gpu'; "
                               f"known: {', '.join(PLATFORMS.names())}")
