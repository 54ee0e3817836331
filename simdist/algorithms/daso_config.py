"""Options of DASO and the node layout it needs (docs/algorithms.md §5).

DASO runs on P nodes × G GPUs: the worker ranks' nodes (``ctx.node_of``), at least 2 of them,
each with the same number of workers (:func:`node_layout`; :meth:`DasoConfig.check_scenario`
says so when the scenario loads). ``schedule: adaptive`` (default) steers B and S itself;
``schedule: fixed`` keeps B and S for the whole run, without phases (the published parameter
study), and without B or S uses B = 4, S = 1 (the published experiments' values,
:data:`DEFAULT_FIXED_B`, :data:`DEFAULT_FIXED_S`).
"""

from __future__ import annotations

from typing import Any, Callable, Literal

from pydantic import Field, ValidationInfo, field_validator

from ..errors import InputError
from .base import AlgorithmConfig
from .daso_math import ScheduleOptions

__all__ = ["DasoConfig", "node_layout", "DEFAULT_FIXED_B", "DEFAULT_FIXED_S"]

DEFAULT_FIXED_B, DEFAULT_FIXED_S = 4, 1  # the published experiments' B and S


class DasoConfig(AlgorithmConfig):
    """Options of DASO."""

    name: Literal["daso"] = "daso"
    schedule: Literal["adaptive", "fixed"] = Field(
        "adaptive", description="adaptive: warm-up, cycling steered by the loss plateau test, cool-down; "
                                "fixed: constant B and S for the whole run, no phases. Default adaptive")
    B: int | None = Field(None, ge=1, description="schedule fixed: batches between global syncs. Default 4")
    S: int | None = Field(None, ge=0, description="schedule fixed: batches a non-blocking sync waits before its "
                                                  "merge, 0 <= S <= B; 0 = blocking (bf16). Default 1")
    warmup_epochs: int = Field(4, ge=0, description="epochs of blocking global sync every batch at the start. "
                                                    "Default 4")
    cooldown_epochs: int = Field(4, ge=0, description="epochs of blocking global sync every batch at the end. "
                                                      "Default 4")
    max_global_skips: int = Field(8, ge=2, description="largest B; cycling starts at B = max_global_skips // 2, "
                                                       "a reset sets B = max_global_skips, S = max_global_skips // 4. "
                                                       "Default 8")
    stability_level: float = Field(0.05, ge=0, description="relative loss improvement below which an epoch counts "
                                                           "towards a plateau. Default 0.05")
    plateau_patience: int = Field(2, ge=0, description="a plateau is more than this many epochs in a row without "
                                                       "such an improvement. Default 2")
    global_staging: Literal["host", "device"] = Field(
        "host", description="how a global sync's parameters reach MPI on GPU devices. host: copied to host memory "
                            "over the device's host link, reduced on a host core, copied back (Heat's DASO with an "
                            "MPI that is not GPU-aware; simdist.platform.host_staging); device: GPU-direct, no "
                            "copies. CPU devices never stage. Default host")

    @field_validator("S")
    @classmethod
    def _s_at_most_b(cls, value: int | None, info: ValidationInfo) -> int | None:
        B = info.data.get("B")
        if value is not None and value > (B if B is not None else DEFAULT_FIXED_B):
            raise ValueError(f"S = {value} exceeds B = {B if B is not None else DEFAULT_FIXED_B}; need 0 <= S <= B")
        return value

    def options(self, total_epochs: int | None) -> ScheduleOptions:
        """The schedule state machine's options for a run of ``total_epochs`` (None: unknown)."""
        return ScheduleOptions(
            adaptive=self.schedule == "adaptive", warmup_epochs=self.warmup_epochs,
            cooldown_epochs=self.cooldown_epochs, max_global_skips=self.max_global_skips,
            stability_level=self.stability_level, plateau_patience=self.plateau_patience,
            total_epochs=total_epochs,
            fixed_B=self.B if self.B is not None else DEFAULT_FIXED_B,
            fixed_S=self.S if self.S is not None else DEFAULT_FIXED_S)

    def check_scenario(self, scenario: Any) -> None:
        if self.schedule == "adaptive":
            for field in ("B", "S"):
                if getattr(self, field) is not None:
                    raise InputError(f"{field} is only used with schedule: fixed (the adaptive schedule sets B and S "
                                     "itself)", field=f"algorithm.{field}")
        per_node, nodes = scenario.platform.node.devices, scenario.platform.nodes
        if nodes < 2:
            raise InputError(f"daso needs at least 2 nodes (node-local and global networks); the platform has {nodes}",
                             field="platform")
        workers = scenario.worker_count
        # with node groups, node_layout checks the workers' nodes once the ranks are placed
        if not scenario.platform.heterogeneous_nodes and (workers % per_node or workers // per_node < 2):
            raise InputError(f"daso needs at least 2 nodes with the same number of workers each: {workers} workers "
                             f"on nodes of {per_node} devices; use a multiple of {per_node}, at least {2 * per_node}",
                             field="workers")
        workload = scenario.workload
        if workload.timing_only and self.schedule == "adaptive" and workload.loss_curve is None:
            raise InputError("timing-only daso with the adaptive schedule steers by the training loss: give "
                             "workload.loss_curve (per-epoch values or a law), or use schedule: fixed",
                             field="workload.loss_curve")


def node_layout(workers: list[int], node_of: Callable[[int], int]) -> list[list[int]]:
    """The worker ranks of each node (nodes in order of first appearance, ranks in worker order).

    Raises :class:`InputError` unless there are at least 2 nodes with equally many workers.
    """
    nodes: dict[int, list[int]] = {}
    for rank in workers:
        nodes.setdefault(node_of(rank), []).append(rank)
    layout = list(nodes.values())
    if len(layout) < 2:
        raise InputError(f"daso needs workers on at least 2 nodes; all {len(workers)} are on one", field="workers")
    sizes = sorted({len(ranks) for ranks in layout})
    if len(sizes) > 1:
        raise InputError(f"daso needs the same number of workers on every node; got {sizes}", field="workers")
    return layout
