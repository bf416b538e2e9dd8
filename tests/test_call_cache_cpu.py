"""The cached (once-per-signature) path of every caching entry point against its checked path, on a CPU: the
device layer is stubbed as in test_launch_args_cpu.py (device 0, a fake kernel loader, a launcher that records),
and for seeded random legal calls

    cold (fresh caches, tensors T1)  ==  warm (cached, NEW tensors T2 of the same signature)  ==  cold again (T2)

as recorded launches: kernel names, grids, block / smem / PDL, every unpacked parameter and every tensor-map
field, with addresses written as the name of the call's tensor they point at (other addresses, the split-K
workspaces, as the order they first appear in). Variants of each call (wrong dtypes, shapes, strides,
misaligned views, wrong Python values) behave alike warm and cold: the same (type, message), or the same launches,
and a failing call adds no cache entry. The regression tests at the end pin
divergences a red-team review found (each failed before its fix)."""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass

import pytest
import torch
from launch_stub import stub_gpu
from test_launch_args_cpu import _decode_maps  # one reading of the runtime's TMA records

import deep_gemm_sm120 as dg
from deep_gemm_sm120 import arch, checks, device, jit, launch
from deep_gemm_sm120.core.arith import ceil_div
from deep_gemm_sm120.families import (
    bf16_gemm,
    fp8_fp4_gemm_1d1d,
    gated_delta_rule,
    mqa_logits,
    paged_mqa_logits,
    sparse_mqa_logits,
    tf32_hc_prenorm_gemm,
)
from deep_gemm_sm120.families.bf16_gemm import api as bf16_api
from deep_gemm_sm120.families.bf16_gemm import einsum as einsum_mod
from deep_gemm_sm120.families.bf16_gemm import grouped as bf16_grouped
from deep_gemm_sm120.families.fp8_fp4_gemm_1d1d import api as fp8_api
from deep_gemm_sm120.families.fp8_fp4_gemm_1d1d import einsum as fp8_einsum_mod
from deep_gemm_sm120.families.gated_delta_rule import api as gdr_api
from deep_gemm_sm120.families.gated_delta_rule.prep import PREP as GDR_PREP
from deep_gemm_sm120.families.mqa_logits import api as mqa_api
from deep_gemm_sm120.families.paged_mqa_logits import api as paged_api
from deep_gemm_sm120.families.paged_mqa_logits import metadata as paged_metadata
from deep_gemm_sm120.families.paged_mqa_logits.schedule import SCHEDULE as PAGED_SCHEDULE
from deep_gemm_sm120.families.sparse_mqa_logits import api as sparse_api
from deep_gemm_sm120.families.sparse_mqa_logits import metadata as sparse_metadata
from deep_gemm_sm120.families.sparse_mqa_logits.slots import SLOTS as SPARSE_SLOTS
from deep_gemm_sm120.families.tf32_hc_prenorm_gemm import api as tf32_api
from deep_gemm_sm120.services import split_k_reduce

SMS = 132
_BIG = 2**32  # CPU addresses are above this; no parameter value that is not an address is

_PREPARES = (
    (bf16_api, "_prepare"),
    (bf16_grouped, "_prepare_contiguous"),
    (bf16_grouped, "_prepare_masked"),
    (bf16_grouped, "_prepare_k_grouped"),
    (fp8_api, "_prepare_dense"),
    (fp8_api, "_prepare_contiguous"),
    (fp8_api, "_prepare_masked"),
    (einsum_mod, "_prepare"),
    (fp8_einsum_mod, "_prepare"),
    (tf32_api, "_prepare"),
    (sparse_api, "_prepare_contiguous"),
    (sparse_api, "_prepare_paged"),
    (gdr_api, "_prepare"),
    (mqa_api, "_prepare"),
    (paged_api, "_prepare"),
)
_KERNEL_CACHES = (
    bf16_grouped._kernel,
    fp8_api._grouped_kernel,
    einsum_mod._batched_kernel,
    einsum_mod._reduce_kernel,
    fp8_einsum_mod._kernel,
    tf32_api._plan,
    sparse_api._kernel,
    gdr_api._kernels,
    mqa_api._kernel,
    paged_api._kernel,
    paged_metadata._kernel,
    sparse_metadata._kernel,
)


@dataclass(frozen=True)
class Launch:
    kernel: str
    grid: tuple
    block: int
    smem: int
    pdl: bool
    args: tuple
    maps: tuple


class Rig:
    def __init__(self):
        self.launches: list[Launch] = []
        self.prepares = 0

    def entries(self) -> int:
        return sum(len(c) for c in launch._CACHES)

    def record(self, fn, args, kwargs, names):
        """('ok', normalized launches) or ('raise', type, message); counts prepares."""
        self.launches.clear()
        before = self.prepares
        try:
            fn(*args, **kwargs)
        except Exception as e:  # the outcome is compared, whatever it is
            return ("raise", type(e), str(e)), self.prepares - before
        return ("ok", _normalize(self.launches, names)), self.prepares - before


def _normalize(launches: list[Launch], names: dict) -> list:
    where: dict[int, str] = {}
    for name, t in names.items():
        if isinstance(t, torch.Tensor) and t.numel():
            where.setdefault(t.data_ptr(), name)
    other: dict[int, str] = {}
    # tensors a call allocated (named allocN by the fast-call tests), then the arguments' extents: an address
    # inside exactly one is named by its offset (the paged sparse scale words inside kv_cache)
    spans = [(n, t.data_ptr(), t.untyped_storage().nbytes()) for n, t in names.items() if n.startswith("alloc")]
    extents = [(n, t.data_ptr(), launch._extent(t)) for n, t in names.items() if not n.startswith("alloc")]

    def sub(v):
        if isinstance(v, int) and not isinstance(v, bool) and v >= _BIG:
            if v in where:
                return "@" + where[v]
            for name, base, size in spans:
                if base <= v < base + size:
                    return f"@{name}+{v - base}"
            inside = [(name, base) for name, base, size in extents if base <= v < base + size]
            if len(inside) == 1:
                return f"@{inside[0][0]}+{v - inside[0][1]}"
            return other.setdefault(v, f"@ws{len(other)}")
        return v

    out = []
    for ln in launches:
        args = tuple((k, sub(v)) for k, v in ln.args)
        maps = tuple(tuple((k, sub(v) if k == "address" else v) for k, v in m) for m in ln.maps)
        out.append(Launch(ln.kernel, ln.grid, ln.block, ln.smem, ln.pdl, args, maps))
    return out


@pytest.fixture()
def rig(monkeypatch):
    families = {
        f.spec_type: f
        for f in (
            bf16_gemm.FAMILY,
            fp8_fp4_gemm_1d1d.FAMILY,
            tf32_hc_prenorm_gemm.FAMILY,
            split_k_reduce.FAMILY,
            sparse_mqa_logits.FAMILY,
            gated_delta_rule.FAMILY,
            GDR_PREP,
            mqa_logits.FAMILY,
            paged_mqa_logits.FAMILY,
            PAGED_SCHEDULE,
            SPARSE_SLOTS,
        )
    }
    specs: dict[int, object] = {}
    r = Rig()

    def fake_get_kernel(spec, target, dev):
        assert target == "sm_120a" and dev == 0
        specs[len(specs)] = spec
        return jit.LoadedKernel(
            len(specs) - 1, spec.threads, spec.smem_bytes, spec.name, families[type(spec)].pdl, spec.params.pointers
        )

    def fake_launch(handle, gx, gy, gz, block, smem, stream, pdl, params, tmaps):
        spec = specs[handle]
        assert stream == 1234
        args = tuple(spec.params.unpack(params).items())
        maps = tuple(tuple(m.items()) for m in _decode_maps(tmaps))
        r.launches.append(Launch(spec.name, (gx, gy, gz), block, smem, pdl, args, maps))

    def counting(fn):
        def wrapper(*a, **k):
            r.prepares += 1
            return fn(*a, **k)

        return wrapper

    stub_gpu(monkeypatch, fake_get_kernel, fake_launch, SMS, 1234)
    monkeypatch.setattr(torch.Tensor, "pin_memory", lambda self: self)
    for mod in (
        bf16_api,
        bf16_grouped,
        fp8_api,
        einsum_mod,
        fp8_einsum_mod,
        tf32_api,
        sparse_api,
        gdr_api,
        mqa_api,
        paged_api,
    ):
        monkeypatch.setattr(mod, "device_of", lambda **t: 0)
    for mod, name in _PREPARES:
        monkeypatch.setattr(mod, name, counting(getattr(mod, name)))
    saved_switch = checks._INDEX_CHECKS.value
    checks._INDEX_CHECKS.value = True

    def clear():
        for c in _KERNEL_CACHES:
            c.cache_clear()
        launch.forget_calls()
        arch.reset_targets()

    clear()
    yield r
    clear()
    checks._INDEX_CHECKS.value = saved_switch


# ---------------------------------------------------------------- tensors


def _t(*shape, dtype=torch.bfloat16):
    return torch.zeros(*shape, dtype=dtype)


def _fp8(*shape):
    return torch.zeros(*shape, dtype=torch.float8_e4m3fn)


def _packed(mn, k, recipe, groups=None, is_sfa=False):
    gran_mn = recipe[0] if is_sfa else recipe[1]
    shape = (ceil_div(mn, gran_mn), ceil_div(k, recipe[2]))
    ones = torch.ones(*((groups,) if groups is not None else ()), *shape)
    return dg.transform_sf_into_required_layout(ones, mn, k, recipe, num_groups=groups, is_sfa=is_sfa)


def _strided(shape, pad, dtype=torch.bfloat16):
    """A view of shape `shape` whose rows are `pad` elements longer (legal strides)."""
    return torch.zeros(*shape[:-1], shape[-1] + pad, dtype=dtype)[..., : shape[-1]]


def _like(t: torch.Tensor, offset: int = 0, dtype=None) -> torch.Tensor:
    """A fresh tensor with t's shape and strides (and dtype unless given), `offset` elements into its storage."""
    dtype = t.dtype if dtype is None else dtype
    span = 1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride())) if t.numel() else 0
    base = torch.zeros(span + offset + 64, dtype=dtype)
    return base.as_strided(tuple(t.shape), tuple(t.stride()), offset)


# ---------------------------------------------------------------- cases
# A case: (label, fn, build) where build() returns (args, kwargs, names) with fresh tensors each time; names
# maps every tensor of the call (for the address mapping) to its name. args may hold tensors inside pairs.


def _walk(obj, prefix, out):
    if isinstance(obj, torch.Tensor):
        out[prefix] = obj
    elif isinstance(obj, (tuple, list)):
        for i, x in enumerate(obj):
            _walk(x, f"{prefix}.{i}", out)
    return out


def _names(args, kwargs):
    out: dict = {}
    for i, a in enumerate(args):
        _walk(a, f"arg{i}", out)
    for k, v in kwargs.items():
        _walk(v, k, out)
    return out


def _case(label, fn, make):
    """make() -> (args, kwargs) with fresh tensors."""

    def build():
        args, kwargs = make()
        return args, kwargs, _names(args, kwargs)

    return label, fn, build


def _bf16_dense_cases(rng):
    out = []
    for layout in ("nt", "nn", "tn", "tt"):
        fn = getattr(dg, f"bf16_gemm_{layout}")
        for _ in range(3):
            m = rng.choice([8, 64, 200, 512]) if layout[0] == "t" else rng.choice([1, 7, 37, 128, 300, 1000])
            n, k = 8 * rng.randint(1, 96), 8 * rng.randint(1, 96)
            out_dtype = rng.choice([torch.bfloat16, torch.float32])
            with_c = out_dtype == torch.float32 and rng.random() < 0.6
            alias = with_c and rng.random() < 0.5
            pad = rng.choice([0, 0, 8])

            def make(layout=layout, m=m, n=n, k=k, out_dtype=out_dtype, with_c=with_c, alias=alias, pad=pad):
                a_shape = (k, m) if layout[0] == "t" else (m, k)
                b_shape = (k, n) if layout[1] == "n" else (n, k)
                a, b = _strided(a_shape, pad), _t(*b_shape)
                d = _t(m, n, dtype=out_dtype)
                kw = {}
                if with_c:
                    kw["c"] = d if alias else _t(m, n, dtype=torch.float32)
                return (a, b, d), kw

            out.append(_case(f"bf16_{layout}_{m}x{n}x{k}_{out_dtype}_c{with_c}", fn, make))
    for m, n, k, c in ((1, 2112, 7168, False), (4, 1536, 7168, True), (16, 4096, 7168, False)):  # split-K / swap

        def make(m=m, n=n, k=k, c=c):
            d = _t(m, n, dtype=torch.float32 if c else torch.bfloat16)
            return (_t(m, k), _t(n, k), d), ({"c": _t(m, n, dtype=torch.float32)} if c else {})

        out.append(_case(f"bf16_nt_split_{m}x{n}x{k}", dg.bf16_gemm_nt, make))
    return out


def _bf16_grouped_cases(rng):
    out = []
    for psum in (False, True, False):
        g, m = rng.randint(1, 4), 128 * rng.randint(1, 4)
        n, k = 8 * rng.randint(1, 64), 8 * rng.randint(1, 64)

        def make(g=g, m=m, n=n, k=k, psum=psum):
            layout = torch.full((g,), m, dtype=torch.int32) if psum else torch.zeros(m, dtype=torch.int32)
            return (_t(m, k), _t(g, n, k), _t(m, n), layout), {"use_psum_layout": psum}

        out.append(_case(f"bf16_contig_{g}x{m}x{n}x{k}_psum{psum}", dg.m_grouped_bf16_gemm_nt_contiguous, make))
    for _ in range(3):
        g, m = rng.randint(1, 4), rng.choice([1, 16, 64, 200])
        n, k = 8 * rng.randint(1, 64), 8 * rng.randint(1, 64)
        em = rng.choice([0, 1, 16, 64, 300])

        def make(g=g, m=m, n=n, k=k, em=em):
            return (_t(g, m, k), _t(g, n, k), _t(g, m, n), torch.zeros(g, dtype=torch.int32), em), {}

        out.append(_case(f"bf16_masked_{g}x{m}x{n}x{k}_e{em}", dg.m_grouped_bf16_gemm_nt_masked, make))
    return out


_R = (1, 128, 128)


def _fp8_cases(rng):
    out = []
    for _ in range(3):
        m, n = rng.choice([1, 33, 128, 200]), 16 * rng.randint(1, 40)
        k = 128 * rng.randint(1, 8)
        recipe = rng.choice([(1, 128, 128), (1, 1, 128)])
        out_dtype = rng.choice([torch.bfloat16, torch.float32])
        with_c = out_dtype == torch.float32 and rng.random() < 0.5
        alpha = rng.choice([None, 0.5, 2])

        def make(m=m, n=n, k=k, recipe=recipe, out_dtype=out_dtype, with_c=with_c, alpha=alpha):
            sfa, sfb = _packed(m, k, recipe, is_sfa=True), _packed(n, k, recipe)
            kw = {"recipe": recipe, "alpha": alpha}
            if with_c:
                kw["c"] = _t(m, n, dtype=torch.float32)
            return ((_fp8(m, k), sfa), (_fp8(n, k), sfb), _t(m, n, dtype=out_dtype)), kw

        out.append(_case(f"fp8_dense_{m}x{n}x{k}_{recipe}", dg.fp8_gemm_nt, make))

    for m, n, k, g, form in ((96, 160, 384, 2, "unpacked"), (64, 128, 256, 2, "bare"), (33, 300, 512, 1, "blocks")):

        def make_dense(m=m, n=n, k=k, form=form):
            if form == "bare":  # unit scales made by the call (packed on every call)
                return (_fp8(m, k), _fp8(n, k), _t(m, n)), {}
            sfb = torch.ones(ceil_div(n, 128), ceil_div(k, 128)) if form == "blocks" else torch.ones(n, k // 128)
            return ((_fp8(m, k), torch.ones(m, k // 128)), (_fp8(n, k), sfb), _t(m, n)), {}

        def make_masked(m=m, n=n, k=k, g=g, form=form):
            if form == "bare":
                a, b = _fp8(g, m, k), _fp8(g, n, k)
            else:
                a, b = (_fp8(g, m, k), torch.ones(g, m, k // 128)), (_fp8(g, n, k), torch.ones(g, n, k // 128))
            return (a, b, _t(g, m, n), torch.zeros(g, dtype=torch.int32), 32), {}

        out.append(_case(f"fp8_dense_{form}_{m}x{n}x{k}", dg.fp8_gemm_nt, make_dense))
        out.append(_case(f"fp8_masked_{form}_{g}x{m}x{n}x{k}", dg.m_grouped_fp8_gemm_nt_masked, make_masked))

    u8 = torch.uint8
    for kind, ra, rb, recipe in (("mxfp4", 32, 32, (1, 1, 32)), ("nvfp4", 16, 16, (1, 1, 16)),
                                 ("mixed", 128, 32, (1, 1, 128))):  # fmt: skip
        m, n, k = rng.choice([1, 64, 130]), 16 * rng.randint(1, 24), 128 * rng.randint(1, 4)

        def make_fp4(m=m, n=n, k=k, kind=kind, ra=ra, rb=rb, recipe=recipe):
            a = _fp8(m, k) if kind == "mixed" else _t(m, k // 2, dtype=u8)
            sfa, sfb = _packed(m, k, (1, 1, ra), is_sfa=True), _packed(n, k, (1, 1, rb))
            return ((a, sfa), (_t(n, k // 2, dtype=u8), sfb), _t(m, n)), {"recipe": recipe}

        out.append(_case(f"fp8_dense_{kind}_{m}x{n}x{k}", dg.fp8_fp4_gemm_nt, make_fp4))
    for kind, gk in (("mxfp4", 32), ("nvfp4", 16)):
        g, m, n, k = rng.randint(1, 3), 128, 128 * rng.randint(1, 2), 128 * rng.randint(1, 3)
        rec = (1, 1, gk)

        def make_masked4(g=g, m=m, n=n, k=k, rec=rec):
            a = (_t(g, m, k // 2, dtype=u8), _packed(m, k, rec, g, is_sfa=True))
            b = (_t(g, n, k // 2, dtype=u8), _packed(n, k, rec, g))
            return (a, b, _t(g, m, n), torch.zeros(g, dtype=torch.int32), 48), {"recipe": rec}

        def make_contig4(g=g, m=m, n=n, k=k, rec=rec):
            a = (_t(m, k // 2, dtype=u8), _packed(m, k, rec, is_sfa=True))
            b = (_t(g, n, k // 2, dtype=u8), _packed(n, k, rec, g))
            return (a, b, _t(m, n), torch.zeros(m, dtype=torch.int32)), {"recipe": rec}

        out.append(_case(f"fp8_masked_{kind}_{g}x{m}x{n}x{k}", dg.m_grouped_fp8_fp4_gemm_nt_masked, make_masked4))
        out.append(_case(f"fp8_contig_{kind}_{g}x{m}x{n}x{k}", dg.m_grouped_fp8_fp4_gemm_nt_contiguous, make_contig4))

    def make_split():
        m, n, k = 1, 2112, 7168
        return ((_fp8(m, k), _packed(m, k, _R, is_sfa=True)), (_fp8(n, k), _packed(n, k, _R)), _t(m, n)), {}

    out.append(_case("fp8_dense_split", dg.fp8_gemm_nt, make_split))
    for _ in range(3):
        g, m, n = rng.randint(1, 3), rng.choice([16, 64, 128]), 128 * rng.randint(1, 3)
        k = 128 * rng.randint(1, 4)
        em = rng.choice([1, 16, 64])

        def make(g=g, m=m, n=n, k=k, em=em):
            sfa, sfb = _packed(m, k, _R, g, is_sfa=True), _packed(n, k, _R, g)
            masked_m = torch.zeros(g, dtype=torch.int32)
            return ((_fp8(g, m, k), sfa), (_fp8(g, n, k), sfb), _t(g, m, n), masked_m, em), {"recipe": _R}

        out.append(_case(f"fp8_masked_{g}x{m}x{n}x{k}_e{em}", dg.m_grouped_fp8_gemm_nt_masked, make))
    for psum in (False, True):
        g, m, n = rng.randint(1, 3), 128 * rng.randint(1, 3), 128 * rng.randint(1, 3)
        k = 128 * rng.randint(1, 4)

        def make(g=g, m=m, n=n, k=k, psum=psum):
            sfa, sfb = _packed(m, k, _R, is_sfa=True), _packed(n, k, _R, g)
            layout = torch.full((g,), m, dtype=torch.int32) if psum else torch.zeros(m, dtype=torch.int32)
            args = ((_fp8(m, k), sfa), (_fp8(g, n, k), sfb), _t(m, n), layout)
            return args, {"recipe": _R, "use_psum_layout": psum, "alpha": 0.25}

        out.append(_case(f"fp8_contig_{g}x{m}x{n}x{k}_psum{psum}", dg.m_grouped_fp8_gemm_nt_contiguous, make))
    return out


def _einsum_cases(rng):
    out = []
    for bs, m, n, k, mode in ((3, 64, 128, 256, "acc"), (2, 24, 40, 4096, "acc"), (4, 100, 64, 64, "bf16")):
        bs, m = bs + rng.randint(0, 2), m + 8 * rng.randint(0, 2)

        def make(bs=bs, m=m, n=n, k=k, mode=mode):
            a, b = _t(bs, m, k), _t(bs, n, k)
            if mode == "bf16":
                return ("bmk,bnk->mn", a, b, _t(m, n)), {}
            d = _t(m, n, dtype=torch.float32)
            return ("bmk,bnk->mn", a, b, d), {"c": d}

        out.append(_case(f"einsum_bmk_{bs}x{m}x{n}x{k}_{mode}", dg.einsum, make))
    for _ in range(2):
        bs, h, dd, r = rng.randint(1, 40), rng.randint(1, 8), 8 * rng.randint(1, 32), 8 * rng.randint(1, 32)

        def make_bhd(bs=bs, h=h, dd=dd, r=r):
            return ("bhr,hdr->bhd", _t(bs, h, r), _t(h, dd, r), _t(bs, h, dd)), {}

        def make_bhr(bs=bs, h=h, dd=dd, r=r):
            return ("bhd, hdr -> bhr", _strided((bs, h, dd), 8), _t(h, dd, r), _t(bs, h, r)), {}

        out.append(_case(f"einsum_bhd_{bs}x{h}x{dd}x{r}", dg.einsum, make_bhd))
        out.append(_case(f"einsum_bhr_{bs}x{h}x{dd}x{r}", dg.einsum, make_bhr))
    return out


def _fp8_einsum_cases(rng):
    """bhr,hdr->bhd with packed scales (used as given), unpacked UE8M0 ones (converted per call), weight scales
    per 128x128 block or per row, bf16 / fp32 d, c."""
    out = []
    for form in ("packed", "unpacked", "rows", "packed"):
        bs, h = rng.choice([1, 7, 33, 130]), rng.randint(1, 4)
        dd, r = 16 * rng.randint(1, 20), 128 * rng.randint(1, 4)
        out_dtype = rng.choice([torch.bfloat16, torch.float32])
        with_c = out_dtype == torch.float32 and rng.random() < 0.5

        def make(bs=bs, h=h, dd=dd, r=r, form=form, out_dtype=out_dtype, with_c=with_c):
            kb = ceil_div(r, 128)
            sfx = torch.ones(bs, h, kb)
            sfy = torch.ones(h, dd, kb) if form == "rows" else torch.ones(h, ceil_div(dd, 128), kb)
            if form == "packed":
                sfx = dg.transform_sf_into_required_layout(sfx.transpose(0, 1), bs, r, _R, num_groups=h, is_sfa=True)
                sfy = dg.transform_sf_into_required_layout(sfy, dd, r, _R, num_groups=h)
            d = _t(bs, h, dd, dtype=out_dtype)
            kw = {"c": _t(bs, h, dd, dtype=torch.float32)} if with_c else {}
            return ("bhr,hdr->bhd", (_fp8(bs, h, r), sfx), (_fp8(h, dd, r), sfy), d), kw

        out.append(_case(f"fp8_einsum_{form}_{bs}x{h}x{dd}x{r}", dg.fp8_einsum, make))
    return out


def _sparse_cases(rng):
    """Sparse MQA logits over contiguous and paged KV, MXFP8 and MXFP4, with a slot table of the right shape
    (its values are the kernel's to read)."""
    out = []
    u8 = torch.uint8
    for fmt, paged in (("mxfp8", False), ("mxfp4", False), ("mxfp8", True), ("mxfp4", True)):
        s, h, nb, blk = rng.choice([1, 5, 64]), rng.choice([16, 32, 64]), rng.randint(1, 8), rng.choice([8, 16, 32])
        d = 128 if fmt == "mxfp4" else rng.choice([64, 128])
        cols = d // 2 if fmt == "mxfp4" else d
        n = rng.choice([1, 300]) if not paged else 0
        pages = rng.randint(1, 4)

        def make(s=s, h=h, nb=nb, blk=blk, d=d, cols=cols, n=n, pages=pages, fmt=fmt, paged=paged):
            vals = (lambda *sh: _fp8(*sh)) if fmt == "mxfp8" else (lambda *sh: _t(*sh, dtype=u8))
            meta = torch.zeros(s, nb, 2, dtype=torch.int32)
            w = _t(s, h)
            if paged:
                q = (vals(s, 1, h, cols), torch.zeros(s, 1, h, dtype=torch.int32))
                cache = _t(pages, 2 * blk, 1, cols + 4, dtype=u8)
                return (q, cache, w, meta, nb, blk), {}
            q = (vals(s, h, cols), torch.zeros(s, h, dtype=torch.int32))
            kv = (vals(n, cols), torch.zeros(n, dtype=torch.int32))
            return (q, kv, w, meta, nb, blk), {}

        fn = dg.fp8_fp4_paged_sparse_mqa_logits if paged else dg.fp8_fp4_sparse_mqa_logits
        out.append(_case(f"sparse_{'paged' if paged else 'dense'}_{fmt}_{s}x{h}x{d}_n{n}", fn, make))
    return out


def _k_grouped_cases(rng):
    """K-grouped BF16 (weight gradients): empty groups, c apart or aliasing d, ks as a list or a tuple, sgl's ks."""
    out = []
    for with_c, alias, spelling in ((False, False, "ks_cpu"), (True, False, "ks"), (True, True, "tuple")):
        g, m, n = rng.randint(1, 4), 8 * rng.randint(1, 24), 8 * rng.randint(1, 24)
        ks = [rng.choice([0, 64, 128, 200]) for _ in range(g)]
        if sum(ks) == 0:
            ks[0] = 64

        def make(g=g, m=m, n=n, ks=ks, with_c=with_c, alias=alias, spelling=spelling):
            total = sum(ks)
            d = _t(g, m, n, dtype=torch.float32)
            kw = {}
            if with_c:
                kw["c"] = d if alias else _t(g, m, n, dtype=torch.float32)
            if spelling == "ks":
                kw["ks"] = list(ks)
                return (_t(total, m), _t(total, n), d), kw
            layout = torch.tensor(ks, dtype=torch.int32)
            per_group = tuple(ks) if spelling == "tuple" else list(ks)
            return (_t(total, m), _t(total, n), d, per_group, layout), kw

        label = f"k_grouped_{g}x{m}x{n}_{ks}_{spelling}" if spelling != "ks" else f"k_grouped-sgl_{g}x{m}x{n}_{ks}"
        out.append(_case(label, dg.k_grouped_bf16_gemm_tn_contiguous, make))  # (the sgl spelling: no positional ks)
    return out


def _gdr_cases(rng):
    """The gated delta rule forward: fixed length and varlen, GVA, initial / final state, l2norm, chunk sizes."""
    out = []
    for varlen, init, final, l2, chunk in ((False, False, False, False, None), (True, True, True, True, 32),
                                           (False, True, True, False, 64), (True, False, True, False, 16)):  # fmt: skip
        b, t, h = (1 if varlen else rng.randint(1, 3)), rng.choice([1, 40, 200]), rng.choice([1, 2, 4])
        hv = h * rng.choice([1, 2])
        n = 3 if varlen else b
        dt = rng.choice([torch.bfloat16, torch.float16])

        def make(b=b, t=t, h=h, hv=hv, n=n, dt=dt, varlen=varlen, init=init, final=final, l2=l2, chunk=chunk):
            kw = {"output_final_state": final, "use_qk_l2norm_in_kernel": l2, "chunk_size": chunk}
            if init:
                kw["initial_state"] = _t(n, hv, 128, 128, dtype=torch.float32)
            if varlen:
                kw["cu_seqlens"] = torch.tensor([0, t // 3, t // 2, t], dtype=torch.int32)
            args = (_t(b, t, h, 128, dtype=dt), _t(b, t, h, 128, dtype=dt), _t(b, t, hv, 128, dtype=dt),
                    _t(b, t, hv, dtype=torch.float32), _t(b, t, hv, dtype=dt))  # fmt: skip
            return args, kw

        out.append(_case(f"gdr_{b}x{t}x{h}x{hv}_varlen{varlen}_c{chunk}", dg.chunk_gated_delta_rule, make))
    return out


def _tf32_cases(rng):
    out = []
    for m, n, k, splits in ((rng.randint(1, 300), 24, 64 * rng.randint(1, 8), None), (256, 32, 1024, 3),
                            (64, 24, 8192, None), (40, 32, 4096, 1)):  # fmt: skip

        def make(m=m, n=n, k=k, splits=splits):
            lead = () if splits is None else (splits,)
            d, s = _t(*lead, m, n, dtype=torch.float32), _t(*lead, m, dtype=torch.float32)
            return (_t(m, k), _t(n, k, dtype=torch.float32), d, s, splits), {}

        out.append(_case(f"tf32_{m}x{n}x{k}_s{splits}", dg.tf32_hc_prenorm_gemm, make))
    return out


def _all_cases(seed):
    rng = random.Random(seed)
    return (
        _bf16_dense_cases(rng)
        + _bf16_grouped_cases(rng)
        + _fp8_cases(rng)
        + _einsum_cases(rng)
        + _fp8_einsum_cases(rng)
        + _tf32_cases(rng)
        + _sparse_cases(rng)
        + _gdr_cases(rng)
        + _k_grouped_cases(rng)
    )


# ---------------------------------------------------------------- legal calls: warm == cold


def _warm_equals_cold(rig, fn, build):
    launch.forget_calls()
    args1, kw1, names1 = build()
    cold, preps = rig.record(fn, args1, kw1, names1)
    assert cold[0] == "ok", cold
    assert preps == 1
    entries = rig.entries()
    assert entries >= 1
    args2, kw2, names2 = build()
    warm, preps = rig.record(fn, args2, kw2, names2)
    assert preps == 0, "the second call of a signature must be served by the cache"
    assert rig.entries() == entries
    launch.forget_calls()
    again, preps = rig.record(fn, args2, kw2, names2)
    assert preps == 1
    assert warm == cold == again
    return cold[1]


@pytest.mark.parametrize("seed", [0, 1])
def test_warm_calls_launch_what_cold_calls_launch(rig, seed):
    seen = set()
    for label, fn, build in _all_cases(seed):
        launches = _warm_equals_cold(rig, fn, build)
        assert launches, label
        seen.add(fn.__name__)
    assert len(seen) == 16


def test_the_cases_reach_split_k_and_internal_splits(rig):
    """The shapes meant to split do: a reduce launch follows the sliced GEMM."""
    hits = set()
    for label, fn, build in _all_cases(0):
        if any(s in label for s in ("split", "x8192_", "x4096_acc")):
            launches = _warm_equals_cold(rig, fn, build)
            assert any(ln.kernel.startswith("split_k_reduce") for ln in launches), label
            hits.add(label)
    assert len(hits) >= 5


# ---------------------------------------------------------------- variants: warm and cold alike


_OTHER_DTYPE = {
    torch.bfloat16: torch.float16,
    torch.float32: torch.bfloat16,
    torch.float8_e4m3fn: torch.bfloat16,
    torch.int32: torch.int64,
}


def _set(args, kwargs, path, value):
    """A copy of (args, kwargs) with the object at `path` (a _names key) replaced."""
    head, *rest = path.split(".")
    args, kwargs = list(args), dict(kwargs)

    def put(obj, idx, value):
        if not idx:
            return value
        i = int(idx[0])
        seq = list(obj)
        seq[i] = put(seq[i], idx[1:], value)
        return tuple(seq) if isinstance(obj, tuple) else seq

    if head.startswith("arg"):
        i = int(head[3:])
        args[i] = put(args[i], rest, value)
    else:
        kwargs[head] = put(kwargs[head], rest, value)
    return tuple(args), kwargs


def _valued(t: torch.Tensor) -> torch.Tensor:
    """Floating tensors hold ones (unpacked scales must be powers of two: their values are checked per call,
    which is not what the variants are about), index tensors zeros (a valid layout / masked_m)."""
    return t.fill_(1) if t.dtype.is_floating_point and t.dtype.itemsize > 1 else t


def _tensor_variants(t: torch.Tensor) -> list:
    def z(*shape, dtype=t.dtype):
        return _valued(torch.zeros(*shape, dtype=dtype))

    out = [("dtype", _valued(_like(t, dtype=_OTHER_DTYPE.get(t.dtype, torch.float32))))]
    out.append(("shape", z(*t.shape[:-1], t.shape[-1] + 1)))
    if t.dim() >= 2:
        out.append(("rows", z(*t.shape[:-2], t.shape[-2] + 1, t.shape[-1])))
        if t.shape[-1] > 1:
            out.append(("stride", z(*t.shape[:-1], 2 * t.shape[-1])[..., ::2]))
        if t.shape[-2] > 1:
            out.append(("mn-major", z(*t.shape[:-2], t.shape[-1], t.shape[-2]).transpose(-1, -2)))
    out.append(("dim", t.reshape(1, *t.shape) if t.is_contiguous() else t.unsqueeze(0)))
    out.append(("misaligned", _valued(_like(t, offset=1))))
    out.append(("not-a-tensor", t.tolist() if t.numel() < 64 else 3.0))
    return out


_PY_VARIANTS = {
    "bf16_masked": [(4, 16.0), (4, True), (4, "16"), (4, -1), (4, None), (4, 2**70)],
    "fp8_masked": [(4, 16.0), (4, True), (4, None), ("recipe", [1, 128, 128]), ("recipe", (1, 128)),
                   ("recipe", (1, 128, 64)), ("recipe", "abc"), ("alpha", "x"), ("alpha", torch.tensor(1.0)),
                   ("alpha", 1 + 2j)],
    "fp8_contig": [("use_psum_layout", 1), ("recipe", [1, 128, 128]), ("recipe", (1, 1, 32)), ("alpha", "x"),
                   ("check_layout", False), ("ensure_zero_padding", 0), ("expected_m_for_psum_layout", 7)],
    "fp8_dense": [("recipe", [1, 128, 128]), ("recipe", (1, 128, 32)), ("recipe", 128), ("alpha", "x"),
                  ("alpha", True), ("recipe", (1.0, 128.0, 128.0))],
    "bf16_contig": [("use_psum_layout", 1), ("check_layout", False), ("ensure_zero_padding", "yes")],
    "tf32": [(4, 2.0), (4, True), (4, "2"), (4, 0), (4, 1)],
    "einsum": [(0, "bmk,bnk->nm"), (0, 3), (0, "bhr,hdr->bhd"), (0, "bhd,hdr->bhr"), ("c", None)],
    "fp8_einsum": [(0, "bhr,hdr->bhr"), (0, 3), (0, "bhr, hdr -> bhd"), ("recipe", [1, 128, 128]),
                   ("recipe", (1, 1, 128)), ("recipe", "abc"), ("epilogue", "x"), ("use_128x4_sfd_layout", True),
                   ("use_128x4_sfd_layout", 0), (1, "pair"), (2, ())],
    "bf16": [("alpha", 2), ("compiled_dims", 3), ("epilogue", "x")],
    "sparse_dense": [(4, 2.0), (4, True), (4, 0), (4, "3"), (5, 32.0), (5, 24), (5, True), ("use_unaligned_ks", 1)],
    "k_grouped": [(3, [64]), (3, "64"), (3, None), (3, [-1]), (3, [2**31]), (3, [64.0]), ("use_psum_layout", True),
                  ("compiled_dims", 3), ("epilogue", "x"), ("ks", [64])],
    "gdr": [("scale", 0.5), ("scale", 1), ("scale", True), ("scale", "x"), ("output_final_state", 1),
            ("use_qk_l2norm_in_kernel", 0), ("chunk_size", 32.0), ("chunk_size", 48), ("chunk_size", True)],
    "sparse_paged": [(4, 2.0), (4, True), (4, 0), (5, 16.0), (5, 24), (5, 128)],
}  # fmt: skip


def _py_variants(label):
    for prefix, variants in _PY_VARIANTS.items():
        if label.startswith(prefix + "_") or label == prefix:
            return variants
    return []


def _outcomes_alike(rig, fn, legal_build, args, kwargs, names, what):
    """The call (args, kwargs) with a cold cache and with a cache warm with its legal signature."""
    launch.forget_calls()
    cold, _ = rig.record(fn, args, kwargs, names)
    cold_entries = rig.entries()
    launch.forget_calls()
    la, lk, ln = legal_build()
    ok, _ = rig.record(fn, la, lk, ln)
    assert ok[0] == "ok", ok
    warm_entries = rig.entries()
    warm, _ = rig.record(fn, args, kwargs, names)
    assert warm == cold, what
    if cold[0] == "raise":
        assert cold_entries == 0, f"{what}: a failing call was cached"
        assert rig.entries() == warm_entries, f"{what}: a failing call was cached"
        if cold[1] is not IndexError or "recipe=(1, 128)" not in what:  # see test_packed_fp4_short_recipe_...
            assert cold[1] in (TypeError, ValueError, NotImplementedError), (what, cold)
    return cold


@pytest.mark.parametrize("seed", [0])
def test_variants_behave_alike_warm_and_cold(rig, seed):
    raised = 0
    for label, fn, build in _all_cases(seed):
        args, kwargs, names = build()
        for path, t in names.items():
            for kind, v in _tensor_variants(t):
                a2, k2 = _set(args, kwargs, path, v)
                n2 = _names(a2, k2)
                out = _outcomes_alike(rig, fn, build, a2, k2, n2, f"{label}: {path} {kind}")
                raised += out[0] == "raise"
        for where, value in _py_variants(label):
            if isinstance(where, int):
                a2, k2 = _set(args, kwargs, f"arg{where}", value)
            else:
                a2, k2 = args, {**kwargs, where: value}
                if value is None:
                    k2.pop(where)
            out = _outcomes_alike(rig, fn, build, a2, k2, _names(a2, k2), f"{label}: {where}={value!r}")
            raised += out[0] == "raise"
    assert raised > 100


def test_bad_layout_values_raise_alike_warm_and_cold(rig):
    """Index values are checked per call (not part of a signature): a bad layout raises the same ValueError
    whether the signature is cached or not."""
    for fn, make in (
        (dg.m_grouped_bf16_gemm_nt_contiguous, lambda lay: ((_t(256, 64), _t(2, 64, 64), _t(256, 64), lay), {})),
        (
            dg.m_grouped_fp8_gemm_nt_contiguous,
            lambda lay: (
                ((_fp8(256, 128), _packed(256, 128, _R, is_sfa=True)), (_fp8(2, 128, 128), _packed(128, 128, _R, 2)),
                 _t(256, 128), lay),
                {"recipe": _R},
            ),
        ),
    ):  # fmt: skip
        good, bad = torch.zeros(256, dtype=torch.int32), torch.zeros(256, dtype=torch.int32)
        bad[0] = 9
        a, k = make(bad)
        launch.forget_calls()
        cold, _ = rig.record(fn, a, k, _names(a, k))
        ga, gk = make(good)
        assert rig.record(fn, ga, gk, _names(ga, gk))[0][0] == "ok"
        warm, preps = rig.record(fn, a, k, _names(a, k))
        assert preps == 0 and warm == cold and cold[0] == "raise" and cold[1] is ValueError
        assert "grouped_layout" in cold[2]


def test_set_num_sms_and_the_target_reach_cached_calls(rig, monkeypatch):
    """What no key holds: num_sms (set_num_sms forgets the calls) and the device's target (re-read per call)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    for label, fn, build in _all_cases(0):
        args, kwargs, names = build()
        dg.set_num_sms(SMS)
        first, _ = rig.record(fn, args, kwargs, names)
        dg.set_num_sms(7)
        small, preps = rig.record(fn, args, kwargs, names)
        assert preps == 1, label
        launch.forget_calls()
        assert rig.record(fn, args, kwargs, names)[0] == small, label
        arch.reset_targets()
        monkeypatch.setattr(arch, "device_capability", lambda i: (9, 0))
        refused, _ = rig.record(fn, args, kwargs, names)
        assert refused[0] == "raise" and refused[1] is NotImplementedError, (label, refused)
        monkeypatch.setattr(arch, "device_capability", lambda i: (12, 0))
        arch.reset_targets()
        device._num_sms = None
        launch.forget_calls()


# ---------------------------------------------------------------- regressions


def _fp8_recipe_calls():
    m, n, k, g = 128, 256, 256, 2

    def dense(recipe):
        return dg.fp8_gemm_nt, ((_fp8(m, k), _packed(m, k, _R, is_sfa=True)), (_fp8(n, k), _packed(n, k, _R)),
                                _t(m, n)), {"recipe": recipe}  # fmt: skip

    def masked(recipe):
        return dg.m_grouped_fp8_gemm_nt_masked, (
            (_fp8(g, m, k), _packed(m, k, _R, g, is_sfa=True)), (_fp8(g, n, k), _packed(n, k, _R, g)), _t(g, m, n),
            torch.zeros(g, dtype=torch.int32), 64), {"recipe": recipe}  # fmt: skip

    def contig(recipe):
        return dg.m_grouped_fp8_gemm_nt_contiguous, (
            (_fp8(m, k), _packed(m, k, _R, is_sfa=True)), (_fp8(g, n, k), _packed(n, k, _R, g)), _t(m, n),
            torch.zeros(m, dtype=torch.int32)), {"recipe": recipe}  # fmt: skip

    return {"dense": dense, "masked": masked, "contiguous": contig}


@pytest.mark.parametrize("entry", ["dense", "masked", "contiguous"])
@pytest.mark.parametrize("container", ["deque", "ndarray", "iterator"])
def test_recipe_container_warm_and_cold(rig, entry, container):
    # Regression: the key once held tuple(recipe), equal (and hashing alike) for any sequence of those ints, while
    # the checks take only a tuple or list: a deque / array / iterator recipe raised ValueError cold and launched
    # warm. launch.recipe_key keys only tuples and lists of ints; anything else is checked every call.
    make = _fp8_recipe_calls()[entry]
    np = pytest.importorskip("numpy") if container == "ndarray" else None
    wrap = {"deque": deque, "ndarray": np and np.array, "iterator": iter}[container]
    launch.forget_calls()
    fn, args, kwargs = make(wrap([1, 128, 128]))
    cold, _ = rig.record(fn, args, kwargs, _names(args, kwargs))
    fn, args, kwargs = make(_R)
    assert rig.record(fn, args, kwargs, _names(args, kwargs))[0][0] == "ok"
    fn, args, kwargs = make(wrap([1, 128, 128]))
    warm, _ = rig.record(fn, args, kwargs, _names(args, kwargs))
    assert warm[0] == cold[0], f"cold: {cold[:3] if cold[0] == 'raise' else 'launches'}; warm: {warm[0]}"


def _sparse(t: torch.Tensor, dtype) -> torch.Tensor:
    """A storage-less tensor (sparse COO) of t's shape: data_ptr() raises RuntimeError."""
    return torch.zeros(t.shape).to_sparse().to(dtype)


def _sparse_calls():
    g, m, n, k = 2, 128, 128, 256
    lay = torch.zeros(m, dtype=torch.int32)
    fp16 = torch.float16
    sfa_m, sfb_g = _packed(m, k, _R, g, is_sfa=True), _packed(n, k, _R, g)
    return {
        "m_grouped_bf16_gemm_nt_contiguous": (
            dg.m_grouped_bf16_gemm_nt_contiguous, (_sparse(_t(m, k), fp16), _t(g, n, k), _t(m, n), lay), {},
            "a must be torch.bfloat16, got torch.float16"),
        "m_grouped_fp8_gemm_nt_masked": (
            dg.m_grouped_fp8_gemm_nt_masked,
            ((_fp8(g, m, k), _sparse(sfa_m, fp16)), (_fp8(g, n, k), sfb_g), _t(g, m, n),
             torch.zeros(g, dtype=torch.int32), 64), {"recipe": _R}, "scale factors must be float32"),
        "m_grouped_fp8_gemm_nt_contiguous": (
            dg.m_grouped_fp8_gemm_nt_contiguous,
            ((_fp8(m, k), _sparse(_packed(m, k, _R, is_sfa=True), fp16)), (_fp8(g, n, k), sfb_g), _t(m, n), lay),
            {"recipe": _R}, "scale factors must be float32"),
        "einsum": (dg.einsum, ("bmk,bnk->mn", _sparse(_t(g, m, k), fp16), _t(g, n, k), _t(m, n)), {},
                   "a must be torch.bfloat16, got torch.float16"),
        "tf32_hc_prenorm_gemm": (
            dg.tf32_hc_prenorm_gemm,
            (_sparse(_t(m, k), fp16), _t(16, k, dtype=torch.float32), _t(m, 16, dtype=torch.float32),
             _t(m, dtype=torch.float32)), {}, "a must be torch.bfloat16, got torch.float16"),
        # the same hole in the entry points cached before this change (issue 39 and earlier):
        "m_grouped_bf16_gemm_nt_masked (pre-existing)": (
            dg.m_grouped_bf16_gemm_nt_masked,
            (_sparse(_t(g, m, k), fp16), _t(g, n, k), _t(g, m, n), torch.zeros(g, dtype=torch.int32), 64), {},
            "a must be torch.bfloat16, got torch.float16"),
        "fp8_gemm_nt (pre-existing)": (
            dg.fp8_gemm_nt, ((_fp8(m, k), _sparse(_packed(m, k, _R, is_sfa=True), fp16)),
                             (_fp8(n, k), _packed(n, k, _R)), _t(m, n)), {"recipe": _R},
            "scale factors must be float32"),
    }  # fmt: skip


@pytest.mark.parametrize("entry", list(_sparse_calls()))
def test_a_storage_less_tensor_gets_the_checks_typed_error(rig, entry):
    # Regression: tensor_key's data_ptr() raises RuntimeError for a tensor without storage (sparse, FakeTensor);
    # callers caught only AttributeError / TypeError, so the RuntimeError escaped before the checks' typed error.
    # They now catch launch.KEY_ERRORS and run the checks uncached.
    fn, args, kwargs, message = _sparse_calls()[entry]
    outcome, _ = rig.record(fn, args, kwargs, {})
    assert outcome[:2] == ("raise", TypeError) and message in outcome[2], outcome


@pytest.mark.parametrize("sfb_ok", [False, True])
def test_fp8_masked_expected_m_none_gets_a_named_error(rig, sfb_ok):
    # Regression: expected_m=None passed the rule (None = not given there) and max(expected_m, 1) then raised a
    # bare comparison TypeError before the scale checks. keywords.expected_m names it (FP8 and BF16 masked).
    g, m, n, k = 2, 64, 128, 256
    sfb = _packed(n, k, _R, g) if sfb_ok else _packed(n, 2 * k, _R, g)
    args = ((_fp8(g, m, k), _packed(m, k, _R, g, is_sfa=True)), (_fp8(g, n, k), sfb), _t(g, m, n),
            torch.zeros(g, dtype=torch.int32), None)  # fmt: skip
    outcome, _ = rig.record(dg.m_grouped_fp8_gemm_nt_masked, args, {"recipe": _R}, {})
    assert outcome[0] == "raise" and outcome[1] in (TypeError, ValueError), outcome
    assert "expected_m" in outcome[2] or "sfb" in outcome[2], outcome


def test_dense_fp8_unhashable_recipe_entry_is_checked_not_hashed(rig):
    # Regression: the dense call's cache lookup sat outside the try that builds the key, so an unhashable recipe
    # entry raised "unhashable type" where the checks (and the grouped calls) accept the recipe.
    make = _fp8_recipe_calls()
    fn, args, kwargs = make["dense"](([1], 128, 128))
    dense, _ = rig.record(fn, args, kwargs, _names(args, kwargs))
    fn, args, kwargs = make["masked"](([1], 128, 128))
    masked, _ = rig.record(fn, args, kwargs, _names(args, kwargs))
    assert masked[0] == "ok"
    assert dense[0] == "ok", dense


def test_packed_fp4_short_recipe_gets_a_value_error(rig):
    # Regression: with packed FP4 scales _kind read recipe[2] before the recipe's length was checked (IndexError
    # for (1, 128)); _check_recipe now runs first, so it is the ValueError FP8 operands get.
    g, m, n, k = 1, 128, 128, 128
    rec = (1, 1, 32)
    a = (_t(g, m, k // 2, dtype=torch.uint8), _packed(m, k, rec, g, is_sfa=True))
    b = (_t(g, n, k // 2, dtype=torch.uint8), _packed(n, k, rec, g))
    args = (a, b, _t(g, m, n), torch.zeros(g, dtype=torch.int32), 48)
    outcome, _ = rig.record(dg.m_grouped_fp8_fp4_gemm_nt_masked, args, {"recipe": (1, 128)}, {})
    assert outcome[:2] == ("raise", ValueError), outcome


def test_an_object_that_looks_like_a_cached_tensor_is_checked(rig):
    # Regression: a key held (dtype, shape, strides, device, alignment) and nothing of the class, so an object
    # with those attributes (a shape tuple equals a torch.Size) matched the entry a real tensor made and was
    # launched on its data_ptr(). tensor_key now holds type(t): the look-alike takes the checked path's TypeError.
    a, b, d = _t(64, 128), _t(128, 128), _t(64, 128)
    ok, _ = rig.record(dg.bf16_gemm_nt, (a, b, d), {}, {"a": a, "b": b, "d": d})
    assert ok[0] == "ok"

    class LooksLikeA:
        dtype, shape, device = a.dtype, tuple(a.shape), a.device

        def stride(self):
            return a.stride()

        def data_ptr(self):
            return a.data_ptr()

    before = rig.entries()
    outcome, prepares = rig.record(dg.bf16_gemm_nt, (LooksLikeA(), b, d), {}, {})
    assert outcome[:2] == ("raise", TypeError) and "a must be a torch.Tensor" in outcome[2], outcome
    assert prepares == 1 and rig.entries() == before
