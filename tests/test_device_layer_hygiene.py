"""No dead code in the device layer: every wrapper is used by a kernel, or reserved for a family an open issue
names (and then removed from the reservation list when that family lands)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEVICE = ROOT / "device_layer"

# wrapper -> the open issue and family that will use it (none now: issue 39 dropped the TMA-store / stmatrix
# wrappers reserved for issue 13's epilogue, which kept the register epilogue)
RESERVED: dict[str, str] = {}
_DEF = re.compile(r"SM120_(?:HOST_)?DEVICE\s+(?:constexpr\s+)?[\w:<>,\s*&]*?\b(\w+)\s*\(")


def _sources() -> dict[Path, str]:
    files = {p: p.read_text() for p in DEVICE.rglob("*.cuh")}
    files.update(
        {
            p: p.read_text()
            for p in (ROOT / "tests").glob("*.py")  # probe kernels built in tests
            if p.name != Path(__file__).name
        }
    )
    return files


def test_every_device_wrapper_is_used_or_reserved_for_a_named_family():
    files = _sources()
    defined = {m.group(1) for p, text in files.items() if p.suffix == ".cuh" for m in _DEF.finditer(text)}
    assert len(defined) > 30
    unused = set()
    for name in defined:
        uses = sum(len(re.findall(rf"\b{name}\b", text)) for text in files.values())
        if uses <= 1:  # the definition alone
            unused.add(name)
    assert unused - set(RESERVED) == set(), f"dead device wrappers: {sorted(unused - set(RESERVED))}"
    assert set(RESERVED) - unused == set(), f"now used, drop from RESERVED: {sorted(set(RESERVED) - unused)}"


def test_every_pytest_marker_has_tests():
    import tomllib

    markers = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["markers"]
    names = [m.split(":")[0] for m in markers]
    text = "\n".join(p.read_text() for p in (ROOT / "tests").glob("test_*.py"))
    for name in names:
        assert f"pytest.mark.{name}" in text, f"marker {name} has no tests"


def _outside_common() -> dict[Path, str]:
    return {p: p.read_text() for p in DEVICE.rglob("*.cuh") if p.parent.name not in ("common", "mma")}


def test_kernels_walk_and_release_stages_only_through_the_stage_ring():
    """The stage/phase arithmetic and the release sequence (proxy fence, __syncwarp, one arrival) live once, in
    common/sm120_pipeline.cuh; every kernel with a TMA ring uses StageRing / PipelineState."""
    forbidden = {
        r"phase\s*\^=\s*1": "stage/phase advance",
        r"\bfence_proxy_async_smem\s*\(": "proxy fence",
        r"\bmbarrier_arrive\s*\(": "barrier arrival",
        r"\bmbarrier_arrive_expect_tx\s*\(\s*&": "arming a stage",
    }
    rings = 0
    for path, text in _outside_common().items():
        for pattern, what in forbidden.items():
            assert not re.search(pattern, text), f"{path.relative_to(DEVICE)} writes a {what} itself"
        if "__global__" in text and ("tma_load_" in text or "mbarrier_" in text):
            rings += 1
            direct = "StageRing<" in text and "PipelineState<" in text
            assert direct or "GemmMainloop<" in text, f"{path.relative_to(DEVICE)}: ring by hand"
    assert rings >= 7  # bf16, block-scaled, tf32 hc, gdr fwd, dense / paged / sparse MQA logits


def test_the_gemm_main_loop_is_written_once():
    """The BF16 and block-scaled GEMMs compose tile/sm120_gemm_mainloop.cuh: neither walks the ring itself, and the
    look-ahead release the GEMM loop needs lives in the collective only."""
    mainloop = "tile/sm120_gemm_mainloop.cuh"
    for name in ("impls/sm120_bf16_gemm.cuh", "impls/sm120_fp8_fp4_gemm_1d1d.cuh"):
        text = (DEVICE / name).read_text()
        assert f'#include "../{mainloop}"' in text and "GemmMainloop<" in text, name
        assert not re.search(r"\bring\.|StageRing<|release_ahead", text), f"{name} walks the stage ring itself"
    users = {str(p.relative_to(DEVICE)) for p, text in _outside_common().items() if "release_ahead(" in text}
    assert users == {mainloop}


def test_impls_holds_kernels_only_and_every_folder_is_documented():
    for path in (DEVICE / "impls").glob("*.cuh"):
        assert "__global__" in path.read_text(), f"impls/{path.name} has no kernel: building blocks go elsewhere"
    folders = sorted(p.name for p in DEVICE.iterdir() if p.is_dir() and p.name != "__pycache__")
    doc = (ROOT / "docs" / "device_layer.md").read_text()
    import sys

    sys.path.insert(0, str(ROOT / "tools"))
    from vendorkit import lineage

    for name in folders:
        assert f"| `{name}/` |" in doc, f"docs/device_layer.md does not describe {name}/"
        assert name in lineage._LAYER_DIRS, f"tools/vendorkit/lineage.py does not know the layer folder {name}/"
