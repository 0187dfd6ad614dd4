// The exact single-trial sums of SPEC 1-2 in double, one decode() per sample: the arithmetic of
// the `reference` engine, shared with engines that re-score chosen trials exactly (cpu-tree's
// refinement), so both evaluate the same operator.
#pragma once
#include <vector>

#include "shiftstack/encoding.hpp"

namespace shiftstack {

struct ExactTrialSums {
  double A = 0, B = 0;
  int obs = 0;  // exposures with a valid sample
};

// Integer mode: each exposure's sample at the nearest pixel, x + floor(sx[e] + 0.5).
// sx, sy: the trajectory's shifts s_{v,e} per exposure (SPEC 2), in pixels.
ExactTrialSums exact_integer_trial(const EncodedStack& stack, const std::vector<double>& sx,
                                   const std::vector<double>& sy, int x, int y);

// Fractional mode: bilinear A over the valid corners and B its exact variance from the
// covariance planes (SPEC 2).
ExactTrialSums exact_bilinear_trial(const EncodedStack& stack, const std::vector<double>& sx,
                                    const std::vector<double>& sy, int x, int y);

}  // namespace shiftstack
