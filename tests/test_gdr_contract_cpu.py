"""chunk_gated_delta_rule's argument contract, on the CPU."""

from __future__ import annotations

import pytest
import torch

from deep_gemm_sm120.families.gated_delta_rule.contract import (
    check_arguments,
    check_cu_seqlens_values,
    default_chunk_size,
)
from deep_gemm_sm120.families.gated_delta_rule.prep import CHUNKS as CHUNK_SIZES

BF16 = torch.bfloat16


def _args(b=2, t=33, h=4, hv=8, dk=128, dv=128, dtype=BF16):
    return (
        torch.zeros(b, t, h, dk, dtype=dtype),
        torch.zeros(b, t, h, dk, dtype=dtype),
        torch.zeros(b, t, hv, dv, dtype=dtype),
        torch.zeros(b, t, hv),
        torch.zeros(b, t, hv, dtype=dtype),
    )


def test_valid_problem_and_defaults():
    p = check_arguments(*_args())
    assert (p.batch, p.seq_len, p.heads, p.value_heads, p.num_sequences) == (2, 33, 4, 8, 2)
    assert p.scale == 128**-0.5 and p.chunk_size == 32 and not p.varlen
    p = check_arguments(
        *_args(b=1),
        cu_seqlens=torch.tensor([0, 1, 1, 33], dtype=torch.int32),
        chunk_size=64,
        initial_state=torch.zeros(3, 8, 128, 128),
        default_chunk=32,
    )
    assert p.num_sequences == 3 and p.varlen and p.chunk_size == 64
    assert check_arguments(*_args(), default_chunk=16).chunk_size == 16


@pytest.mark.parametrize(
    "mutate,error,text",
    [
        (lambda a: (a[0].float(),) + a[1:], TypeError, "bfloat16 or torch.float16"),
        (lambda a: a[:2] + (a[2].half(),) + a[3:], TypeError, "q's dtype"),
        (lambda a: a[:3] + (a[3].to(BF16),) + a[4:], TypeError, "g .*float32"),
        (lambda a: a[:2] + (torch.zeros(2, 33, 6, 128, dtype=BF16),) + a[3:], ValueError, "multiple of H"),
        (lambda a: a[:3] + (torch.zeros(2, 33, 7),) + a[4:], ValueError, r"g must be \[B, T, HV\]"),
        (lambda a: tuple(x[..., :64] if i < 3 else x for i, x in enumerate(a)), NotImplementedError, "K = V = 128"),
    ],
)
def test_typed_errors(mutate, error, text):
    with pytest.raises(error, match=text):
        check_arguments(*mutate(_args()))


def test_varlen_state_and_chunk_errors():
    a = _args(b=1)
    with pytest.raises(ValueError, match="batch must be 1"):
        check_arguments(*_args(), cu_seqlens=torch.tensor([0, 33], dtype=torch.int32))
    with pytest.raises(TypeError, match="int32 or int64"):
        check_arguments(*a, cu_seqlens=torch.tensor([0.0, 33.0]))
    with pytest.raises(ValueError, match=r"initial_state must be \[N, HV, K, V\] = \(2, 8, 128, 128\)"):
        check_arguments(*a, cu_seqlens=torch.tensor([0, 3, 33]), initial_state=torch.zeros(1, 8, 128, 128))
    with pytest.raises(NotImplementedError, match=str(CHUNK_SIZES).replace("(", r"\(").replace(")", r"\)")):
        check_arguments(*a, chunk_size=128)
    with pytest.raises(TypeError, match="chunk_size"):
        check_arguments(*a, chunk_size=32.0)
    with pytest.raises(ValueError, match="end at T = 33"):
        check_cu_seqlens_values(torch.tensor([0, 5, 30]), 33)
    with pytest.raises(ValueError, match="never decrease"):
        check_cu_seqlens_values(torch.tensor([0, 20, 10, 33]), 33)
    check_cu_seqlens_values(torch.tensor([0, 0, 33]), 33)


def test_default_chunk_size_without_a_gpu():
    assert default_chunk_size() == 32


def test_api_and_is_supported_agree():
    """The API on CPU tensors reaches the device check exactly when is_supported says True."""
    import itertools

    from support_helpers import agree

    import deep_gemm_sm120 as dg

    for dtype, beta_dtype, (h, hv), dim, chunk in itertools.product(
        (BF16, torch.float16, torch.float32),
        (BF16, torch.float32, torch.float16),
        ((4, 8), (2, 2)),
        (64, 128),
        (None, 16, 32, 64, 128),
    ):
        q, k, v, g, _ = _args(b=1, t=5, h=h, hv=hv, dk=dim, dv=dim, dtype=dtype)
        beta = torch.zeros(1, 5, hv, dtype=beta_dtype)
        agree(
            "chunk_gated_delta_rule",
            (dg.chunk_gated_delta_rule, q, k, v, g, beta, None, None, False, None, False, chunk),
            dtype=dtype,
            beta_dtype=beta_dtype,
            g_dtype=torch.float32,
            heads=h,
            value_heads=hv,
            head_dim=dim,
            value_dim=dim,
            chunk_size=chunk,
        )
        kw = dict(dtype=dtype, beta_dtype=beta_dtype, g_dtype=torch.float32, heads=h, value_heads=hv)
        kw.update(head_dim=dim, value_dim=dim, chunk_size=chunk)
        # the backward covers every call the forward accepts: is_supported answers alike with gradients asked for
        forward = dg.is_supported("chunk_gated_delta_rule", **kw)
        assert dg.is_supported("chunk_gated_delta_rule", backward=True, **kw) == forward
        assert dg.is_supported("chunk_gated_delta_rule", backward=False, **kw) == forward
    why = dg.why_unsupported("chunk_gated_delta_rule", backward="yes")
    assert why is not None and "backward must be None or a bool" in why


def test_recurrence_plans_fit_and_split_only_few_heads():
    """Every (V slice, K split) instantiation fits the SM120 budget with at most eight math warps; the plan splits
    the head dim only where the heads leave SM partitions idle, and always picks a built instantiation."""
    from deep_gemm_sm120.core.limits import SMEM_LIMIT
    from deep_gemm_sm120.families.gated_delta_rule.kernel import GdrFwdSpec, plans
    from deep_gemm_sm120.families.gated_delta_rule.plan import choose_plan

    for chunk in (16, 32, 64):
        built = plans(chunk)
        assert (16, 1) in built and all(vs // 16 * ks <= 8 for vs, ks in built)
        for vs, ks in built:
            spec = GdrFwdSpec(chunk, vs, "bf16", ks)
            assert 1 <= spec.stages and spec.smem_bytes <= SMEM_LIMIT, spec.name
            assert spec.threads == (vs // 16 * ks + 1) * 32
        for n, hv in ((1, 8), (4, 8), (1, 32), (1, 64), (64, 32), (3, 1)):
            for sms in (84, 132, 188):
                assert choose_plan(n, hv, sms, chunk) in built
    assert choose_plan(1, 8, 132, 32) == (16, 2)  # 64 warps unsplit: a quarter of the partitions
    assert choose_plan(4, 8, 132, 32) == (32, 1)  # 32-column slices are never split
    assert choose_plan(1, 64, 132, 32) == (64, 1)  # 512 warps already
    assert choose_plan(64, 32, 132, 32) == (128, 1)
    names = {GdrFwdSpec(32, 16, "bf16", k).name for k in (1, 2)}
    assert len(names) == 2  # the split is part of the kernel's name (JIT cache key)


def test_segments_only_where_few_pairs_walk_long_chains(monkeypatch):
    """The split (chunks per segment, 0: whole sequences): only when the (sequence, value head) pairs fill at most
    half the SMs, never below MIN_SEGMENT_CHUNKS chunks a segment, at least two segments; the knob wins (0: never),
    a bad knob is a ValueError naming it."""
    from deep_gemm_sm120.core.arith import ceil_div
    from deep_gemm_sm120.families.gated_delta_rule.plan import (
        MAX_SLOTS_PER_SM,
        MIN_SEGMENT_CHUNKS,
        SEGMENT_ENV,
        choose_plan,
        choose_segments,
        planned_units,
    )

    assert choose_segments(1, 8, 1024, 132) == 128  # 8 segments of 128 chunks: 8 pairs x 8 = 64 units
    assert choose_segments(1, 2, 1024, 132) == 32  # 33 splits capped at sqrt(1024): 32 segments of 32 chunks
    assert choose_segments(1, 8, 64, 132) == 16  # short: 4 segments of MIN_SEGMENT_CHUNKS
    assert choose_segments(1, 1, 4096, 188) == 64  # one pair: sqrt(4096) = 64 segments (the combine is a chain)
    # varlen: sized for an even share of the pack (4 x 2048 tokens: 4 segments of 16 chunks each), and a pack of
    # many sequences' slots stay bounded (at most MAX_SLOTS_PER_SM units a SM)
    assert choose_segments(4, 4, 256, 132, varlen=True) == 16
    assert choose_segments(4, 4, 256, 132) == 64  # fixed length: each 256-chunk sequence in 4 segments
    for n, hv, chunks in ((2, 1, 8192), (16, 2, 4096), (1, 8, 2048), (33, 2, 1000)):
        seg = choose_segments(n, hv, chunks, 132, varlen=True)
        if seg:
            assert n * hv * ceil_div(chunks, seg) <= MAX_SLOTS_PER_SM * 132
    # a pack with one long sequence: sized over the whole pack, the long one is cut and the short ones are not
    # (16384 + 7 x 512 tokens at chunk 32: 624 chunks, 8 units of 8 value heads a pack)
    seg = choose_segments(8, 8, 512 + 7 * 16, 132, varlen=True)
    assert seg == 78 and ceil_div(512, seg) == 7 and ceil_div(16, seg) == 1
    assert choose_segments(6, 8, 256, 132, varlen=True) == 32  # six uneven sequences, 8192 tokens in all
    # equal sequences split as a fixed-length batch of them wherever the pack's ways are the batch's times n
    for n, hv, share in ((4, 8, 64), (4, 4, 64), (2, 8, 128), (2, 4, 256), (1, 8, 1024)):
        assert (132 // (2 * hv)) == n * (132 // (2 * n * hv))
        assert choose_segments(n, hv, n * share, 132, varlen=True) == choose_segments(n, hv, share, 132) > 0
    # the V slice is planned for the units that hold tokens: an equal pack whose segments are its sequences plans
    # as its unsplit walk does (planning for all 64 slots took the widest slice, half the CTAs: run 145)
    seg = choose_segments(8, 8, 8 * 64, 132, varlen=True)
    assert seg == 64 and planned_units(8, 8, True) == 8 and planned_units(8, 8, False) == 64
    assert choose_plan(planned_units(8, 8, True), 8, 132, 32) == choose_plan(8, 8, 132, 32)
    assert planned_units(4, 0, True) == 4 and planned_units(2, 9, True) == 9
    assert choose_segments(1, 8, 15, 132) == 0  # fewer than two segments of MIN_SEGMENT_CHUNKS
    assert choose_segments(4, 8, 1024, 132) == 512  # 32 pairs: 2 segments
    assert choose_segments(8, 8, 1024, 132) == 0  # 64 pairs: 132 // 128 is one segment
    assert choose_segments(9, 8, 1024, 132) == 0  # 72 pairs fill more than half: whole sequences
    assert choose_segments(64, 32, 1024, 132) == 0
    for n, hv, chunks, sms in ((1, 1, 4096, 188), (2, 4, 300, 84), (1, 16, 2048, 170), (3, 2, 999, 132)):
        seg = choose_segments(n, hv, chunks, sms)
        if seg:
            assert seg >= MIN_SEGMENT_CHUNKS and ceil_div(chunks, seg) >= 2
            assert n * hv * ceil_div(chunks, seg) <= sms // 2 + n * hv  # about two SMs a unit, at most
    assert choose_segments(1, 8, 1024, 132, "0") == 0
    assert choose_segments(64, 32, 1024, 132, "3") == 3  # forced even where the plan would not
    assert choose_segments(1, 8, 10, 132, "10") == 0  # one segment is no split
    for bad in ("x", "-2", "1.5"):
        with pytest.raises(ValueError, match=SEGMENT_ENV):
            choose_segments(1, 8, 1024, 132, bad)


def test_prep_overlaps_the_recurrence_only_where_it_leaves_sms_idle():
    """The persistent prep grid takes the SMs the recurrence leaves idle, only when that is at least half of them
    and PDL lets the recurrence start early; the few-head shapes of issue 29 qualify, many heads do not."""
    from deep_gemm_sm120.families.gated_delta_rule.plan import choose_overlap, choose_plan
    from deep_gemm_sm120.families.gated_delta_rule.plan import recurrence_ctas as grid

    def recurrence_ctas(n: int, hv: int, sms: int) -> int:
        return grid(n, hv, choose_plan(n, hv, sms, 32)[0])

    assert choose_overlap(recurrence_ctas(1, 8, 132), 132, True) == 132 - 64  # 1 x T, 8 value heads
    assert choose_overlap(66, 132, True) == 66 and choose_overlap(67, 132, True) == 0
    assert choose_overlap(recurrence_ctas(1, 32, 132), 132, True) == 0  # 16 / 32 heads fill the GPU
    assert choose_overlap(recurrence_ctas(16, 8, 132), 132, True) == 0
    for ctas in (1, 10, 64):
        assert choose_overlap(ctas, 132, False) == 0  # no PDL: sequential
        assert 0 < choose_overlap(ctas, 132, True) <= 132 - ctas


def test_persistent_prep_specs_fit_and_come_with_the_plans_that_overlap():
    """The persistent prep runs as many teams as fit the SM120 budget (two, one at C = 64), each team a separate
    instantiation and JIT name; a precompile of a few-head shape includes it, a many-head one does not."""
    from deep_gemm_sm120.core.limits import SMEM_LIMIT
    from deep_gemm_sm120.families.gated_delta_rule.plan import plan_specs
    from deep_gemm_sm120.families.gated_delta_rule.prep import GdrPrepSpec

    for chunk, teams in ((16, 2), (32, 2), (64, 1)):
        one, persistent = GdrPrepSpec(chunk, "bf16"), GdrPrepSpec(chunk, "bf16", True)
        assert (one.teams, persistent.teams) == (1, teams)
        assert persistent.threads == 128 * teams and one.smem_bytes <= persistent.smem_bytes <= SMEM_LIMIT
        assert persistent.template_args() == [str(chunk), "true", str(teams), "sm120::bf16"]
        assert one.name != persistent.name != GdrPrepSpec(chunk, "bf16", True, teams + 1).name
    few = {s.name for s in plan_specs(132, num_seqs=1, value_heads=8)}
    many = {s.name for s in plan_specs(132, num_seqs=1, value_heads=64)}
    assert "gated_delta_rule_prep_c32_persistent_t2_bf16" in few and "gated_delta_rule_prep_c32_bf16" in few
    assert not any("persistent" in name for name in many)
    # a long few-head sequence is walked in segments: no persistent prep, and the segments' (wider) plan
    long = {s.name for s in plan_specs(132, num_seqs=1, value_heads=8, seq_len=32768)}
    assert not any("persistent" in name for name in long)
    assert "gated_delta_rule_fwd_c32_v64_s2_bf16" in long and "gated_delta_rule_fwd_c32_v16_k2_s2_bf16" in few


def test_int64_offsets_are_clamped_before_narrowing():
    """Unchecked int64 offsets reach the kernels clamped to [0, T], as documented and as the backward's layout reads
    them: narrowed first, 2**32 would be 0 and 2**31 + 5 negative."""
    from deep_gemm_sm120.families.gated_delta_rule.contract import cu_seqlens_int32

    got = cu_seqlens_int32(torch.tensor([0, 2**32, 2**31 + 5, -(2**40), 300]), 300)
    assert got.dtype == torch.int32 and got.tolist() == [0, 300, 300, 0, 300]
    same = torch.tensor([0, 7, 3, 400], dtype=torch.int32)  # int32: the kernels clamp; passed through
    assert cu_seqlens_int32(same, 300).tolist() == [0, 7, 3, 400]


def test_b3_fold_fills_the_gpu_with_the_fewest_waves():
    """B3's value heads per CTA (bwd_chunk.choose_fold): the fold with the fewest waves x fold, the largest of
    equals, always a divisor of the group."""
    from deep_gemm_sm120.families.gated_delta_rule.bwd_chunk import choose_fold

    assert choose_fold(128, 16, 2, 132) == 2  # 1 x 8192 (16, 32): 16 waves of two heads cost as 32 of one
    assert choose_fold(128, 2, 4, 132) == 4  # 4 x 2048 (2, 8): 256 CTAs of four, 2 waves x 4 = 8 as every fold
    assert choose_fold(32, 2, 4, 132) == 2  # 1 x 2048 (2, 8): 64 CTAs of four would leave half the SMs idle
    assert choose_fold(5, 2, 2, 132) == 1  # a few chunks: one wave either way, the shorter CTA
    assert choose_fold(40, 4, 1, 132) == 1  # no GVA
    for chunks, heads, group in ((7, 3, 6), (1000, 8, 8), (3, 1, 12)):
        f = choose_fold(chunks, heads, group, 132)
        assert group % f == 0


def test_host_lengths_only_veto_a_segmentation_that_cuts_nothing():
    """plan.lengths_setting: "0" where the whole-pack rule's segments would cut no sequence, "" (plan as without
    lengths) where they cut one or where nothing is segmented anyway."""
    from deep_gemm_sm120.families.gated_delta_rule.plan import choose_segments, lengths_setting

    assert choose_segments(8, 8, 8 * 64, 132, varlen=True) == 64  # 8 x 2048 at chunk 32: segments as long as each
    assert lengths_setting([2048] * 8, 8, 32, 132) == "0"
    assert lengths_setting([16384] + [512] * 7, 8, 32, 132) == ""  # the long one is cut: keep the plan
    assert lengths_setting([4096, 1024, 333, 2048, 57, 512], 8, 32, 132) == ""  # mixed 6: the longest is cut
    assert lengths_setting([256] * 32, 8, 32, 132) == ""  # many pairs: nothing segmented to veto
    assert lengths_setting([], 8, 32, 132) == "" and lengths_setting([0, 0], 8, 32, 132) == ""
