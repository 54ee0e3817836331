"""Runtimes: the seam algorithms talk to (base), the simulator (sim), and collective schedules."""

from .base import ANY, GradResult, Group, Message, Runtime
from .collectives import COLLECTIVES

__all__ = ["ANY", "GradResult", "Group", "Message", "Runtime", "COLLECTIVES"]
