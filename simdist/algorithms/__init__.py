"""Training algorithms, each registered by name in :data:`ALGORITHMS`."""

from .base import ALGORITHMS, Algorithm, AlgorithmConfig, AlgorithmContext
from . import sync, asgd, nsoftsync, dbs, daso, dcs3gd, nnt  # noqa: F401  (each registers itself)

__all__ = ["ALGORITHMS", "Algorithm", "AlgorithmConfig", "AlgorithmContext"]
