"""A tensor with a size and a dtype but no values: what timing-only runs compute with.

Timing-only mode runs the same algorithm code without tensor math: a :class:`PhantomTensor`
passes through slicing, casts and arithmetic as a tensor would, so that messages and
collectives still move the right number of bytes (:mod:`.payloads`) while nothing is
computed. It lives in the runtime layer because the runtimes size and sum it; the training
layer's :class:`~simdist.training.replica.PhantomReplica` holds one, and
``simdist.training.replica.PhantomTensor`` still names it.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["PhantomTensor"]


class PhantomTensor:
    """A tensor of ``numel`` elements of ``dtype`` with no values (timing-only mode).

    Arithmetic with numbers, tensors or phantoms gives a phantom of the same size (dtype
    promoted as torch would); ``norm()`` is 0.0. Only sizes are real.
    """

    __slots__ = ("_numel", "dtype")

    def __init__(self, numel: int, dtype: torch.dtype = torch.float32):
        self._numel = int(numel)
        self.dtype = dtype

    def numel(self) -> int:
        return self._numel

    @property
    def shape(self) -> torch.Size:
        return torch.Size([self._numel])

    def size(self) -> torch.Size:
        return self.shape

    def dim(self) -> int:
        return 1

    def __len__(self) -> int:
        return self._numel

    def element_size(self) -> int:
        return self.dtype.itemsize

    def __getitem__(self, index: slice) -> "PhantomTensor":
        """A slice (e.g. one layer's ``[start:stop]``) is a phantom of the slice's length."""
        if not isinstance(index, slice):
            raise TypeError("a PhantomTensor has no values; only slices of it can be taken")
        return PhantomTensor(len(range(self._numel)[index]), self.dtype)

    @property
    def nbytes(self) -> int:
        return self._numel * self.element_size()

    def __repr__(self) -> str:
        return f"PhantomTensor(numel={self._numel}, dtype={self.dtype})"

    # conversions and copies
    def to(self, dtype: torch.dtype) -> "PhantomTensor":
        return PhantomTensor(self._numel, dtype)

    def float(self) -> "PhantomTensor":
        return PhantomTensor(self._numel, torch.float32)

    def clone(self) -> "PhantomTensor":
        return PhantomTensor(self._numel, self.dtype)

    detach = clone

    def norm(self, *args: Any, **kwargs: Any) -> float:
        return 0.0

    # arithmetic
    def _result(self, other: object) -> "PhantomTensor":
        dtype = self.dtype
        if isinstance(other, (PhantomTensor, torch.Tensor)):
            dtype = torch.promote_types(self.dtype, other.dtype)
        return PhantomTensor(self._numel, dtype)

    def __add__(self, other: object) -> "PhantomTensor":
        return self._result(other)

    __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __rtruediv__ = __add__
    __neg__ = clone

    def _inplace(self, *args: Any, **kwargs: Any) -> "PhantomTensor":
        return self

    add_ = sub_ = mul_ = div_ = copy_ = zero_ = _inplace
    __iadd__ = __isub__ = __imul__ = __itruediv__ = _inplace
