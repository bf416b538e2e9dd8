#!/usr/bin/env bash
# One-call qualification on the lent H200 (run by the `device` tool from the repo root; logs under $OUT).
# Builds the runtime, runs the GPU tests (emulation), compute-sanitizer memcheck + racecheck on a
# representative subset, and the benchmark. Prints a short summary last.
set -uo pipefail
OUT=${OUT:-/tmp/qual_out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 DG_SM120_JIT_CACHE_DIR=/tmp/dg_cache
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv; nvcc --version | tail -2; git rev-parse HEAD 2>/dev/null; } > "$OUT/env.txt" 2>&1
python3 setup.py build_ext --inplace > "$OUT/build.log" 2>&1 || { echo "BUILD FAILED"; tail -30 "$OUT/build.log"; exit 1; }
python3 -m pytest -q -p no:cacheprovider -m "cuda" tests/ "$@" > "$OUT/pytest_gpu.log" 2>&1; rc_t=$?
compute-sanitizer --tool memcheck --error-exitcode 9 python3 tests/sanitize_bf16_gemm.py > "$OUT/memcheck.log" 2>&1; rc_m=$?
compute-sanitizer --tool racecheck --racecheck-report all --error-exitcode 9 python3 tests/sanitize_bf16_gemm.py > "$OUT/racecheck.log" 2>&1; rc_r=$?
python3 benchmarks/bench_bf16_gemm.py ${BENCH_ARGS:-} --json "$OUT/bench.json" > "$OUT/bench.log" 2>&1; rc_b=$?
echo "==== summary"; cat "$OUT/env.txt"
echo "pytest rc=$rc_t: $(tail -1 "$OUT/pytest_gpu.log")"
echo "memcheck rc=$rc_m: $(grep -E 'ERROR SUMMARY' "$OUT/memcheck.log" | tail -1)"
echo "racecheck rc=$rc_r: $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$OUT/racecheck.log" | tail -1)"
grep -E "FAIL|Error|error" "$OUT/pytest_gpu.log" | head -20
echo "bench rc=$rc_b"; cat "$OUT/bench.log" | tail -40
