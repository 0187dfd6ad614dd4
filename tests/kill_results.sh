#!/usr/bin/env bash
# kill -9 at random points of many searches, checking after each that the result set under its
# final names is whole: either every file of one run (all carrying the same run_id), or, before
# any run has finished, none. A set once seen must never be lost or mixed by a later kill.
#
#   tests/kill_results.sh [SHIFTSTACK] [RUNS] [WORKDIR]
#
# Defaults: build/bin/shiftstack, 50 runs, a fresh temporary folder. Exit 1 on the first broken
# set (the folder is kept for inspection); prints how the runs ended.
set -euo pipefail
bin="${1:-build/bin/shiftstack}"
runs="${2:-50}"
work="${3:-$(mktemp -d "${TMPDIR:-/tmp}/shiftstack-kill-XXXXXX")}"
mkdir -p "$work"
bin="$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")"
cd "$work"
rm -rf kit out && mkdir out
"$bin" write-kit -o kit > /dev/null 2>&1
# A low threshold and no clustering: thousands of rows, so that writing takes a good part of
# the run and kills land inside it often.
args=(search --config kit/search.yaml kit -o out/results.ecsv --set lh_level=3.5 --set do_clustering=false
      --set stamp_radius=6)

check_set() {  # prints "none", or the run_id of a whole set; exits 1 on a broken set
  python3 - "$@" <<'EOF'
import json, os, re, sys
names = ["results.ecsv", "results.fits", "results.stamps.fits", "results.summary.json"]
present = [n for n in names if os.path.exists(os.path.join("out", n))]
if not present:
    print("none"); sys.exit(0)
if len(present) != len(names):
    print("partial set: only " + ", ".join(present), file=sys.stderr); sys.exit(1)
def fits_id(path):
    data = open(path, "rb").read()
    m = re.search(rb"RUN_ID\s*=\s*'([^']*)'", data, re.I)
    return m.group(1).decode() if m else None
ids = {}
ecsv = open("out/results.ecsv").read()
m = re.search(r'"run_id":"([^"]*)"', ecsv)
ids["ecsv"] = m.group(1) if m else None
ids["fits"] = fits_id("out/results.fits")
ids["stamps"] = fits_id("out/results.stamps.fits")
ids["summary"] = json.load(open("out/results.summary.json")).get("run_id")
rows = sum(1 for line in ecsv.splitlines() if line and not line.startswith("#")) - 1
if len(set(ids.values())) != 1 or None in ids.values():
    print("mixed set: " + json.dumps(ids), file=sys.stderr); sys.exit(1)
print(ids["summary"])
EOF
}

start=$(date +%s.%N)
"$bin" "${args[@]}" 2> /dev/null
full=$(python3 -c "import sys; print(float(sys.argv[2]) - float(sys.argv[1]))" "$start" "$(date +%s.%N)")
seen="$(check_set)"
[ "$seen" != "none" ] || { echo "kill test: a finished run left no result set" >&2; exit 1; }
echo "kill test: one run takes ${full} s; $runs runs killed at random points in [0, 1.1 x that]" >&2

kept=0; replaced=0; finished=0
declare -A phase  # the last stage a killed run reported: where the kill landed
for ((i = 1; i <= runs; ++i)); do
  delay=$(python3 -c "import random, sys; print(random.uniform(0, 1.1 * float(sys.argv[1])))" "$full")
  "$bin" "${args[@]}" 2> progress.log &
  pid=$!
  sleep "$delay"
  if kill -9 "$pid" 2> /dev/null; then wait "$pid" 2> /dev/null || true; else wait "$pid" || true; finished=$((finished + 1)); fi
  now="$(check_set)" || { echo "kill test: run $i (killed after $delay s) broke the set; see $work" >&2; exit 1; }
  if [ "$now" = "none" ]; then echo "kill test: run $i lost the previous set; see $work" >&2; exit 1; fi
  if [ "$now" = "$seen" ]; then kept=$((kept + 1)); else replaced=$((replaced + 1)); fi
  last=$( (grep -oE "^shiftstack: [a-z]+ " progress.log || true) | tail -1 | awk '{print $2}')
  phase[${last:-start}]=$(( ${phase[${last:-start}]:-0} + 1 ))
  seen="$now"
done
# Then, where strace exists, a kill at each file-system call of a run in turn (the random kills
# above rarely land in the few milliseconds of the commit itself). strace counts invocations per
# system call, so each call is reached as the n-th of its own kind.
if command -v strace > /dev/null; then
  calls=rename,renameat,renameat2,symlink,symlinkat,linkat,unlink,unlinkat,mkdir,mkdirat,fsync,fdatasync
  strace -f -qq -o strace.log -e trace="$calls" "$bin" "${args[@]}" 2> /dev/null
  seen="$(check_set)"
  total=0; killed=0
  for call in ${calls//,/ }; do
    count=$(grep -c -E "[0-9] +$call\(" strace.log || true)
    for ((n = 1; n <= count; ++n)); do
      rc=0
      # Through an inner shell, so that "Killed" is reported to /dev/null, not to this output.
      bash -c '"$@"; exit $?' _ strace -f -qq -o /dev/null -e trace="$call" -e inject="$call":signal=SIGKILL:when="$n" \
        "$bin" "${args[@]}" > /dev/null 2>&1 || rc=$?
      [ "$rc" -eq 137 ] && killed=$((killed + 1))
      total=$((total + 1))
      now="$(check_set)" || { echo "kill test: a kill at $call number $n broke the set; see $work" >&2; exit 1; }
      if [ "$now" = "none" ]; then echo "kill test: a kill at $call number $n lost the set; see $work" >&2; exit 1; fi
      seen="$now"
    done
  done
  echo "kill test: a kill at each of the $total file-system calls of a run in turn ($killed runs died" \
       "there): the set stayed whole" >&2
fi
left=$(find out -maxdepth 1 -name '.results.run-*' | wc -l)
echo "kill test: $runs runs: $kept left the previous set, $replaced the new one ($finished finished before" \
     "the kill); never a partial or mixed set; $left leftover run folder(s) for the next run to remove" >&2
summary=""
for p in "${!phase[@]}"; do summary+=" $p:${phase[$p]}"; done
echo "kill test: last stage reported before the kill (write = data files staged, summary/commit pending):$summary" >&2
rm -rf "$work"
