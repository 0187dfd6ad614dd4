// The Z gate of the GPU scoring (cuda/common/z_gate.hpp): a trial it stops must not be able to
// reach the floor, whatever the rounding, checked against Z computed as the kernels compute it
// (A / sqrtf(B) in FP32) and in double; without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "cuda/common/z_gate.hpp"

using shiftstack::cuda::ZGate;

TEST(ZGate, NeverStopsATrialWhoseZReachesTheFloor) {
  std::mt19937 rng(7);
  std::normal_distribution<float> z_draw(0.0f, 3.0f);
  std::uniform_real_distribution<double> log_b(-6.0, 8.0), floor_draw(0.0, 10.0);
  long long stopped = 0, reaching = 0;
  for (int i = 0; i < 2'000'000; ++i) {
    const float B = float(std::pow(10.0, log_b(rng)));
    const float A = z_draw(rng) * std::sqrt(B);
    const float Z = A / std::sqrt(B);
    // Half the floors exactly at the trial's Z (the ties the argmax rule must see), half random.
    const double floor = i % 2 ? double(Z) : floor_draw(rng);
    if (floor < 0) continue;
    const ZGate gate(floor);
    if (double(Z) >= floor || double(A) / std::sqrt(double(B)) >= floor) {
      ++reaching;
      ASSERT_TRUE(gate.passes(A, B)) << "A " << A << " B " << B << " Z " << Z << " floor " << floor;
    }
    stopped += !gate.passes(A, B);
  }
  EXPECT_GT(reaching, 500'000);
  EXPECT_GT(stopped, 400'000);  // the random floors stop most trials below them
}

TEST(ZGate, StopsTrialsClearlyBelowAndPassesEverythingWithoutAFloor) {
  const ZGate gate(5.0);
  EXPECT_FALSE(gate.passes(4.9f, 1.0f));    // Z = 4.9
  EXPECT_FALSE(gate.passes(-30.0f, 4.0f));  // Z < 0
  EXPECT_FALSE(gate.passes(0.0f, 1.0f));
  EXPECT_TRUE(gate.passes(10.0f, 4.0f));    // Z = 5: a tie counts
  EXPECT_TRUE(ZGate(0.0).passes(0.0f, 1.0f));  // Z = 0 reaches a floor of 0
  EXPECT_FALSE(ZGate(0.0).passes(-1e-30f, 1.0f));
  for (const ZGate open : {ZGate{}, ZGate(-1.0)}) {
    EXPECT_TRUE(open.passes(-30.0f, 4.0f));
    EXPECT_TRUE(open.passes(0.0f, 1.0f));
  }
}
