"""What every training algorithm is: a config class, processes per rank, replicas to evaluate.

An algorithm registers itself in :data:`ALGORITHMS` with its pydantic config class. It is
constructed with its validated config and an :class:`AlgorithmContext` (the workload, the
worker ranks, data iterators), and returns one generator function per rank it runs on;
each generator takes only a :class:`~simdist.runtime.base.Runtime`. Algorithms never import
SimPy or mpi4py, and their math lives in plain tensor functions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Generator

from pydantic import BaseModel

from ..config import USER_CONFIG
from ..registry import Registry
from ..runtime.base import Runtime

__all__ = ["ALGORITHMS", "AlgorithmConfig", "AlgorithmContext", "Algorithm", "LockstepForm", "PeerAlgorithm", "Process",
           "register_imported"]

Process = Callable[[Runtime], Generator]

ALGORITHMS: Registry[type["Algorithm"]] = Registry("algorithm")


class AlgorithmConfig(BaseModel):
    """Base of every algorithm's options; ``name`` selects the algorithm."""

    model_config = USER_CONFIG
    name: str

    def check_scenario(self, scenario: Any) -> None:
        """Cross-checks against the rest of the scenario (raise InputError naming the field)."""


@dataclass
class AlgorithmContext:
    """What an algorithm gets to know about the run it is part of."""

    workers: list[int]  # ranks that train, in worker order (worker i runs on workers[i])
    node_of: Callable[[int], int]
    workload: Any  # simdist.training.workload.Workload
    batch_size: int
    seed: int
    max_epochs: int | None
    timing_only: bool
    make_data: Callable[[int], Any]  # worker index -> ShardIterator
    make_replica: Callable[[], Any]  # a fresh replica at the initial weights
    eval_max_samples: int | None = None  # test samples an algorithm's own evaluations may use (None: all)
    # seconds of an elementwise op (update, average, compensate, copy) over n parameters on a rank:
    # (rank, op, params, buffers) -> s (simdist.platform.op_costs); None where work is done for real
    op_cost: Callable[[int, str, int, int], float] | None = None
    platform: Any = None  # simdist.platform.topology.Platform: the hardware the run's costs are modelled on

    def op_seconds(self, rank: int, op: str, params: int, buffers: int = 1) -> float:
        """What ``op`` over ``params`` parameters costs on ``rank`` (0 in a real run: the math itself takes the time)."""
        return self.op_cost(rank, op, params, buffers) if self.op_cost is not None else 0.0

    @property
    def n_workers(self) -> int:
        return len(self.workers)

    def host_path(self, rank: int) -> Any:
        """``rank``'s device-to-host-memory path (:class:`~simdist.platform.host_staging.HostPath`), to price
        collectives staged through host memory; None for CPU devices (data already in host memory) and
        without a platform (nothing priced); a real run ignores modelled durations either way."""
        from ..platform.host_staging import host_path

        return None if self.platform is None else host_path(self.platform, rank)


class Algorithm:
    """Base class: subclasses set ``Config`` and implement ``processes``."""

    Config: ClassVar[type[AlgorithmConfig]]

    def __init__(self, config: AlgorithmConfig, ctx: AlgorithmContext):
        self.config = config
        self.ctx = ctx

    def processes(self) -> dict[int, Process]:
        """The generator function each rank runs (rank -> process)."""
        raise NotImplementedError

    def evaluation_replicas(self) -> dict[int, Any]:
        """The replicas whose test accuracy is reported, keyed by the rank holding them."""
        raise NotImplementedError

    def lockstep_form(self) -> "LockstepForm | None":
        """Every worker's process as one generator standing for all of them, or None (the
        default: one process per rank). A simulator may run it instead of :meth:`processes`
        where that gives the same results (:mod:`simdist.runtime.group`). Called at most once,
        before the run starts."""
        return None

    def epochs_completed(self) -> float | None:
        """Epochs of data consumed (mean over workers), for the summary."""
        return None


@dataclass(frozen=True)
class Lane:
    """Workers that run one program in lockstep: ``process`` is the first one's (``ranks[0]``),
    run for every one of ``ranks``."""

    ranks: tuple[int, ...]
    process: Process


@dataclass(frozen=True)
class LockstepForm:
    """The workers as lockstep lanes, each one generator standing for all its ranks.

    One lane holds every worker where all run the same program (sync); an algorithm whose
    workers differ by role (DASO's local rank decides which global syncs it takes part in)
    has one lane per role, its ranks in the same order in every lane, so that the collectives
    of the lanes' first ranks stand for those of their second ranks, and so on
    (:mod:`simdist.runtime.lanes`). ``apart``: the workers' clocks may differ when they start
    a forward/backward (the algorithm overlaps a collective with the next compute, or leaves
    one at its own time).
    """

    lanes: tuple[Lane, ...]
    apart: bool = False


class PeerAlgorithm(Algorithm):
    """An algorithm without a server: every worker rank owns a replica and a data shard.

    Subclasses write ``_worker(rt, index)``, the generator of worker ``index`` (running on rank
    ``ctx.workers[index]``). Worker 0's replica is the one evaluated unless overridden.

    ``lockstep`` declares that every worker runs the same requests in the same order, with
    arguments that name no rank but through ``rt.rank`` and only collectives over all workers,
    and that nothing it does depends on its own clock but what it records: ``"always"`` when its
    replicas also stay equal (every worker applies the same update), ``"timing_only"`` when they
    do only without tensor math. Such workers may run as one lockstep group
    (:meth:`lockstep_form`). ``lockstep_apart``: whether their clocks may differ when they start
    a forward/backward.
    """

    lockstep: ClassVar[str | None] = None
    lockstep_apart: ClassVar[bool] = False
    lockstep_lanes_join: ClassVar[bool] = False  # collectives join the lanes (:meth:`lockstep_lanes`)

    def __init__(self, config: AlgorithmConfig, ctx: AlgorithmContext):
        super().__init__(config, ctx)
        self.replicas = [ctx.make_replica() for _ in ctx.workers]
        self.data = [ctx.make_data(i) for i in range(ctx.n_workers)]

    def processes(self) -> dict[int, Process]:
        return {rank: self._bind(i) for i, rank in enumerate(self.ctx.workers)}

    def evaluation_replicas(self) -> dict[int, Any]:
        return {self.ctx.workers[0]: self.replicas[0]}

    def epochs_completed(self) -> float:
        """The mean over workers; workers that share one iterator (a lockstep group) read it once."""
        read: dict[int, float] = {}
        for d in self.data:
            if id(d) not in read:
                read[id(d)] = d.epochs_completed
        return sum(read[id(d)] for d in self.data) / len(self.data)

    def lockstep_form(self) -> LockstepForm | None:
        """The workers as lockstep lanes (:meth:`lockstep_lanes`; one lane of all by default),
        where the declaration allows it and every worker's own work costs the same (else they
        would leave a collective at different times). A lane's workers then share its first
        worker's replica and advance one shard position together
        (:class:`~simdist.training.data.LockstepShards`)."""
        if self.lockstep is None or (self.lockstep == "timing_only" and not self.ctx.timing_only):
            return None
        if not self._own_work_uniform():
            return None
        from ..training.data import LockstepShards

        ctx = self.ctx
        lanes = self.lockstep_lanes()
        index_of = {rank: i for i, rank in enumerate(ctx.workers)}
        for lane in lanes:
            shards = LockstepShards(self.data[0].sharder, len(lane), ctx.max_epochs)
            view = shards.group_view(with_indices=not ctx.timing_only)
            first = index_of[lane[0]]
            for rank in lane:
                self.data[index_of[rank]], self.replicas[index_of[rank]] = view, self.replicas[first]
        return LockstepForm(tuple(Lane(tuple(lane), self._bind(index_of[lane[0]])) for lane in lanes),
                            apart=self.lockstep_apart)

    def lockstep_lanes(self) -> list[list[int]]:
        """The worker ranks of each lockstep lane (:class:`LockstepForm`); the default: one lane of
        every worker."""
        return [list(self.ctx.workers)]

    def _own_work_uniform(self) -> bool:
        """Whether every worker's elementwise operations cost the same: what an op's price depends on
        (:class:`~simdist.platform.op_costs.OpCostModel`: the device kind, its profile and a share of
        less than a core) is the same for every worker, or there is no model (a real run)."""
        platform = self.ctx.platform
        if platform is None or self.ctx.op_cost is None:
            return True

        def prices(rank: int) -> tuple:
            device = platform.devices[rank]
            return device.kind, device.profile_device, min(device.cpus or 1.0, 1.0)

        return len({prices(rank) for rank in self.ctx.workers}) == 1

    def _bind(self, index: int) -> Process:
        def run(rt: Runtime):
            return self._worker(rt, index)
        return run

    def _worker(self, rt: Runtime, index: int) -> Generator:
        raise NotImplementedError


def register_imported(path: str) -> str:
    """Register the :class:`Algorithm` subclass named by ``"package.module:Class"`` under that path
    (once per process; importing the module runs its code) and return the name.

    The class needs a ``Config`` (an :class:`AlgorithmConfig` subclass; its ``name`` accepts the
    path). An algorithm of one's own then runs as the built-in ones do, in the simulator and
    under ``mpiexec``: ``algorithm: {name: "mypkg.algos:LocalSGD", ...options}``.
    """
    from ..errors import InputError
    from ..importpath import import_object

    if path in ALGORITHMS:
        return path
    target = import_object(path, "algorithm")
    config = getattr(target, "Config", None)
    if not (isinstance(target, type) and issubclass(target, Algorithm) and isinstance(config, type)
            and issubclass(config, AlgorithmConfig)):
        raise InputError(f"algorithm {path!r} must be a subclass of simdist.algorithms.base.Algorithm with a Config "
                         "(a subclass of AlgorithmConfig)")
    description = (target.__doc__ or path).strip().splitlines()[0]
    ALGORITHMS.add(path, target, description, config=config)
    return path
