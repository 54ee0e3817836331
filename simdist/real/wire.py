"""How point-to-point payloads travel in a real run: tensors out of band, the rest pickled.

Pickling a torch tensor copies its storage into the pickle stream and back out on the other
side (about 1 ms per MB here, each way), which a real training framework never pays and the
simulator does not charge. So before a send, :func:`pack` replaces every CPU tensor inside
the payload's dicts, lists and tuples with a :class:`WireTensor` holding a NumPy view of it;
sent with mpi4py's ``pkl5`` communicator (pickle protocol 5), NumPy arrays leave the pickle as
out-of-band buffers that MPI moves directly. :func:`unpack` turns them back into tensors that
own their memory (the receive buffers). Anything else (numbers, strings, other objects)
is pickled as before; tensors inside other object types are still correct, just slower.

bfloat16 has no NumPy dtype and travels as its int16 bits.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

__all__ = ["WireTensor", "pack", "unpack"]


class WireTensor:
    """A tensor on the wire: a NumPy array (sent out of band) and the torch dtype it came from."""

    __slots__ = ("array", "bfloat16")

    def __init__(self, array: np.ndarray, bfloat16: bool = False):
        self.array = array
        self.bfloat16 = bfloat16

    def __reduce__(self):
        return (WireTensor, (self.array, self.bfloat16))

    @classmethod
    def of(cls, tensor: torch.Tensor) -> "WireTensor":
        t = tensor.detach().contiguous()
        if t.dtype == torch.bfloat16:
            return cls(t.view(torch.int16).numpy(), True)
        return cls(t.numpy())

    def tensor(self) -> torch.Tensor:
        t = torch.from_numpy(self.array)
        return t.view(torch.bfloat16) if self.bfloat16 else t


def pack(obj: Any) -> Any:
    """``obj`` with every CPU tensor in its dicts, lists and tuples replaced by a :class:`WireTensor`.

    The arrays share memory with the tensors: the send must copy them before they can change
    (a buffered send does, at the call).
    """
    if isinstance(obj, torch.Tensor) and obj.device.type == "cpu" and not obj.requires_grad:
        return WireTensor.of(obj)
    if type(obj) is dict:
        return {key: pack(value) for key, value in obj.items()}
    if type(obj) in (list, tuple):
        return type(obj)(pack(value) for value in obj)
    return obj


def unpack(obj: Any) -> Any:
    """The inverse of :func:`pack`: :class:`WireTensor` values become tensors again."""
    if isinstance(obj, WireTensor):
        return obj.tensor()
    if type(obj) is dict:
        return {key: unpack(value) for key, value in obj.items()}
    if type(obj) in (list, tuple):
        return type(obj)(unpack(value) for value in obj)
    return obj
