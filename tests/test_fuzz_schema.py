"""Property tests of every input boundary, through ``simdist.cli.main``.

Scenarios are walked from the JSON Schema that ``simdist schema`` prints and shrunk to tiny
(``tests/fuzz_generators.py``); the mutated families replace one field, break the YAML text,
break a platform file, compute profile or measured trace, or put a broken value in a
``compare`` variant or ``sweep`` point; hypothesis-jsonschema's own documents of the same
schema, shrunk to tiny, run too. Each case runs in a sandbox
(``tests/fuzz_harness.py``) and must keep the command-line promise: exit 0, or exit 2 with
one line ``simdist: error: ...``; no exception escapes; nothing runs past the time limit or
exhausts memory; outputs hold no NaN/inf; nothing outside ``--out`` changes; an input that
is certainly invalid is refused. Odd command lines (``--out``, ``--set``, ``sweep --jobs``,
scenario paths that are a directory, a FIFO or ``/dev/zero``) are listed one by one.

The default suite runs 140 generated cases and the 50 listed command lines in about 40 s on
two cores (no shrinking, fixed examples); ``-m slow`` runs about 3,000 and shrinks a failure
to a minimal input.
``benchmarks/fuzz_inputs.py`` runs 10,000 and keeps the failing inputs.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from fuzz_generators import (PROFILE, TINY_PROFILE_TEXT, TRACES, Case, cli_cases, make_case, shrink_to_tiny,
                             tiny_scenario, warm_up_case)
from fuzz_harness import output_problem, run_case
from fuzz_mutations import dump_yaml
from fuzz_schema_walk import UNIT_FIELDS, HypothesisDraw, admits, generate, scenario_schema, schema_at

TIMEOUT_S = 8.0  # a tiny run takes well under a second
MEMORY_BYTES = 2 << 30  # address space a case may add to this process


@st.composite
def cases(draw, family: str) -> Case:
    return make_case(HypothesisDraw(draw), family)


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory):
    """A sandbox folder, after one untimed tiny run (what a first run imports is not charged to a case)."""
    root = tmp_path_factory.mktemp("fuzz") / "case"
    assert run_case(warm_up_case(), root, timeout_s=300).ok
    return root


def check(case: Case, sandbox) -> None:
    outcome = run_case(case, sandbox, timeout_s=TIMEOUT_S, memory_bytes=MEMORY_BYTES)
    assert outcome.ok, (f"{case.family} case ({case.what}) broke the promise: {outcome.failures}; "
                        f"exit status {outcome.status}; stderr: {outcome.stderr.strip()[-400:]!r}")


_CI = settings(deadline=None, derandomize=True, database=None, phases=[Phase.explicit, Phase.generate],
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example,
                                      HealthCheck.function_scoped_fixture])
_SLOW = settings(_CI, derandomize=False, phases=list(Phase))

BUDGET = {"valid": 30, "mutated": 40, "yaml": 20, "platform": 12, "profile": 12, "trace": 12, "variants": 8}


@pytest.mark.parametrize("family", sorted(BUDGET))
def test_generated_inputs_keep_the_promise(family, sandbox):
    @settings(_CI, max_examples=BUDGET[family])
    @given(cases(family))
    def run(case):
        check(case, sandbox)

    run()


@pytest.mark.slow
@pytest.mark.parametrize("family", sorted(BUDGET))
def test_many_generated_inputs_keep_the_promise(family, sandbox):
    @settings(_SLOW, max_examples=20 * BUDGET[family])
    @given(cases(family))
    def run(case):
        check(case, sandbox)

    run()


@pytest.mark.parametrize("case", cli_cases(), ids=lambda c: c.what[:50])
def test_odd_command_line_keeps_the_promise(case, sandbox):
    check(case, sandbox)


# -- the generator itself ------------------------------------------------------------------------

def _schema_errors(doc: dict) -> list[str]:
    """JSON Schema errors of ``doc``, except unit strings ('2ms') where the schema says number."""
    import jsonschema

    validator = jsonschema.Draft202012Validator(scenario_schema())
    return [f"{list(e.absolute_path)}: {e.message[:120]}" for e in validator.iter_errors(doc)
            if not _only_unit_strings(e)]


def _only_unit_strings(error) -> bool:
    """Whether ``error`` is a unit string where the schema says number — or a choice (anyOf, oneOf:
    an algorithm's options) one of whose branches fails on nothing else."""
    if isinstance(error.instance, str) and set(error.absolute_path) & UNIT_FIELDS:
        return True
    branches: dict = {}
    for sub in error.context or ():
        branches.setdefault(sub.relative_schema_path[0], []).append(sub)
    return any(all(_only_unit_strings(sub) for sub in subs) for subs in branches.values())


@settings(_CI, max_examples=60)
@given(st.data())
def test_walked_documents_match_the_schema(data):
    """The walk emits only what the schema allows (so 'valid' means schema-derived)."""
    doc = generate(HypothesisDraw(data.draw), scenario_schema())
    assert _schema_errors(doc) == []


@settings(_CI, max_examples=40)
@given(cases("valid"))
def test_valid_cases_are_tiny(case):
    import yaml

    doc = yaml.safe_load(case.files["inputs/scenario.yaml"])
    assert doc["workload"]["model"]["name"] == "mlp" and max(doc["workload"]["model"]["hidden"], default=1) <= 8
    assert doc["workload"]["dataset"]["samples"] <= 80
    assert doc["platform"]["nodes"] * doc["platform"]["node"]["devices"] <= 4
    assert doc["compute"]["profiles"] == [PROFILE] and doc["outputs"] == {"plots": False, "trace": False}
    assert case.files["inputs/" + PROFILE] == TINY_PROFILE_TEXT


def _json_schema_documents(max_examples: int):
    """Raw documents from hypothesis-jsonschema (odd strings, huge numbers), shrunk to tiny and run."""
    from hypothesis_jsonschema import from_schema
    from simdist.scenario import scenario_json_schema

    @settings(_CI, max_examples=max_examples)
    @given(raw=from_schema(scenario_json_schema()), data=st.data())
    def run(raw, data, sandbox):
        doc = shrink_to_tiny(HypothesisDraw(data.draw), raw)
        files = {"inputs/scenario.yaml": dump_yaml(doc), "inputs/" + PROFILE: TINY_PROFILE_TEXT}
        check(Case("jsonschema", "hypothesis-jsonschema document", ["run", "{root}/inputs/scenario.yaml", "--out",
                                                                     "{out}", "--quiet"], files), sandbox)

    return run


def test_hypothesis_jsonschema_documents_keep_the_promise(sandbox):
    _json_schema_documents(6)(sandbox=sandbox)


@pytest.mark.slow
def test_many_hypothesis_jsonschema_documents_keep_the_promise(sandbox):
    _json_schema_documents(300)(sandbox=sandbox)


def test_certainly_invalid_marks_follow_the_schema():
    """The ground truth of 'accepted-invalid' on a few fields whose rules are plain."""
    doc = {"workload": {"batch_size": 4, "optimizer": {"lr": 0.1}}, "platform": {"node": {"nic_link": {"kind": "shm"}}}}
    batch = schema_at(doc, ("workload", "batch_size"))
    lr = schema_at(doc, ("workload", "optimizer", "lr"))
    latency = schema_at(doc, ("platform", "node", "nic_link", "latency"))
    assert admits(batch, 4) and not admits(batch, 2.5) and not admits(batch, 0)
    assert admits(lr, 0.1) and not admits(lr, math.inf) and not admits(lr, -1) and not admits(lr, math.nan)
    assert admits(latency, 1e-6, unit="latency") and not admits(latency, -1e-6, unit="latency")


def test_the_harness_flags_each_broken_promise(tmp_path, sandbox):
    """The checks themselves: a write outside --out, an invalid input accepted, a hang, NaN/inf in outputs."""
    trace = "osu_latency_2nodes_tcp_ethernet.txt"
    outside = Case("trace", "summary written beside --out", ["calibrate", "trace", "{root}/inputs/" + trace,
                                                               "--summary", "{root}/cwd/summary.yaml"],
                   {"inputs/" + trace: (TRACES / trace).read_text()})
    assert [kind for kind, _ in run_case(outside, sandbox).failures] == ["data-loss"]
    files = {"inputs/scenario.yaml": dump_yaml(tiny_scenario()), "inputs/" + PROFILE: TINY_PROFILE_TEXT}
    argv = ["run", "{root}/inputs/scenario.yaml", "--out", "{out}", "--quiet"]
    assert [kind for kind, _ in run_case(Case("valid", "marked invalid", argv, files, invalid=True),
                                         sandbox).failures] == ["accepted-invalid"]
    assert [kind for kind, _ in run_case(Case("valid", "no time", argv, files), sandbox,
                                         timeout_s=1e-4).failures] == ["hang"]
    (tmp_path / "a.json").write_text('{"x": [1.0, NaN]}')
    assert "a.json" in output_problem(tmp_path)
    (tmp_path / "a.json").write_text('{"x": 1e999}')
    assert "a.json" in output_problem(tmp_path)
    (tmp_path / "a.json").unlink()
    (tmp_path / "b.csv").write_text("step,loss,label\n1,,x\n2,inf,y\n")
    assert "b.csv" in output_problem(tmp_path)
    (tmp_path / "b.csv").write_text("step,loss,label\n1,,x\n2,0.5,nan\n")
    assert "b.csv" in output_problem(tmp_path)
    (tmp_path / "b.csv").write_text("step,loss,label\n1,,x\n2,0.5,y\n")
    assert output_problem(tmp_path) is None
