"""Generated command-line inputs for fuzzing every input boundary: the cases.

One place for the generators used by ``tests/test_fuzz_schema.py`` (hypothesis, a small
budget in CI) and ``benchmarks/fuzz_inputs.py`` (10,000 seeded cases in worker processes),
with :mod:`fuzz_schema_walk` (values from the JSON Schema) and :mod:`fuzz_mutations` (one
thing broken). A generator makes its choices through a ``Draw``: a seeded ``random.Random``
(fast; case ``i`` of seed ``s`` has a stream of its own, see :func:`case_for_seed`) or
hypothesis (so that a failure shrinks).

Families of :class:`Case` (each knows its command line and input files):

* ``valid`` — a scenario walked from the JSON Schema that ``simdist schema`` prints (every
  optional field, anyOf/oneOf branch and enum can appear), then shrunk to tiny: at most 4
  ranks, an mlp with hidden widths up to 8 on at most 80 synthetic samples, a few steps
  (and ``stop.max_wall_time`` of at most 2 s), the tiny test compute profile, no plots and
  no trace;
* ``mutated`` — a valid one with one field replaced (a bool, a string, a fraction where an
  integer belongs, 1e6/4e9, inf/-inf/nan, 1e308, 1e-300, a negative number, zero, null, a
  deep mapping, a huge list, the field's own maximum or minimum), a field removed, an
  unknown key added, or two numeric fields set to their extremes at once;
* ``yaml`` — a valid one written as broken YAML text: duplicate keys, alias bombs, deep
  nesting, two documents, control characters, a python tag, truncation, tabs, CRLF, BOM;
* ``platform`` / ``profile`` / ``trace`` — a platform file, a compute profile, or a measured
  trace (``simdist calibrate trace``) with one field or line broken;
* ``variants`` — ``simdist compare`` / ``simdist sweep`` of a valid scenario with a second
  variant or grid point whose one field holds a mutated value;
* ``cli`` — odd command lines, listed one by one in :func:`cli_cases`.

``Case.invalid`` is the ground truth of "accepted though invalid": set only where
invalidity is certain (see :mod:`fuzz_mutations`).
"""

from __future__ import annotations

import copy
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import yaml

from fuzz_mutations import FREE_SECTIONS, alias_bomb, dump_yaml, mutate_value, mutated_scenario, yaml_text_mutation
from fuzz_schema_walk import Draw, RandomDraw, generate, scenario_schema

__all__ = ["Case", "FAMILIES", "make_case", "case_for_seed", "valid_scenario", "shrink_to_tiny", "tiny_scenario",
           "cli_cases", "warm_up_case", "PROFILE", "SCENARIO", "TINY_PROFILE_TEXT", "TRACES"]

TINY_PROFILE_TEXT = Path(__file__).with_name("data").joinpath("tiny_profile.yaml").read_text()
PROFILE = "profile.yaml"  # next to the scenario: profiles resolve relative to it
SCENARIO = "scenario.yaml"
# The simulator's own guard in every generated scenario: a mutation that asks for a long but
# bounded run (stop.steps: 1e6, which the work estimate allows up to 6 h) ends within it, so
# that a hang is something no guard stops (parsing, building, planning, an unbounded loop).
WALL_GUARD = "2s"
TRACES = Path(__file__).resolve().parents[1] / "calibration" / "traces"
TRACE_FILES = ("osu_latency_2nodes_tcp_ethernet.txt", "osu_bw_2nodes_tcp_ethernet.txt",
               "osu_allreduce_2nodes_tcp_ethernet.txt", "nccl-tests_all_reduce_2x8xA100-40GB_roce.txt")


@dataclass(repr=False)
class Case:
    """One command line and the files it reads.

    ``argv``, ``out`` and file names may hold ``{root}`` (the sandbox); ``argv`` may hold
    ``{out}`` (``out`` as given: relative to the working directory ``{root}/cwd``, or
    absolute). Files are written under the sandbox before the run, ``fifos`` made with
    ``os.mkfifo``, ``dirs`` created.
    """

    family: str
    what: str  # one line: what makes this input special
    argv: list[str]
    files: dict[str, str | bytes] = field(default_factory=dict)
    fifos: list[str] = field(default_factory=list)
    dirs: list[str] = field(default_factory=list)
    out: str = "{root}/out"  # the output area: changes under it are allowed
    invalid: bool = False  # certain to be refused (exit status 2)
    subprocess: bool = False  # run as a real process (a read that could block the runner itself)

    def __repr__(self) -> str:  # the files can be megabytes: name them with their sizes
        files = ", ".join(f"{name} ({len(content)} chars)" for name, content in self.files.items())
        argv = [a if len(a) < 200 else a[:60] + f"...({len(a)} chars)" for a in self.argv]
        return f"Case({self.family}: {self.what}; argv {argv}; files {files}; certainly invalid: {self.invalid})"


def _run_argv(*extra: str, scenario: str = "{root}/inputs/" + SCENARIO) -> list[str]:
    return ["run", scenario, "--out", "{out}", "--quiet", *extra]


def _scenario_files(doc: Any, text: str | None = None) -> dict[str, str | bytes]:
    return {"inputs/" + SCENARIO: text if text is not None else dump_yaml(doc), "inputs/" + PROFILE: TINY_PROFILE_TEXT}


# -- valid scenarios, shrunk to tiny ----------------------------------------------------------

_PS = {"asgd", "nsoftsync", "dbs"}


def valid_scenario(d: Draw) -> dict:
    """A scenario walked from the schema, then shrunk to tiny and made consistent."""
    return shrink_to_tiny(d, generate(d, scenario_schema()))


def shrink_to_tiny(d: Draw, doc: dict) -> dict:
    """Cap every size of a schema-valid scenario and tie its cross-field references together
    (workers <= devices, ranks and nodes that exist, each algorithm's shape rules)."""
    doc = copy.deepcopy(doc)
    algorithm = doc.get("algorithm") or {}
    name = algorithm.setdefault("name", "sync")
    nodes = 2 if name in ("nnt", "daso") else d.integer(1, 2)
    devices = 2 if name in _PS or name == "nnt" else d.integer(1, 2)
    ranks = nodes * devices
    doc["platform"] = _tiny_platform(d, doc.get("platform"), nodes, devices)
    servers = 1 if name in _PS else 0
    workers = ranks if name in ("nnt", "daso") else d.integer(1, ranks - servers)
    doc["workers"] = workers if servers or d.chance(0.7) else None
    doc["algorithm"] = _tiny_algorithm(d, algorithm, workers, ranks)
    doc["workload"] = _tiny_workload(d, doc.get("workload") or {})
    doc["stop"] = _tiny_stop(d, doc.get("stop") or {}, timing_only=bool(doc["workload"].get("timing_only")))
    evaluation = doc.get("evaluation") or {}
    if evaluation.get("every_steps") is not None:
        evaluation.pop("every_time", None)
    doc["evaluation"] = evaluation
    compute = doc.get("compute") or {}
    compute["profiles"] = [PROFILE]
    compute["stragglers"] = [{**s, "ranks": sorted({r % ranks for r in s["ranks"]})}
                             for s in compute.get("stragglers", [])[:2]]
    for straggler in compute["stragglers"]:
        if straggler.get("every") is not None:
            straggler.pop("random", None)
    doc["compute"] = compute
    faults = doc.get("faults") or {}
    faults["node_crash"] = [{**c, "node": c["node"] % nodes} for c in faults.get("node_crash", [])[:1]]
    faults["link_degradation"] = faults.get("link_degradation", [])[:2]
    doc["faults"] = faults
    doc["outputs"] = {"plots": False, "trace": False}
    doc["compare"] = [{**p, "label": f"{p['label']}{i}"} for i, p in enumerate(doc.get("compare", [])[:2])]
    return doc


def _tiny_workload(d: Draw, workload: dict) -> dict:
    workload["model"] = {"name": "mlp", "hidden": [d.integer(1, 8) for _ in range(d.integer(0, 2))]}
    kept = {k: v for k, v in (workload.get("dataset") or {}).items() if k in ("separation", "test_fraction")}
    workload["dataset"] = {"name": "synthetic", "samples": d.integer(20, 80), "features": d.integer(1, 6),
                           "classes": d.integer(2, 3), **kept}
    workload["batch_size"] = d.integer(1, 16)
    workload["allow_code_import"] = False
    optimizer = workload.get("optimizer") or {}
    if optimizer.get("nesterov") and not optimizer.get("momentum"):
        optimizer["momentum"] = 0.5
    if workload.get("timing_only"):
        workload["loss_curve"] = _one_loss_curve(d, workload.get("loss_curve"))
    else:
        workload.pop("loss_curve", None)
    return workload


def _tiny_stop(d: Draw, stop: dict, *, timing_only: bool) -> dict:
    stop = {k: v for k, v in stop.items() if k in ("target_accuracy", "stop_at_target", "max_events", "max_wall_time")}
    limit = d.choice(["steps", "steps", "epochs", "virtual_time"])
    stop[limit] = {"steps": d.integer(1, 4), "epochs": 1, "virtual_time": d.choice(["0.5ms", "2ms", 0.001])}[limit]
    if stop.get("max_wall_time") is None:
        stop["max_wall_time"] = WALL_GUARD
    if timing_only:
        stop.pop("target_accuracy", None)
    return stop


def _one_loss_curve(d: Draw, curve: dict | None) -> dict:
    """A timing-only run's loss curve: per-epoch values or a law, not both."""
    curve = dict(curve or {})
    if curve.get("values") and (curve.get("law") is None or d.chance(0.5)):
        curve.pop("law", None)
    else:
        curve.pop("values", None)
        curve["law"] = curve.get("law") or d.choice(["exponential", "power", "step"])
    return curve


def _key_paths(doc: Any, prefix: tuple = ()) -> list[tuple]:
    """Every path of mapping keys in ``doc`` (no list indexes: what a dotted key can name)."""
    if not isinstance(doc, dict):
        return []
    return [p for key, value in doc.items() for p in [prefix + (key,), *_key_paths(value, prefix + (key,))]]


def _tiny_platform(d: Draw, platform: Any, nodes: int, devices: int) -> dict:
    platform = dict(platform) if isinstance(platform, dict) else {}
    platform.pop("name", None)
    platform.update(preset="laptop-cpu", nodes=nodes)
    node = platform.get("node") or {}
    node["devices"] = devices
    if node.get("cores") is not None:
        node.pop("core_sets", None)
    if node.get("core_sets"):
        first = node["core_sets"][0]
        node["core_sets"] = [{**first, "devices": sorted({x % devices for x in first["devices"]})}]
    platform["node"] = node
    fabric = platform.get("fabric") or {}
    if fabric.get("dims"):
        fabric["dims"] = [nodes]
    if "nodes_per_leaf" in fabric:
        fabric["nodes_per_leaf"] = d.integer(1, nodes)
    platform["fabric"] = fabric
    platform["device_overrides"] = [{**o, "ranks": sorted({r % (nodes * devices) for r in o["ranks"]})}
                                    for o in platform.get("device_overrides", [])[:2]]
    return platform


def _tiny_algorithm(d: Draw, algorithm: dict, workers: int, ranks: int) -> dict:
    name = algorithm["name"]
    if name in _PS:
        algorithm["servers"] = 1
        algorithm["server_ranks"] = None if d.chance(0.7) else [ranks - 1]
        if name == "nsoftsync":
            algorithm["n"] = min(algorithm.get("n", 1), workers)
        if name == "dbs" and algorithm.get("b_max") is not None:
            algorithm["b_min"] = min(algorithm.get("b_min", 1), algorithm["b_max"])
        elif name == "dbs":
            algorithm["b_min"] = min(algorithm.get("b_min", 1), 4)
    if name == "nnt":
        algorithm["topology"], algorithm["grid_shape"] = "ring", None
    if name == "daso" and algorithm.get("schedule", "adaptive") == "adaptive":
        algorithm.pop("B", None), algorithm.pop("S", None)
    if name == "daso" and algorithm.get("S") is not None:
        algorithm["S"] = min(algorithm["S"], algorithm.get("B") or 4)
    if name == "dcs3gd" and algorithm.get("decay_iterations") is not None:
        algorithm["decay_iterations"] = min(algorithm["decay_iterations"], 8)
    return algorithm


def tiny_scenario() -> dict:
    """The smallest sync scenario (two ranks, two steps): the base of the cli and profile cases."""
    return {
        "name": "fuzz", "platform": {"preset": "laptop-cpu", "node": {"devices": 2}},
        "workload": {"model": {"name": "mlp", "hidden": [4]},
                     "dataset": {"name": "synthetic", "samples": 40, "features": 3, "classes": 2}, "batch_size": 4},
        "algorithm": {"name": "sync"}, "stop": {"steps": 2, "max_wall_time": WALL_GUARD},
        "compute": {"profiles": [PROFILE]}, "outputs": {"plots": False, "trace": False},
    }


def warm_up_case() -> Case:
    """A tiny valid run, untimed, so that what a first run imports lazily is not charged to a case."""
    return Case("valid", "warm-up", _run_argv(), _scenario_files(tiny_scenario()))


# -- families --------------------------------------------------------------------------------------

def _valid_case(d: Draw) -> Case:
    doc = valid_scenario(d)
    return Case("valid", f"algorithm {doc['algorithm']['name']}", _run_argv(), _scenario_files(doc))


def _mutated_case(d: Draw) -> Case:
    doc, what, invalid = mutated_scenario(d, valid_scenario(d))
    return Case("mutated", what, _run_argv(), _scenario_files(doc), invalid=invalid)


def _yaml_case(d: Draw) -> Case:
    text, what, invalid = yaml_text_mutation(d, valid_scenario(d))
    return Case("yaml", what, _run_argv(), _scenario_files(None, text), invalid=invalid)


def _platform_case(d: Draw) -> Case:
    """The platform in a file of its own (``platform: plat.yaml``), mutated there."""
    doc = valid_scenario(d)
    platform = dict(doc.pop("platform"))
    platform.pop("preset")
    platform["name"] = "fuzz-platform"
    doc["platform"] = {"file": "plat.yaml"}
    what, invalid = "as generated", False
    if d.chance(0.75):
        path = d.choice(_key_paths(platform))
        platform, what, invalid = mutate_value(d, platform, path, {"$ref": "#/$defs/PlatformSpec"})
    files = _scenario_files(doc)
    files["inputs/plat.yaml"] = dump_yaml(platform)
    return Case("platform", "platform file: " + what, _run_argv(), files, invalid=invalid)


_PROFILE_SCHEMA = {
    "type": "object", "required": ["device", "models"], "additionalProperties": True,
    "properties": {"device": {"type": "string"}, "models": {"type": "object", "additionalProperties": {
        "type": "object", "required": ["t0_s", "t1_s"], "additionalProperties": True,
        "properties": {"t0_s": {"type": "number", "minimum": 0}, "t1_s": {"type": "number", "exclusiveMinimum": 0},
                       "forward_flops_per_sample": {"type": "number", "exclusiveMinimum": 0}}}}}}


def _profile_case(d: Draw) -> Case:
    """The compute profile the scenario lists, with one field mutated."""
    doc = tiny_scenario()
    profile = yaml.safe_load(TINY_PROFILE_TEXT)
    path = d.choice([("device",), ("models",), ("models", "mlp"), ("models", "mlp", "t0_s"), ("models", "mlp", "t1_s"),
                     ("models", "mlp", "t1_s"), ("models", "mlp", "t0_s")])
    profile, what, invalid = mutate_value(d, profile, path, _PROFILE_SCHEMA)
    files = {**_scenario_files(doc), "inputs/" + PROFILE: dump_yaml(profile)}
    return Case("profile", "profile: " + what, _run_argv(), files, invalid=invalid)


def _trace_case(d: Draw) -> Case:
    """A measured trace with one number replaced, a line dropped or doubled, or cut short."""
    name = d.choice(TRACE_FILES)
    lines = (TRACES / name).read_text().splitlines(keepends=True)
    data = [i for i, line in enumerate(lines) if line.strip() and not line.startswith("#")]
    i = d.choice(data)
    kind = d.choice(["number", "number", "drop", "double", "cut", "garbage"])
    invalid = False
    if kind == "number":
        fields = lines[i].split()
        j = d.integer(0, len(fields) - 1)
        new = d.choice(["inf", "nan", "-1", "0", "1e308", "1e-300", "-inf", "x", "99999999999999999999"])
        invalid = new in ("inf", "nan", "-inf") and name.startswith("osu")  # OSU columns are all read
        lines[i] = lines[i].replace(fields[j], new, 1)
        what = f"line {i + 1} field {j + 1} <- {new}"
    elif kind == "drop":
        del lines[i]
        what = f"line {i + 1} dropped"
    elif kind == "double":
        lines.insert(i, lines[i])
        what = f"line {i + 1} doubled"
    elif kind == "cut":
        cut = d.integer(0, len(lines[i]))
        lines = lines[:i] + [lines[i][:cut]]
        what = f"cut in line {i + 1}"
    else:
        lines.insert(i, "\x00\xff garbage \x01\n")
        what = f"garbage before line {i + 1}"
    argv = ["calibrate", "trace", "{root}/inputs/" + name, "--summary", "{out}/summary.yaml"]
    if "allreduce" not in name:
        argv += ["--out", "{out}/overlay.yaml"]
    return Case("trace", f"{name}: {what}", argv, {"inputs/" + name: "".join(lines)}, dirs=["out"], invalid=invalid)


def _variants_case(d: Draw) -> Case:
    """'simdist compare' or 'simdist sweep' of a valid scenario whose second variant or grid
    point sets one field (dotted key) to a mutated value; every variant is validated first."""
    doc = valid_scenario(d)
    path = d.choice([p for p in _key_paths(doc) if p[0] not in FREE_SECTIONS and p[0] != "platform" or
                     p[:2] == ("platform", "nodes")])
    mutated, what, invalid = mutate_value(d, copy.deepcopy(doc), path)
    value = mutated
    for key in path:
        value = value[key]
    dotted = ".".join(path)
    doc.pop("sweep", None)
    if d.chance(0.5):
        doc["compare"] = [{"label": "base", "set": {}}, {"label": "changed", "set": {dotted: value}}]
        argv = ["compare", "{root}/inputs/" + SCENARIO, "--out", "{out}", "--quiet"]
    else:
        doc["compare"] = []
        original = copy.deepcopy(doc)
        for key in path:
            original = original[key]
        doc["sweep"] = {"grid": {dotted: [original, value]}}
        argv = ["sweep", "{root}/inputs/" + SCENARIO, "--out", "{out}", "--jobs", "1", "--quiet"]
    return Case("variants", f"{argv[0]}: {what}", argv, _scenario_files(doc), invalid=invalid)


def cli_cases() -> list[Case]:
    """Odd command lines around a tiny valid scenario (every one listed, none drawn)."""
    base = _scenario_files(tiny_scenario())
    keep = {**base, "cwd/keep.txt": "keep"}
    deep = "a." * 500 + "b=1"
    sweep = copy.deepcopy(tiny_scenario())
    sweep["sweep"] = {"grid": {"stop.steps": [1, 2]}}
    huge_grid = copy.deepcopy(tiny_scenario())
    huge_grid["sweep"] = {"grid": {key: [i + 1 for i in range(30)] for key in (
        "seed", "stop.steps", "workload.batch_size", "workload.dataset.samples", "workload.dataset.features",
        "evaluation.every_steps")}}
    long_name = copy.deepcopy(tiny_scenario())
    long_name["name"] = "n" * 300
    cases = [
        Case("cli", "--out .", _run_argv(), keep, out=".", invalid=True),
        Case("cli", "--out ..", _run_argv(), keep, out="..", invalid=True),
        Case("cli", "--out an existing file", _run_argv(), {**base, "cwd/afile": "data"}, out="afile", invalid=True),
        Case("cli", "--out a 300-character name", _run_argv(), base, out="{root}/" + "o" * 300, invalid=True),
        Case("cli", "--out /proc/1/x", _run_argv(), base, out="/proc/1/x", invalid=True),
        Case("cli", "--out /dev/null", _run_argv(), base, out="/dev/null", invalid=True),
        Case("cli", "--out under a regular file", _run_argv(), {**base, "cwd/afile": "data"}, out="afile/sub",
             invalid=True),
        Case("cli", "name of 300 characters, no --out", ["run", "{root}/inputs/" + SCENARIO, "--quiet"],
             _scenario_files(long_name), out="results", invalid=True),
        Case("cli", "--set 500 levels deep", _run_argv("--set", deep), base, invalid=True),
        Case("cli", "--set 100000 levels deep", _run_argv("--set", "a." * 100_000 + "b=1"), base, invalid=True),
        Case("cli", "--set a value nested 100000 deep",
             _run_argv("--set", "workload.model.hidden=" + "[" * 100_000 + "]" * 100_000), base, invalid=True),
        Case("cli", "--set an alias bomb", _run_argv("--set", "description=" + alias_bomb(9, 9)), base),
    ]
    for value in ("workers=.inf", "workers=.nan", "workers=true", "workers=2.5", "workload.optimizer.lr=.inf",
                  "workload.optimizer.lr=1e308", "workload.batch_size=true", "=1", "workers", ".workers=1",
                  "workers..x=1", "platform.nodes=-1", "stop.steps=[1", "name=!!python/name:os.system",
                  "platform.node.cores=1e-300", "platform.node.nic_link.bandwidth=.inf"):
        cases.append(Case("cli", f"--set {value}", _run_argv("--set", value), base,
                          invalid=value not in ("workload.optimizer.lr=1e308", "platform.node.cores=1e-300")))
    for value in ("workload.batch_size=4000000000", "platform.nodes=1000000", "platform.nodes=4000000000",
                  "workload.model.hidden=[4000000000]", "evaluation.every_time=1e-300", "stop.steps=4000000000"):
        cases.append(Case("cli", f"--set {value}", _run_argv("--set", value), base))
    sweep_files = _scenario_files(sweep)
    for jobs in ("0", "-1"):
        cases.append(Case("cli", f"sweep --jobs {jobs}",
                          ["sweep", "{root}/inputs/" + SCENARIO, "--out", "{out}", "--jobs", jobs, "--quiet"],
                          sweep_files, invalid=True))
    cases.append(Case("cli", "sweep of 30^6 points", ["sweep", "{root}/inputs/" + SCENARIO, "--out", "{out}",
                                                     "--jobs", "1", "--quiet"], _scenario_files(huge_grid)))
    cases.append(Case("cli", "sweep of 2 points", ["sweep", "{root}/inputs/" + SCENARIO, "--out", "{out}",
                                                   "--jobs", "1", "--quiet"], sweep_files))
    scenario_paths = [
        ("scenario path is a directory", "{root}/inputs", {}, [], False),
        ("scenario path is a FIFO", "{root}/inputs/fifo.yaml", {}, ["inputs/fifo.yaml"], True),
        ("scenario path is /dev/zero", "/dev/zero", {}, [], True),
        ("scenario path is /dev/null", "/dev/null", {}, [], False),
        ("scenario path does not exist", "{root}/inputs/none.yaml", {}, [], False),
        ("scenario file is empty", "{root}/inputs/empty.yaml", {"inputs/empty.yaml": ""}, [], False),
        ("scenario path is /proc/self/mem", "/proc/self/mem", {}, [], False),
    ]
    for what, path, files, fifos, isolated in scenario_paths:
        cases.append(Case("cli", what, _run_argv(scenario=path), {**base, **files}, fifos=fifos, invalid=True,
                          subprocess=isolated))
    cases += [
        Case("cli", "list of an unknown kind", ["list", "bogus"], {}, invalid=True),
        Case("cli", "no command", [], {}, invalid=True),
        Case("cli", "compare without variants", ["compare", "{root}/inputs/" + SCENARIO, "--out", "{out}", "--quiet"],
             base, invalid=True),
        Case("cli", "plot of a folder that is no result", ["plot", "{root}/inputs", "--out", "{out}"], base,
             invalid=True),
        Case("cli", "report of a folder that is no sweep", ["report", "{root}/inputs", "--out", "{out}"], base,
             invalid=True),
    ]
    return cases


def _cli_case(d: Draw) -> Case:
    return d.choice(cli_cases())


FAMILIES: dict[str, tuple[float, Callable[[Draw], Case]]] = {  # family: (share of the cases, generator)
    "valid": (0.28, _valid_case), "mutated": (0.32, _mutated_case), "yaml": (0.11, _yaml_case),
    "platform": (0.07, _platform_case), "profile": (0.05, _profile_case), "trace": (0.05, _trace_case),
    "variants": (0.08, _variants_case), "cli": (0.04, _cli_case),
}


def make_case(d: Draw, family: str | None = None) -> Case:
    """One case of ``family`` (drawn by weight when None)."""
    if family is None:
        pick, total = d.real(0, 1), 0.0
        for family, (weight, _) in FAMILIES.items():
            total += weight
            if pick <= total:
                break
    return FAMILIES[family][1](d)


def case_for_seed(seed: int, index: int, family: str | None = None) -> Case:
    """Case ``index`` of the benchmark's run with ``seed`` (each case has its own stream)."""
    return make_case(RandomDraw(random.Random(f"{seed}:{index}")), family)
