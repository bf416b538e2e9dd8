"""`deep_gemm.utils.dist`: DeepGEMM 2.8.1's multi-process test scaffolding (NCCL process groups for its MegaMoE
tests). Not provided: deep_gemm_sm120 has no multi-GPU kernel, so nothing here would have a caller; each name
refuses with NotImplementedError saying so, rather than half-working."""

from __future__ import annotations

_WHY = (
    "is DeepGEMM's multi-GPU test scaffolding (MegaMoE, SM100-only upstream); deep_gemm_sm120 has no "
    "multi-GPU kernel: use torch.distributed directly"
)


def init_dist(local_rank: int, num_local_ranks: int):
    raise NotImplementedError(f"deep_gemm.utils.dist.init_dist {_WHY}")


def uneven_all_gather(tensor, dim: int = 0, group=None):
    raise NotImplementedError(f"deep_gemm.utils.dist.uneven_all_gather {_WHY}")


def dist_print(s: str = "", once_in_node: bool = False) -> None:
    raise NotImplementedError(f"deep_gemm.utils.dist.dist_print {_WHY}")


__all__ = ["init_dist", "uneven_all_gather", "dist_print"]
