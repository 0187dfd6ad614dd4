// The bank's shift extent (tiles, halos and padding are cut from it) against every trial of the
// grid: the Cartesian shortcut visits only each axis's extremes.
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <random>

#include "shiftstack/motion.hpp"

namespace shiftstack {
namespace {

ShiftExtent extent_of_every_trial(const MotionBank& bank) {
  const bool fractional = bank.mode == ShiftMode::fractional;
  auto lo = [&](double s) { return fractional ? int(std::floor(s)) : round_shift(s); };
  auto hi = [&](double s) { return fractional ? int(std::floor(s)) + 1 : round_shift(s); };
  ShiftExtent ext{INT_MAX, INT_MIN, INT_MAX, INT_MIN};
  for (std::size_t v = 0; v < bank.size(); ++v)
    for (int e = 0; e < bank.exposures(); ++e) {
      const double sx = bank.shift_x(v, e), sy = bank.shift_y(v, e);
      ext.min_x = std::min(ext.min_x, lo(sx));
      ext.max_x = std::max(ext.max_x, hi(sx));
      ext.min_y = std::min(ext.min_y, lo(sy));
      ext.max_y = std::max(ext.max_y, hi(sy));
    }
  return ext;
}

TEST(Motion, ShiftExtentOfAGridIsThatOfEveryTrial) {
  std::mt19937 random(7);
  std::uniform_real_distribution<double> epoch(-3.0, 5.0), speed(-40.0, 40.0), curve(-2.5, 2.5);
  for (int round = 0; round < 200; ++round) {
    MotionBank bank;
    const int exposures = 1 + round % 17;
    for (int e = 0; e < exposures; ++e) bank.epochs.push_back(epoch(random));
    bank.t_ref = epoch(random);
    // Unsorted axes, repeated values, and half the banks with a common curve.
    for (int i = 0; i < 1 + round % 9; ++i) bank.vx_axis.push_back(speed(random));
    for (int i = 0; i < 1 + round % 5; ++i) bank.vy_axis.push_back(speed(random));
    bank.vx_axis.push_back(bank.vx_axis.front());
    if (round % 2) {
      for (int e = 0; e < exposures; ++e) {
        bank.curve_x.push_back(curve(random));
        bank.curve_y.push_back(curve(random));
      }
    }
    bank.mode = round % 3 == 0 ? ShiftMode::fractional : ShiftMode::integer;
    const ShiftExtent fast = shift_extent(bank), every = extent_of_every_trial(bank);
    EXPECT_EQ(fast.min_x, every.min_x) << "round " << round;
    EXPECT_EQ(fast.max_x, every.max_x) << "round " << round;
    EXPECT_EQ(fast.min_y, every.min_y) << "round " << round;
    EXPECT_EQ(fast.max_y, every.max_y) << "round " << round;
  }
}

}  // namespace
}  // namespace shiftstack
