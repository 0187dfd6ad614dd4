#!/usr/bin/env bash
# Packs built binaries for a GPU machine that has the CUDA toolkit but none of Debian's -dev
# libraries: strips each binary into DEST/bin, copies the shared libraries they load, except the C
# library's and the CUDA toolkit's (that machine has its own), into DEST/lib, and writes
# DEST.tar.xz. There, unpack it and run with BIN=DEST/bin LIBS=DEST/lib (bench/h200_session.sh).
# Usage: bench/bundle_binaries.sh BUILD_DIR DEST [binary...]   (default: shiftstack,
# shiftstack_gpu_tests and shiftstack_tensor_ceiling)
set -euo pipefail
build=${1:?usage: bench/bundle_binaries.sh BUILD_DIR DEST [binary...]}
dest=${2:?usage: bench/bundle_binaries.sh BUILD_DIR DEST [binary...]}
shift 2
binaries=("$@")
((${#binaries[@]})) || binaries=(shiftstack shiftstack_gpu_tests shiftstack_tensor_ceiling)
for name in "${binaries[@]}"; do  # all present before DEST is touched
  [ -x "$build/bin/$name" ] || { echo "bundle_binaries: $build/bin/$name is not a built binary" >&2; exit 1; }
done
rm -rf "$dest" && mkdir -p "$dest/bin" "$dest/lib"
for name in "${binaries[@]}"; do
  strip -o "$dest/bin/$name" "$build/bin/$name"
  ldd "$build/bin/$name" | awk '/=> \//{print $3}' |
    grep -v -E '/cuda[^/]*/|/lib(c|m|dl|rt|pthread|resolv)\.so|ld-linux' |
    while read -r library; do cp -L -n "$library" "$dest/lib/"; done
done
tar cJf "$dest.tar.xz" -C "$dest" bin lib
du -sh "$dest" "$dest.tar.xz"
