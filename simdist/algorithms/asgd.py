"""asgd — asynchronous SGD with a parameter server (docs/algorithms.md §2).

A server holds w and a version counter v. Worker loop: pull (w, v) → compute g on its
batch → push g. The server, on each arriving gradient: staleness s = v_now − v_read;
w ← w − η·g (``staleness_aware: true`` uses η/max(1, s), after Zhang et al.); v ← v + 1;
reply with the new (w, v) to that worker, which is the worker's next pull.

Pull and push each move a full model (parameters × 4 bytes) between worker and server, so
N workers converge on the server's link, which becomes the bottleneck as N grows.
Expected mean staleness with homogeneous workers: ≈ N − 1.

Options (see :class:`AsgdConfig`; protocol, placement and sharding in
:mod:`.parameter_server`): ``servers`` (k shards, default 1), ``server_ranks`` (default the
k ranks after the workers), ``apply_time_per_param`` (default: the server device's measured or
estimated ``update`` op, :mod:`simdist.platform.op_costs`), ``staleness_aware`` (default false),
``push`` (``whole``, default, or ``buckets``: pushed bucket by bucket as backward produces them,
:mod:`.ps_buckets`) and ``bucket_bytes`` (default 25 MiB). The scenario must leave ranks for the
servers: ``workers: N`` on a platform of at least N + k devices. Workers pay for packing their
gradient and unpacking the pulled weights, the server for each update (:mod:`.parameter_server`).

The optimizer of the scenario runs on the server (momentum buffers live there); with plain
SGD an update is exactly w ← w − η·g.
"""

from __future__ import annotations

from typing import Any, Literal

from .async_math import asgd_learning_rate
from .base import ALGORITHMS
from .parameter_server import ParameterServerAlgorithm, ParameterServerConfig, PendingGradient

__all__ = ["AsgdConfig", "Asgd"]


class AsgdConfig(ParameterServerConfig):
    """Options of asynchronous SGD (all from :class:`ParameterServerConfig`)."""

    name: Literal["asgd"] = "asgd"


@ALGORITHMS.register(
    "asgd", "asynchronous SGD: workers pull, compute and push to a parameter server that applies each gradient "
            "on arrival",
    citation="Dean et al., Large Scale Distributed Deep Networks (Downpour SGD), NIPS 2012; staleness-aware step: "
             "Zhang et al., Staleness-Aware Async-SGD for Distributed Deep Learning, IJCAI 2016",
    config=AsgdConfig)
class Asgd(ParameterServerAlgorithm):
    """Asynchronous SGD: every gradient is one update."""

    Config = AsgdConfig

    def combine(self, pending: list[PendingGradient], stalenesses: list[int]) -> tuple[Any, float]:
        (gradient,), (s,) = pending, stalenesses
        return gradient.grad, asgd_learning_rate(self.lr, s, self.config.staleness_aware)
