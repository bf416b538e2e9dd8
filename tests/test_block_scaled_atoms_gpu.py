"""The block-scaled MMA atoms alone, against the documented scale-selector mapping.

One warp runs one atom on random operand registers and random scale registers in *every* lane (a different
scale per lane and per byte), for several {byte-id, thread-id} selectors. The fp64 reference decodes the
fragments and picks each row's / column's scale from the lane and byte that mma/sm120_scale_selectors.cuh
names. On sm_90 this validates the emulation's arithmetic and its use of the mapping; on SM120 silicon the
same test checks the mapping itself."""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import pytest
import torch
from gpu_helpers import requires_cuda

from deep_gemm_sm120.core.params import Param, ParamList

pytestmark = [pytest.mark.cuda, pytest.mark.emulation, requires_cuda]
E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
ATOMS = {
    "mxfp8": "mma_mxf8_e4m3_16832",
    "mxfp4": "mma_mxf4_16864",
    "nvfp4": "mma_nvf4_16864",
    # kind::mxf8f6f4 mixed forms: e2m1 one per byte in bits [5:2]
    "e4m3_e2m1": "mma_mxf8f6f4_16832<sm120::F8F6F4Type::kE4M3, sm120::F8F6F4Type::kE2M1, ",
    "e2m1_e4m3": "mma_mxf8f6f4_16832<sm120::F8F6F4Type::kE2M1, sm120::F8F6F4Type::kE4M3, ",
}
K32_KINDS = ("mxfp8", "e4m3_e2m1", "e2m1_e4m3")  # m16n8k32, one element per byte


@dataclass(frozen=True)
class AtomProbeSpec:
    kind: str
    sel: tuple[int, int, int, int]  # byte-id-a, thread-id-a, byte-id-b, thread-id-b
    family = "atom_probe"
    threads = 32
    smem_bytes = 0
    params = ParamList(Param("words", "const uint32_t*"), Param("out", "float*"))

    @property
    def name(self) -> str:
        return f"atom_probe_{self.kind}_{'_'.join(map(str, self.sel))}"

    def _atom(self) -> str:
        atom = ATOMS[self.kind]
        return atom if atom.endswith(", ") else atom + "<"

    def source(self) -> str:
        ba, ta, bb, tb = self.sel
        return (
            '#include "mma/sm120.cuh"\n'
            'extern "C" __global__ void __launch_bounds__(32, 1) probe(const uint32_t* words, float* out) {\n'
            "    const uint32_t l = threadIdx.x;\n"
            "    const uint32_t a[4] = {words[l], words[32 + l], words[64 + l], words[96 + l]};\n"
            "    const uint32_t b[2] = {words[128 + l], words[160 + l]};\n"
            "    float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};\n"
            f"    sm120::{self._atom()}{ba}, {ta}, {bb}, {tb}>(d, a, b, words[192 + l], words[224 + l]);\n"
            "    for (int i = 0; i < 4; ++i) out[4 * l + i] = d[i];\n"
            "}\n"
        )


def _e4m3(byte: torch.Tensor) -> torch.Tensor:
    return byte.to(torch.uint8).view(torch.float8_e4m3fn).double()


def _byte_value(byte: int, e2m1_container: bool) -> float:
    if e2m1_container:  # code in bits [5:2]
        c = (byte >> 2) & 0xF
        return (-1 if c & 8 else 1) * E2M1[c & 7]
    return float(_e4m3(torch.tensor([byte]))[0])


def _scale(byte: int, kind: str) -> float:
    if kind == "nvfp4":
        return float(torch.tensor([byte & 0x7F], dtype=torch.uint8).view(torch.float8_e4m3fn).double())
    return 2.0 ** (byte - 127)


def _reference(words: list[int], kind: str, sel) -> torch.Tensor:
    """(D (16x8), largest sum of |products|) from the per-lane registers, decoded with the PTX fragment layouts and the selector mapping."""
    ba, ta, bb, tb = sel
    kdim = 32 if kind in K32_KINDS else 64
    a_fp4, b_fp4 = kind.startswith("e2m1"), kind.endswith("e2m1")
    A = torch.zeros(16, kdim, dtype=torch.float64)
    B = torch.zeros(kdim, 8, dtype=torch.float64)
    reg = lambda r, lane: words[32 * r + lane]
    for lane in range(32):
        g, q = lane // 4, lane % 4
        if kind in K32_KINDS:  # byte j of a[0..3]: rows g, g+8, g, g+8 at K 4q+j, 4q+j, 16+4q+j, 16+4q+j
            for r, (row, k0) in enumerate(((g, 4 * q), (g + 8, 4 * q), (g, 16 + 4 * q), (g + 8, 16 + 4 * q))):
                for j in range(4):
                    A[row, k0 + j] = _byte_value((reg(r, lane) >> (8 * j)) & 0xFF, a_fp4)
            for r, k0 in enumerate((4 * q, 16 + 4 * q)):
                for j in range(4):
                    B[k0 + j, g] = _byte_value((reg(4 + r, lane) >> (8 * j)) & 0xFF, b_fp4)
        else:  # nibble j of a[0..3]: rows g, g+8, g, g+8 at K 8q+j, 8q+j, 32+8q+j, 32+8q+j
            for r, (row, k0) in enumerate(((g, 8 * q), (g + 8, 8 * q), (g, 32 + 8 * q), (g + 8, 32 + 8 * q))):
                for j in range(8):
                    c = (reg(r, lane) >> (4 * j)) & 0xF
                    A[row, k0 + j] = (-1 if c & 8 else 1) * E2M1[c & 7]
            for r, k0 in enumerate((8 * q, 32 + 8 * q)):
                for j in range(8):
                    c = (reg(4 + r, lane) >> (4 * j)) & 0xF
                    B[k0 + j, g] = (-1 if c & 8 else 1) * E2M1[c & 7]
    chunk = 16 if kind == "nvfp4" else 32
    sfa_lane = lambda row: 4 * (row % 8) + 2 * ta + row // 8
    sfb_lane = lambda col: 4 * col + tb
    for k in range(kdim):
        cidx = k // chunk
        for row in range(16):
            A[row, k] *= _scale((reg(6, sfa_lane(row)) >> (8 * (ba + cidx))) & 0xFF, kind)
        for col in range(8):
            B[k, col] *= _scale((reg(7, sfb_lane(col)) >> (8 * (bb + cidx))) & 0xFF, kind)
    return A @ B, float((A.abs() @ B.abs()).max())


def _random_words(kind: str, gen: torch.Generator) -> list[int]:
    w = torch.randint(0, 2**32, (256,), generator=gen, dtype=torch.int64)
    if kind in K32_KINDS:  # e4m3 bytes without NaN (0x7F / 0xFF); e2m1 codes in bits [5:2], zero padding
        b = w[:192].view(-1, 1) >> torch.tensor([0, 8, 16, 24]) & 0xFF
        b = torch.where((b & 0x7F) == 0x7F, b ^ 0x01, b)
        fp4_rows = torch.zeros(192, 1, dtype=torch.bool)
        if kind.startswith("e2m1"):
            fp4_rows[:128] = True
        if kind.endswith("e2m1"):
            fp4_rows[128:] = True
        b = torch.where(fp4_rows, b & 0x3C, b)
        w[:192] = (b << torch.tensor([0, 8, 16, 24])).sum(1)
    # scales: UE8M0 exponents 127 +- 6, or UE4M3 magnitudes in [2^-3, 2^3) -- every byte of every lane differs
    s = (
        torch.randint(0, 13, (64, 4), generator=gen) + 121
        if kind != "nvfp4"
        else torch.randint(0x20, 0x50, (64, 4), generator=gen)
    )
    w[192:] = (s << torch.tensor([0, 8, 16, 24])).sum(1)
    return [int(x) for x in w]


SELECTORS = {
    "mxfp8": [(0, 0, 0, 0), (1, 1, 2, 3), (3, 0, 1, 2), (2, 1, 3, 1)],
    "mxfp4": [(0, 0, 0, 0), (2, 1, 0, 3), (0, 1, 2, 2)],
    "nvfp4": [(0, 0, 0, 0), (0, 1, 0, 3), (0, 0, 0, 1)],
    "e4m3_e2m1": [(0, 0, 0, 0), (1, 1, 2, 3)],
    "e2m1_e4m3": [(3, 0, 1, 2)],
}


@pytest.mark.parametrize("kind,sel", [(k, s) for k, sels in SELECTORS.items() for s in sels])
def test_atom_matches_documented_selector_mapping(sm120_or_emulation, kind, sel):
    from deep_gemm_sm120 import jit, runtime
    from deep_gemm_sm120.arch import target_for_device

    index = torch.cuda.current_device()
    kern = jit.get_kernel(AtomProbeSpec(kind, sel), target_for_device(index), index)
    gen = torch.Generator().manual_seed(zlib.crc32(repr((kind, sel)).encode()))
    for trial in range(3):
        words = _random_words(kind, gen)
        inp = torch.tensor([w - 2**32 if w >= 2**31 else w for w in words], dtype=torch.int32, device="cuda")
        out = torch.full((128,), float("nan"), dtype=torch.float32, device="cuda")
        runtime.launcher()(
            kern.handle,
            1,
            1,
            1,
            32,
            0,
            runtime.current_stream_fn()(index),
            False,
            AtomProbeSpec.params.pack(words=inp.data_ptr(), out=out.data_ptr()),
            b"",
        )
        torch.cuda.synchronize()
        d = torch.empty(16, 8, dtype=torch.float64)
        o = out.cpu().double().view(32, 4)
        for lane in range(32):  # accumulator layout: rows g, g+8; columns 2q, 2q+1
            g, q = lane // 4, lane % 4
            d[g, 2 * q], d[g, 2 * q + 1], d[g + 8, 2 * q], d[g + 8, 2 * q + 1] = o[lane].tolist()
        ref, magnitude = _reference(words, kind, sel)
        err = (d - ref).abs().max().item()
        assert err <= 1e-5 * magnitude, f"{kind} {sel} trial {trial}: max error {err} (scale {magnitude})"
