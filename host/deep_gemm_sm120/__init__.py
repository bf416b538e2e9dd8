"""deep_gemm_sm120: DeepGEMM-style API for SM120 GEMM kernels, JIT-compiled from device_layer/.

Importing this package never initializes CUDA and works without a GPU, driver or toolkit.
"""
__version__ = "0.1.0.dev0"
