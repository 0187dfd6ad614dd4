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

// Integer mode for a group of n trials, exposure by exposure: trial t samples exposure e at
// (x[t] + shift_x[t][e], y[t] + shift_y[t][e]), the shifts already rounded (round_shift). Each
// trial's sums are exact_integer_trial()'s, bit for bit (the same samples added in the same
// order); neighbouring trials, as a refinement scores them, share the cache lines of each
// exposure instead of each trial walking the whole stack (a cache miss per sample on `dense`).
void exact_integer_trials(const EncodedStack& stack, const int* const* shift_x, const int* const* shift_y,
                          const int* x, const int* y, int n, ExactTrialSums* out);

// Fractional mode: bilinear A over the valid corners and B its exact variance from the
// covariance planes (SPEC 2).
ExactTrialSums exact_bilinear_trial(const EncodedStack& stack, const std::vector<double>& sx,
                                    const std::vector<double>& sy, int x, int y);

}  // namespace shiftstack
