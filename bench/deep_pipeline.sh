#!/usr/bin/env bash
# The `deep` workload (SPEC 3: 100 exposures of 2048 x 4096, 50 x 30 velocities) end to end:
# the kit is written as 100 FITS files, then `shiftstack search` goes from those files to the
# results table, several times, and the per-stage wall times are printed (median over runs).
#
#   bash bench/deep_pipeline.sh [BUILD_DIR] [WORK_DIR] [RUNS] [EXTRA SEARCH OPTIONS...]
#
# BUILD_DIR defaults to build, WORK_DIR to a new temporary folder (about 9 GB of FITS files),
# RUNS to 3. Extra options go to `shiftstack search` (e.g. --engine NAME, --encoding int8).
# WORKLOAD=ci (environment) runs the same steps on another kit, to try the script quickly.
# The files were just written, so the first read already comes from the page cache: the `read`
# stage measures decoding, not the disk; a cold read adds ~9 GB / (disk bandwidth).
set -euo pipefail
build=${1:-build}
work=${2:-$(mktemp -d)}
runs=${3:-3}
shift $(( $# < 3 ? $# : 3 ))
workload=${WORKLOAD:-deep}
bin=$build/bin/shiftstack
[ -x "$bin" ] || { echo "no $bin: build first (cmake --build $build)" >&2; exit 1; }
mkdir -p "$work"

echo "== writing the $workload kit to $work/kit" >&2
"$bin" write-kit --workload "$workload" --out "$work/kit"
du -sh "$work/kit" >&2

for run in $(seq 1 "$runs"); do
  echo "== search run $run of $runs" >&2
  "$bin" search --config "$work/kit/search.yaml" "$work/kit" -o "$work/results_$run.ecsv" --json "$@" \
    > "$work/summary_$run.json"
done

# Per-stage medians over the runs, from the run summaries (python3 only reads JSON here).
python3 - "$work" "$runs" <<'EOF'
import json, statistics, sys
work, runs = sys.argv[1], int(sys.argv[2])
summaries = [json.load(open(f"{work}/summary_{r}.json")) for r in range(1, runs + 1)]
stages = [s["stage"] for s in summaries[0]["stages"]]
print(f"{summaries[0]['image']['exposures']} exposures of {summaries[0]['image']['width']}x{summaries[0]['image']['height']}, {runs} runs; engine {summaries[0]['engine']}, encoding {summaries[0]['encoding']}")
print(f"{'stage':<12}{'median s':>10}   runs")
for i, name in enumerate(stages):
    times = [s["stages"][i]["seconds"] for s in summaries]
    print(f"{name:<12}{statistics.median(times):>10.3f}   " + " ".join(f"{t:.3f}" for t in times))
walls = [s["wall_seconds"] for s in summaries]
print(f"{'wall':<12}{statistics.median(walls):>10.3f}   " + " ".join(f"{t:.3f}" for t in walls)
      + "   (files on disk -> results table, per CCD)")
last = summaries[-1]
print(f"candidates: {last['counts']['after_clustering']}; threshold crossings {last['counts']['threshold_crossings']}; "
      f"digest maxZ {last['digest']['maxZ']:.3f} at x={last['digest']['argmax']['x']} y={last['digest']['argmax']['y']}")
truth = json.load(open(f"{work}/kit/truth.json"))
print(f"injected: x={truth['x']} y={truth['y']} vx={truth['vx']:.4f} vy={truth['vy']:.4f} (velocity {truth['velocity_index']})")
EOF
echo "results and summaries in $work" >&2
