"""`deep_gemm.epilogue`: DeepGEMM's GEMM epilogue objects for the `epilogue=` keyword, under both spellings in use
(DeepGEMM 2.8.1: `FP8Quantization`; sgl-deep-gemm 0.2.5: `FP8CastWithClamp`). What each means on our kernels is
decided in one place, keywords.py `epilogue()`: `Identity` is no epilogue, `Alpha(x)` is the `alpha`
keyword (honoured where the GEMM scales its result), the FP8-output and stochastic-rounding epilogues refuse
by name: SM120 kernels have no fused output quantization or stochastic rounding."""

from __future__ import annotations

import torch


class Epilogue:
    """Base of every epilogue object; `kind` names it in messages."""

    kind = "epilogue"

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if not isinstance(v, torch.Tensor))
        return f"{type(self).__name__}({fields})"


class Identity(Epilogue):
    kind = "Identity"


class Alpha(Epilogue):
    kind = "Alpha"

    def __init__(self, alpha: float) -> None:
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float)):
            raise TypeError(f"Alpha takes a number, got {type(alpha).__name__}")
        self.alpha = float(alpha)


class FP8Quantization(Epilogue):
    """Cast the result to FP8 with per-block scales written to `sfd` (not provided on SM120)."""

    kind = "FP8Quantization"

    def __init__(self, sfd: torch.Tensor) -> None:
        self.sfd = sfd


class FP8CastWithClamp(Epilogue):
    """sgl-deep-gemm's FP8 output epilogue, optionally clamping first (not provided on SM120)."""

    kind = "FP8CastWithClamp"

    def __init__(
        self, sfd: torch.Tensor, clamp_value: float | None = None, clamped_count: torch.Tensor | None = None
    ) -> None:
        self.sfd, self.clamp_value, self.clamped_count = sfd, clamp_value, clamped_count


class BF16StochasticRounding(Epilogue):
    kind = "BF16StochasticRounding"


__all__ = ["Epilogue", "Identity", "Alpha", "FP8Quantization", "FP8CastWithClamp", "BF16StochasticRounding"]
