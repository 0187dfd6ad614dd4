#!/usr/bin/env bash
# Many units per run (`shiftstack search-many`): units per hour on one machine.
#
#   bash bench/scale_out.sh [BUILD_DIR] [WORK_DIR] [RANKS...]
#
# Writes KITS kits of WORKLOAD (`shiftstack write-kit`, seeds 1..KITS) and a manifest of UNITS
# units that take the kits in turn (unit k searches kit k mod KITS: the same files searched again
# under another name, as when one CCD is searched at several distances). Then, for each RANKS
# value (default "1 2"), runs the whole manifest from scratch: with mpirun -np RANKS where the
# build has MPI and mpirun exists, otherwise as RANKS shards at once on this machine (--shard i/N,
# then --merge). Prints units per hour, the median unit time and the status counts, and checks
# that every unit of one kit got the same digest.
#
# Environment (defaults for the H200 run of 32 deep-like CCDs):
#   WORKLOAD=deep  KITS=2  UNITS=32  ENGINE= (the config's: auto)  EXTRA= (more search-many options)
#   MPI=auto|off   BASELINE=1 (also time one `shiftstack search` process per unit; 0: skip)
#   OMP_NUM_THREADS (passed on)
# One `deep` kit is about 8.4 GB of FITS files (KITS=2: 17 GB of disk); WORK_DIR defaults to a
# new temporary folder. A CPU-only check: WORKLOAD=ci KITS=4 UNITS=32 ENGINE=cpu.
set -euo pipefail
build=${1:-build}
work=${2:-$(mktemp -d)}
shift $(( $# < 2 ? $# : 2 ))
ranks_list=${*:-1 2}
workload=${WORKLOAD:-deep}
kits=${KITS:-2}
units=${UNITS:-32}
engine=${ENGINE:-}
bin=$(realpath "$build/bin/shiftstack")
[ -x "$bin" ] || { echo "no $build/bin/shiftstack: build first" >&2; exit 1; }
mkdir -p "$work"

for k in $(seq 1 "$kits"); do
  if [ ! -f "$work/kit$k/search.yaml" ]; then
    echo "== writing $workload kit $k of $kits to $work/kit$k" >&2
    "$bin" write-kit --workload "$workload" --seed "$k" --out "$work/kit$k" >&2
  fi
done

manifest=$work/manifest.yaml
{
  echo "# $units units over $kits $workload kits (written by bench/scale_out.sh)"
  echo "output: out"
  echo "config: kit1/search.yaml"
  [ -n "$engine" ] && echo "engine: $engine"
  echo "units:"
  for u in $(seq 0 $((units - 1))); do
    printf '  - {name: unit%03d, inputs: kit%d}\n' "$u" $((u % kits + 1))
  done
} > "$manifest"

have_mpi=no
if [ "${MPI:-auto}" != off ] && command -v mpirun > /dev/null && "$bin" search-many --help | grep -q -- "--mpi"; then
  # The binary was built with MPI only if it links libmpi.
  if ldd "$bin" 2>/dev/null | grep -q libmpi; then have_mpi=yes; fi
fi

# The baseline: one `shiftstack search` process per unit, one after another (what a loop in a
# job script does): every unit pays the start-up, CUDA context creation included.
if [ "${BASELINE:-1}" = 1 ]; then
  rm -rf "$work/loop" && mkdir -p "$work/loop"
  start=$(date +%s.%N)
  for u in $(seq 0 $((units - 1))); do
    "$bin" search -q --config "$work/kit1/search.yaml" "$work/kit$((u % kits + 1))" ${engine:+--engine $engine} \
      -o "$work/loop/unit$u.ecsv" || echo "unit $u failed" >&2
  done
  end=$(date +%s.%N)
  python3 -c "import sys; w = float(sys.argv[2]) - float(sys.argv[1]); n = int(sys.argv[3]); \
print(f'one process per unit: {n} units in {w:.2f} s wall: {3600 * n / w:.0f} units/hour')" "$start" "$end" "$units"
fi

for ranks in $ranks_list; do
  rm -rf "$work/out"
  echo "== $units units, $ranks rank(s) ($([ $have_mpi = yes ] && echo mpirun || echo "$ranks shards at once"))" >&2
  start=$(date +%s.%N)
  set +e
  if [ $have_mpi = yes ]; then
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
      mpirun -np "$ranks" --oversubscribe "$bin" search-many "$manifest" -q ${EXTRA:-}
  else
    for i in $(seq 0 $((ranks - 1))); do
      "$bin" search-many "$manifest" -q --shard "$i/$ranks" ${EXTRA:-} &
    done
    wait
    [ "$ranks" -gt 1 ] && "$bin" search-many "$manifest" -q --merge
  fi
  set -e
  end=$(date +%s.%N)
  python3 - "$work/out/summary.json" "$start" "$end" "$ranks" "$kits" <<'EOF'
import json, statistics, sys
summary = json.load(open(sys.argv[1]))
wall = float(sys.argv[3]) - float(sys.argv[2])
kits = int(sys.argv[5])
units = summary["units"]
ok = [u for u in units if u["status"] == "ok"]
seconds = [u["seconds"] for u in ok] or [0]
print(f"ranks {sys.argv[4]}: {len(ok)}/{len(units)} units ok in {wall:.2f} s wall (launch to merged summary): "
      f"{3600 * len(ok) / wall:.0f} units/hour; unit median {statistics.median(seconds):.3f} s "
      f"(min {min(seconds):.3f}, max {max(seconds):.3f}); engine {ok[0]['engine'] if ok else '-'}; "
      f"status {summary['status_counts']}")
stages = {}
for u in ok:
    for name, s in u.get("stages", {}).items():
        stages.setdefault(name, []).append(s)
print("  stage medians (s): " + ", ".join(f"{k} {statistics.median(v):.3f}" for k, v in stages.items()))
# Units of one kit searched the same files: their digests must be identical.
digests = {}
for u in ok:
    digests.setdefault(int(u["unit"][4:]) % kits, set()).add(json.dumps(u["digest"], sort_keys=True))
print("  one digest per kit: " + ("yes" if all(len(d) == 1 for d in digests.values()) else f"NO: {digests}"))
EOF
done
echo "manifest, outputs and summaries in $work" >&2
