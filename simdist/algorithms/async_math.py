"""Update rules of the parameter-server algorithms (asgd, nsoftsync, dbs) as pure functions.

The protocol (who sends what, when) lives in :mod:`.parameter_server` and the algorithm
modules; the arithmetic lives here, written from docs/algorithms.md §2–§4 and unit-tested
against those formulas (``tests/test_async_math.py``). Every function works on real
tensors and on timing-only :class:`~simdist.training.replica.PhantomTensor` s alike.

* **asgd** (§2): staleness ``s = v_now − v_read``; step ``w ← w − η·g``, or with
  ``staleness_aware`` ``w ← w − η/max(1, s)·g`` (Zhang et al.).
* **n-softsync** (§3): the server averages ``c = ⌊N/n⌋`` gradients,
  ``w ← w − η·(1/c)·Σ g_j``; with ``staleness_aware`` each ``g_j`` is first divided by
  ``max(1, s_j)``. The sum can be built one gradient at a time as they arrive
  (:func:`softsync_accumulate`, then :func:`softsync_mean`), with the same result.
* **dbs** (§4), ``measure: compute`` (the default): per-sample compute times
  ``τ = Σ t / Σ b`` over the last m iterations (:func:`dbs_per_sample_s`); the batch becomes
  ``clamp(round(X·τ_0/τ_i), b_min, b_max)`` unless that is within a relative ``A`` of the
  current batch (:func:`dbs_resize`). ``measure: iteration``: speed ratio
  ``S = Σ(last m times of worker 0) / Σ(last m times of worker i)``; when ``|1 − S| > A`` the
  batch becomes ``clamp(round(b·S), b_min, b_max)`` with ``b = b_i`` (``rescale: current``)
  or ``b = X`` (``rescale: base``). With ``weight_by_batch`` a gradient is scaled by ``b_i / X``.
"""

from __future__ import annotations

from typing import Any, Sequence

__all__ = [
    "staleness",
    "staleness_scale",
    "asgd_learning_rate",
    "softsync_group_size",
    "softsync_accumulate",
    "softsync_mean",
    "softsync_average",
    "batch_weighted",
    "dbs_speed_ratio",
    "dbs_rescale",
    "dbs_per_sample_s",
    "dbs_resize",
    "shard_bounds",
]


def staleness(version_now: int, version_read: int) -> int:
    """Updates applied since the gradient's weights were read: ``v_now − v_read`` (≥ 0)."""
    s = int(version_now) - int(version_read)
    if s < 0:
        raise ValueError(f"a gradient cannot be read at version {version_read} after version {version_now}")
    return s


def staleness_scale(s: int) -> float:
    """``1 / max(1, s)``: the staleness-aware damping of Zhang et al."""
    return 1.0 / max(1, int(s))


def asgd_learning_rate(lr: float, s: int, staleness_aware: bool) -> float:
    """The step size for one asgd gradient of staleness ``s``: ``η`` or ``η / max(1, s)``."""
    return lr * staleness_scale(s) if staleness_aware else lr


def softsync_group_size(n_workers: int, n: int) -> int:
    """``c = ⌊N / n⌋``, the gradients n-softsync averages per update (needs 1 ≤ n ≤ N)."""
    if not 1 <= n <= n_workers:
        raise ValueError(f"n-softsync needs 1 <= n <= N = {n_workers}, got n = {n}")
    return n_workers // n


def softsync_accumulate(total: Any, grad: Any, s: int, staleness_aware: bool) -> Any:
    """The running sum of an n-softsync round with one more gradient: ``Σ + g_j`` (``g_j`` when
    ``total`` is None), ``g_j`` divided by ``max(1, s_j)`` first with ``staleness_aware``.

    Neither input is written: the sum is a new tensor, and the first gradient starts it as is.
    """
    scale = staleness_scale(s) if staleness_aware else 1.0
    term = grad if scale == 1.0 else grad * scale
    return term if total is None else total + term


def softsync_mean(total: Any, count: int) -> Any:
    """``(1/c)·Σ`` of a round's sum of ``c = count`` gradients (the sum itself when c = 1)."""
    if count < 1:
        raise ValueError("an n-softsync update needs at least one gradient")
    return total if count == 1 else total / count


def softsync_average(grads: Sequence[Any], stalenesses: Sequence[int], staleness_aware: bool) -> Any:
    """``(1/c) Σ_j g_j`` over the ``c = len(grads)`` gradients of one update.

    With ``staleness_aware`` each ``g_j`` is divided by ``max(1, s_j)`` before averaging.
    One gradient of scale 1 comes back unchanged (so 1-gradient groups are exactly asgd).
    Summation runs in the order given (:func:`softsync_accumulate` one gradient at a time, as a
    server sums them on arrival), so equal inputs give bitwise-equal results.
    """
    if not grads:
        raise ValueError("an n-softsync update needs at least one gradient")
    if len(grads) != len(stalenesses):
        raise ValueError(f"{len(grads)} gradients but {len(stalenesses)} staleness values")
    total = None
    for grad, s in zip(grads, stalenesses):
        total = softsync_accumulate(total, grad, s, staleness_aware)
    return softsync_mean(total, len(grads))


def batch_weighted(grad: Any, batch_size: int, base_batch_size: int) -> Any:
    """``g · b_i / X`` (dbs ``weight_by_batch``); ``g`` itself when ``b_i = X``."""
    if batch_size == base_batch_size:
        return grad
    return grad * (batch_size / base_batch_size)


def dbs_speed_ratio(reference_times_s: Sequence[float], own_times_s: Sequence[float]) -> float:
    """``S = Σ reference times / Σ own times``: > 1 means this worker is faster than worker 0."""
    own = float(sum(own_times_s))
    if own <= 0.0:
        raise ValueError("a worker's iteration times must sum to more than zero")
    return float(sum(reference_times_s)) / own


def dbs_rescale(batch_size: int, base_batch_size: int, ratio: float, *, threshold: float, b_min: int, b_max: int,
                rescale: str = "current") -> int:
    """The next batch size of a worker i ≠ 0 given its speed ratio ``S`` (``ratio``).

    Unchanged when ``|1 − S| ≤ A`` (``threshold``); otherwise
    ``clamp(round(b·S), b_min, b_max)`` with ``b`` the current batch (``rescale='current'``)
    or the base batch ``X`` (``rescale='base'``). ``round`` is Python's (half to even).
    """
    if abs(1.0 - ratio) <= threshold:
        return int(batch_size)
    if rescale == "current":
        start = batch_size
    elif rescale == "base":
        start = base_batch_size
    else:
        raise ValueError(f"rescale must be 'current' or 'base', got {rescale!r}")
    return int(min(max(round(start * ratio), b_min), b_max))


def dbs_per_sample_s(window: Sequence[tuple[float, int]]) -> float:
    """A worker's compute time per sample over its window of ``(compute_s, samples)``: ``Σ t / Σ b``."""
    samples = sum(int(b) for _, b in window)
    if samples <= 0:
        raise ValueError("a window of compute times must hold at least one sample")
    return float(sum(t for t, _ in window)) / samples


def dbs_resize(batch_size: int, target: float, *, threshold: float, b_min: int, b_max: int) -> int:
    """The batch ``clamp(round(target), b_min, b_max)``, or ``batch_size`` unchanged when the
    target is within a relative ``threshold`` of it (``|target / b − 1| ≤ A``)."""
    if abs(target / batch_size - 1.0) <= threshold:
        return int(batch_size)
    return int(min(max(round(target), b_min), b_max))


def shard_bounds(numel: int, shards: int) -> list[tuple[int, int]]:
    """``shards`` contiguous ``(start, stop)`` ranges covering ``0..numel``, sizes differing by ≤ 1."""
    if not 1 <= shards <= numel:
        raise ValueError(f"cannot split {numel} parameters into {shards} non-empty shards")
    cuts = [j * numel // shards for j in range(shards + 1)]
    return list(zip(cuts[:-1], cuts[1:]))
