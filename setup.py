"""deep_gemm_sm120: SM120 GEMM kernels (device_layer/) with a DeepGEMM-style PyTorch host."""
from setuptools import find_packages, setup

TEST = [
    "pytest>=7",
    "pyyaml>=6",
    "requests>=2.28",
    "numpy>=1.24",
]

setup(
    name="deep_gemm_sm120",
    version="0.1.0.dev0",
    description="SM120 (consumer Blackwell) GEMM kernels and a DeepGEMM-style JIT host",
    package_dir={"": "host"},
    packages=find_packages("host"),
    python_requires=">=3.10",
    install_requires=["pyyaml>=6"],
    extras_require={
        "torch": ["torch>=2.4,<3"],
        "test": TEST,
        "remote": ["requests>=2.28"],
    },
    zip_safe=False,
)
