#!/usr/bin/env bash
# One-call qualification on the lent H200 (run by the `device` tool from the repo root; logs under $OUT).
# Builds the runtime, warms the JIT cache in parallel, runs the GPU tests (emulation), compute-sanitizer
# memcheck + racecheck on the sanitizer drivers, and the benchmarks. Prints a short summary last.
#   SANITIZE="bf16_gemm fp8_fp4_gemm"  BENCHES="bf16_gemm fp8_fp4_gemm"  BENCH_ARGS="--quick"  SKIP_TESTS=1
#   (SANITIZE / BENCHES default to everything the families declare; set to "" they run none)
set -uo pipefail
OUT=${OUT:-/tmp/qual_out}; mkdir -p "$OUT"
# the device tool returns at most 8 files: logs go to one folder, packed into $OUT/qual_logs.tar.gz at the end
FINAL_OUT=$OUT; OUT=$(mktemp -d); trap 'tar -czf "$FINAL_OUT/qual_logs.tar.gz" -C "$OUT" .' EXIT
export PYTHONUNBUFFERED=1 DG_SM120_JIT_CACHE_DIR=${DG_SM120_JIT_CACHE_DIR:-/tmp/dg_cache}
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv; nvcc --version | tail -2; git rev-parse HEAD 2>/dev/null; } > "$OUT/env.txt" 2>&1
python3 setup.py build_ext --inplace > "$OUT/build.log" 2>&1 || { echo "BUILD FAILED"; tail -30 "$OUT/build.log"; exit 1; }
# every shipped kernel for the qualification target, one nvcc per core (the tests then only load)
( cd host && python3 -c "import deep_gemm_sm120 as dg, time; t=time.time(); n=dg.precompile(targets=['sm_90a'], progress=False); print(f'precompiled {n} kernels in {time.time()-t:.0f} s')" ) > "$OUT/precompile.log" 2>&1
rc_t=0
if [ -z "${SKIP_TESTS:-}" ]; then
  python3 -m pytest -q -p no:cacheprovider -m "cuda" tests/ "$@" > "$OUT/pytest_gpu.log" 2>&1; rc_t=$?
fi
rc_m=0; rc_r=0
# defaults: every driver and benchmark the family declarations name (tools/family_plan.py)
for s in ${SANITIZE-$(python3 tools/family_plan.py sanitizers)}; do  # tests/sanitize_<name>.py; SANITIZE="" runs none
  compute-sanitizer --tool memcheck --error-exitcode 9 python3 "tests/sanitize_$s.py" > "$OUT/memcheck_$s.log" 2>&1 || rc_m=$?
  compute-sanitizer --tool racecheck --racecheck-report all --error-exitcode 9 python3 "tests/sanitize_$s.py" > "$OUT/racecheck_$s.log" 2>&1 || rc_r=$?
done
rc_b=0
for bench in ${BENCHES-$(python3 tools/family_plan.py benchmarks)}; do  # BENCHES="" runs none
  python3 "benchmarks/bench_$bench.py" ${BENCH_ARGS:-} --json "$OUT/bench_$bench.json" > "$OUT/bench_$bench.log" 2>&1 || rc_b=$?
done
echo "==== summary (logs: qual_logs.tar.gz)"; cat "$OUT/env.txt"; cat "$OUT/precompile.log"
[ -z "${SKIP_TESTS:-}" ] && echo "pytest rc=$rc_t: $(tail -1 "$OUT/pytest_gpu.log")"
for f in "$OUT"/memcheck_*.log "$OUT"/racecheck_*.log; do
  [ -f "$f" ] && echo "$(basename "$f"): $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$f" | tail -1) $(grep -c 'sanitize .* ok' "$f") ok, $(grep -c 'FAIL' "$f") FAIL"
done
echo "memcheck rc=$rc_m racecheck rc=$rc_r"
[ -z "${SKIP_TESTS:-}" ] && grep -E "^FAILED|^ERROR|Error:" "$OUT/pytest_gpu.log" | head -30
echo "bench rc=$rc_b"; for f in "$OUT"/bench_*.log; do [ -f "$f" ] && tail -30 "$f"; done
