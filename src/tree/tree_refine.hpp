// Exact refinement of screened trials: each is re-scored with the reference engine's double
// arithmetic (integer or bilinear shifts, as the bank asks) together with its neighbours (origin
// +-1 pixel, each velocity index +-1), and every re-scored trial above the flood threshold has its
// own neighbours re-scored too, until none is left: a connected group of exact scores above the
// threshold is found whole once one of its trials (or a neighbour) passed the screen.
#pragma once
#include <cstdint>
#include <vector>

#include "shiftstack/search.hpp"

namespace shiftstack::tree {

struct TrialRef {
  int x = 0, y = 0;
  std::int32_t velocity = 0;
};

struct ExactScore {
  int x = 0, y = 0;
  std::int32_t velocity = 0;
  double A = 0, B = 0;
  int obs = 0;
};

// Re-scores the seeds' neighbourhoods, flooding above z_flood. Origins stay inside `region`.
// Sorted by (velocity, y, x). Error when more than `limit` trials would be re-scored.
std::vector<ExactScore> refine(const EncodedStack& stack, const MotionBank& bank, const Region& region,
                               const std::vector<TrialRef>& seeds, double z_flood, std::int64_t limit);

}  // namespace shiftstack::tree
