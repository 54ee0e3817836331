"""The hardware model: link and device kinds, platform files and presets, routes, flows, compute times."""

from .devices import DEVICE_KINDS, DeviceKind
from .links import LINK_KINDS, LinkKind
from .presets import PLATFORMS
from .spec import PlatformSpec
from .topology import Device, Link, Platform

__all__ = ["DEVICE_KINDS", "DeviceKind", "LINK_KINDS", "LinkKind", "PLATFORMS", "PlatformSpec",
           "Device", "Link", "Platform"]
