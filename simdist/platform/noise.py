"""Compute noise: per-node, per-rank and heavy-tailed per-step factors, correlated in time.

A rank's forward/backward takes its noiseless time (:mod:`simdist.platform.compute`) times a
factor. For rank ``r`` on node ``n`` at its ``k``-th forward/backward (its step ``k``):

    factor[r, k] = exp(a[n, k] + b[r, k] - (σ_n² + σ_r²) / 2) · s[r, k]

    a[n, k] = ρ · a[n, k-1] + σ_n · √(1 - ρ²) · ε[n, k],   a[n, 0] = σ_n · ε[n, 0]
    b[r, k] = ρ · b[r, k-1] + σ_r · √(1 - ρ²) · η[r, k],   b[r, 0] = σ_r · η[r, 0]
    s[r, k] = m · exp(σ_s · ζ[r, k]) with probability p, else 1

with ε, η, ζ independent standard normals. ``a`` is shared by the ranks of a node (its CPU,
its power and cooling, its PCIe switch), ``b`` is the rank's own; both are stationary AR(1)
processes of log-standard-deviation σ and lag-1 correlation ρ, so a slow node stays slow for
about ``1 / (1 - ρ)`` steps, and ``exp(a + b - σ²/2)`` has mean 1: the profile's time stays
the mean. ``s`` is the heavy tail: a rare step slowed ``m``-fold (median), spread ``σ_s``.
``docs/noise.md`` gives each parameter's physical meaning and published ranges.

Determinism: every number comes from named streams of the run's seed
(:mod:`simdist.seeding`): ``compute-noise/node<n>/block<b>`` (the node process, in blocks of
:data:`BLOCK_STEPS` steps, so that any rank of the node can rebuild a block),
``compute-noise/rank<r>/correlated``, ``compute-noise/rank<r>/straggler-hit`` and
``compute-noise/rank<r>/straggler-size``. A component that is off draws nothing, and none
of these is the stream of ``compute.noise_sigma`` (``compute-noise/rank<r>``), so turning
this model on changes no other number. A rank's factors are computed a block at a time into
a table; drawing them one rank at a time or for a whole lockstep group at once reads the same table
entries, so the two give identical numbers.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
from pydantic import BaseModel, Field, model_validator

from ..config import USER_CONFIG
from ..errors import SimulationError
from ..seeding import numpy_stream

__all__ = ["NoiseSpec", "NoiseModel", "BLOCK_STEPS"]

BLOCK_STEPS = 256  # steps drawn at once per rank (and per node block stream)
_NODE_BLOCKS_CACHED = 4  # recent node blocks kept per node; older ones are rebuilt on demand


class NoiseSpec(BaseModel):
    """Correlated compute noise of a run (``compute.noise`` in a scenario); all zeros: off."""

    model_config = USER_CONFIG
    node_sigma: float = Field(0.0, ge=0, le=2, description="log-std of the factor shared by a node's ranks (0 = none)")
    rank_sigma: float = Field(0.0, ge=0, le=2, description="log-std of each rank's own factor (0 = none)")
    correlation: float = Field(0.0, ge=0, lt=1, description="AR(1) coefficient per step of the node and rank "
                               "log-factors, in [0, 1): 0 = independent steps, 0.9 = a slow spell lasts ~10 steps")
    straggler_probability: float = Field(0.0, ge=0, le=1, description="chance that one step of one rank is a "
                                         "straggler step (0 = none)")
    straggler_median: float = Field(1.0, ge=1, le=1000,
                                    description="median slow-down factor of a straggler step, 1 .. 1000")
    straggler_sigma: float = Field(0.0, ge=0, le=2,
                                   description="log-std of a straggler step's slow-down around its median")
    source: str | None = Field(None, min_length=1, max_length=2000, description="where the figures come from (a "
                               "calibration file and its sha256, a paper); required when any component is on")

    @property
    def enabled(self) -> bool:
        """Whether any component changes a duration."""
        straggles = self.straggler_probability > 0 and (self.straggler_median > 1 or self.straggler_sigma > 0)
        return self.node_sigma > 0 or self.rank_sigma > 0 or straggles

    @model_validator(mode="after")
    def _sourced(self):
        if self.enabled and not self.source:
            raise ValueError("source is required when any component is on: say where the figures come from "
                             "(the calibration file 'simdist calibrate noise' wrote, a paper)")
        return self


class NoiseModel:
    """The factors of :class:`NoiseSpec` for every rank of a platform.

    ``node_of[r]`` is rank ``r``'s node. :meth:`factors` gives the factor of given ranks at
    given steps; :meth:`next_factors` the factor of each rank's next step (the compute model
    counts a rank's forward/backwards as its steps). Steps are drawn forward: a rank may ask
    for any step of its current block or later, never an earlier block.
    """

    def __init__(self, spec: NoiseSpec, seed: int, node_of: Sequence[int]):
        self.spec = spec
        self.seed = int(seed)
        self.node_of = np.asarray(node_of, dtype=np.int64)
        n = len(self.node_of)
        self._next = np.zeros(n, dtype=np.int64)  # each rank's next step (next_factors)
        self._block = np.full(n, -1, dtype=np.int64)  # the block held in _table, per rank
        self._table: np.ndarray | None = None  # (ranks, BLOCK_STEPS) factors, allocated on first use
        self._rank_state = np.zeros(n)  # b at the last step of the rank's latest block
        self._streams: dict[tuple[int, str], np.random.Generator] = {}
        self._node_ends: dict[int, list[float]] = {}  # a at the last step of each block built, per node
        self._node_blocks: dict[int, dict[int, np.ndarray]] = {}
        self._log_mean = -0.5 * (spec.node_sigma ** 2 + spec.rank_sigma ** 2)
        self._stragglers = spec.straggler_probability > 0 and (spec.straggler_median > 1 or spec.straggler_sigma > 0)

    # -- public -------------------------------------------------------------------------

    def factors(self, ranks: Sequence[int] | np.ndarray, steps: Sequence[int] | np.ndarray) -> np.ndarray:
        """The factor of each ``ranks[i]`` at its step ``steps[i]`` (each rank at most once)."""
        ranks = np.asarray(ranks, dtype=np.int64)
        steps = np.asarray(steps, dtype=np.int64)
        blocks = steps // BLOCK_STEPS
        behind = blocks < self._block[ranks]
        if behind.any():
            i = int(np.argmax(behind))
            raise SimulationError(f"compute noise of rank {ranks[i]} is drawn forward: step {steps[i]} is before "
                                  f"its current block (steps {self._block[ranks[i]] * BLOCK_STEPS} on)")
        self._advance(ranks, blocks)
        return self._table[ranks, steps % BLOCK_STEPS]

    def factor(self, rank: int, step: int) -> float:
        """The factor of ``rank`` at ``step``."""
        if step >= 0 and self._block[rank] == step // BLOCK_STEPS:  # fast path: the block is drawn
            return float(self._table[rank, step % BLOCK_STEPS])
        return float(self.factors([rank], [step])[0])

    def next_factors(self, ranks: Sequence[int] | np.ndarray) -> np.ndarray:
        """The factor of each rank's next step (each rank at most once); advances their steps."""
        ranks = np.asarray(ranks, dtype=np.int64)
        out = self.factors(ranks, self._next[ranks])
        self._next[ranks] += 1
        return out

    def next_factor(self, rank: int) -> float:
        """The factor of ``rank``'s next step; advances its step."""
        step = int(self._next[rank])
        self._next[rank] = step + 1
        return self.factor(rank, step)

    def matrix(self, steps: int) -> np.ndarray:
        """Factors of every rank for steps ``0 .. steps-1`` as a (ranks, steps) array (a fresh model)."""
        ranks = np.arange(len(self.node_of))
        return np.stack([self.factors(ranks, np.full(len(ranks), k)) for k in range(steps)], axis=1) \
            if steps > 0 else np.empty((len(ranks), 0))

    # -- blocks -------------------------------------------------------------------------

    def _advance(self, ranks: np.ndarray, blocks: np.ndarray) -> None:
        """Draw blocks, in order, until each rank holds its target block."""
        need = self._block[ranks] < blocks
        while need.any():
            waiting = ranks[need]
            following = self._block[waiting] + 1
            for block in np.unique(following):
                self._draw_block(waiting[following == block], int(block))
            need = self._block[ranks] < blocks

    def _draw_block(self, ranks: np.ndarray, block: int) -> None:
        """Factors of block ``block`` for ``ranks`` (each holding block ``block - 1``), as rows of one array.

        The arithmetic is elementwise on (ranks, steps) arrays, so a row does not depend on
        which other rows are drawn with it.
        """
        spec, width = self.spec, BLOCK_STEPS
        if self._table is None:
            self._table = np.empty((len(self.node_of), width))
        log = np.zeros((len(ranks), width))
        if spec.rank_sigma > 0:
            shocks = np.stack([self._stream(r, "correlated").standard_normal(width) for r in ranks])
            own = _ar1(shocks, self._rank_state[ranks], block == 0, spec.rank_sigma, spec.correlation)
            self._rank_state[ranks] = own[:, -1]
            log += own
        if spec.node_sigma > 0:
            log += np.stack([self._node_block(int(self.node_of[r]), block) for r in ranks])
        factor = np.exp(log + self._log_mean)
        if self._stragglers:
            hit = np.stack([self._stream(r, "straggler-hit").random(width) for r in ranks]) < spec.straggler_probability
            size = np.stack([self._stream(r, "straggler-size").standard_normal(width) for r in ranks])
            factor = np.where(hit, factor * (spec.straggler_median * np.exp(spec.straggler_sigma * size)), factor)
        self._table[ranks] = factor
        self._block[ranks] = block

    def _stream(self, rank: int, part: str) -> np.random.Generator:
        key = (int(rank), part)
        stream = self._streams.get(key)
        if stream is None:
            stream = self._streams[key] = numpy_stream(self.seed, f"compute-noise/rank{int(rank)}/{part}")
        return stream

    def _node_block(self, node: int, block: int) -> np.ndarray:
        """The node's log-factor ``a`` over block ``block`` (built in order, rebuilt if evicted)."""
        cache = self._node_blocks.setdefault(node, {})
        if block in cache:
            return cache[block]
        ends = self._node_ends.setdefault(node, [])
        while len(ends) < block:  # blocks before this one: only their end state is kept
            self._build_node_block(node, len(ends), ends, cache)
        return self._build_node_block(node, block, ends, cache)

    def _build_node_block(self, node: int, block: int, ends: list[float], cache: dict[int, np.ndarray]) -> np.ndarray:
        shocks = numpy_stream(self.seed, f"compute-noise/node{node}/block{block}").standard_normal((1, BLOCK_STEPS))
        previous = np.array([ends[block - 1]]) if block > 0 else np.zeros(1)
        values = _ar1(shocks, previous, block == 0, self.spec.node_sigma, self.spec.correlation)[0]
        if block == len(ends):
            ends.append(float(values[-1]))
        cache[block] = values
        while len(cache) > _NODE_BLOCKS_CACHED:
            del cache[min(cache)]
        return values


def _ar1(shocks: np.ndarray, previous: np.ndarray, first: bool, sigma: float, rho: float) -> np.ndarray:
    """Rows of a stationary AR(1) of log-std ``sigma``, lag-1 coefficient ``rho``, from standard normal
    ``shocks``; each row continues from its ``previous`` value (or starts stationary when ``first``)."""
    if rho == 0.0:
        return sigma * shocks
    out = np.empty_like(shocks)
    step = sigma * math.sqrt(1.0 - rho * rho)
    x = sigma * shocks[:, 0] if first else rho * previous + step * shocks[:, 0]
    out[:, 0] = x
    for k in range(1, shocks.shape[1]):
        x = rho * x + step * shocks[:, k]
        out[:, k] = x
    return out
