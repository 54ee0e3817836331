"""What ``calibrate compute --scenario S.yaml`` measures: the scenario's own model.

:func:`plan_scenario` loads and checks the scenario and builds its workload as the simulator
does — its model name and options, its dataset's input shape (random values of that shape
for datasets that hold none), its optimizer and seed — before any step is timed. It is timed
at the batch sizes its algorithm runs and a spread around them
(:func:`~simdist.calibrate.compute_options.spread_batch_sizes`), under the model name and
profile key the simulator looks the scenario up by (:class:`~simdist.platform.compute.ComputeModel`:
``(device kind's profile_device, workload.model.name)``). A device kind whose profile key is
not the one this machine measures is refused. :func:`scenario_block` is what the profile file
records about the scenario.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from ..errors import InputError
from ..training.workload import Workload, build_workload
from .compute_options import MIN_FIT_SIZES, scenario_batch_range, spread_batch_sizes
from .profile_file import profile_key

if TYPE_CHECKING:
    from ..scenario import Scenario

__all__ = ["ScenarioTarget", "plan_scenario", "scenario_block"]


@dataclass(frozen=True)
class ScenarioTarget:
    """What ``--scenario`` measures, checked before any step is timed."""

    path: Path  # the scenario file
    scenario: Scenario  # validated
    workload: Workload  # its model, dataset, optimizer and seed, built
    profile_device: str  # the profile key its ranks look up (the device kind's profile_device)
    batch_sizes: tuple[int, ...]  # timed
    batch_range: tuple[int, int]  # the batches its algorithm runs, smallest and largest
    range_field: str  # where that range comes from


def _scenario_workload(scenario: Scenario, path: Path) -> Workload:
    """The scenario's workload built as the simulator builds it; a failure names the file and field."""
    w = scenario.workload
    try:
        return build_workload(w.model.name, w.model.options, w.dataset.name, w.dataset.options, w.optimizer,
                              scenario.seed, allow_import=w.allow_code_import)
    except InputError as exc:
        raise InputError(exc.message, source=str(path), field=exc.field or "workload.model") from None
    except (RuntimeError, ValueError, TypeError, MemoryError) as exc:  # a factory or torch refusing the shapes
        raise InputError(f"cannot build model {w.model.name!r}: {type(exc).__name__}: {exc}", source=str(path),
                         field="workload.model") from None


def plan_scenario(path: str | os.PathLike, device: str, batch_sizes: Sequence[int] | None = None) -> ScenarioTarget:
    """Load and check the scenario at ``path`` and build its workload (an :class:`InputError` naming
    the file and field on bad input); ``batch_sizes`` replaces the ones derived from the scenario."""
    from ..platform.devices import DEVICE_KINDS
    from ..scenario import load_scenario

    path = Path(path)
    scenario = load_scenario(path)
    kind = scenario.platform.node.device.kind
    wanted, measured = DEVICE_KINDS.get(kind).profile_device, profile_key(device)
    if wanted != measured:
        raise InputError(f"device kind {kind!r} looks up compute profiles under {wanted!r}, but --device "
                         f"{device} measures this machine's {measured!r}; run on such a device or change the kind",
                         source=str(path), field="platform.node.device.kind")
    smallest, largest, field = scenario_batch_range(scenario)
    if batch_sizes is None:
        batch_sizes = spread_batch_sizes(smallest, largest, scenario.workload.batch_size)
    elif len(set(batch_sizes)) < MIN_FIT_SIZES:
        raise InputError(f"with --scenario give at least {MIN_FIT_SIZES} different batch sizes (or none: the "
                         f"scenario's batches {smallest}..{largest} and a spread around them)", source="--batch-sizes")
    workload = _scenario_workload(scenario, path)
    return ScenarioTarget(path, scenario, workload, measured, tuple(sorted(set(batch_sizes))), (smallest, largest),
                          field)


def scenario_block(target: ScenarioTarget) -> dict:
    """What the profile file records about the scenario whose model it holds."""
    s = target.scenario
    return {"file": target.path.as_posix(), "name": s.name, "model": s.workload.model.name,
            "batch_size": s.workload.batch_size, "batch_range": list(target.batch_range),
            "batch_range_from": target.range_field, "profile_device": target.profile_device}
