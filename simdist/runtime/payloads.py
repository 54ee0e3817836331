"""What a message payload weighs, what a send copies, and values a runtime evaluates later.

These are the runtimes' rules for what algorithms hand them; algorithms never apply them
themselves.

* :func:`payload_nbytes`: how many bytes a payload puts on the wire (tensors and phantoms
  ``numel * element_size``, numbers 8 bytes, containers summed).
* :func:`snapshot`: the copy a send makes, so a message in flight does not change when its
  sender later updates the tensor it sent. A send with ``handover=True``
  (:meth:`~simdist.runtime.base.Runtime.send`) gives the payload's tensors away instead: the
  sender never writes them again, so they travel without a copy and receivers share them
  read-only. :func:`sent_copy` is the copy and the size in one pass.
* :class:`Deferred`: a value evaluated when first read. The simulator evaluates gradients
  lazily, batched with every request queued by then: a gradient can travel in a message
  unevaluated and be computed when its receiver uses it (:func:`resolved`), and work on such
  values can wait for them too (:func:`computed`, behind ``rt.busy(..., inputs=...)``).
"""

from __future__ import annotations

import copy
from typing import Any, Callable, Sequence

import numpy as np
import torch

from .phantom import PhantomTensor

__all__ = ["Deferred", "resolved", "computed", "payload_nbytes", "snapshot", "sent_copy"]


class Deferred:
    """A value evaluated when it is first read (:func:`resolved`).

    It counts ``nbytes`` on the wire (None: its value's size, which then evaluates it), is
    never copied by a send (its value is never written), and pickles as its value.
    """

    __slots__ = ("_compute", "_value", "nbytes")

    def __init__(self, compute: Callable[[], Any], nbytes: int | None = None):
        self._compute: Callable[[], Any] | None = compute
        self._value: Any = None
        self.nbytes = None if nbytes is None else int(nbytes)

    @property
    def value(self) -> Any:
        if self._compute is not None:
            self._value, self._compute = self._compute(), None
        return self._value

    def __reduce__(self) -> tuple:
        return _unwrapped, (self.value,)

    def __repr__(self) -> str:
        size = "size of its value" if self.nbytes is None else f"{self.nbytes} B"
        return f"Deferred({size}, {'evaluated' if self._compute is None else 'not evaluated'})"


def _unwrapped(value: Any) -> Any:
    return value


def resolved(value: Any) -> Any:
    """``value``, or a :class:`Deferred`'s value (evaluated now if it was not yet)."""
    return value.value if type(value) is Deferred else value


def computed(run: Callable[..., Any], inputs: Sequence[Any] = (), lazy: bool = False) -> Any:
    """``run(*inputs)`` on the inputs' values.

    With ``lazy`` and an input not evaluated yet, the result is a :class:`Deferred` computed
    when first read, so the input stays unevaluated until then (``run`` must have no other
    effect); otherwise ``run`` is called now.
    """
    if not inputs:
        return run()
    if any(type(value) is Deferred for value in inputs):
        if lazy:
            return Deferred(lambda: run(*(resolved(value) for value in inputs)))
        return run(*(resolved(value) for value in inputs))
    return run(*inputs)


def payload_nbytes(obj: object) -> int:
    """Bytes ``obj`` puts on the wire.

    Tensors and phantoms count ``numel * element_size`` (bf16 is half of fp32), NumPy
    arrays their ``nbytes``, Python numbers 8 bytes, strings their UTF-8 length and None
    nothing; lists, tuples and dict *values* are summed (dict keys are labels, not data);
    a :class:`Deferred` counts its ``nbytes``.
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
    if kind is Deferred:
        return obj.nbytes if obj.nbytes is not None else payload_nbytes(obj.value)
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


def snapshot(obj: Any, handover: bool = False) -> Any:
    """A copy of ``obj`` that later changes to the sender's tensors cannot reach.

    With ``handover`` its torch tensors are kept uncopied: their sender has given them away.
    A :class:`Deferred` is kept as it is (its value is never written).
    """
    kind = type(obj)  # the common exact types first: this runs for every message
    if kind is dict:
        return {k: v if type(v) in _IMMUTABLE else snapshot(v, handover) for k, v in obj.items()}
    if kind in _IMMUTABLE or (handover and kind is torch.Tensor):
        return obj
    return _copied(obj, handover)


def sent_copy(payload: Any, handover: bool = False) -> tuple[Any, int]:
    """``(snapshot(payload, handover), payload_nbytes(payload))``, in one pass over a dict payload
    (a message's usual shape: a few numbers and a tensor)."""
    if type(payload) is not dict:
        return snapshot(payload, handover), payload_nbytes(payload)
    data, nbytes = {}, 0
    for key, value in payload.items():
        kind = type(value)
        if kind in _NUMBERS:
            nbytes += 8
            data[key] = value
        elif value is None:
            data[key] = None
        elif handover and kind is torch.Tensor:
            nbytes += value.numel() * value.element_size()
            data[key] = value
        else:
            nbytes += payload_nbytes(value)
            data[key] = value if kind in _IMMUTABLE else snapshot(value, handover)
    return data, nbytes


_IMMUTABLE = frozenset({PhantomTensor, Deferred, type(None), bool, int, float, str, bytes})
_NUMBERS = frozenset({bool, int, float})


def _copied(obj: Any, handover: bool) -> Any:
    if isinstance(obj, PhantomTensor) or obj is None or isinstance(obj, (bool, int, float, str, bytes)):
        return obj
    if isinstance(obj, torch.Tensor):
        return obj if handover else obj.detach().clone()
    if isinstance(obj, np.ndarray):
        return obj.copy()
    if isinstance(obj, dict):
        return {k: snapshot(v, handover) for k, v in obj.items()}
    if isinstance(obj, list):
        return [snapshot(item, handover) for item in obj]
    if isinstance(obj, tuple):
        items = [snapshot(item, handover) for item in obj]
        return type(obj)(*items) if hasattr(obj, "_fields") else tuple(items)
    return copy.deepcopy(obj)
