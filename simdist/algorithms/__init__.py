"""Training algorithms, each registered by name in :data:`ALGORITHMS`."""

from .base import ALGORITHMS, Algorithm, AlgorithmConfig, AlgorithmContext
from . import sync  # noqa: F401  (registers "sync")
from . import asgd, nsoftsync, dbs  # noqa: F401

__all__ = ["ALGORITHMS", "Algorithm", "AlgorithmConfig", "AlgorithmContext"]
