"""`deep_gemm.locality_domain`: DeepGEMM 2.8.1's memory homed in a GPU's locality domains (MLOPart partitions of
multi-die datacenter GPUs). An SM120 GPU is a single domain with no partitions: the questions are answered
(`is_localization_available()` and `is_localized(t)` are False, `destroy_localizer()` / `release_mlopart()` have
nothing to release); whatever would place memory in a partition refuses with NotImplementedError."""

from __future__ import annotations

from ..core.names import make_refusal as refusal

_WHY = "SM120 GPUs have no memory locality partitions (MLOPart): allocate with torch as usual"


def is_localization_available() -> bool:
    return False


def is_localized(t) -> bool:
    return False


def destroy_localizer() -> None:
    """Nothing was localized: a no-op."""


def release_mlopart() -> None:
    """No partition was created: a no-op."""


REFUSED = (
    "get_num_locality_domains",
    "get_granularity",
    "empty",
    "empty_per_domain",
    "get_sm_locality_domains",
    "get_balanced_sm_locality_domains",
    "localize",
    "localize_rows",
)
globals().update({n: refusal(n, _WHY) for n in REFUSED})

__all__ = ["is_localization_available", "is_localized", "destroy_localizer", "release_mlopart"]
__all__.extend(REFUSED)
