"""Named, seeded random streams.

One seed per run; every component draws from its own stream derived from that seed and
the stream's name (``"compute-noise/rank3"``, ``"data-order"``, ``"model-init"``), so
adding a component or a rank never changes the numbers another component draws.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # torch is imported where a generator is made: the command line's help needs none
    import torch

__all__ = ["derive_seed", "numpy_stream", "torch_generator"]


def derive_seed(seed: int, name: str) -> int:
    """A 63-bit integer seed for stream ``name``, stable across Python versions and runs."""
    digest = hashlib.sha256(f"{int(seed)}/{name}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def numpy_stream(seed: int, name: str) -> np.random.Generator:
    """A NumPy generator for stream ``name`` of run ``seed``."""
    return np.random.default_rng(derive_seed(seed, name))


def torch_generator(seed: int, name: str) -> "torch.Generator":
    """A CPU torch generator for stream ``name`` of run ``seed``."""
    import torch

    gen = torch.Generator()
    gen.manual_seed(derive_seed(seed, name))
    return gen
