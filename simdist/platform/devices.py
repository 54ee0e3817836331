"""Device kinds: what a rank runs on, and where its compute times come from.

A device kind names the compute profile its measured times are looked up under
(``profile_device``) and, for devices that cannot be measured here, its peak rate, used by
the FLOP-count estimate of :mod:`simdist.platform.compute` when no measured profile exists.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..registry import Registry

__all__ = ["DeviceKind", "DEVICE_KINDS"]


@dataclass(frozen=True)
class DeviceKind:
    """Defaults of one kind of device."""

    name: str
    profile_device: str  # key of the compute profile holding this device's measured times
    peak_flops: float | None  # dense peak of the training precision, FLOP/s (None: measured profiles only)
    is_gpu: bool
    source: str
    memory_bandwidth_Bps: float | None = None  # bytes/s a streaming elementwise kernel sustains (op costs)
    memory_source: str = ""


DEVICE_KINDS: Registry[DeviceKind] = Registry("device kind")


def _add(kind: DeviceKind, description: str) -> None:
    DEVICE_KINDS.add(kind.name, kind, description, citation=kind.source)


_add(DeviceKind("cpu", "host-cpu", None, False,
                "calibration/profiles/host-cpu.yaml (real kernels measured on the host, 1 torch thread per core)",
                19e9, "measured on the development host: numpy float32 a += b over 64 MiB arrays on one core, "
                "median of 30: 19.0 GB/s of reads and writes"),
     "a CPU rank with a core share ('cpus', like docker --cpus); times from the host-cpu profile")
_add(DeviceKind("a100", "a100", 312e12, True,
                "hardware_reference.csv: gpu_compute 'A100 BF16 / FP16 Tensor Core' = 312 TFLOPS dense",
                1555e9, "hardware_reference.csv: gpu_memory 'A100 40GB HBM2' = 1555 GB/s"),
     "NVIDIA A100 SXM (bf16 tensor cores)")
_add(DeviceKind("h100", "h100", 989e12, True,
                "hardware_reference.csv: gpu_compute 'H100 SXM dense tf32 / bf16 / fp16 / fp8' = 989 TFLOPS bf16 dense",
                3350e9, "hardware_reference.csv: gpu_memory 'H100 SXM HBM3 bandwidth' = 3350 GB/s"),
     "NVIDIA H100 SXM (bf16 tensor cores)")
_add(DeviceKind("xc-skylake", "xc-skylake", 2 * 20 * 2.4e9 * 64, False,
                "calibration/profiles/xc-skylake-published.yaml (published ResNet-50 training throughput of a "
                "2 x 20-core Xeon Gold 6148 node, PaddlePaddle benchmark/IntelOptimizedPaddle.md); peak: 2 sockets x "
                "20 cores x 2.40 GHz (same file) x 64 fp32 FLOP/cycle (two AVX-512 FMA units on Gold 6000 parts: "
                "Intel community forum 'Calculate the Max Flops on Skylake', 32 DP FLOP/cycle) at the nominal clock",
                2 * 6 * 2666e6 * 8, "channel arithmetic of the Xeon Gold 6148 (6 DDR4-2666 channels of 8 bytes per "
                "socket, 2 sockets): 256 GB/s peak; a sustained stream reaches less, so op costs come out low"),
     "a whole dual-socket Skylake CPU node of a Cray XC50-class system as one rank (keep cpus at 1)")
