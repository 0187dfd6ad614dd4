#!/usr/bin/env bash
# Installs the Debian packages shiftstack's build and tests need; safe to run again.
# The CUDA toolkit is optional and not installed here: when nvcc is on the PATH (or in
# /usr/local/cuda), CMake enables the GPU engines, otherwise it builds the CPU-only library.
set -euo pipefail
packages=(
  build-essential cmake ninja-build pkg-config
  libgtest-dev libcli11-dev libboost-math-dev nlohmann-json3-dev
  libcfitsio-dev wcslib-dev libyaml-cpp-dev
  # the Python module and its tests (`pip install .` builds through python3-skbuild)
  pybind11-dev python3-dev python3-numpy python3-pytest python3-astropy python3-matplotlib
  python3-skbuild python3-pip python3-venv
  zlib1g-dev libopenmpi-dev openmpi-bin
  libhwy-dev
  # the fuzz targets (fuzz/run.sh, the fuzz_smoke test): Clang with libFuzzer and OpenMP
  clang libclang-rt-dev libomp-dev
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  echo "installing: ${missing[*]}" >&2
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
