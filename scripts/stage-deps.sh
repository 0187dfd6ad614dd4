#!/usr/bin/env bash
# Copies the header-only dependencies (CLI11, nlohmann-json, the Boost.Math headers the library
# includes), GoogleTest's source and the static FITS/WCS/YAML libraries from this Debian machine
# into a folder (default .deps), so that a machine without Debian's -dev packages can build
# with: cmake -DSHIFTSTACK_DEPS_DIR=.deps ...
set -euo pipefail
dest=${1:-.deps}
rm -rf "$dest" && mkdir -p "$dest/include" "$dest/lib"
cp -r /usr/include/CLI /usr/include/nlohmann "$dest/include/"
# Only the Boost headers the normal-distribution code pulls in (the whole tree is 160 MB).
probe=$(mktemp --suffix=.cpp)
echo '#include <boost/math/distributions/normal.hpp>' > "$probe"
g++ -std=c++20 -M "$probe" | tr ' \\' '\n\n' | grep '^/usr/include/boost/' | sort -u |
  while read -r header; do
    mkdir -p "$dest/include/$(dirname "${header#/usr/include/}")"
    cp "$header" "$dest/include/${header#/usr/include/}"
  done
rm -f "$probe"
cp -r /usr/src/googletest "$dest/googletest"
# Google Highway (the cpu engine's SIMD): headers and the shared library (Debian ships no static
# one); binaries built against the staged copy find it through their build RPATH.
cp -r /usr/include/hwy "$dest/include/"
cp -P /usr/lib/x86_64-linux-gnu/libhwy.so /usr/lib/x86_64-linux-gnu/libhwy.so.1* "$dest/lib/"
# Static I/O libraries (optional on the other side: CMake builds the readers only if found).
if [ -f /usr/include/fitsio.h ] && [ -f /usr/lib/x86_64-linux-gnu/libcfitsio.a ]; then
  cp /usr/include/fitsio.h /usr/include/longnam.h "$dest/include/"
  cp -r /usr/include/wcslib "$dest/include/"
  cp -r /usr/include/yaml-cpp "$dest/include/"
  cp /usr/lib/x86_64-linux-gnu/libcfitsio.a /usr/lib/x86_64-linux-gnu/libwcs.a \
     /usr/lib/x86_64-linux-gnu/libyaml-cpp.a "$dest/lib/"
  cp /usr/lib/x86_64-linux-gnu/libz.a /usr/lib/x86_64-linux-gnu/libbz2.a "$dest/lib/"  # libcfitsio.a needs them
  cp /usr/include/zlib.h /usr/include/zconf.h "$dest/include/"  # search-many's output checksums
fi
du -sh "$dest"
