"""Fuzzing the scenario boundary with hypothesis.

* valid scenarios (every algorithm, small platforms, random sizes, noise, stragglers and
  faults) validate and run to a clear status on a tiny budget;
* near-valid scenarios (a valid one with one field replaced by junk, removed, or an unknown
  one added) either validate — and then run — or raise :class:`InputError`; no other
  exception ever escapes, and every message is one line.

The default suite runs a few hundred cases; ``-m slow`` runs well over a thousand.
"""

from __future__ import annotations

import copy
import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simdist.errors import InputError
from simdist.scenario import scenario_from_dict
from simdist.simulate import simulate

PROFILE = str(Path(__file__).parent / "data" / "tiny_profile.yaml")
STATUSES = {"completed", "step_limit", "time_limit", "target_reached", "stalled"}

# algorithm → (min workers, platform shape constraint, options strategy)
_OPTIONS = {
    "sync": st.fixed_dictionaries({}, optional={"collective": st.sampled_from(["ring", "tree", "halving_doubling"])}),
    "asgd": st.fixed_dictionaries({}, optional={"staleness_aware": st.booleans()}),
    "nsoftsync": st.fixed_dictionaries({"n": st.integers(1, 3)}),  # capped at the worker count below
    "dbs": st.fixed_dictionaries({"m": st.integers(1, 3)}),
    "dcs3gd": st.just({}),
    "nnt": st.just({"topology": "ring"}),
    "daso": st.fixed_dictionaries({"schedule": st.just("fixed"), "B": st.integers(1, 3), "S": st.integers(0, 1)}),
}
_SERVER = {"asgd", "nsoftsync", "dbs"}  # need a device for the parameter server


@st.composite
def valid_scenarios(draw) -> dict:
    name = draw(st.sampled_from(sorted(_OPTIONS)))
    options = draw(_OPTIONS[name])
    if name == "daso":
        nodes, devices = 2, 2
        workers = 4
    else:
        workers = draw(st.integers(3 if name == "nnt" else 1, 4))
        nodes = draw(st.integers(1, 2))
        need = workers + (1 if name in _SERVER else 0)
        devices = max(1, math.ceil(need / nodes))
    if "n" in options:
        options["n"] = min(options["n"], workers)
    stop = draw(st.one_of(
        st.fixed_dictionaries({"steps": st.integers(1, 4)}),
        st.fixed_dictionaries({"epochs": st.just(1)}),
        st.fixed_dictionaries({"virtual_time": st.sampled_from(["0.5ms", "2ms"])}),
    ))
    data = {
        "name": "fuzz",
        "seed": draw(st.integers(0, 2**31)),
        "platform": {"preset": "laptop-cpu", "nodes": nodes, "node": {"devices": devices}},
        "workers": workers,
        "workload": {"model": {"name": "mlp", "hidden": [draw(st.integers(2, 12))]},
                     "dataset": {"name": "synthetic", "samples": draw(st.integers(40, 100)),
                                 "features": draw(st.integers(2, 6)), "classes": draw(st.integers(2, 3))},
                     "batch_size": draw(st.integers(4, 16)),
                     "optimizer": {"name": draw(st.sampled_from(["sgd", "adam"])), "lr": draw(st.floats(1e-4, 0.5))}},
        "algorithm": {"name": name, **options},
        "stop": stop,
        "evaluation": {"every_steps": draw(st.integers(1, 5))},
        "network": {"collective_fidelity": draw(st.sampled_from(["analytic", "flows"]))},
        "compute": {"profiles": [PROFILE], "noise_sigma": draw(st.sampled_from([0.0, 0.1, 0.5]))},
        "outputs": {"plots": False, "trace": False},
    }
    if draw(st.booleans()):
        data["compute"]["stragglers"] = [{"ranks": [draw(st.integers(0, workers - 1))],
                                          "factor": draw(st.floats(0.5, 4)), "duration": "1ms",
                                          "start": draw(st.sampled_from([0, "0.1ms"]))}]
    faults = {}
    if draw(st.booleans()):
        faults["node_crash"] = [{"node": draw(st.integers(0, nodes - 1)), "at": draw(st.sampled_from(["0s", "0.3ms", "5s"]))}]
    if draw(st.booleans()):
        faults["link_degradation"] = [{"links": ["*"], "factor": draw(st.floats(0.01, 1)), "start": "0.1ms",
                                       "duration": draw(st.sampled_from([None, "1ms"]))}]
    if faults:
        data["faults"] = faults
    return data


_PATHS = [
    ("seed",), ("workers",), ("name",), ("platform",), ("platform", "nodes"), ("platform", "node"),
    ("platform", "node", "devices"), ("platform", "preset"), ("workload",), ("workload", "model"),
    ("workload", "model", "name"), ("workload", "model", "hidden"), ("workload", "dataset"),
    ("workload", "dataset", "samples"), ("workload", "dataset", "classes"), ("workload", "batch_size"),
    ("workload", "optimizer"), ("workload", "optimizer", "lr"), ("workload", "optimizer", "name"),
    ("algorithm",), ("algorithm", "name"), ("stop",), ("stop", "steps"), ("stop", "epochs"), ("stop", "virtual_time"),
    ("stop", "target_accuracy"), ("stop", "max_events"), ("evaluation",), ("evaluation", "every_steps"),
    ("evaluation", "every_time"), ("network", "collective"), ("network", "collective_fidelity"),
    ("compute", "profiles"), ("compute", "noise_sigma"), ("compute", "stragglers"), ("faults",),
    ("faults", "node_crash"), ("faults", "link_degradation"), ("outputs", "plots"),
]

junk = st.one_of(
    st.none(), st.booleans(), st.integers(-10, 10), st.integers(-2**70, 2**70),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
    st.sampled_from(["-3Gbps", "0s", "1e400s", "nan", "inf", "10 parsecs", "../../etc/passwd", "os:system",
                     "mlp", "sync", "daso", "ring", "2ms", "", "*"]),
    st.lists(st.integers(-3, 3), max_size=3), st.dictionaries(st.text(max_size=5), st.integers(), max_size=2),
    st.just([{"node": 99, "at": "1s"}]), st.just([{"links": ["n9.*"], "factor": 0.5}]),
    st.just([{"ranks": [-1], "factor": 2, "duration": "1s"}]),
)


@st.composite
def near_valid_scenarios(draw) -> dict:
    data = copy.deepcopy(draw(valid_scenarios()))
    path = draw(st.sampled_from(_PATHS))
    node = data
    for key in path[:-1]:
        child = node.get(key)
        if not isinstance(child, dict):
            child = node[key] = {}
        node = child
    action = draw(st.sampled_from(["replace", "replace", "delete", "extra"]))
    if action == "replace":
        node[path[-1]] = draw(junk)
    elif action == "delete":
        node.pop(path[-1], None)
    else:
        node[draw(st.text(min_size=1, max_size=8))] = draw(junk)
    return data


def check_runs(data: dict) -> None:
    """Validation either fails with InputError or succeeds and the run ends with a known status."""
    try:
        scenario = scenario_from_dict(copy.deepcopy(data), source="fuzz.yaml")
    except InputError as exc:
        assert "\n" not in str(exc) and str(exc)
        return
    try:
        result = simulate(scenario)
    except InputError as exc:  # found only when the workload is built (e.g. a model option)
        assert "\n" not in str(exc)
        return
    assert result.status in STATUSES, result.status


def check_validates(data: dict) -> None:
    try:
        scenario_from_dict(copy.deepcopy(data), source="fuzz.yaml")
    except InputError as exc:
        assert "\n" not in str(exc) and str(exc)


_FAST = settings(max_examples=40, deadline=None, derandomize=True,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@_FAST
@given(valid_scenarios())
def test_valid_scenarios_run_to_a_clear_status(data):
    scenario = scenario_from_dict(copy.deepcopy(data), source="fuzz.yaml")
    result = simulate(scenario)
    assert result.status in STATUSES
    if not scenario.faults.node_crash:
        assert result.status != "stalled"


@settings(_FAST, max_examples=300)
@given(near_valid_scenarios())
def test_near_valid_scenarios_validate_or_fail_with_one_line(data):
    check_validates(data)


@settings(_FAST, max_examples=40)
@given(near_valid_scenarios())
def test_near_valid_scenarios_that_validate_also_run(data):
    check_runs(data)


_SLOW = settings(max_examples=600, deadline=None, derandomize=False,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.mark.slow
@_SLOW
@given(valid_scenarios())
def test_slow_valid_scenarios(data):
    test_valid_scenarios_run_to_a_clear_status.hypothesis.inner_test(data)


@pytest.mark.slow
@settings(_SLOW, max_examples=1200)
@given(near_valid_scenarios())
def test_slow_near_valid_scenarios(data):
    check_runs(data)
