#!/usr/bin/env bash
# Mutation checks: each mutant of the block-scaled kernel / emulation must make the tests fail.
set -u
export DG_SM120_JIT_CACHE_DIR=/tmp/dg_mut PYTHONUNBUFFERED=1
K=device_layer/impls/sm120_fp8_fp4_gemm_1d1d.cuh
E=device_layer/mma/sm120_emulation.cuh
run() {  # name, file, sed expr, test selection; MUTANTS="a b" runs only those
  if [ -n "${MUTANTS:-}" ] && [[ " $MUTANTS " != *" $1 "* ]]; then return; fi
  cp "$2" /tmp/orig.cuh; sed -i "$3" "$2"
  if cmp -s "$2" /tmp/orig.cuh; then echo "MUTANT $1: sed did not apply"; return; fi
  rm -rf /tmp/dg_mut
  timeout 200 python3 -m pytest -q -p no:cacheprovider -x -m cuda $4 > /tmp/m.log 2>&1; rc=$?
  echo "MUTANT $1: pytest rc=$rc ($(tail -1 /tmp/m.log))"
  cp /tmp/orig.cuh "$2"
}
run a_thread_id $K 's/const uint32_t i = 2 \* w + sfa_thread_id_of_lane(lane);/const uint32_t i = 2 * w + (1 - sfa_thread_id_of_lane(lane));/' "tests/test_fp8_fp4_gemm_gpu.py -k test_fp8_gemm_nt"
run b_thread_id $K 's/SB::byte_of_step(kk), j % 4>/SB::byte_of_step(kk), (j + 1) % 4>/' "tests/test_fp8_fp4_gemm_gpu.py -k test_fp8_gemm_nt"
run coarse_shift $K 's/return kCoarse ? 8 \* (kb % 4) : 0;/return kCoarse ? 8 * ((kb + 1) % 4) : 0;/' "tests/test_fp8_fp4_gemm_gpu.py -k test_fp8_gemm_nt"
run mx4_step_byte $K 's/(kKind == ScaleKind::kMxFp4 ? 2 \* (step % 2) : 0)/(kKind == ScaleKind::kMxFp4 ? 0 : 0)/' "tests/test_fp8_fp4_gemm_gpu.py -k test_fp4_gemm_nt"
run emu_sfa_lane device_layer/mma/sm120_scale_selectors.cuh 's/return 4 \* (r % 8) + 2 \* thread_id_a + r \/ 8;/return 4 * (r % 8) + 2 * thread_id_a + 1 - r \/ 8;/' "tests/test_block_scaled_atoms_gpu.py"
run nvfp4_chunk $E 's/const bool mine = q \/ 2 == p;/const bool mine = q % 2 == p;/' "tests/test_block_scaled_atoms_gpu.py"
run mixed_a_permutation $K '/h \* 8 + g8, kk \* 2 + q8 \/ 2)/s/ + 8 \* (q8 % 2))/)/' "tests/test_fp8_fp4_gemm_gpu.py -k test_mixed_fp8_fp4_gemm_nt"
run mixed_widening device_layer/mma/sm120_block_scaled.cuh 's/    return t << 2;/    return t << 3;/' "tests/test_fp8_fp4_gemm_gpu.py -k test_mixed_fp8_fp4_gemm_nt"
