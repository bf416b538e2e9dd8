"""How a gated-delta-rule call is planned (pure): the V slice and K split of the recurrence, whether the prep runs
beside it, and the kernels a call of a given shape launches."""

from __future__ import annotations

import math
import os

from ...core.arith import ceil_div
from .combine import GdrCombineSpec
from .kernel import ELEM_DTYPES, HEAD_DIM, SM120_CHUNK, V_SLICES, GdrFwdSpec, plans
from .prep import GdrPrepSpec


def choose_plan(num_seqs: int, value_heads: int, num_sms: int, chunk: int) -> tuple[int, int]:
    """(V slice, K split). The V slice: the widest that still gives every other SM a CTA (wider slices share each
    loaded q / k / factor tile among more warps). Then, on 16-column slices, two warps per 16 value columns along
    the head dim while that stays within one warp per tensor-core partition (four an SM): the few-head, long
    sequence shapes. Tuned on the H200 (benchmarks/bench_gated_delta_rule.py --sweep; docs/gated_delta_rule.md)."""
    heads = num_seqs * value_heads
    built = plans(chunk)
    widest_first = sorted((vs for vs, ks in built if ks == 1), reverse=True)
    vs = next((v for v in widest_first if 2 * heads * (HEAD_DIM // v) >= num_sms), V_SLICES[0])
    split = (vs, 2) in built and heads * (HEAD_DIM // 16) * 2 <= 4 * num_sms
    return vs, 2 if split else 1


SEGMENT_ENV = "DG_SM120_GDR_SEGMENT_CHUNKS"  # chunks per segment, for measurement (0: never split); unset: planned
MIN_SEGMENT_CHUNKS = 16  # shorter segments spend more on the extra passes than the shorter chain saves (to tune)
MAX_SLOTS_PER_SM = 4  # (segment slot, sequence, value head) units a SM at most: bounds the maps' memory


def segment_setting() -> str:
    """The measurement knob's raw value (part of a call's cache key: a new value plans anew)."""
    return os.environ.get(SEGMENT_ENV, "")


def choose_segments(
    num_seqs: int, value_heads: int, chunks: int, num_sms: int, setting: str = "", varlen: bool = False
) -> int:
    """Chunks per segment when a sequence's chain is cut into segments that run in parallel (context
    parallelism inside the GPU; docs/gated_delta_rule.md), 0 to walk whole sequences. `chunks`: a sequence's
    chunk count (varlen: the whole pack's, the most any one sequence can hold).

    Splitting costs a transition pass over every segment but a sequence's last (twice the recurrence's work
    there) and a combine step per segment; it pays where few (sequence, value head) pairs leave SMs idle while
    each walks a long chain. So: only when the pairs fill at most half the SMs, into as many segments as give
    each pair's segments about two SMs' worth, at most about sqrt(chunks) of them (the combine's steps are a
    chain too), none shorter than MIN_SEGMENT_CHUNKS chunks.

    A varlen pack's lengths are not read on the host (that would synchronize). Its segments are sized as if the
    pack were one chain of `chunks`: about two SMs' worth of (segment, value head) units over the whole pack, at
    most sqrt(chunks) segments. Each sequence then gets segments in proportion to its share: a long one among
    short ones is cut where the short ones are not (an even-share rule gave it one segment whenever the pairs
    came near half the SMs), and equal sequences split as a fixed-length batch of them does wherever
    num_sms // (2 value_heads) is the sequences' count times their own share of it. The slots a sequence may need
    stay bounded (MAX_SLOTS_PER_SM units a SM)."""
    if setting:
        try:
            forced = int(setting)
        except ValueError:
            raise ValueError(f"{SEGMENT_ENV}={setting!r}: expected a whole number of chunks (0: never split)") from None
        if forced < 0:
            raise ValueError(f"{SEGMENT_ENV}={setting!r}: expected a whole number of chunks >= 0 (0: never split)")
        return forced if 0 < forced < chunks else 0
    pairs = num_seqs * value_heads
    if 2 * pairs > num_sms:
        return 0
    if varlen:  # segments over the whole pack (value heads' units), not per sequence
        split = min(num_sms // (2 * value_heads), chunks // MIN_SEGMENT_CHUNKS, math.isqrt(chunks))
    else:
        split = min(num_sms // (2 * pairs), chunks // MIN_SEGMENT_CHUNKS, math.isqrt(chunks))
    if split < 2:
        return 0
    length = ceil_div(chunks, split)
    # every sequence gets ceil(chunks / length) segment slots: bound them (a pack's slots past a short sequence
    # are CTAs that return at once and maps nothing reads)
    slots = MAX_SLOTS_PER_SM * num_sms // pairs
    length = max(length, ceil_div(chunks, max(1, slots)))
    return length if length < chunks else 0


def lengths_setting(lengths: list[int], value_heads: int, chunk: int, num_sms: int) -> str:
    """The segment setting of a varlen pack whose lengths the caller gave on the host (cu_seqlens_cpu): "0" (walk
    whole sequences) where the whole-pack rule's segments would cut none of them, so an equal pack keeps its
    unsplit walk instead of paying the segmented path's extra launches for nothing (8 x 2048 at (2, 8): 136.3 us
    against 124.6, run 146); "" (plan as without lengths) otherwise. Only ever a veto: a copy that differs from
    cu_seqlens' values changes the plan, never the result (every plan computes the same o)."""
    chunks = ceil_div(sum(lengths), chunk)
    seg = choose_segments(len(lengths), value_heads, chunks, num_sms, "", varlen=True)
    longest = max((ceil_div(x, chunk) for x in lengths), default=0)
    return "0" if seg and longest <= seg else ""


def planned_units(num_seqs: int, segments: int, varlen: bool) -> int:
    """The walking units the recurrence's V slice is chosen for (choose_plan): sequences, or (segment, sequence)
    pairs. The grid has a CTA set for each of num_seqs x segments slots, but in a varlen pack only the slots that
    hold tokens walk (the rest return at once): the segments cover the pack's chunks once and every sequence has
    one, so about max(num_seqs, segments) of them. Planning for every slot would pick a slice for units that do
    not exist (an equal pack of 8 sequences at 8 value heads took the 64-slot plan's widest slice: half the CTAs
    and 40% more time than its unsplit walk, run 145)."""
    if not segments:
        return num_seqs
    return max(num_seqs, segments) if varlen else num_seqs * segments


def recurrence_ctas(num_seqs: int, value_heads: int, vslice: int) -> int:
    """The recurrence's grid: one CTA per (V slice, value head, sequence)."""
    return num_seqs * value_heads * (HEAD_DIM // vslice)


def choose_overlap(recurrence_ctas: int, num_sms: int, pdl: bool) -> int:
    """CTAs of a persistent prep grid that runs beside the recurrence (0: the prep runs first, one CTA per item).
    Overlapped when the recurrence leaves at least half the SMs idle (few heads, whose long chunk walk then starts
    at once instead of after the whole prep); the prep gets the idle SMs. Needs PDL: without it the recurrence
    would start only after the (then narrower) prep grid anyway."""
    if not pdl or 2 * recurrence_ctas > num_sms:
        return 0
    return num_sms - recurrence_ctas


def plan_specs(
    num_sms: int,
    dtype=None,
    chunk_size: int | None = None,
    num_seqs: int = 1,
    value_heads: int = 1,
    seq_len: int = 0,
    **_shape,
) -> list:
    """The kernels a call launches: seq_len (tokens of a sequence, of the pack with varlen; 0: unknown, planned as
    unsplit) decides whether its walk is segmented, which changes the recurrence's plan."""
    elem = ELEM_DTYPES.get(str(dtype).replace("torch.", ""), "bf16")
    chunk = chunk_size or SM120_CHUNK
    chunks = ceil_div(seq_len, chunk)
    segment_chunks = (
        choose_segments(num_seqs, value_heads, chunks, num_sms, segment_setting(), _shape.get("varlen", False))
        if chunks
        else 0
    )
    segments = ceil_div(chunks, segment_chunks) if segment_chunks else 0
    units = num_seqs * max(1, segments)
    vs, ks = choose_plan(planned_units(num_seqs, segments, _shape.get("varlen", False)), value_heads, num_sms, chunk)
    # the persistent prep too where the launch overlaps (with PDL on, the default; the one-item prep without)
    overlap = not segment_chunks and choose_overlap(recurrence_ctas(units, value_heads, vs), num_sms, True) > 0
    combine = [GdrCombineSpec()] if segment_chunks else []
    return (
        [GdrPrepSpec(chunk, elem)]
        + [GdrPrepSpec(chunk, elem, True)] * overlap
        + [GdrFwdSpec(chunk, vs, elem, ks)]
        + [GdrFwdSpec(chunk, vs, elem, ks, True)] * bool(segment_chunks)
        + combine
    )
