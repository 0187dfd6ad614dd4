#!/usr/bin/env bash
# The H200 measurements this project records, in two phases that each fit one 10-minute call.
# Binaries are built on the development machine and carried (BIN), with the shared libraries the
# GPU machine lacks (LIBS); or build there with -DSHIFTSTACK_DEPS_DIR=.deps and point BIN at it.
#   PHASE=1: GPU tests, then `shiftstack bench` for every GPU engine x encoding on ci, kbmod, dense
#   PHASE=2: sensitivity validation of the GPU engines, then the `deep` pipeline from FITS files
# Logs and JSON land in $OUT.
set -u
out=${OUT:-h200-out}
bin=${BIN:-build/bin}
mkdir -p "$out"
export LD_LIBRARY_PATH=${LIBS:+$(realpath "$LIBS"):}${LD_LIBRARY_PATH:-}
step() { echo "== $(date +%T) $*" | tee -a "$out/summary.txt"; }
gpu_engines=(cuda-serial cuda-tiled cuda-fast cuda-fourier cuda-gemm cuda-tc)

if [ "${PHASE:-1}" = 1 ]; then
  step "machine"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv | tee -a "$out/summary.txt"
  step "gpu tests"
  timeout 150 "$bin/shiftstack_gpu_tests" --gtest_brief=1 > "$out/gpu_tests.log" 2>&1
  echo "exit $?" | tee -a "$out/gpu_tests.log" "$out/summary.txt"
  tail -5 "$out/gpu_tests.log" | tee -a "$out/summary.txt"
  for workload in ci kbmod dense; do
    step "bench $workload"
    timeout 170 "$bin/shiftstack" bench --workload "$workload" --engine "${gpu_engines[@]}" \
      --encoding all --runs 5 --baseline cuda-serial --json "$out/bench_$workload.json" \
      > "$out/bench_$workload.txt" 2>&1
    echo "exit $?" >> "$out/bench_$workload.txt"
    tail -22 "$out/bench_$workload.txt" | tee -a "$out/summary.txt"
  done
else
  step "validation (GPU engines, ${PAIRS:-128} pairs)"
  BUILD=$(dirname "$bin") PAIRS=${PAIRS:-128} OUT="$out/validation" timeout 240 \
    bash bench/validation/run_gpu.sh > "$out/validation.log" 2>&1
  echo "exit $?" | tee -a "$out/validation.log" "$out/summary.txt"
  tail -30 "$out/validation.log" | tee -a "$out/summary.txt"
  (cd "$out" && tar czf validation.tgz validation && rm -rf validation)
  step "deep pipeline"
  timeout 280 bash bench/deep_pipeline.sh "$(dirname "$bin")" /tmp/deep 1 > "$out/deep.log" 2>&1
  echo "exit $?" | tee -a "$out/deep.log" "$out/summary.txt"
  tail -25 "$out/deep.log" | tee -a "$out/summary.txt"
fi
