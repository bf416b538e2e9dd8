"""chunk_gated_delta_rule: the gated delta rule chunked forward (FLA's semantics; docs/gated_delta_rule.md).

Two kernels on the current stream, graph-capturable: the prep kernel (per chunk and value head: cumsum of g,
(I + A)^-1 scaled into the WY factors Tw and Tu, the decayed causal q.k products, the per-token gates) and the recurrence
(per sequence, value head and V slice: the state in registers, chunk after chunk, and o). The intermediates live
in a per-call scratch of 3 * C * 2 + 16 bytes per token and value head.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ... import jit
from ...arch import target_of
from ...checks import device_of, get_index_checks, index_checks
from ...core.arith import ceil_div
from ...core.params import ParamList
from ...core.tma import tma_request, with_addresses
from ...device import num_sms_for
from ...launch import KEY_ERRORS, CallCache, fast_calls, get_pdl, kernel_memo, launch, recording, tensor_key
from ...launch import empty as fresh_empty
from ...launch import zeros as fresh_zeros
from .backward import Carried, Differentiable, chunk_grads_enabled, grad_rows_enabled
from .bwd import PARAMS as BWD_PARAMS
from .bwd import GdrBwdSpec
from .bwd_chunk import PARAMS as CHUNK_GRAD_PARAMS
from .bwd_chunk import GdrChunkGradSpec, choose_fold, fold_setting
from .combine import PARAMS as COMBINE_PARAMS
from .combine import GdrCombineSpec, combine_ctas
from .contract import (
    OTHER_CHUNK,
    check_arguments,
    check_cu_seqlens_values,
    chunk_gated_delta_rule_bwd,
    cu_seqlens_int32,
    default_chunk_size,
    scale_value,
)
from .grad_rows import PARAMS as GRAD_ROWS_PARAMS
from .grad_rows import GdrGradRowsSpec, grad_rows_ctas
from .kernel import HEAD_DIM, PARAMS, STATE_TOKENS, GdrFwdSpec
from .plan import (
    choose_overlap,
    choose_plan,
    choose_segments,
    lengths_setting,
    planned_units,
    recurrence_ctas,
    segment_setting,
)
from .prep import PARAMS as PREP_PARAMS
from .prep import GdrPrepSpec, persistent_teams

__all__ = ["chunk_gated_delta_rule", "chunk_gated_delta_rule_bwd", "default_chunk_size"]

_CALLS = CallCache()  # calls checked and planned once per signature
# served in C (launch.fast_calls): the arguments, then the PDL switch and the segment knob (the plan reads both);
# a hit returns (o, final_state) it allocated, with the scratch, flags and segment maps made anew
_FAST = fast_calls("TTTTTVTVTVVVV", returns=True)
_ELEM = {torch.bfloat16: ("bf16", "bfloat16"), torch.float16: ("fp16", "float16")}


@kernel_memo(maxsize=64)
def _kernels(
    chunk: int, vslice: int, ksplit: int, persistent: bool, elem: str, index: int, target: str, states: bool = False
):
    return (
        jit.get_kernel(GdrPrepSpec(chunk, elem, persistent), target, index),
        jit.get_kernel(GdrFwdSpec(chunk, vslice, elem, ksplit, False, states), target, index),
    )


@kernel_memo(maxsize=64)
def _segment_kernels(chunk: int, vslice: int, ksplit: int, elem: str, index: int, target: str):
    """The segmented walk's extra kernels: the recurrence's transition-pass instance and the combine."""
    return (
        jit.get_kernel(GdrFwdSpec(chunk, vslice, elem, ksplit, True), target, index),
        jit.get_kernel(GdrCombineSpec(), target, index),
    )


def _map(
    name: str,
    dtype: str,
    address: int,
    inner: int,
    heads: int,
    tokens: int,
    box_inner: int,
    chunk: int,
    elem_bytes: int,
    params: ParamList = PARAMS,
) -> bytes:
    """A [tokens][heads][inner] tensor at `address` read in boxes of (box_inner, 1 head, chunk tokens), for the
    kernel parameter `name` of `params` (the recurrence's by default)."""
    swizzle = box_inner * elem_bytes if box_inner * elem_bytes in (32, 64, 128) else 0
    return tma_request(
        params.offsets[name],
        dtype,
        address,
        (inner, heads, tokens),
        (inner * elem_bytes, heads * inner * elem_bytes),
        (box_inner, 1, chunk),
        swizzle,
    )


def chunk_gated_delta_rule(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    scale: float | None = None,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = False,
    cu_seqlens: torch.Tensor | None = None,
    use_qk_l2norm_in_kernel: bool = False,
    chunk_size: int | None = None,
    *,
    cu_seqlens_cpu: torch.Tensor | None = None,
):
    """q, k [B, T, H, 128]; v [B, T, HV, 128] (HV a multiple of H, bf16 or fp16); g fp32 [B, T, HV] (log decay);
    beta [B, T, HV]; initial_state fp32 [N, HV, 128, 128]; cu_seqlens [N + 1] (B = 1). Returns (o [B, T, HV, 128]
    in v's dtype, final_state fp32 [N, HV, 128, 128] or None). chunk_size: 16, 32 or 64 (default:
    default_chunk_size(), 32 on SM120). Differentiable in q, k, v, g, beta and initial_state (backward.py: on CUDA
    four kernels, the states pass, the reverse state pass, B3's per-chunk gradients and dq / dk's last step;
    elsewhere torch operations).
    Checked and planned once per call signature (every tensor's dtype, shape, strides, device and alignment class,
    the Python values, the PDL switch); cu_seqlens' values are checked per call (index_checks()).
    cu_seqlens_cpu (FLA's keyword): a host copy of cu_seqlens' values, read to plan a pack (no device read): a
    pack whose segments would cut no sequence walks whole (plan.lengths_setting). It only steers the plan; the
    kernels read cu_seqlens."""
    # served in C unless autograd wants a backward (the Function must see the call) or cu_seqlens' values are read
    try:
        grad = _wants_grad(q, k, v, g, beta, initial_state)
    except AttributeError:  # not tensors: the checked path names what was expected
        grad = True
    seg = segment_setting()
    lengths = None if cu_seqlens_cpu is None else _host_lengths(q, v, cu_seqlens, cu_seqlens_cpu)
    if lengths is not None and not seg:
        seg = _lengths_setting(q, v, lengths, chunk_size)
    fast_args = (
        q, k, v, g, beta, scale, initial_state, output_final_state, cu_seqlens, use_qk_l2norm_in_kernel, chunk_size,
        get_pdl(), seg,
    )  # fmt: skip
    sig = _FAST(*fast_args) if not grad and (cu_seqlens is None or not get_index_checks()) else None
    if sig is not None and sig.__class__ is not bytes:  # served: (o, final_state)
        return sig
    try:
        key = sig or (
            tensor_key(q),
            tensor_key(k),
            tensor_key(v),
            tensor_key(g),
            tensor_key(beta),
            type(scale),
            scale,
            None if initial_state is None else tensor_key(initial_state),
            type(output_final_state),
            output_final_state,
            None if cu_seqlens is None else tensor_key(cu_seqlens),
            type(use_qk_l2norm_in_kernel),
            use_qk_l2norm_in_kernel,
            type(chunk_size),
            chunk_size,
            get_pdl(),  # the plan overlaps its two kernels only with PDL
            seg,  # the measurement knob, or the host lengths' veto: a new value plans anew
        )
        call = _CALLS.get(key)
    except KEY_ERRORS:  # not tensors, storage-less, or unhashable values: the checks name what was expected
        key, call = None, None
    if call is None or target_of(call[1]) != call[0]:
        call = _prepare(
            q, k, v, g, beta, scale, initial_state, output_final_state, cu_seqlens, use_qk_l2norm_in_kernel,
            chunk_size, segments=seg,
        )  # fmt: skip
        if sig is not None:  # a new signature: what it launches and returns is kept for the C table
            with recording(_FAST, fast_args) as rec:
                rec.result = call[2](q, k, v, g, beta, initial_state, cu_seqlens, scale)
            o, final = rec.result
        else:
            o, final = _run(
                call[2], q, k, v, g, beta, scale, initial_state, cu_seqlens, use_qk_l2norm_in_kernel, lengths
            )
        if key is not None:  # after the first run: a call whose cu_seqlens values fail is never cached
            _CALLS.put(key, call)
        return o, final
    return _run(call[2], q, k, v, g, beta, scale, initial_state, cu_seqlens, use_qk_l2norm_in_kernel, lengths)


def _host_lengths(q, v, cu_seqlens, cu_seqlens_cpu) -> list[int] | None:
    """cu_seqlens_cpu checked (a CPU integer tensor shaped as cu_seqlens, from 0 to T, non-decreasing), then the
    sequences' lengths it gives. Anything wrong with the other arguments is left to the call's own checks (None:
    planned as without lengths)."""
    if not isinstance(cu_seqlens_cpu, torch.Tensor):
        raise TypeError(
            f"cu_seqlens_cpu must be a CPU torch.Tensor (int32 or int64), got {type(cu_seqlens_cpu).__name__}"
        )
    if cu_seqlens_cpu.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"cu_seqlens_cpu must be int32 or int64, got {cu_seqlens_cpu.dtype}")
    if cu_seqlens_cpu.device.type != "cpu":
        raise ValueError(f"cu_seqlens_cpu must be on the CPU (a host copy of cu_seqlens), got {cu_seqlens_cpu.device}")
    if not isinstance(cu_seqlens, torch.Tensor) or not isinstance(q, torch.Tensor) or not isinstance(v, torch.Tensor):
        if cu_seqlens is None:
            raise ValueError("cu_seqlens_cpu is a host copy of cu_seqlens: pass cu_seqlens too")
        return None
    if tuple(cu_seqlens_cpu.shape) != tuple(cu_seqlens.shape):
        raise ValueError(
            f"cu_seqlens_cpu must have cu_seqlens' shape {tuple(cu_seqlens.shape)}, got {tuple(cu_seqlens_cpu.shape)}"
        )
    offsets = cu_seqlens_cpu.tolist()
    t = q.shape[1] if q.dim() == 4 else -1
    if not offsets or offsets[0] != 0 or offsets[-1] != t or any(a > b for a, b in zip(offsets, offsets[1:])):
        raise ValueError(f"cu_seqlens_cpu must run from 0 to T = {t} without decreasing, got {offsets}")
    if v.dim() != 4 or q.dim() != 4:
        return None
    return [b - a for a, b in zip(offsets, offsets[1:])]


def _lengths_setting(q, v, lengths: list[int], chunk_size) -> str:
    """The segment setting the host lengths give (plan.lengths_setting) at the call's chunk size and SM count."""
    chunk = chunk_size or (default_chunk_size(q.device) if q.is_cuda else OTHER_CHUNK)
    return lengths_setting(lengths, v.shape[2], chunk, num_sms_for(q.device.index if q.is_cuda else 0))


def _wants_grad(q, k, v, g, beta, initial_state) -> bool:
    """Whether autograd wants a backward of this call: grad mode on and an input that requires grad."""
    return torch.is_grad_enabled() and (
        q.requires_grad
        or k.requires_grad
        or v.requires_grad
        or g.requires_grad
        or beta.requires_grad
        or (initial_state is not None and initial_state.requires_grad)
    )


def _run(run, q, k, v, g, beta, scale, initial_state, cu_seqlens, use_qk_l2norm_in_kernel, lengths=None) -> tuple:
    """run(...) as it is, or inside the autograd Function that gives it a backward when an input requires grad
    (backward.py: the inputs are kept, the rest recomputed from them). lengths: the sequences' lengths from
    cu_seqlens_cpu (the backward sizes its chunk layout from them without a device read where that pads little)."""
    if not _wants_grad(q, k, v, g, beta, initial_state):
        return run(q, k, v, g, beta, initial_state, cu_seqlens, scale)
    l2 = bool(use_qk_l2norm_in_kernel)

    # the prep scratch the states pass made, for the reverse pass that follows it in the same backward
    kept: list = []
    # a segmented forward's first states (segments x pairs x 64 KiB, fp32), kept with the saved inputs for the
    # states pass: it then skips the transition pass and the combine
    carried = Carried()

    def states(q, k, v, g, beta, initial_state, cu_seqlens, slots, count):  # stage 1 by the forward's kernels
        kept.clear()
        return gdr_states(q, k, v, g, beta, scale, initial_state, cu_seqlens, l2, slots, count, kept, carried)

    def state_grads(q, k, v, g, beta, cu_seqlens, do, dfinal, slots, count, want_dh0):  # stage 2 by its kernel
        scratch = kept.pop() if kept else None
        return gdr_state_grads(q, k, v, g, beta, scale, do, dfinal, cu_seqlens, l2, slots, count, want_dh0, scratch)

    def chunk_grads(q, k, v, g, beta, do, states, dh_next, first, length, covered):  # stages 0 and 3 by B3
        return gdr_chunk_grads(q, k, v, g, beta, scale, do, l2, states, dh_next, first, length, covered)

    def grad_rows(q, k, dq_parts, dk_parts):  # dq and dk's parts summed, the l2norm's backward, the cast
        return gdr_grad_rows(dq_parts, dk_parts, q, k, l2)

    on_gpu = q.is_cuda
    meta = (
        scale_value(scale, HEAD_DIM),
        l2,
        states if on_gpu else None,
        state_grads if on_gpu else None,
        chunk_grads if on_gpu and chunk_grads_enabled() else None,
        grad_rows if on_gpu and chunk_grads_enabled() and grad_rows_enabled() else None,
        None if lengths is None else sum(ceil_div(n, STATE_TOKENS) for n in lengths),
        carried,
    )
    outs = Differentiable.apply(
        meta, lambda *tensors: run(*tensors, scale, carried=carried), q, k, v, g, beta, initial_state, cu_seqlens
    )
    return outs if isinstance(outs, tuple) else (outs, None)


def _prep_scratch(tokens: int, hv: int, c: int, elem_bytes: int, n: int, varlen: bool) -> tuple[int, Callable]:
    """The prep's outputs in one scratch allocation, addressed by offset (no tensor per part): Tw, Tu, attn
    [T, HV, C] in q's dtype, the gates [T, HV, 4] fp32, then cu' (2 (N + 1) int32) with varlen. Every part starts
    16-byte aligned (a multiple of T x HV x 32 bytes before it), as the tensor maps need. Returns (bytes,
    addresses(base) -> (tw, tu, attn, gates, cu' or 0))."""
    factor = tokens * hv * c * elem_bytes
    gates = 3 * factor
    cu_eff = gates + tokens * hv * 16

    def addresses(base: int) -> tuple[int, int, int, int, int]:
        return base, base + factor, base + 2 * factor, base + gates, base + cu_eff if varlen else 0

    return cu_eff + (8 * (n + 1) if varlen else 0), addresses


def gdr_states(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    scale: float | None,
    initial_state: torch.Tensor | None,
    cu_seqlens: torch.Tensor | None,
    use_qk_l2norm_in_kernel: bool,
    slots: torch.Tensor,
    count: int,
    scratch_out: list | None = None,
    carried: Carried | None = None,
) -> torch.Tensor:
    """The backward's states pass (backward.py): the forward's walk (its plan, at the device's default chunk) that
    stores the state entering every STATE_TOKENS-th token of each sequence, the j-th of sequence n at slot
    slots[n] + slots[N + j] of a [count, HV, 128, 128] tensor in q's dtype (rounded to nearest once: B3 reads the
    states as its mma operands; int32 slots on the device), and forms no o
    (the kernel's kStates instance loads neither q nor attn). Planned per call; the call's arguments are the
    forward's. scratch_out (a list): receives the prep kernel's scratch (the chunk factors), which
    gdr_state_grads then reads instead of running the prep again. carried: the training call's Carried, in which its
    segmented forward left the segments' first states; under the same cut and capture state the pass walks from
    them instead of forming them again (the transition pass and the combine skipped)."""
    call = _prepare(
        q, k, v, g, beta, scale, initial_state, False, cu_seqlens, use_qk_l2norm_in_kernel, None, states=True
    )
    out = torch.empty(count, v.shape[2], HEAD_DIM, HEAD_DIM, dtype=q.dtype, device=v.device)
    if count:
        call[2](
            q, k, v, g, beta, initial_state, cu_seqlens, scale, state_out=(out, slots), scratch_out=scratch_out,
            carried=carried,
        )  # fmt: skip
    return out


def _dense16(*xs: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Each tensor contiguous with a 16-byte aligned base (the backward kernels' 16-byte loads and tensor maps):
    contiguous() first, then a clone where the base is misaligned (a clone of a permuted tensor would keep its
    dense permuted layout, so the order matters)."""
    dense = [x.contiguous() for x in xs]
    return tuple(x.clone() if x.data_ptr() % 16 else x for x in dense)


def gdr_state_grads(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    scale: float | None,
    do: torch.Tensor,
    dfinal: torch.Tensor | None,
    cu_seqlens: torch.Tensor | None,
    use_qk_l2norm_in_kernel: bool,
    slots: torch.Tensor,
    count: int,
    want_dh0: bool,
    prep_scratch: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The backward's reverse state pass (backward.py's stage 2 by the kernels): the prep kernel, then the reverse walk
    (impls/sm120_gated_delta_rule_bwd.cuh), at the device's default chunk. Returns (dh_next, dh0): the state gradient
    leaving every STATE_TOKENS tokens of each sequence, the j-th of sequence n at slot slots[n] + slots[N + j] of a
    [count, HV, 128, 128] tensor in q's dtype (rounded to nearest once, as the states), and the initial state's gradient
    [N, HV, 128, 128] in fp32 (None unless want_dh0). The arguments are the forward's, already checked by it; do [B, T,
    HV, 128] in v's dtype. prep_scratch: the states pass's prep scratch for the same arguments (gdr_states'
    scratch_out), whose factors are the ones this pass needs: no second prep run. Ignored unless its size is this call's
    layout's."""
    p = check_arguments(
        q, k, v, g, beta, scale, None, False, cu_seqlens, use_qk_l2norm_in_kernel, None,
        default_chunk=default_chunk_size(q.device),
    )  # fmt: skip
    extra = {"cu_seqlens": cu_seqlens} if cu_seqlens is not None else {}
    index = device_of(q=q, k=k, v=v, g=g, beta=beta, do=do, **extra)
    target = target_of(index)
    b, t, h, hv, n, c = p.batch, p.seq_len, p.heads, p.value_heads, p.num_sequences, p.chunk_size
    elem, tma_dtype = _ELEM[q.dtype]
    tokens, dev = b * t, q.device
    dh_next = torch.empty(count, hv, HEAD_DIM, HEAD_DIM, dtype=q.dtype, device=dev)
    dh0 = torch.empty(n, hv, HEAD_DIM, HEAD_DIM, dtype=torch.float32, device=dev) if want_dh0 else None
    if tokens == 0:
        if dh0 is not None:
            dh0.copy_(dfinal) if dfinal is not None else dh0.zero_()
        return dh_next, dh0
    vslice = choose_plan(n, hv, num_sms_for(index), c)[0]  # the forward's slice; the reverse walk has no K split
    prep = jit.get_kernel(GdrPrepSpec(c, elem, False), target, index)
    bwd = jit.get_kernel(GdrBwdSpec(c, vslice, elem), target, index)
    # contiguous, 16-byte aligned bases for the tensor maps
    q, k, v, do = _dense16(q, k, v, do)
    g, beta = g.contiguous(), beta.contiguous()
    dfinal = None if dfinal is None else dfinal.float().contiguous()
    cu = None if cu_seqlens is None else cu_seqlens_int32(cu_seqlens, t)
    slots = slots.to(device=dev, dtype=torch.int32).contiguous()
    scratch_bytes, scratch_parts = _prep_scratch(tokens, hv, c, q.element_size(), n, cu is not None)
    shared = prep_scratch is not None and prep_scratch.numel() == scratch_bytes and prep_scratch.device == dev
    scratch = prep_scratch if shared else torch.empty(scratch_bytes, dtype=torch.uint8, device=dev)
    tw, tu, attn, gates, cu_eff = scratch_parts(scratch.data_ptr())
    slots_total = ceil_div(t, c) + n if cu is not None else n * ceil_div(t, c)
    if not shared:
        launch(
            prep,
            slots_total * hv,
            PREP_PARAMS.pack(
                q=q.data_ptr(), k=k.data_ptr(), g=g.data_ptr(), beta=beta.data_ptr(),
                cu_seqlens=0 if cu is None else cu.data_ptr(), tw=tw, tu=tu, attn=attn, gates=gates,
                beta_fp32=int(beta.dtype == torch.float32), l2norm=int(use_qk_l2norm_in_kernel),
                cu_effective=cu_eff, ready=0, scale=scale_value(scale, HEAD_DIM), num_seqs=n, seq_len=t,
                value_heads=hv, group=hv // h,
            ),
            b"",
            index,
        )  # fmt: skip
    maps = (
        _map("tmap_q", tma_dtype, q.data_ptr(), HEAD_DIM, h, tokens, 64, c, 2, BWD_PARAMS)
        + _map("tmap_k", tma_dtype, k.data_ptr(), HEAD_DIM, h, tokens, 64, c, 2, BWD_PARAMS)
        + _map("tmap_do", tma_dtype, do.data_ptr(), HEAD_DIM, hv, tokens, min(vslice, 64), c, 2, BWD_PARAMS)
        + _map("tmap_tw", tma_dtype, tw, c, hv, tokens, c, c, 2, BWD_PARAMS)
        + _map("tmap_attn", tma_dtype, attn, c, hv, tokens, c, c, 2, BWD_PARAMS)
        + _map("tmap_gate", "float32", gates, 4, hv, tokens, 4, c, 4, BWD_PARAMS)
    )
    launch(
        bwd,
        n * hv * (HEAD_DIM // vslice),
        BWD_PARAMS.pack(
            dfinal=0 if dfinal is None else dfinal.data_ptr(), dh0=0 if dh0 is None else dh0.data_ptr(),
            dh_next=dh_next.data_ptr() if count else 0, state_slots=slots.data_ptr(),
            cu_seqlens=cu_eff, seq_len=t, value_heads=hv, group=hv // h,
        ),
        maps,
        index,
    )  # fmt: skip
    return dh_next, dh0


def gdr_chunk_grads(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    scale: float | None,
    do: torch.Tensor,
    use_qk_l2norm_in_kernel: bool,
    states: torch.Tensor,
    dh_next: torch.Tensor,
    chunk_first: torch.Tensor,
    chunk_len: torch.Tensor,
    covered: bool,
    fold: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The backward's per-chunk gradients (backward.py's stages 0 and 3 by the kernel,
    impls/sm120_gated_delta_rule_bwd_chunk.cuh): for every 64-token chunk c of the backward's layout (its first token
    chunk_first[c] in the flat [B T] numbering, chunk_len[c] tokens, 0 for a padding chunk) and value head, from the
    state entering it (states[c], the states pass's) and the gradient of the state leaving it (dh_next[c], the reverse
    pass's), both [count, HV, 128, 128] in q's dtype. Returns fp32 token-major (dq, dk) [B T, H x parts, 128], each
    summed over a part of its q / k head's value heads (fold of them, group / fold parts: row h x parts + p holds value
    heads h x group + p x fold onwards; with respect to the l2-normalized q / k when use_qk_l2norm_in_kernel), dv [B T,
    HV, 128] in v's dtype (rounded once, from fp32), dg, dbeta [B T, HV]. fold: None plans it (bwd_chunk.choose_fold;
    DG_SM120_GDR_FOLD for measurement), else a divisor of the group. covered: every token lies in some chunk (fixed
    lengths), so nothing is zeroed first. The arguments are the forward's, already checked by it; do [B, T, HV, 128] in
    v's dtype."""
    b, t, h = q.shape[:3]
    hv, tokens, dev = v.shape[2], q.shape[0] * q.shape[1], q.device
    count = chunk_first.numel()
    for name, x in (("states", states), ("dh_next", dh_next)):
        if x.dtype != q.dtype:
            raise TypeError(f"{name} must be in q's dtype ({q.dtype}, as the passes store it), got {x.dtype}")
        if tuple(x.shape) != (count, hv, HEAD_DIM, HEAD_DIM):
            raise ValueError(
                f"{name} must be [{count}, {hv}, {HEAD_DIM}, {HEAD_DIM}] (a state per chunk), got {list(x.shape)}"
            )
    index = device_of(q=q, k=k, v=v, g=g, beta=beta, do=do, states=states, dh_next=dh_next)
    target = target_of(index)
    elem = _ELEM[q.dtype][0]
    group = hv // h
    if fold is None:
        fold = fold_setting() or choose_fold(count, h, group, num_sms_for(index))
    if fold < 1 or group % fold:  # (the knob's value too)
        raise ValueError(f"fold={fold}: expected a divisor of the value heads per q / k head ({group})")
    make = torch.empty if covered else torch.zeros
    dq, dk = (make(tokens, h * (group // fold), HEAD_DIM, dtype=torch.float32, device=dev) for _ in range(2))
    dv = make(tokens, hv, HEAD_DIM, dtype=v.dtype, device=dev)
    dg, dbeta = (make(tokens, hv, dtype=torch.float32, device=dev) for _ in range(2))
    if tokens == 0 or count == 0:
        return dq, dk, dv, dg, dbeta
    kern = jit.get_kernel(GdrChunkGradSpec(elem), target, index)
    # contiguous, then 16-byte aligned bases (the kernel's 16-byte loads of q / k rows)
    q, k, v, do = _dense16(q, k, v, do)
    g, beta = g.contiguous(), beta.contiguous()
    # the kernel reads the states and their gradients 16 bytes at a time too
    states, dh_next = _dense16(states, dh_next)
    first = chunk_first.to(device=dev, dtype=torch.int32).contiguous()
    length = chunk_len.to(device=dev, dtype=torch.int32).contiguous()
    launch(
        kern,
        count * hv // fold,
        CHUNK_GRAD_PARAMS.pack(
            q=q.data_ptr(), k=k.data_ptr(), v=v.data_ptr(), dout=do.data_ptr(), g=g.data_ptr(),
            beta=beta.data_ptr(), states=states.data_ptr(), dh_next=dh_next.data_ptr(), chunk_first=first.data_ptr(),
            chunk_len=length.data_ptr(), dq=dq.data_ptr(), dk=dk.data_ptr(), dv=dv.data_ptr(), dg=dg.data_ptr(),
            dbeta=dbeta.data_ptr(), heads=h, value_heads=hv, scale=scale_value(scale, HEAD_DIM),
            beta_fp32=int(beta.dtype == torch.float32), l2norm=int(use_qk_l2norm_in_kernel), fold=fold,
        ),
        b"",
        index,
    )  # fmt: skip
    return dq, dk, dv, dg, dbeta


def gdr_grad_rows(
    dq_parts: torch.Tensor, dk_parts: torch.Tensor, q: torch.Tensor, k: torch.Tensor, use_qk_l2norm_in_kernel: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """dq and dk's last step (impls/sm120_gated_delta_rule_grad_rows.cuh) from B3's fp32 parts [B T, H x parts,
    128] (api.gdr_chunk_grads): the parts added in part order, the l2norm's backward when the forward normalized q
    and k (x = q, k as given to the forward), the result [B, T, H, 128] in q's dtype, rounded once. One launch for
    both. backward._finish_rows is the same step in torch."""
    index = device_of(dq_parts=dq_parts, dk_parts=dk_parts, q=q, k=k)
    b, t, h = q.shape[:3]
    rows = b * t * h
    if dq_parts.dtype != torch.float32 or dk_parts.dtype != torch.float32:
        raise TypeError(f"dq / dk parts must be float32 (B3's), got {dq_parts.dtype} / {dk_parts.dtype}")
    parts = dq_parts.shape[1] // h if h else 1
    want = (b * t, h * parts, HEAD_DIM)
    if tuple(k.shape) != tuple(q.shape) or k.dtype != q.dtype:
        raise ValueError(f"k must match q ({tuple(q.shape)}, {q.dtype}), got {tuple(k.shape)}, {k.dtype}")
    if parts < 1 or tuple(dq_parts.shape) != want or tuple(dk_parts.shape) != want:
        raise ValueError(
            f"dq / dk parts must be [B T, H x parts, 128] with parts >= 1, got {tuple(dq_parts.shape)} / "
            f"{tuple(dk_parts.shape)} for q {tuple(q.shape)}"
        )
    dq, dk = (
        torch.empty_like(q, memory_format=torch.contiguous_format),
        torch.empty_like(k, memory_format=torch.contiguous_format),
    )
    if rows == 0:
        return dq, dk
    kern = jit.get_kernel(GdrGradRowsSpec(_ELEM[q.dtype][0]), target_of(index), index)
    dq_parts, dk_parts, q, k = _dense16(dq_parts, dk_parts, q, k)
    launch(
        kern,
        grad_rows_ctas(rows),
        GRAD_ROWS_PARAMS.pack(
            dq_parts=dq_parts.data_ptr(), dk_parts=dk_parts.data_ptr(), q=q.data_ptr(), k=k.data_ptr(),
            dq=dq.data_ptr(), dk=dk.data_ptr(), rows=rows, parts=parts, l2norm=int(use_qk_l2norm_in_kernel),
        ),
        b"",
        index,
    )  # fmt: skip
    return dq, dk


def _prepare(
    q,
    k,
    v,
    g,
    beta,
    scale,
    initial_state,
    output_final_state,
    cu_seqlens,
    use_qk_l2norm_in_kernel,
    chunk_size,
    states: bool = False,
    segments: str | None = None,
) -> tuple:
    """Every check of a call and its plan: (target, device index, run), run(q, k, v, g, beta, initial_state,
    cu_seqlens, scale) -> (o, final_state or None). The scale's value is read per call (its type is in the key,
    its value too, but -0.0 and 0.0 are one key). states: the backward's states pass (gdr_states), whose run also
    takes state_out = (states, state_slots). segments: the segment setting (default the measurement knob's)."""
    on_cuda = isinstance(q, torch.Tensor) and q.is_cuda
    p = check_arguments(
        q,
        k,
        v,
        g,
        beta,
        scale,
        initial_state,
        output_final_state,
        cu_seqlens,
        use_qk_l2norm_in_kernel,
        chunk_size,
        default_chunk=default_chunk_size(q.device) if on_cuda else OTHER_CHUNK,
    )
    extra = {"initial_state": initial_state} if initial_state is not None else {}
    if cu_seqlens is not None:
        extra["cu_seqlens"] = cu_seqlens
    index = device_of(q=q, k=k, v=v, g=g, beta=beta, **extra)
    target = target_of(index)
    b, t, h, hv, n, c = p.batch, p.seq_len, p.heads, p.value_heads, p.num_sequences, p.chunk_size
    elem, tma_dtype = _ELEM[q.dtype]
    tokens = b * t

    def outputs(v: torch.Tensor, with_o: bool = True) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        o = fresh_empty((b, t, hv, HEAD_DIM), v.dtype, v.device) if with_o else None
        final = fresh_empty((n, hv, HEAD_DIM, HEAD_DIM), torch.float32, v.device) if output_final_state else None
        return o, final

    if tokens == 0:

        def empty(q, k, v, g, beta, initial_state, cu_seqlens, scale, state_out=None, scratch_out=None, carried=None):
            if cu_seqlens is not None and index_checks():
                check_cu_seqlens_values(cu_seqlens, t)
            o, final = outputs(v)
            if final is not None:
                final.copy_(initial_state) if initial_state is not None else final.zero_()
            return o, final

        return target, index, empty

    sms = num_sms_for(index)
    varlen = cu_seqlens is not None
    # few (sequence, value head) pairs on long chains: each sequence cut into segments that run in parallel
    setting = segment_setting() if segments is None else segments
    segment_chunks = choose_segments(n, hv, ceil_div(t, c), sms, setting, varlen)
    segments = ceil_div(ceil_div(t, c), segment_chunks) if segment_chunks else 0
    units = n * max(1, segments)  # the recurrence's grid: sequences, or (segment, sequence) slots
    vslice, ksplit = choose_plan(planned_units(n, segments, varlen), hv, sms, c)
    fwd_ctas = recurrence_ctas(units, hv, vslice)
    slots = ceil_div(t, c) + n if varlen else n * ceil_div(t, c)
    # few recurrence CTAs: a persistent prep grid beside it, the recurrence waiting on per-chunk flags (both
    # families launch with PDL when the switch is on); a segmented walk waits for the whole prep
    overlap = 0 if segments else choose_overlap(fwd_ctas, sms, get_pdl())
    prep, fwd = _kernels(c, vslice, ksplit, overlap > 0, elem, index, target, states)
    transition, combine = _segment_kernels(c, vslice, ksplit, elem, index, target) if segments else (None, None)
    overlap = min(overlap, ceil_div(slots * hv, persistent_teams(c)))  # no CTA without an item
    # tensor maps with placeholder addresses: each call's own are patched in (q, k, v, then its scratch)
    maps = (
        _map("tmap_q", tma_dtype, 0, HEAD_DIM, h, tokens, 64, c, 2)
        + _map("tmap_k", tma_dtype, 0, HEAD_DIM, h, tokens, 64, c, 2)
        + _map("tmap_v", tma_dtype, 0, HEAD_DIM, hv, tokens, min(vslice, 64), c, 2)
        + _map("tmap_tw", tma_dtype, 0, c, hv, tokens, c, c, 2)
        + _map("tmap_tu", tma_dtype, 0, c, hv, tokens, c, c, 2)
        + _map("tmap_attn", tma_dtype, 0, c, hv, tokens, c, c, 2)
        + _map("tmap_gate", "float32", 0, 4, hv, tokens, 4, c, 4)
    )
    fixed = dict(num_seqs=n, seq_len=t, value_heads=hv, group=hv // h)
    l2norm = int(use_qk_l2norm_in_kernel)
    # the tensor maps' bases must be 16-byte aligned: a view that starts elsewhere (the alignment class is in the
    # key) is copied, as a non-contiguous one is
    unaligned = tuple(x.is_contiguous() and x.data_ptr() % 16 != 0 for x in (q, k, v))
    scratch_bytes, scratch_parts = _prep_scratch(tokens, hv, c, q.element_size(), n, varlen)

    def run(q, k, v, g, beta, initial_state, cu_seqlens, scale, state_out=None, scratch_out=None, carried=None):
        # (the backward's states pass skips the check: its forward checked the values, or ran with checks off,
        # and the backward reads them as the kernels do)
        if cu_seqlens is not None and state_out is None and index_checks():
            check_cu_seqlens_values(cu_seqlens, t)
        dev = q.device
        o, final = outputs(v, state_out is None)  # the states pass forms no o
        q, k, v = (x.clone() if copy else x.contiguous() for x, copy in zip((q, k, v), unaligned))
        g, beta = g.contiguous(), beta.contiguous()
        init = initial_state.contiguous() if initial_state is not None else None
        cu = None if cu_seqlens is None else cu_seqlens_int32(cu_seqlens, t)
        # cu_seqlens as the kernels read it (clamped running maximum, written by the prep kernel): untrusted
        # offsets never overlap sequences or leave the tokens (docs/untrusted_indices.md); then each sequence's
        # first chunk slot
        scratch = fresh_empty((scratch_bytes,), torch.uint8, dev)
        if scratch_out is not None:  # the backward's reverse pass reads the same factors: kept, not recomputed
            scratch_out.append(scratch)
        tw, tu, attn, gates, cu_eff = scratch_parts(scratch.data_ptr())
        ready = fresh_zeros((1 + slots * hv,), torch.int32, dev) if overlap else None
        launch(
            prep,
            overlap or slots * hv,
            PREP_PARAMS.pack(
                q=q.data_ptr(),
                k=k.data_ptr(),
                g=g.data_ptr(),
                beta=beta.data_ptr(),
                cu_seqlens=0 if cu is None else cu.data_ptr(),
                tw=tw,
                tu=tu,
                attn=attn,
                gates=gates,
                beta_fp32=int(beta.dtype == torch.float32),
                l2norm=l2norm,
                cu_effective=cu_eff,
                ready=0 if ready is None else ready.data_ptr(),
                scale=scale_value(scale, HEAD_DIM),
                **fixed,
            ),
            b"",
            index,
        )
        addresses = with_addresses(maps, q.data_ptr(), k.data_ptr(), v.data_ptr(), tw, tu, attn, gates)

        def recurrence(kernel, ctas: int, init: torch.Tensor | None, final: torch.Tensor | None, o) -> None:
            launch(
                kernel,
                ctas,
                PARAMS.pack(
                    initial_state=0 if init is None else init.data_ptr(),
                    final_state=0 if final is None else final.data_ptr(),
                    o=0 if o is None else o.data_ptr(),
                    cu_seqlens=cu_eff,
                    seq_len=t,
                    value_heads=hv,
                    group=hv // h,
                    ready=0 if ready is None else ready.data_ptr(),
                    segments=segments,
                    segment_tokens=segment_chunks * c,
                    states=0 if state_out is None or kernel is not fwd else state_out[0].data_ptr(),
                    state_slots=0 if state_out is None or kernel is not fwd else state_out[1].data_ptr(),
                ),
                addresses,
                index,
            )

        if not segments:
            recurrence(fwd, fwd_ctas, init, final, o)
            return o, final
        # carried (a training call's Carried, shared by its forward and its backward's states pass): the forward
        # leaves its segments' first states there, and the states pass under the same cut skips steps 1 and 2
        # (the same kernels on the same inputs: bitwise the states it would form)
        cut = (c, segments, segment_chunks)
        firsts = carried.take(cut, dev) if carried is not None and state_out is not None else None
        if firsts is not None:
            recurrence(fwd, fwd_ctas, firsts, final, o)
            return o, final
        # 1. every segment's affine map (A, B) but each sequence's last: [B; A][segment][sequence][hv]
        # a sequence's last segment and those past its end are not walked, and nothing reads their maps
        maps_ab = fresh_empty((2, segments, n * hv, HEAD_DIM, HEAD_DIM), torch.float32, dev)
        recurrence(transition, 2 * fwd_ctas, None, maps_ab, None)
        # 2. each segment's first state: h_0 the initial state, h_{j+1} = A_j h_j + B_j, one launch, plain FP32,
        # for the segments that hold tokens of their sequence (from cu', as the passes read it)
        firsts = fresh_empty((segments, n * hv, HEAD_DIM, HEAD_DIM), torch.float32, dev)
        if init is not None and init.data_ptr() % 16:
            init = init.clone()  # the combine reads it in 16-byte loads
        launch(
            combine,
            combine_ctas(n * hv),
            COMBINE_PARAMS.pack(
                maps=maps_ab.data_ptr(),
                initial_state=0 if init is None else init.data_ptr(),
                firsts=firsts.data_ptr(),
                segments=segments,
                pairs=n * hv,
                cu_seqlens=cu_eff,
                seq_len=t,
                value_heads=hv,
                segment_tokens=segment_chunks * c,
            ),
            b"",
            index,
        )
        # 3. the chunk walk from each segment's first state: o, and the final state from each sequence's last
        recurrence(fwd, fwd_ctas, firsts, final, o)
        if carried is not None and state_out is None and c == default_chunk_size(dev):
            carried.put(cut, firsts)  # (a forward at another chunk size: no states pass could take them)
        return o, final

    return target, index, run
