"""`deep_gemm.utils.mlopart`: DeepGEMM 2.8.1's memory locality partitions (a driver feature of multi-die
datacenter GPUs, behind its localization helpers). An SM120 GPU is one locality domain: `is_available` answers
False, and what would allocate in a partition raises MLOPartUnavailable, the exception DeepGEMM's callers catch."""

from __future__ import annotations

NUM_LOCALITY_DOMAINS = 2  # DeepGEMM's constant, kept for callers that read it


class MLOPartUnavailable(RuntimeError):
    """Memory locality partitions cannot be used on this GPU."""


_WHY = "memory locality partitions do not exist on SM120 (one locality domain per GPU)"


class MLOPart:
    def __init__(self, *args, **kwargs):
        raise MLOPartUnavailable(_WHY)


def is_available(device_uuid: bytes) -> bool:
    return False


def create_memory(device_uuid: bytes, num_bytes: int, domain_idx: int) -> int:
    raise MLOPartUnavailable(_WHY)


def release() -> None:
    """Nothing was ever allocated: a no-op, as DeepGEMM's is when no partition was created."""


__all__ = ["NUM_LOCALITY_DOMAINS", "MLOPartUnavailable", "MLOPart", "is_available", "create_memory", "release"]
