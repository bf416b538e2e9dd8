#!/usr/bin/env bash
# Build a CUDA toolchain from PyPI wheels in its own venv (no system toolkit needed) and print its nvcc.
#   tools/toolchain_venv.sh 13.5.37 /tmp/cuda-13.5   ->  /tmp/cuda-13.5/.../nvidia/cu13/bin/nvcc
# Every component is pinned: the nvcc wheel's own requirements would otherwise pull the newest nvvm/crt.
set -euo pipefail
version=${1:?usage: toolchain_venv.sh VERSION DIR}
dir=${2:?usage: toolchain_venv.sh VERSION DIR}
case "$version" in
  13.0.88) runtime=13.0.88; cccl=13.0.85 ;;
  13.2.86) runtime=13.2.86; cccl=13.2.86 ;;
  13.3.33) runtime=13.3.29; cccl=13.3.3.3.1 ;;
  13.3.73) runtime=13.3.29; cccl=13.3.3.4.1 ;;
  13.5.37) runtime=13.5.37; cccl=13.3.5.0.6 ;;
  *) echo "toolchain_venv.sh: no pinned component set for CUDA $version" >&2; exit 3 ;;
esac
python3 -m venv "$dir" >&2
"$dir/bin/python" -m pip install -q "nvidia-cuda-nvcc==$version" "nvidia-nvvm==$version" \
  "nvidia-cuda-crt==$version" "nvidia-cuda-runtime==$runtime" "nvidia-cuda-cccl==$cccl" >&2
ls "$dir"/lib/python3*/site-packages/nvidia/cu13/bin/nvcc
