#!/usr/bin/env bash
# Builds the libFuzzer targets with Clang (ASan + UBSan) in a folder of their own, writes the
# seed corpora, and runs each target for a bounded time or number of executions.
#
#   fuzz/run.sh --seconds 10 [BUILD]       short run of each target (the fuzz_smoke test)
#   fuzz/run.sh --runs 10000000 [BUILD]    long run: 1e7 executions of each (see docs/reliability.md)
#   fuzz/run.sh --runs N --only read_one   one target
#   fuzz/run.sh --seed 1 ...               libFuzzer's random seed (default: a new one each run);
#                                          the fuzz_smoke test fixes it, so that CI repeats itself
#
# BUILD defaults to build-fuzz. Exit status 77 when no Clang with libFuzzer is found (ctest
# reports the test as skipped); 1 when a target finds a crash, a leak, a sanitizer report or a
# hang (its reproducer is left in BUILD/findings/).
set -euo pipefail
cd "$(dirname "$0")/.."
mode="-max_total_time=10"
only=""
seed=0
build=""
while (($#)); do
  case "$1" in
    --seconds) mode="-max_total_time=$2"; shift 2 ;;
    --runs) mode="-runs=$2"; shift 2 ;;
    --only) only="$2"; shift 2 ;;
    --seed) seed="$2"; shift 2 ;;
    *) build="$1"; shift ;;
  esac
done
build="${build:-build-fuzz}"
cxx="${SHIFTSTACK_FUZZ_CXX:-$(command -v clang++ || command -v clang++-14 || true)}"
if [ -z "$cxx" ] || [ ! -f "$("$cxx" -print-file-name=libclang_rt.fuzzer-x86_64.a)" ]; then
  echo "fuzz: no clang++ with libFuzzer here (install clang and libclang-rt-dev); skipped" >&2
  exit 77
fi
jobs="${SHIFTSTACK_FUZZ_BUILD_JOBS:-2}"
launcher=()
command -v ccache > /dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
mkdir -p "$build"
cmake -S . -B "$build" -G Ninja -DCMAKE_CXX_COMPILER="$cxx" -DSHIFTSTACK_FUZZ=ON -DSHIFTSTACK_TESTS=OFF \
  -DSHIFTSTACK_CUDA=OFF "${launcher[@]}" > "$build/configure.log" 2>&1 || { cat "$build/configure.log" >&2; exit 1; }
targets=(fuzz_read_one fuzz_read_pair fuzz_config)
[ -n "$only" ] && targets=("fuzz_$only")
cmake --build "$build" -j "$jobs" --target fuzz_make_seeds "${targets[@]}"

seeds="$build/seeds"
rm -rf "$seeds"
"$build/bin/fuzz_make_seeds" "$seeds" > /dev/null
# Third-party fixtures and the reproducers join the single-file corpus.
for f in tests/data/fixtures/*/*.fits tests/data/repro/*.fits; do
  [ -f "$f" ] && cp "$f" "$seeds/read_one/$(basename "$(dirname "$f")")_$(basename "$f")"
done
for f in tests/data/repro/*.yaml; do [ -f "$f" ] && cp "$f" "$seeds/config/"; done

export ASAN_OPTIONS="${ASAN_OPTIONS:-halt_on_error=1:detect_leaks=1:allocator_may_return_null=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}"
# Known leaks inside cfitsio and wcslib on malformed input (not ours to fix; see the file).
export LSAN_OPTIONS="${LSAN_OPTIONS:-suppressions=$PWD/fuzz/lsan.supp:print_suppressions=0}"
mkdir -p "$build/findings"
status=0
for target in "${targets[@]}"; do
  name="${target#fuzz_}"
  corpus="$build/corpus/$name"
  mkdir -p "$corpus"
  echo "fuzz: $target ($mode)" >&2
  # -timeout: an input that takes over 10 s is a hang; -rss_limit_mb: an allocation runaway.
  if ! "$build/bin/$target" "$mode" -seed="$seed" -timeout=10 -rss_limit_mb=2560 -max_len=131072 -print_final_stats=1 \
      -artifact_prefix="$build/findings/$name-" "$corpus" "$seeds/$name" 2> "$build/$name.log"; then
    echo "fuzz: $target found a problem (see $build/$name.log and $build/findings/)" >&2
    tail -40 "$build/$name.log" >&2
    status=1
  fi
  grep -E "stat::number_of_executed_units|stat::average_exec_per_sec|stat::peak_rss_mb" "$build/$name.log" >&2 || true
done
exit $status
