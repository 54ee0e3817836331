"""A run's content hash: what its numbers depend on, so that a sweep reuses only what still holds.

The hash is the SHA-256 of the canonical JSON of

* the resolved scenario and platform and the seed (the files a scenario names for its
  ``platform:`` and ``platform.overlays`` are read into the resolved platform, so their
  contents are in it already; so are noise fits and collective tables, which are inline
  sections of a scenario or an overlay);
* the bytes (SHA-256) of every other file a run reads on the scenario's word, which the
  resolved scenario names only by path: the compute profiles (the shipped
  ``calibration/profiles/*.yaml`` and ``compute.profiles``) and, where
  ``workload.allow_code_import`` lets a scenario import code, the source file of the module
  that defines its model, algorithm or dataset (that file only, not what it imports);
* simdist's version (``simdist.__version__``).

:func:`run_inputs` lists the files and the version; the manifest records that list
(``inputs``: kind, name, path and sha256 of each file) so that a user can see why a point was
computed again, and :func:`input_changes` says which of them differ between two lists. A
file's name (its place in the scenario or the shipped folder, a module's name) and its bytes
enter the hash, not where it lies on disk: a sweep folder moved with its scenario stays valid.
A file that cannot be read is listed with ``sha256: null``; the run itself names the problem.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import json
import sys
from pathlib import Path
from typing import Any

from .errors import InputError
from .inputfile import read_input_bytes
from .metrics import jsonable

__all__ = ["content_hash", "run_inputs", "scenario_content_hash", "input_changes", "simdist_version",
           "MAX_MODULE_SOURCE_BYTES"]

MAX_MODULE_SOURCE_BYTES = 16 << 20  # a module's source is kilobytes; anything larger is not source
_OWN_PACKAGE = __name__.partition(".")[0]


def content_hash(scenario: dict[str, Any], platform: dict[str, Any], seed: int,
                 inputs: dict[str, Any] | None = None) -> str:
    """SHA-256 (hex) of the canonical JSON of a run's inputs: scenario, platform, seed and, when
    given, ``inputs`` (:func:`run_inputs`: simdist's version and each referenced file's bytes)."""
    payload: dict[str, Any] = {"scenario": scenario, "platform": platform, "seed": seed}
    if inputs is not None:
        payload["inputs"] = _hashed_part(inputs)
    canonical = json.dumps(jsonable(payload), sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                           allow_nan=False)
    return hashlib.sha256(canonical.encode("ascii")).hexdigest()


def scenario_content_hash(scenario: Any) -> tuple[str, dict[str, Any]]:
    """The content hash a run of ``scenario`` (a validated :class:`~simdist.scenario.Scenario`)
    records in its manifest, and its :func:`run_inputs`; computed without running it."""
    from .platform.topology import Platform

    inputs = run_inputs(scenario)
    platform = Platform(scenario.platform).describe()
    return content_hash(scenario.resolved(), platform, scenario.seed, inputs), inputs


def run_inputs(scenario: Any) -> dict[str, Any]:
    """simdist's version and the files ``scenario`` makes a run read, each ``{kind, name, path, sha256}``."""
    files = _profile_files(scenario) + _code_files(scenario)
    return {"simdist_version": simdist_version(), "files": files}


def input_changes(stored: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """What differs from ``stored`` to ``current`` (both :func:`run_inputs`), one phrase each:
    ``"profile calibration/profiles/cpu.yaml changed"``, ``"simdist version 0.1.0 -> 0.2.0"``."""
    changes = []
    if stored.get("simdist_version") != current.get("simdist_version"):
        changes.append(f"simdist version {stored.get('simdist_version')} -> {current.get('simdist_version')}")
    before = {(f.get("kind"), f.get("name")): f.get("sha256") for f in stored.get("files") or []}
    after = {(f["kind"], f["name"]): f["sha256"] for f in current.get("files") or []}
    for (kind, name), digest in after.items():
        if (kind, name) not in before:
            changes.append(f"{kind} {name} added")
        elif before[(kind, name)] != digest:
            changes.append(f"{kind} {name} changed")
    changes += [f"{kind} {name} removed" for kind, name in before if (kind, name) not in after]
    return changes


def simdist_version() -> str:
    """``simdist.__version__``, else the installed distribution's version, else ``"unknown"``."""
    module = sys.modules.get(_OWN_PACKAGE)
    version = getattr(module, "__version__", None)
    if version:
        return str(version)
    try:
        return importlib.metadata.version(_OWN_PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


# --------------------------------------------------------------------------- helpers


def _hashed_part(inputs: dict[str, Any]) -> dict[str, Any]:
    """What of :func:`run_inputs` enters the hash: the version and each file's kind, name and bytes."""
    files = inputs.get("files")
    listed = None if files is None else [[f["kind"], f["name"], f["sha256"]] for f in files]  # in reading order
    return {"simdist_version": inputs.get("simdist_version"), "files": listed}


def _file_entry(kind: str, name: str, path: Path | None, what: str, max_bytes: int | None = None) -> dict[str, Any]:
    digest = None
    if path is not None:
        try:
            digest = hashlib.sha256(read_input_bytes(path, what, max_bytes)).hexdigest()
        except InputError:  # missing or unreadable: the run reports it where it reads the file
            digest = None
    return {"kind": kind, "name": name, "path": None if path is None else str(path), "sha256": digest}


def _profile_files(scenario: Any) -> list[dict[str, Any]]:
    """The compute profiles a simulation loads (as :mod:`simdist.simulate` resolves them): the
    shipped ones, then ``compute.profiles`` (:func:`simdist.resources.resolve_reference`: beside
    the scenario file, else the shipped file of that name)."""
    from .platform.compute import default_profile_paths
    from .resources import resolve_reference

    shipped = [_file_entry("profile", f"calibration/profiles/{p.name}", p, "compute profile")
               for p in default_profile_paths()]
    base = Path(scenario.source).parent if scenario.source else Path(".")
    own = [_file_entry("profile", name, resolve_reference(base, name), "compute profile")
           for name in scenario.compute.profiles]
    return shipped + own


def _code_files(scenario: Any) -> list[dict[str, Any]]:
    """Source files of the modules outside simdist that define the scenario's model, algorithm or dataset:
    a component registered by a user's code, or one named by import path where the scenario allows importing."""
    from .algorithms import ALGORITHMS
    from .training.datasets import DATASETS
    from .training.models import MODELS

    named = [("model code", MODELS, scenario.workload.model.name),
             ("algorithm code", ALGORITHMS, scenario.algorithm_name),
             ("dataset code", DATASETS, scenario.workload.dataset.name)]
    files = []
    for kind, registry, name in named:
        module = _defining_module(registry, name, scenario.workload.allow_code_import)
        if module is not None and module.partition(".")[0] != _OWN_PACKAGE:
            files.append(_file_entry(kind, module, _module_file(module), "module source", MAX_MODULE_SOURCE_BYTES))
    return files


def _defining_module(registry: Any, name: str, may_import: bool) -> str | None:
    """The module that defines ``name``: a registered entry's, or (``may_import``) that of a
    ``package.module:attr`` path."""
    if name in registry:
        return getattr(registry.entry(name).factory, "__module__", None)
    module, sep, attr = name.partition(":")
    return module if may_import and sep and module and attr else None


def _module_file(module_name: str) -> Path | None:
    """The source file of ``module_name``, importing it if need be (the scenario allows it); None if none."""
    try:
        module = sys.modules.get(module_name) or importlib.import_module(module_name)
    except Exception:  # noqa: BLE001 - any failure of the user's code: the run reports it when it imports
        return None
    path = getattr(module, "__file__", None)
    return Path(path) if path else None
