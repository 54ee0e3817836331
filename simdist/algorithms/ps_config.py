"""Options every parameter-server algorithm shares, and where its servers run (docs/algorithms.md §2–§4).

Ranks: the workers are the scenario's first N ranks (``ctx.workers``); the k servers
(``servers: k``, default 1) run on ``server_ranks``, by default the k ranks right after the
workers (N .. N+k−1). A scenario therefore needs at least N + k devices and must set
``workers`` explicitly (``workers: 4`` on a 5-device platform): by default every device
trains, leaving none for a server. :meth:`ParameterServerConfig.check_scenario` says so.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, NonNegativeInt, field_validator, model_validator

from ..errors import InputError
from ..units import parse_size
from .base import AlgorithmConfig
from .ps_buckets import DEFAULT_BUCKET_BYTES

__all__ = ["ParameterServerConfig"]


class ParameterServerConfig(AlgorithmConfig):
    """Options every parameter-server algorithm shares."""

    servers: int = Field(1, ge=1, description="parameter servers k; parameters are split into k contiguous shards. "
                                              "Default 1 (or the length of server_ranks)")
    server_ranks: list[NonNegativeInt] | None = Field(
        None, description="ranks the servers run on, none of them a worker. Default: the k ranks after the "
                          "workers, N..N+k-1")
    apply_time_per_param: float | None = Field(
        None, ge=0, description="server time per parameter of its shard for each gradient it handles, in seconds. "
                                "Default: the device's measured or estimated 'update' op (simdist.platform.op_costs)")
    staleness_aware: bool = Field(
        False, description="damp a gradient of staleness s by 1/max(1, s) (Zhang et al.). Default false")
    push: Literal["whole", "buckets"] = Field(
        "whole", description="push the gradient once backward is done (whole) or bucket by bucket as backward "
                             "produces it, last layer first (buckets: MXNet kvstore / DDP style). Default whole")
    bucket_bytes: float = Field(
        DEFAULT_BUCKET_BYTES, ge=0, description="bucket size for push: buckets, e.g. '4MiB'; 0 = one bucket per "
                                                "parameter tensor. Default 25 MiB (PyTorch DDP)")

    @field_validator("bucket_bytes", mode="before")
    @classmethod
    def _size(cls, value: Any) -> float:
        return parse_size(value)

    @model_validator(mode="before")
    @classmethod
    def _servers_from_ranks(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("server_ranks"), list) and data.get("servers") is None:
            data = {**data, "servers": len(data["server_ranks"])}
        return data

    @model_validator(mode="after")
    def _ranks_consistent(self):
        ranks = self.server_ranks
        if ranks is not None:
            if len(ranks) != self.servers:
                raise ValueError(f"server_ranks lists {len(ranks)} ranks but servers is {self.servers}")
            if len(set(ranks)) != len(ranks):
                raise ValueError(f"server_ranks {ranks} repeats a rank; each server needs its own rank")
        return self

    def resolved_server_ranks(self, n_workers: int) -> list[int]:
        """The servers' ranks: ``server_ranks`` or N .. N+k−1."""
        if self.server_ranks is not None:
            return list(self.server_ranks)
        return list(range(n_workers, n_workers + self.servers))

    def check_scenario(self, scenario: Any) -> None:
        """Every server needs a rank of its own that exists and is not a worker."""
        n, k, devices = scenario.worker_count, self.servers, scenario.platform.device_count
        if self.server_ranks is None:
            if n + k > devices:
                raise InputError(
                    f"{self.name} needs {n} worker ranks plus {k} server rank(s) = {n + k} devices, but the platform "
                    f"has {devices}; set workers to at most {max(devices - k, 0)} (workers default to every device) "
                    f"or add devices", field="workers")
            return
        for rank in self.server_ranks:
            if rank >= devices:
                raise InputError(f"unknown server rank {rank}: the platform has ranks 0..{devices - 1}",
                                 field="algorithm.server_ranks")
            if rank < n:
                raise InputError(f"server rank {rank} is also a worker (workers are ranks 0..{n - 1}); "
                                 f"choose ranks from {n} to {devices - 1} or lower workers",
                                 field="algorithm.server_ranks")
