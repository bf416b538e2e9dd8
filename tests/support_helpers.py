"""The API-versus-is_supported agreement check, shared by the CPU tests of every family: an op called on CPU
tensors gets as far as the device check (the last check before CUDA) exactly when is_supported says True."""

from __future__ import annotations

import deep_gemm_sm120 as dg

CPU_REJECT = "must be on a CUDA device"


def accepts(fn, *args, **kw) -> tuple[bool, str]:
    try:
        fn(*args, **kw)
    except ValueError as e:
        return (True, "") if CPU_REJECT in str(e) else (False, f"ValueError: {e}")
    except (TypeError, NotImplementedError) as e:
        return False, f"{type(e).__name__}: {e}"
    raise AssertionError("a CPU call cannot succeed")


def agree(op: str, call: tuple, **query) -> None:
    api_ok, why = accepts(*call)
    sup = dg.why_unsupported(op, **query)
    assert api_ok == (sup is None), (
        f"{op} {query}: API {'accepts' if api_ok else 'rejects: ' + why}, is_supported says {sup or 'yes'}"
    )
