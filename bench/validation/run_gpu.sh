#!/usr/bin/env bash
# Sensitivity validation of the GPU engines (issue 5, SPEC 7) on a GPU machine: every available GPU
# engine x {fp32, fp16, int8} on the `ci` workload, against an FP32 exact gather (BASELINE, fp32
# storage; default `cpu`, the host's fast CPU engine) on the same cubes. One process per chunk of
# pairs: each pair's cubes, likelihood maps and encodings are made once (on the host, while the
# previous pair is searched) and shared by every method; the methods search each cube at the same
# time. Engines that cannot compute an input (their unsupported_reason) are listed as skipped.
#
# The pairs run in chunks (--first-pair), each saving its raw per-pair records; `validate --merge`
# joins adjoining chunks into exactly the numbers one run over all pairs gives, and writes the
# reports. A chunk is not started when the time left (DEADLINE seconds from the start) is less
# than the last chunk took, so a run cut short keeps whole chunks; run the rest later with
# FIRST=<next pair> and merge all records files.
#
# Build first, from the repository root (dependencies staged on the Debian machine with
# scripts/stage-deps.sh .deps):
#   cmake -S . -B build-h200 -G Ninja -DSHIFTSTACK_DEPS_DIR=.deps && ninja -C build-h200 shiftstack_cli
# then, for the standard kit (512 pairs, reports into bench/validation/<engine>-<encoding>/):
#   bash bench/validation/run_gpu.sh
# and the null calibration away from masks (sparse masks, windows placed away from masks, no
# completeness cubes; reports into bench/validation/sparse-masks/):
#   TAG=sparse PAIRS=256 KIT_MASKS=sparse PLACEMENT=away EXTRA=--no-completeness \
#     OUT=bench/validation/sparse-masks bash bench/validation/run_gpu.sh
# Overrides through the environment:
#   BUILD=build-h200 PAIRS=512 FIRST=0 CHUNK=128 BASELINE=cpu ENGINES=gpu ENCODINGS=fp32,fp16,int8
#   NULL_WINDOW=32 PLACEMENT=random KIT_MASKS=standard EXTRA= OUT=bench/validation TAG=standard
#   RECORDS=$OUT/records DEADLINE=0 (no limit) MERGE=1 CARD=<GPU name> COMMIT=<git describe>
#   AFTER_CHUNK=<shell command run after each chunk, e.g. to archive the records so far>
set -euo pipefail

BUILD=${BUILD:-build-h200}
PAIRS=${PAIRS:-512}
FIRST=${FIRST:-0}
CHUNK=${CHUNK:-128}
BASELINE=${BASELINE:-cpu}
ENGINES=${ENGINES:-gpu}
ENCODINGS=${ENCODINGS:-fp32,fp16,int8}
NULL_WINDOW=${NULL_WINDOW:-32}
PLACEMENT=${PLACEMENT:-random}
KIT_MASKS=${KIT_MASKS:-standard}
EXTRA=${EXTRA:-}
OUT=${OUT:-bench/validation}
TAG=${TAG:-standard}
RECORDS=${RECORDS:-$OUT/records}
DEADLINE=${DEADLINE:-0}
MERGE=${MERGE:-1}
BIN="$BUILD/bin/shiftstack"

if [ ! -x "$BIN" ]; then
  echo "run_gpu.sh: $BIN not found; build it first (see the top of this script)" >&2
  exit 1
fi
if [ -z "${CARD:-}" ]; then
  CARD=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1 || true)
  CARD=${CARD:-unknown GPU}
fi
COMMIT=${COMMIT:-$(git describe --always --dirty 2>/dev/null || echo unknown)}
mkdir -p "$OUT" "$RECORDS"
LOG="$RECORDS/run_gpu_$TAG.log"

"$BIN" validate --list-engines | tee -a "$LOG"
start=$(date +%s)
last=0
files=()
first=$FIRST
end=$((FIRST + PAIRS))
while [ "$first" -lt "$end" ]; do
  n=$((end - first < CHUNK ? end - first : CHUNK))
  now=$(date +%s)
  if [ "$DEADLINE" -gt 0 ] && [ $((now - start + last * n / CHUNK)) -gt "$DEADLINE" ]; then
    echo "run_gpu.sh: stopping before pair $first: the next chunk would end after ${DEADLINE} s" | tee -a "$LOG"
    break
  fi
  file="$RECORDS/${TAG}_pairs_${first}-$((first + n - 1)).json"
  # shellcheck disable=SC2086  # EXTRA holds separate options
  "$BIN" validate --engine "$ENGINES" --encoding "$ENCODINGS" --baseline "$BASELINE" --workload ci \
    --pairs "$n" --first-pair "$first" --null-window "$NULL_WINDOW" --null-window-placement "$PLACEMENT" \
    --kit-masks "$KIT_MASKS" --seed 1 $EXTRA $([ "$first" = "$FIRST" ] || echo --no-quantization) \
    --card "$CARD (baseline: $BASELINE)" --commit "$COMMIT" --save-records "$file" -v 2>&1 | tee -a "$LOG"
  last=$(( $(date +%s) - now ))
  echo "chunk of pairs $first..$((first + n - 1)) took $last s" | tee -a "$LOG"
  files+=("$file")
  first=$((first + n))
  if [ -n "${AFTER_CHUNK:-}" ]; then bash -c "$AFTER_CHUNK"; fi
done
echo "validation took $(( $(date +%s) - start )) s for pairs $FIRST..$((first - 1))" | tee -a "$LOG"

if [ "$MERGE" = 1 ] && [ "${#files[@]}" -gt 0 ]; then
  "$BIN" validate --merge "${files[@]}" --out "$OUT" | tee -a "$LOG"
  "$BIN" validate --summarize "$OUT"/*/report.json --out "$OUT" | tee -a "$LOG"
fi
