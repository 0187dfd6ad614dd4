#!/usr/bin/env bash
# cuda-tree's checks and measurements on one GPU, in one call of under ten minutes: the tree's GPU
# tests and its parity cases, compute-sanitizer memcheck and racecheck on its tests, then
# `shiftstack bench` of cuda-tree and cuda-tree-bf16 beside cuda-fast and cuda-tc on dense (one
# run: the ratios the issue asks for), and beside cuda-fast on nights, kbmod and deep.
# Binaries are built elsewhere and carried (BIN, with LIBS for the shared libraries the GPU
# machine lacks). Logs and JSON land in $OUT; a summary is printed last. Set SHIFTSTACK_COMMIT to
# the revision the binaries were built from: the records carry it.
set -u
out=${OUT:-h200-tree-out}
bin=${BIN:-build/bin}
mkdir -p "$out"
export LD_LIBRARY_PATH=${LIBS:+$(realpath "$LIBS"):}${LD_LIBRARY_PATH:-}
end=$(( $(date +%s) + ${DEADLINE:-560} ))  # the steps end within DEADLINE seconds
source "$(dirname "$0")/gpu_steps.sh"

machine memory.total
step "cuda-tree tests and parity"
gpu_suite tree_tests 150 --gtest_filter='CudaTree*:*cuda_tree*'
sanitize 'CudaTreeSanitizer.*' 120 memcheck racecheck
bench() {  # workload, seconds, engines...
  local workload=$1 limit=$2
  shift 2
  step "bench $workload: $*"
  timeout "$(within "$limit")" "$bin/shiftstack" bench --workload "$workload" --engine "$@" --encoding fp32 \
    --runs 5 --baseline cuda-fast --json "$out/bench_$workload.json" > "$out/bench_$workload.txt" 2>&1
  echo "exit $?" >> "$out/bench_$workload.txt"
  grep -vE "^\s*$" "$out/bench_$workload.txt" | tail -12 | tee -a "$out/summary.txt"
}
bench dense 120 cuda-tree cuda-tree-bf16 cuda-fast cuda-tc
bench nights 60 cuda-tree cuda-tree-bf16 cuda-fast
bench kbmod 60 cuda-tree cuda-tree-bf16 cuda-fast
bench deep 150 cuda-tree cuda-tree-bf16 cuda-fast
step "done"
