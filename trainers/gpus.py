"""THE table of what each GPU a job can name is: its CUDA compute capability, by Vertex accelerator type.

One table for both sides of the tree: the replica reads it when TensorFlow does not report the device's
capability (``trainers.precision``: a parameter-server coordinator deciding for its workers' GPUs, a driver that
does not say), and the hardware catalog (``jobs.rules.hardware.catalog``) reads it for each of its ``gpu_types``
(tensor cores, the precision advice). It lives in the replica's package because the replica must not import the job
side, and the job side may read this one; a test holds its names and the catalog's ``gpu_types`` together.

Source: NVIDIA's table of CUDA GPUs and their compute capability, https://developer.nvidia.com/cuda-gpus (read
2026-11-28); the RTX PRO 6000 Blackwell (Server Edition, Vertex's G4 machines) is a GB202 part, compute capability
12.0 as that table lists it.
"""
from __future__ import annotations

#: Vertex accelerator type -> CUDA compute capability (major, minor).
COMPUTE_CAPABILITY: dict[str, tuple[int, int]] = {
    "NVIDIA_TESLA_K80": (3, 7),
    "NVIDIA_TESLA_P4": (6, 1),
    "NVIDIA_TESLA_P100": (6, 0),
    "NVIDIA_TESLA_V100": (7, 0),
    "NVIDIA_TESLA_T4": (7, 5),
    "NVIDIA_TESLA_A100": (8, 0),
    "NVIDIA_A100_80GB": (8, 0),
    "NVIDIA_L4": (8, 9),
    "NVIDIA_H100_80GB": (9, 0),
    "NVIDIA_H100_MEGA_80GB": (9, 0),
    "NVIDIA_H200_141GB": (9, 0),
    "NVIDIA_B200": (10, 0),
    "NVIDIA_GB200": (10, 0),
    "NVIDIA_RTX_PRO_6000": (12, 0),
}
#: tensor cores came with Volta (7.0); bf16 tensor cores with Ampere (8.0)
VOLTA = (7, 0)
AMPERE = (8, 0)


def compute_capability(accelerator_type: str) -> tuple[int, int] | None:
    """The capability of a Vertex accelerator type (any case), or None for one the table does not know."""
    return COMPUTE_CAPABILITY.get(accelerator_type.upper())


def fast_float16(cc: tuple[int, int]) -> bool:
    """float16 faster than float32 without bf16 being the better choice: tensor cores before Ampere (7.x) or
    Pascal GP100's double-rate float16 (6.0)."""
    return cc == (6, 0) or VOLTA <= cc < AMPERE
