"""Flat-tensor helpers that work the same on real tensors and timing-only phantoms."""

from __future__ import annotations

from typing import Any, Sequence

import torch

from ..training.replica import PhantomTensor

__all__ = ["flat_slice", "flat_concat", "cast"]


def flat_slice(t: Any, start: int, stop: int) -> Any:
    """Elements ``start:stop`` of a flat tensor (a view for real tensors)."""
    if isinstance(t, PhantomTensor):
        return PhantomTensor(stop - start, t.dtype)
    return t[start:stop]


def flat_concat(parts: Sequence[Any]) -> Any:
    """Concatenate flat tensors (phantoms concatenate to a phantom of the summed size)."""
    if any(isinstance(p, PhantomTensor) for p in parts):
        return PhantomTensor(sum(p.numel() for p in parts), parts[0].dtype)
    return torch.cat(list(parts))


def cast(t: Any, dtype: torch.dtype) -> Any:
    """``t`` in ``dtype`` (no copy when it already is)."""
    return t if t.dtype == dtype else t.to(dtype)
