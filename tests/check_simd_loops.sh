#!/usr/bin/env bash
# Every `#pragma omp simd` loop of a source compiled for function multi-versioning must be
# vectorised in each clone: 64-byte vectors (AVX-512), 32 (AVX2) and 16 (the x86-64 baseline).
# GCC reports which loops it vectorised (-fopt-info-vec-optimized); a loop that stays scalar in
# one clone runs several times slower on the machines that pick that clone, and no test of the
# results would notice (the tree's root scoring ran scalar on AVX2 until 28bafdc).
# Usage: check_simd_loops.sh COMPILER SOURCE [compiler flags...]
set -uo pipefail
compiler=$1 source=$2
shift 2
report=$("$compiler" "$@" -fopt-info-vec-optimized -c "$source" -o /dev/null 2>&1) || {
  echo "compiling $source failed:"; echo "$report"; exit 1
}
name=$(basename "$source")
failed=0 loops=0
while IFS=: read -r pragma_line _; do
  loops=$((loops + 1))
  # GCC places the report on the pragma, the loop header or the loop's first statement.
  lines="($pragma_line|$((pragma_line + 1))|$((pragma_line + 2)))"
  for bytes in 64 32 16; do
    if ! grep -Eq "$name:$lines:[0-9]+: optimized: loop vectorized using $bytes byte vectors" <<<"$report"; then
      echo "FAIL: $name: the loop under the pragma on line $pragma_line is not vectorised with $bytes-byte vectors"
      failed=$((failed + 1))
    fi
  done
done < <(grep -n '^[[:space:]]*#pragma omp simd' "$source")
if [ "$loops" -eq 0 ]; then echo "no '#pragma omp simd' loop found in $source"; exit 1; fi
echo "$name: $loops simd loops, $((loops * 3 - failed)) of $((loops * 3)) clone checks vectorised"
[ "$failed" -eq 0 ]
