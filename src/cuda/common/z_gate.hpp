// Which scored trials need their Z = A / sqrt(B) (a division and a square root), shared by the
// gathers' and the Fourier route's scoring. Host code too, so that it is tested without a GPU
// (tests/cuda/test_z_gate.cpp).
#pragma once

#include "cuda/common/host_device.hpp"

namespace shiftstack::cuda {

// A trial matters only if its Z may reach `floor`: the smallest of the detection threshold, the
// candidate threshold, the running maximum and, with top-k lists, the Z that enters the origin's
// list. Z >= floor >= 0 needs A >= 0 and A^2 >= floor^2 B; the test keeps a margin of 1e-5, far
// above the float roundings involved, so no trial that could change a result is skipped, and
// almost all others (Z near 0) cost two products. A negative floor, or none (the default), passes
// every trial.
struct ZGate {
  float gate = -1.0f;  // < 0: every trial
  ZGate() = default;
  SHIFTSTACK_HOST_DEVICE explicit ZGate(double floor) {
    if (floor >= 0) gate = float(floor * floor) * (1.0f - 1e-5f);
  }
  SHIFTSTACK_HOST_DEVICE bool passes(float A, float B) const { return gate < 0 || (A >= 0 && A * A >= gate * B); }
};

}  // namespace shiftstack::cuda
