#!/usr/bin/env bash
# Sensitivity validation of the GPU engines (issue 5, SPEC 7), one command on the GPU machine:
# every available GPU engine x {fp32, fp16, int8} on the `ci` workload, 512 paired null/injection
# cubes, against the CPU FP32 exact gather (`cpu` engine, fp32 storage) on the same cubes. One
# process runs them all: each pair's cubes, likelihood maps and encodings are made once (on the
# CPU, OpenMP) and shared by every engine. Engines that cannot compute an input (their
# unsupported_reason) are listed as skipped, not failed.
#
# Build first, from the repository root (dependencies staged on the Debian machine with
# scripts/stage-deps.sh .deps):
#   cmake -S . -B build-h200 -G Ninja -DSHIFTSTACK_DEPS_DIR=.deps && ninja -C build-h200 shiftstack_cli
# then:
#   bash bench/validation/run_gpu.sh
# Writes bench/validation/<engine>-<encoding>/{report.json,report.txt,*.svg} and refreshes
# bench/validation/summary.txt, summary_retention.svg, summary_null_variance.svg over every
# report there (CPU and GPU). Overrides through the environment:
#   BUILD=build-h200 PAIRS=512 BASELINE=cpu ENGINES=gpu ENCODINGS=fp32,fp16,int8 NULL_WINDOW=32
#   OUT=bench/validation CARD="NVIDIA H200"
# Expected time: the null bank is a 32x32-origin window per cube (x 289 velocities), so the
# all-trials candidate lists stay at ~0.3 M per search; the rest per pair is two kit cubes, two
# likelihood maps and ~30 encodings on the CPU plus ~12 small searches per engine x encoding.
# Not yet measured on the H200: watch the per-pair seconds in the log (printed for every pair).
set -euo pipefail

BUILD=${BUILD:-build-h200}
PAIRS=${PAIRS:-512}
BASELINE=${BASELINE:-cpu}
ENGINES=${ENGINES:-gpu}
ENCODINGS=${ENCODINGS:-fp32,fp16,int8}
NULL_WINDOW=${NULL_WINDOW:-32}
OUT=${OUT:-bench/validation}
BIN="$BUILD/bin/shiftstack"

if [ ! -x "$BIN" ]; then
  echo "run_gpu.sh: $BIN not found; build it first (see the top of this script)" >&2
  exit 1
fi
if [ -z "${CARD:-}" ]; then
  CARD=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1 || true)
  CARD=${CARD:-unknown GPU}
fi
COMMIT=$(git describe --always --dirty 2>/dev/null || echo unknown)
mkdir -p "$OUT"
LOG="$OUT/run_gpu.log"

"$BIN" validate --list-engines | tee "$LOG"
start=$(date +%s)
"$BIN" validate --engine "$ENGINES" --encoding "$ENCODINGS" --baseline "$BASELINE" --workload ci \
  --pairs "$PAIRS" --null-window "$NULL_WINDOW" --seed 1 --card "$CARD (baseline: $BASELINE on the host CPU)" \
  --commit "$COMMIT" --out "$OUT" -v 2>&1 | tee -a "$LOG"
echo "validation took $(( $(date +%s) - start )) s" | tee -a "$LOG"

"$BIN" validate --summarize "$OUT"/*/report.json --out "$OUT" | tee -a "$LOG"
