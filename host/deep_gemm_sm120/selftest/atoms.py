"""The atom part of the self-test: every SM120-only block-scaled MMA in every scale encoding, on the user's GPU.

The scale probe (services/scale_probe) runs each case of its table (an encoding, the m16 / n8 tile it serves,
the byte-ids) on registers chosen here, in one launch per atom kind. Three sorts of input:

  random   random operands and a different random scale in every lane and byte (selectors), or the scales in
           the replicated layout the kernels use (replicated). Judged against float64 with two bounds: within
           fp32 rounding is `ok`; up to 2^-9 of the sum of |products| is `imprecise` (the MMA accumulates with
           fewer bits than fp32, as Hopper's FP8 path does: the mapping is right); beyond, an O(1) error: `wrong`.
  decode   operands 1.0 in one K chunk, the other side's scales 1.0, and a distinct power-of-two (UE4M3: a
           distinct value) in every lane and byte of one half of the warp: each output is exact and names the
           lane and byte its scale came from. The report lists every row / column read from the wrong place.
  special  the scale encodings with defined results (docs/block_scaled.md): UE8M0 0x00 (2^-127) and 0xFF (NaN),
           a pair of UE8M0 scales whose product overflows fp32 while the result does not (silicon adds
           exponents), UE4M3 0x00 and 0x7F (NaN); the UE4M3 sign bit is reported, not judged.

Everything but `run_atoms` is CPU-only torch, so the judging logic is tested without a GPU.
"""

from __future__ import annotations

import functools
import math
import time
from dataclasses import dataclass, field

import torch

from ..core import encoding as enc
from ..services.scale_probe import ATOM_KINDS, OUTS_PER_CASE, ProbeCase, ScaleProbeSpec, cases

K32_KINDS = ("mxfp8", "e4m3_e2m1", "e2m1_e4m3")  # m16n8k32, one operand element per byte
E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
ROUNDING = 2.0**-17  # fp32 accumulation of at most 64 exact products (K * 2^-24 with room)
IMPRECISE = 2.0**-9  # a coarser accumulator (Hopper's FP8 path keeps ~13-14 bits): still the right mapping
UNIT_UE8M0, UNIT_UE4M3 = 127, 0x38
DECODE_BASE_UE8M0, DECODE_MARKER_UE8M0 = 127 - 32, 127 - 48  # 64 distinct exponents; the other half's marker
DECODE_BASE_UE4M3 = 0x10  # 64 distinct UE4M3 values 0x10..0x4F; the other half reads 0
VERDICT_ORDER = ("ok", "imprecise", "wrong")


def sfa_lane(row: int, tid: int) -> int:
    return 4 * (row % 8) + 2 * tid + row // 8


def sfb_lane(col: int, tid: int) -> int:
    return 4 * col + tid


def sfa_row_of_lane(lane: int) -> int:
    return lane // 4 + 8 * (lane % 2)


@dataclass(frozen=True)
class Atom:
    """An atom kind's fragment geometry: K per MMA, K per scale chunk, which operands are e2m1."""

    kind: str

    @property
    def vec(self) -> int:
        return ATOM_KINDS[self.kind][1]

    @property
    def kdim(self) -> int:
        return 32 if self.kind in K32_KINDS else 64

    @property
    def chunk(self) -> int:
        return self.kdim // self.vec

    @property
    def packed(self) -> bool:  # two e2m1 codes per byte (kind::mxf4 / mxf4nvf4)
        return self.kind not in K32_KINDS

    @property
    def fp4(self) -> tuple[bool, bool]:
        if self.packed:
            return True, True
        return self.kind.startswith("e2m1"), self.kind.endswith("e2m1")

    @property
    def ue4m3(self) -> bool:
        return self.kind == "nvfp4"

    @property
    def unit(self) -> int:
        return UNIT_UE4M3 if self.ue4m3 else UNIT_UE8M0

    @property
    def per_word(self) -> int:  # operand elements per 32-bit register
        return 8 if self.packed else 4

    def positions(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Element slots (word * per_word + sub) of A [16, K] and B [K, 8] in the probe's word array: the PTX
        fragment layouts (K32: byte j of a[r] is row g + 8 (r % 2), K 4q + j + 16 (r / 2); packed FP4: nibble j
        of a[r] is K 8q + j + 32 (r / 2); B likewise with column g)."""
        pw, span = self.per_word, 4 * self.per_word  # K elements of one register per quad lane: 4 or 8
        a = torch.empty(16, self.kdim, dtype=torch.long)
        b = torch.empty(self.kdim, 8, dtype=torch.long)
        for lane in range(32):
            g, q = lane // 4, lane % 4
            for r in range(4):
                for j in range(pw):
                    a[g + 8 * (r % 2), pw * q + j + span * (r // 2)] = (32 * r + lane) * pw + j
            for r in range(2):
                for j in range(pw):
                    b[pw * q + j + span * r, g] = (128 + 32 * r + lane) * pw + j
        return a, b


def _e4m3_values() -> torch.Tensor:
    return torch.arange(256, dtype=torch.int32).to(torch.uint8).view(torch.float8_e4m3fn).double()


def _e2m1_value(code: torch.Tensor) -> torch.Tensor:
    mag = torch.tensor(E2M1, dtype=torch.float64)[code & 7]
    return torch.where((code & 8) != 0, -mag, mag)


def scale_value(codes: torch.Tensor, ue4m3: bool) -> torch.Tensor:
    """The documented value of scale bytes: UE8M0 2^(e - 127) (0x00 is 2^-127, 0xFF NaN); UE4M3 the e4m3 value
    of the low seven bits (the sign bit is ignored; 0x7F is NaN)."""
    codes = codes.long()
    if ue4m3:
        return _e4m3_values()[codes & 0x7F]
    v = torch.pow(torch.tensor(2.0, dtype=torch.float64), (codes - 127).double())
    return torch.where(codes == 0xFF, torch.full_like(v, math.nan), v)


@dataclass
class Inputs:
    """Operand element codes and scale words for N probe blocks of one kind."""

    atom: Atom
    elems: torch.Tensor  # [N, 192 * per_word] int64 codes (e4m3 byte, e2m1 container byte or nibble)
    sa: torch.Tensor  # [N, 32] int64 scale words (A)
    sb: torch.Tensor  # [N, 32] int64 scale words (B)

    def words(self) -> torch.Tensor:
        """[N, 256] int64 in [0, 2^32): the probe's word array."""
        pw = self.atom.per_word
        width = 32 // pw
        shifts = torch.arange(pw, dtype=torch.long) * width
        ops = (self.elems.view(self.elems.shape[0], 192, pw) << shifts).sum(-1)
        return torch.cat([ops, self.sa, self.sb], dim=1)


def _bytes(words: torch.Tensor) -> torch.Tensor:
    """[..., 32] words -> [..., 32, 4] bytes (lowest first)."""
    return (words.unsqueeze(-1) >> (8 * torch.arange(4))) & 0xFF


def received(words: torch.Tensor, case: ProbeCase, byte: int, vec: int) -> torch.Tensor:
    """The scale register the MMA receives: as loaded (selectors) or replicate_scale_bytes'd (replicated)."""
    if case.encoding == enc.SELECTORS or vec == 4:
        return words
    b = _bytes(words)
    pick = [byte] * 4 if vec == 1 else [byte, byte + 1, byte, byte + 1]
    return (b[..., pick] << (8 * torch.arange(4))).sum(-1)


def issued_selectors(case: ProbeCase) -> tuple[int, int, int, int]:
    """(byte-id-a, thread-id-a, byte-id-b, thread-id-b) the MMA of a case is issued with (ScaleLanes)."""
    if case.encoding == enc.REPLICATED:
        return 0, 0, 0, 0
    return case.byte_a, case.i % 2, case.byte_b, case.j % 4


READINGS = ("documented", "selectors-as-zero")


def reading(case: ProbeCase, vec: int, how: str = "documented") -> tuple[list, list]:
    """For each A row r and chunk ch, and each B column c and chunk ch, the (lane, byte) of the *received*
    register the MMA reads: the PTX ISA's mapping, or (selectors-as-zero) the one silicon that ignored non-zero
    selectors would use (what DG_SM120_EMULATE_SELECTORS=ignored emulates)."""
    ba, ta, bb, tb = issued_selectors(case)
    if how == "selectors-as-zero":
        ba = ta = bb = tb = 0
    nch = vec
    a = [[(sfa_lane(r, ta), ba + ch) for ch in range(nch)] for r in range(16)]
    b = [[(sfb_lane(c, tb), bb + ch) for ch in range(nch)] for c in range(8)]
    return a, b


@functools.cache
def _reading_index(case: ProbeCase, vec: int, how: str) -> tuple:
    """reading() as (lane, byte) index tensors: A [16, vec] each, B [8, vec] each."""
    return _index(*reading(case, vec, how))


def _index(a: list, b: list) -> tuple:
    ta, tb = torch.tensor(a), torch.tensor(b)
    return (ta[..., 0], ta[..., 1]), (tb[..., 0], tb[..., 1])


def expected_sources(case: ProbeCase, vec: int) -> tuple[list, list]:
    """Where, in the words the *kernel* loaded (before any replication), each row's / column's scale for chunk
    ch may correctly come from: one (lane, byte) under selectors; under replicated, every lane the replicated
    layout gives that row (column) and the byte the kernel meant."""
    if case.encoding == enc.SELECTORS:
        return reading(case, vec)
    a = [
        [{(lane, case.byte_a + ch) for lane in range(32) if sfa_row_of_lane(lane) == r} for ch in range(vec)]
        for r in range(16)
    ]
    b = [[{(lane, case.byte_b + ch) for lane in range(32) if lane // 4 == c} for ch in range(vec)] for c in range(8)]
    return a, b


def reference(
    inputs: Inputs, case_of: list[ProbeCase], how: str = "documented", reading_fn=None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(D [N, 16, 8], sum of |products| [N, 16, 8]) in float64 for each block, decoding the operands with the
    fragment layouts and the scales from the received registers with `how` (see reading()), or with
    reading_fn(case, vec) -> reading()'s lists (the CPU tests' model of hardware that reads elsewhere)."""
    at = inputs.atom
    pa, pb = at.positions()
    a_fp4, b_fp4 = at.fp4
    lut8 = _e4m3_values()

    def values(codes: torch.Tensor, fp4: bool) -> torch.Tensor:
        if not fp4:
            return lut8[codes]
        return _e2m1_value(codes if at.packed else (codes >> 2) & 0xF)

    A = values(inputs.elems[:, pa], a_fp4)  # [N, 16, K]
    B = values(inputs.elems[:, pb], b_fp4)  # [N, K, 8]
    n, vec, chunk = A.shape[0], at.vec, at.chunk
    sa_scale = torch.empty(n, 16, vec, dtype=torch.float64)
    sb_scale = torch.empty(n, 8, vec, dtype=torch.float64)
    for blk, case in enumerate(case_of):
        ra = _bytes(received(inputs.sa[blk], case, case.byte_a, vec))
        rb = _bytes(received(inputs.sb[blk], case, case.byte_b, vec))
        (la, ya), (lb, yb) = _reading_index(case, vec, how) if reading_fn is None else _index(*reading_fn(case, vec))
        sa_scale[blk] = scale_value(ra[la, ya], at.ue4m3)
        sb_scale[blk] = scale_value(rb[lb, yb], at.ue4m3)
    ks = torch.arange(at.kdim) // chunk
    A = A * sa_scale[:, :, ks]
    B = B * sb_scale[:, :, ks].transpose(1, 2)
    return A @ B, A.abs() @ B.abs()


# ---------------------------------------------------------------- inputs


def _random_elems(at: Atom, n: int, gen: torch.Generator) -> torch.Tensor:
    pw = at.per_word
    codes = torch.empty(n, 192 * pw, dtype=torch.long)
    a_fp4, b_fp4 = at.fp4
    for lo, hi, fp4 in ((0, 128, a_fp4), (128, 192, b_fp4)):
        span = slice(lo * pw, hi * pw)
        if at.packed:
            codes[:, span] = torch.randint(0, 16, (n, (hi - lo) * pw), generator=gen)
        elif fp4:  # e2m1 code in bits [5:2]
            codes[:, span] = torch.randint(0, 16, (n, (hi - lo) * pw), generator=gen) << 2
        else:  # e4m3 without NaN
            b = torch.randint(0, 256, (n, (hi - lo) * pw), generator=gen)
            codes[:, span] = torch.where((b & 0x7F) == 0x7F, b ^ 1, b)
    return codes


def _pack_bytes(b: torch.Tensor) -> torch.Tensor:
    return (b << (8 * torch.arange(4))).sum(-1)


def _random_scale_bytes(at: Atom, shape: tuple, gen: torch.Generator) -> torch.Tensor:
    if at.ue4m3:  # magnitudes in [2^-3, 2^3)
        return torch.randint(0x20, 0x50, shape, generator=gen)
    return torch.randint(121, 134, shape, generator=gen)  # 2^-6 .. 2^6


def random_inputs(at: Atom, case_of: list[ProbeCase], gen: torch.Generator) -> Inputs:
    """Random operands; selectors: a random scale in every lane and byte; replicated: one random word per row
    (column) placed in every lane the replicated layout gives it, as the kernels load them."""
    n = len(case_of)
    sa = _pack_bytes(_random_scale_bytes(at, (n, 32, 4), gen))
    sb = _pack_bytes(_random_scale_bytes(at, (n, 32, 4), gen))
    rows = _pack_bytes(_random_scale_bytes(at, (n, 16, 4), gen))
    cols = _pack_bytes(_random_scale_bytes(at, (n, 8, 4), gen))
    lane_row = torch.tensor([sfa_row_of_lane(lane) for lane in range(32)])
    lane_col = torch.arange(32) // 4
    rep = torch.tensor([c.encoding == enc.REPLICATED for c in case_of]).unsqueeze(1)
    sa = torch.where(rep, rows[:, lane_row], sa)
    sb = torch.where(rep, cols[:, lane_col], sb)
    return Inputs(at, _random_elems(at, n, gen), sa, sb)


def _ones_in_chunk(at: Atom, n: int, side: str, ch: int) -> torch.Tensor:
    """Operand codes: 1.0 at every K of chunk `ch` of `side`'s operand (the other operand 1.0 everywhere)."""
    pa, pb = at.positions()
    a_fp4, b_fp4 = at.fp4
    one = lambda fp4: (2 if at.packed else 0x08) if fp4 else 0x38  # e2m1 code 2 (nibble or bits [5:2]); e4m3
    codes = torch.zeros(192 * at.per_word, dtype=torch.long)
    ks = torch.arange(at.kdim) // at.chunk
    a_on = (ks == ch) if side == "a" else torch.ones(at.kdim, dtype=torch.bool)
    b_on = (ks == ch) if side == "b" else torch.ones(at.kdim, dtype=torch.bool)
    codes[pa[:, a_on].flatten()] = one(a_fp4)
    codes[pb[b_on, :].flatten()] = one(b_fp4)
    return codes.expand(n, -1).clone()


def decode_codes(at: Atom, half: int) -> torch.Tensor:
    """[32, 4] scale bytes of a decode probe: a distinct code at every (lane, byte) of lanes 16 half .. +15,
    the marker elsewhere."""
    lanes = torch.arange(32).unsqueeze(1)
    p = (lanes % 16) * 4 + torch.arange(4)
    mine = (lanes // 16) == half
    if at.ue4m3:
        return torch.where(mine, DECODE_BASE_UE4M3 + p, torch.zeros_like(p))
    return torch.where(mine, DECODE_BASE_UE8M0 + p, torch.full_like(p, DECODE_MARKER_UE8M0))


@dataclass(frozen=True)
class DecodeProbe:
    side: str  # "a" or "b": whose scales carry the codes
    ch: int  # the K chunk with non-zero operands
    half: int  # lanes 0-15 or 16-31 carry codes


def decode_probes(at: Atom) -> list[DecodeProbe]:
    return [DecodeProbe(s, ch, h) for s in ("a", "b") for ch in range(at.vec) for h in (0, 1)]


def decode_inputs(at: Atom, case_of: list[ProbeCase], probe: DecodeProbe) -> Inputs:
    n = len(case_of)
    codes = _pack_bytes(decode_codes(at, probe.half))
    unit = _pack_bytes(torch.full((32, 4), at.unit))
    sa, sb = (codes, unit) if probe.side == "a" else (unit, codes)
    return Inputs(at, _ones_in_chunk(at, n, probe.side, probe.ch), sa.expand(n, -1).clone(), sb.expand(n, -1).clone())


def decode_outputs(at: Atom, probe: DecodeProbe, d: torch.Tensor) -> list:
    """For each row (side a) or column (side b) of each block: the (lane, byte) whose code the output holds,
    None when it holds the other half's marker, or "?" for a value no code produces (or rows that disagree)."""
    codes = decode_codes(at, probe.half)
    table = {}
    for lane in range(32):
        for byte in range(4):
            v = float(scale_value(codes[lane, byte].view(1), at.ue4m3)[0]) * at.chunk
            table[v] = (lane, byte) if lane // 16 == probe.half else None
    out = []
    per = d if probe.side == "a" else d.transpose(1, 2)  # [N, rows or cols, the other]
    for blk in per.tolist():
        found = []
        for vals in blk:
            first = vals[0]
            ok = all(v == first for v in vals) and first in table
            found.append(table[first] if ok else "?")
        out.append(found)
    return out


@dataclass(frozen=True)
class Special:
    name: str
    judged: bool  # False: reported only (no documented result on silicon)
    what: str


SPECIALS_UE8M0 = (
    Special("ue8m0_zero", True, "UE8M0 0x00 in row 3's scale is 2^-127 (not zero)"),
    Special("ue8m0_nan", True, "UE8M0 0xFF in row 5's scale makes row 5 NaN and no other"),
    Special("ue8m0_exponent_sum", True, "scales whose fp32 product overflows give the finite exact result"),
)
SPECIALS_UE4M3 = (
    Special("ue4m3_zero", True, "UE4M3 0x00 in row 3's scale makes row 3 exactly 0"),
    Special("ue4m3_nan", True, "UE4M3 0x7F in row 5's scale makes row 5 NaN and no other"),
    Special("ue4m3_sign", False, "UE4M3 0xB8 (0x38 with the sign bit) in row 6's scale: what the MMA reads"),
)
MIN_PRODUCT_LOG2 = {"mxfp8": -18, "e4m3_e2m1": -10, "e2m1_e4m3": -10, "mxfp4": -2}


def specials(at: Atom) -> tuple[Special, ...]:
    return SPECIALS_UE4M3 if at.ue4m3 else SPECIALS_UE8M0


def special_inputs(at: Atom, case: ProbeCase, sp: Special) -> Inputs:
    """One block: operands 1.0 in chunk 0 (the sum overflow: the smallest operand values at one K), unit scales
    in the layout the case's encoding loads, and the special code in the A scale of one row."""
    unit = torch.full((32, 4), at.unit)
    sb = unit.clone()
    elems = _ones_in_chunk(at, 1, "a", 0)
    rows = {"zero": 3, "nan": 5, "sign": 6}
    code = {"ue8m0_zero": 0x00, "ue8m0_nan": 0xFF, "ue4m3_zero": 0x00, "ue4m3_nan": 0x7F, "ue4m3_sign": 0xB8}
    sa = unit.clone()
    if sp.name == "ue8m0_exponent_sum":
        # smallest operands at K = 0 only, scale exponents summing to 128 + ... so that sa * sb overflows fp32
        pa, pb = at.positions()
        a_fp4, b_fp4 = at.fp4
        smallest = lambda fp4: (1 if at.packed else 0x04) if fp4 else 0x01  # e2m1 0.5; e4m3 2^-9
        elems = torch.zeros_like(elems)
        elems[0, pa[:, 0]] = smallest(a_fp4)
        elems[0, pb[0, :]] = smallest(b_fp4)
        total = 122 - MIN_PRODUCT_LOG2[at.kind] if at.kind != "mxfp4" else 128  # log2(sa * sb) > 127
        sa = torch.full((32, 4), 127 + total // 2)
        sb = torch.full((32, 4), 127 + total - total // 2)
    else:
        row = rows[sp.name.split("_")[1]]
        targets = (
            [sfa_lane(row, issued_selectors(case)[1])]
            if case.encoding == enc.SELECTORS
            else [lane for lane in range(32) if sfa_row_of_lane(lane) == row]
        )
        for lane in targets:
            sa[lane, :] = code[sp.name]
    return Inputs(at, elems, _pack_bytes(sa).unsqueeze(0), _pack_bytes(sb).unsqueeze(0))


# ---------------------------------------------------------------- judging


@dataclass
class CaseResult:
    kind: str
    case: ProbeCase
    verdict: str = "ok"  # ok | imprecise | wrong
    max_rel_error: float = 0.0  # largest |D - ref| / sum |products| over the random probes
    misreads: list = field(default_factory=list)  # decode findings: "A row 3 chunk 0: lane 13 byte 1 (expected ...)"
    matches: str = "documented"  # the reading the random probes agree with ("documented", "selectors-as-zero", "none")

    def worsen(self, verdict: str) -> None:
        if VERDICT_ORDER.index(verdict) > VERDICT_ORDER.index(self.verdict):
            self.verdict = verdict

    def as_dict(self) -> dict:
        c = self.case
        return {
            "kind": self.kind,
            "encoding": c.encoding,
            "tile": [c.i, c.j],
            "byte_ids": [c.byte_a, c.byte_b],
            "verdict": self.verdict,
            "max_rel_error": self.max_rel_error,
            "matches": self.matches,
            "misreads": self.misreads[:8],
            "misread_count": len(self.misreads),
        }


def judge_random(res: CaseResult, d: torch.Tensor, ref: torch.Tensor, mag: torch.Tensor) -> float:
    """Worsen `res` by one random probe's outputs; returns the largest relative error."""
    finite = torch.isfinite(d).all().item()
    rel = ((d.double() - ref).abs() / mag.clamp_min(1e-300)).max().item() if finite else math.inf
    res.max_rel_error = max(res.max_rel_error, rel)
    res.worsen("ok" if rel <= ROUNDING else ("imprecise" if rel <= IMPRECISE else "wrong"))
    return rel


def judge_decode(res: CaseResult, at: Atom, probe: DecodeProbe, found: list) -> None:
    exp_a, exp_b = expected_sources(res.case, at.vec)
    expect = exp_a if probe.side == "a" else exp_b
    who = "A row" if probe.side == "a" else "B column"
    for idx, src in enumerate(found):
        allowed = expect[idx][probe.ch]
        allowed = allowed if isinstance(allowed, set) else {allowed}
        mine = {s for s in allowed if s[0] // 16 == probe.half}
        if src is None and not mine:
            continue  # the scale lives in the other half: the other probe reads it
        if src == "?" or src not in allowed:
            want = " or ".join(f"lane {lane} byte {b}" for lane, b in sorted(allowed))
            got = (
                "an unexpected value"
                if src == "?"
                else ("the other half's marker" if src is None else f"lane {src[0]} byte {src[1]}")
            )
            res.misreads.append(f"{who} {idx} chunk {probe.ch}: read {got}, expected {want}")
            res.worsen("wrong")


@dataclass
class SpecialResult:
    kind: str
    encoding: str
    name: str
    what: str
    judged: bool
    verdict: str  # ok | wrong | info
    observed: str

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def judge_special(at: Atom, case: ProbeCase, sp: Special, d: torch.Tensor) -> SpecialResult:
    """The special's defined result (the emulation computes exactly it) against the block's output."""
    d = d.double()
    chunk = at.chunk
    row_vals = d[:, 0].tolist()  # every column of a row agrees when the rest is right
    rows_agree = bool(((d == d[:, :1]) | (d.isnan() & d[:, :1].isnan())).all())
    observed = f"rows: {[f'{v:.6g}' for v in row_vals]}"
    ok = rows_agree
    if sp.name == "ue8m0_exponent_sum":
        total = (122 - MIN_PRODUCT_LOG2[at.kind]) if at.kind != "mxfp4" else 128
        want = 2.0 ** (MIN_PRODUCT_LOG2[at.kind] + total)
        ok = ok and all(v == want for v in row_vals)
        observed = f"every output {row_vals[0]!r}, expected {want!r}"
    elif sp.name in ("ue8m0_zero", "ue4m3_zero"):
        want_row = chunk * 2.0**-127 if sp.name == "ue8m0_zero" else 0.0
        ok = ok and row_vals[3] == want_row and all(v == chunk for r, v in enumerate(row_vals) if r != 3)
    elif sp.name in ("ue8m0_nan", "ue4m3_nan"):
        ok = ok and math.isnan(row_vals[5]) and all(v == chunk for r, v in enumerate(row_vals) if r != 5)
    else:  # the UE4M3 sign bit: report what row 6 read
        v = row_vals[6] / chunk
        seen = {1.0: "sign ignored (+1.0, as the emulation reads it)", -1.0: "negative scale (-1.0)"}
        observed = seen.get(v, "NaN" if math.isnan(v) else f"{v!r}")
        ok = rows_agree
    verdict = ("ok" if ok else "wrong") if sp.judged else "info"
    return SpecialResult(at.kind, case.encoding, sp.name, sp.what, sp.judged, verdict, observed)


# ---------------------------------------------------------------- the run


@dataclass
class KindResult:
    kind: str
    cases: list[CaseResult]
    specials: list[SpecialResult]
    seconds: float
    table_ok: bool = True

    def passes(self, encoding: str) -> bool:
        """The encoding reads every scale where the kernels put it (ok, or imprecise: the mapping is right)."""
        mine = [c for c in self.cases if c.case.encoding == encoding]
        return self.table_ok and bool(mine) and all(c.verdict != "wrong" for c in mine)


RANDOM_TRIALS = 2


def plan(at: Atom, seed: int) -> tuple[list[Inputs], list[tuple]]:
    """Every block one launch of a kind runs: (inputs per probe, what each probe is)."""
    table = list(cases(at.kind))
    gen = torch.Generator().manual_seed(seed)
    batches, what = [], []
    for t in range(RANDOM_TRIALS):
        batches.append(random_inputs(at, table, gen))
        what.append(("random", t))
    for p in decode_probes(at):
        batches.append(decode_inputs(at, table, p))
        what.append(("decode", p))
    firsts = (table[0], next(c for c in table if c.encoding == enc.REPLICATED))  # one case of each encoding
    for case in firsts:
        for sp in specials(at):
            inp = special_inputs(at, case, sp)
            # a full table's worth of blocks so the case index of each block is fixed (b % num_cases)
            pad = Inputs(
                at,
                inp.elems.expand(len(table), -1).clone(),
                inp.sa.expand(len(table), -1).clone(),
                inp.sb.expand(len(table), -1).clone(),
            )
            batches.append(pad)
            what.append(("special", (sp, table.index(case))))
    return batches, what


def judge(at: Atom, what: list[tuple], batches: list[Inputs], d_all: torch.Tensor, table_seen: list[int]) -> KindResult:
    """Verdicts from one launch's outputs d_all [probes * cases, 16, 8] (the accumulator as D rows / cols)."""
    table = list(cases(at.kind))
    n = len(table)
    res = [CaseResult(at.kind, c) for c in table]
    table_ok = table_seen == [c.descriptor for c in table] * (len(table_seen) // n)
    sp_results = []
    alt_ok = [True] * n
    for p, (sort, info) in enumerate(what):
        d = d_all[p * n : (p + 1) * n]
        if sort == "random":
            ref, mag = reference(batches[p], table)
            alt, alt_mag = reference(batches[p], table, "selectors-as-zero")
            for b in range(n):
                judge_random(res[b], d[b], ref[b], mag[b])
                rel_alt = ((d[b].double() - alt[b]).abs() / alt_mag[b].clamp_min(1e-300)).max().item()
                alt_ok[b] = alt_ok[b] and bool(torch.isfinite(d[b]).all()) and rel_alt <= IMPRECISE
        elif sort == "decode":
            for b, found in enumerate(decode_outputs(at, info, d)):
                judge_decode(res[b], at, info, found)
        else:
            sp, b = info
            sp_results.append(judge_special(at, table[b], sp, d[b]))
    for b, r in enumerate(res):
        if r.verdict == "wrong":
            r.matches = "selectors-as-zero" if alt_ok[b] else "none"
    return KindResult(at.kind, res, sp_results, 0.0, table_ok)


def run_atoms(index: int, target: str, kinds=None, seed: int = 20261205) -> list[KindResult]:
    """Launch the probe of every atom kind on device `index` (compiled for `target`) and judge it."""
    from .. import jit, runtime

    out = []
    for kind in kinds or ATOM_KINDS:
        t0 = time.perf_counter()
        at = Atom(kind)
        spec = ScaleProbeSpec(kind)
        kern = jit.get_kernel(spec, target, index)
        batches, what = plan(at, seed)
        words = torch.cat([b.words() for b in batches])
        words = torch.where(words >= 2**31, words - 2**32, words).to(torch.int32).to(f"cuda:{index}")
        blocks = words.shape[0]
        out_d = torch.full((blocks * OUTS_PER_CASE,), math.nan, dtype=torch.float32, device=words.device)
        table = torch.full((blocks,), -1, dtype=torch.int32, device=words.device)
        with torch.cuda.device(index):
            runtime.launcher()(
                kern.handle,
                blocks,
                1,
                1,
                32,
                0,
                runtime.current_stream_fn()(index),
                False,
                spec.params.pack(words=words.data_ptr(), out=out_d.data_ptr(), table=table.data_ptr()),
                b"",
            )
            torch.cuda.synchronize(index)
        d = accumulator_to_tile(out_d.cpu().view(blocks, 32, 4))
        result = judge(at, what, batches, d, [int(x) & 0xFFFFFFFF for x in table.cpu().tolist()])
        result.seconds = time.perf_counter() - t0
        out.append(result)
    return out


def accumulator_to_tile(o: torch.Tensor) -> torch.Tensor:
    """[N, 32 lanes, 4] accumulators -> [N, 16, 8] (lane g, q holds rows g, g + 8 x columns 2q, 2q + 1)."""
    n = o.shape[0]
    d = torch.empty(n, 16, 8, dtype=o.dtype)
    for lane in range(32):
        g, q = lane // 4, lane % 4
        d[:, g, 2 * q] = o[:, lane, 0]
        d[:, g, 2 * q + 1] = o[:, lane, 1]
        d[:, g + 8, 2 * q] = o[:, lane, 2]
        d[:, g + 8, 2 * q + 1] = o[:, lane, 3]
    return d
