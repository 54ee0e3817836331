"""A worker's (or server's) copy of the model, and stand-ins for timing-only runs.

:class:`Replica` is one flat float32 parameter vector plus its optimizer state; algorithms
move whole vectors (or slices of them, per :class:`~simdist.training.models.LayerInfo`).

Timing-only mode runs the same algorithm code without tensors: a :class:`PhantomTensor`
has a size and a dtype but no values, so messages still cost the right number of bytes,
and a :class:`PhantomReplica` accepts every call and does nothing.

:func:`payload_nbytes` says how many bytes a message payload puts on the wire and
:func:`snapshot` copies a payload at send time, so a message in flight does not change
when its sender later updates the tensor it sent. A sender that will never write to a
tensor again wraps it in :class:`Handover` and saves that copy; a replica that hands its
weights out this way updates them with :meth:`Replica.apply_gradient_fresh`, which leaves
the tensor it replaces untouched. A :class:`Deferred` travels unevaluated: its receiver
evaluates it on first read (:func:`resolved`).
"""

from __future__ import annotations

import copy
from typing import Any, Callable

import numpy as np
import torch

from .optim import Optimizer

__all__ = ["Replica", "PhantomTensor", "PhantomReplica", "Handover", "Deferred", "resolved", "payload_nbytes",
           "snapshot", "sent_copy"]


class Replica:
    """A flat float32 parameter vector and the optimizer state that goes with it."""

    def __init__(self, params: torch.Tensor, optimizer: Optimizer):
        self.params = params
        self.optimizer = optimizer
        self.opt_state = optimizer.init_state(params)

    @property
    def numel(self) -> int:
        return self.params.numel()

    @property
    def nbytes(self) -> int:
        """Bytes of the parameter vector (optimizer state not included)."""
        return self.params.numel() * self.params.element_size()

    def apply_gradient(self, grad: torch.Tensor, lr: float | None = None) -> None:
        """One optimizer step on ``params`` in place."""
        self.optimizer.step(self.params, grad, self.opt_state, lr=lr)

    def apply_gradient_fresh(self, grad: torch.Tensor, lr: float | None = None) -> None:
        """One optimizer step into a new tensor that becomes ``params`` (same values as
        :meth:`apply_gradient`). The tensor replaced is never written again, so whoever was
        handed it (a :class:`Handover` in a message) keeps valid weights without a copy."""
        self.params = self.optimizer.stepped(self.params, grad, self.opt_state, lr=lr)

    def load(self, params: torch.Tensor) -> None:
        """Copy ``params``' values in (optimizer state is kept)."""
        self.params.copy_(params)

    def adopt(self, params: torch.Tensor) -> None:
        """Use ``params`` itself as the parameters, without a copy: for weights that nobody
        writes to any more (received as a :class:`Handover`) and that this replica only reads."""
        self.params = params

    def clone_params(self) -> torch.Tensor:
        return self.params.clone()


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


class PhantomReplica:
    """Same interface as :class:`Replica`; holds a phantom and its steps do nothing."""

    def __init__(self, numel: int, optimizer: Optimizer, dtype: torch.dtype = torch.float32):
        self.params = PhantomTensor(numel, dtype)
        self.optimizer = optimizer
        self.opt_state: dict = {}

    @property
    def numel(self) -> int:
        return self.params.numel()

    @property
    def nbytes(self) -> int:
        return self.params.nbytes

    def apply_gradient(self, grad: object, lr: float | None = None) -> None:
        """Nothing to compute in timing-only mode."""

    apply_gradient_fresh = apply_gradient

    def load(self, params: object) -> None:
        """Nothing to copy in timing-only mode."""

    adopt = load

    def clone_params(self) -> PhantomTensor:
        return self.params.clone()


class Handover:
    """A part of a message payload that its sender gives away: sent without a copy.

    Sends copy tensors (:func:`snapshot`) because the sender may update them in place
    later. A sender that never writes to ``value`` again (a freshly computed gradient,
    weights a server replaces rather than updates) wraps it: the receiver gets ``value``
    itself, and must only read it, since other receivers may share it. It counts as
    ``value`` on the wire, and pickles as ``value`` (the MPI runtime sends it as usual).
    """

    __slots__ = ("value",)

    def __init__(self, value: Any):
        self.value = value

    def __reduce__(self) -> tuple:
        return _unwrapped, (self.value,)

    def __repr__(self) -> str:
        return f"Handover({self.value!r})"


def _unwrapped(value: Any) -> Any:
    return value


class Deferred:
    """A part of a message payload evaluated when its receiver first reads it (:func:`resolved`).

    The simulator batches gradient evaluations: a worker's gradient can travel unevaluated
    and be computed, with every other request queued by then, when a server applies it. It
    counts ``nbytes`` on the wire, is never copied (its value is never written), and pickles
    as its value.
    """

    __slots__ = ("_compute", "_value", "nbytes")

    def __init__(self, compute: Callable[[], Any], nbytes: int):
        self._compute: Callable[[], Any] | None = compute
        self._value: Any = None
        self.nbytes = int(nbytes)

    @property
    def value(self) -> Any:
        if self._compute is not None:
            self._value, self._compute = self._compute(), None
        return self._value

    def __reduce__(self) -> tuple:
        return _unwrapped, (self.value,)

    def __repr__(self) -> str:
        return f"Deferred({self.nbytes} B, {'evaluated' if self._compute is None else 'not evaluated'})"


def resolved(value: Any) -> Any:
    """``value``, or a :class:`Deferred`'s value (evaluated now if it was not yet)."""
    return value.value if type(value) is Deferred else value


def payload_nbytes(obj: object) -> int:
    """Bytes ``obj`` puts on the wire.

    Tensors and phantoms count ``numel * element_size`` (bf16 is half of fp32), NumPy
    arrays their ``nbytes``, Python numbers 8 bytes, strings their UTF-8 length and None
    nothing; lists, tuples and dict *values* are summed (dict keys are labels, not data);
    a :class:`Handover` counts as its value, a :class:`Deferred` as its ``nbytes``.
    """
    kind = type(obj)  # the common exact types first: this runs for every message
    if kind is dict:
        total = 0
        for value in obj.values():  # numbers inline: a message is mostly small fields
            total += 8 if type(value) in _NUMBERS else payload_nbytes(value)
        return total
    if kind is torch.Tensor or kind is PhantomTensor:
        return obj.numel() * obj.element_size()
    if kind is int or kind is float or kind is bool:
        return 8
    if kind is Handover:
        return payload_nbytes(obj.value)
    if kind is Deferred:
        return obj.nbytes
    return _nbytes_by_kind(obj)


def _nbytes_by_kind(obj: object) -> int:
    if obj is None:
        return 0
    if isinstance(obj, (torch.Tensor, PhantomTensor)):
        return obj.numel() * obj.element_size()
    if isinstance(obj, (np.ndarray, np.generic)):
        return int(obj.nbytes)
    if isinstance(obj, (bool, int, float)):
        return 8
    if isinstance(obj, str):
        return len(obj.encode("utf-8"))
    if isinstance(obj, (bytes, bytearray)):
        return len(obj)
    if isinstance(obj, dict):
        return sum(payload_nbytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(payload_nbytes(item) for item in obj)
    raise TypeError(
        f"cannot size a payload of type {type(obj).__name__}; send tensors, numbers, strings or containers of them"
    )


def snapshot(obj: Any) -> Any:
    """A copy of ``obj`` that later changes to the sender's tensors cannot reach.

    A :class:`Handover` is replaced by its value, uncopied: its sender has given it away.
    A :class:`Deferred` is kept as it is (its value is never written).
    """
    kind = type(obj)  # the common exact types first: this runs for every message
    if kind is dict:
        return {k: v if type(v) in _IMMUTABLE else snapshot(v) for k, v in obj.items()}
    if kind is Handover:
        return obj.value
    if kind in _IMMUTABLE:
        return obj
    return _copied(obj)


def sent_copy(payload: Any) -> tuple[Any, int]:
    """``(snapshot(payload), payload_nbytes(payload))``, in one pass over a dict payload
    (a message's usual shape: a few numbers and a tensor)."""
    if type(payload) is not dict:
        return snapshot(payload), payload_nbytes(payload)
    data, nbytes = {}, 0
    for key, value in payload.items():
        kind = type(value)
        if kind in _NUMBERS:
            nbytes += 8
            data[key] = value
        elif value is None:
            data[key] = None
        elif kind is Deferred:
            nbytes += value.nbytes
            data[key] = value
        else:
            nbytes += payload_nbytes(value)
            data[key] = value if kind in _IMMUTABLE else snapshot(value)
    return data, nbytes


_IMMUTABLE = frozenset({PhantomTensor, Deferred, type(None), bool, int, float, str, bytes})
_NUMBERS = frozenset({bool, int, float})


def _copied(obj: Any) -> Any:
    if isinstance(obj, PhantomTensor) or obj is None or isinstance(obj, (bool, int, float, str, bytes)):
        return obj
    if isinstance(obj, torch.Tensor):
        return obj.detach().clone()
    if isinstance(obj, np.ndarray):
        return obj.copy()
    if isinstance(obj, dict):
        return {k: snapshot(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [snapshot(item) for item in obj]
    if isinstance(obj, tuple):
        items = [snapshot(item) for item in obj]
        return type(obj)(*items) if hasattr(obj, "_fields") else tuple(items)
    return copy.deepcopy(obj)

