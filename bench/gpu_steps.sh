# Steps shared by the GPU measurement scripts (sourced, not run). The caller defines `out` (the
# output folder), `bin` (the binaries) and `end` (the call's deadline, in seconds since the epoch,
# less a margin).

# Logs a heading to the terminal and to $out/summary.txt.
step() { echo "== $(date +%T) $*" | tee -a "$out/summary.txt"; }

# A step's time limit: N seconds, or what is left before `end` if less (at least 5).
within() {  # N
  local left=$(( end - $(date +%s) ))
  [ "$left" -lt "$1" ] && echo $(( left > 5 ? left : 5 )) || echo "$1"
}

# The GPU test suite, or the tests its gtest arguments select: log $out/NAME.log, time limit LIMIT.
gpu_suite() {  # NAME LIMIT [gtest arguments...]
  local name=$1 limit=$2
  shift 2
  timeout "$(within "$limit")" "$bin/shiftstack_gpu_tests" --gtest_brief=1 "$@" > "$out/$name.log" 2>&1
  echo "exit $?" | tee -a "$out/$name.log" "$out/summary.txt"
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |tests? ran|FAILED TEST|Failure" "$out/$name.log" | tail -12 |
    tee -a "$out/summary.txt"
}

# compute-sanitizer with each TOOL on the tests FILTER selects, failing on any report.
sanitize() {  # FILTER LIMIT TOOL...
  local filter=$1 limit=$2 tool
  shift 2
  for tool in "$@"; do
    step "compute-sanitizer $tool: $filter"
    timeout "$(within "$limit")" compute-sanitizer --tool "$tool" --error-exitcode 3 "$bin/shiftstack_gpu_tests" \
      --gtest_filter="$filter" > "$out/sanitizer_$tool.log" 2>&1
    echo "exit $?" | tee -a "$out/sanitizer_$tool.log" "$out/summary.txt"
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|hazard|PASSED|FAILED" "$out/sanitizer_$tool.log" | tail -4 |
      tee -a "$out/summary.txt"
  done
}

# The card, its driver and clocks, and the further nvidia-smi fields FIELDS names (comma-separated).
machine() {  # [FIELDS]
  step "machine"
  nvidia-smi --query-gpu="name,driver_version,clocks.sm,clocks.max.sm${1:+,$1}" --format=csv | tee -a "$out/summary.txt"
}

# At most 8 files come back from a call: every log, text and JSON in $out but the summary goes
# into NAME.tgz, and the loose copies are removed.
archive() {  # NAME
  (cd "$out" && shopt -s nullglob &&
    tar czf "$1.tgz" --exclude=summary.txt --exclude="$1.tgz" ./*.log ./*.txt ./*.json &&
    find . -maxdepth 1 -type f ! -name summary.txt ! -name "$1.tgz" -delete)
}
