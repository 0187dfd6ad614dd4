// Exact refinement of screened trials: each is re-scored with the reference engine's double
// arithmetic (integer or bilinear shifts, as the bank asks) together with its neighbours (origin
// +-1 pixel, each velocity index +-1), and every re-scored trial above the flood threshold has its
// own neighbours re-scored too, until none is left: a connected group of exact scores above the
// threshold is found whole once one of its trials (or a neighbour) passed the screen.
#pragma once
#include <cstdint>
#include <string>
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

// A Cartesian bank's shifts per axis value, in double (SPEC 2): x[a][e] = vx_a * dt_e + c_x(e),
// y[b][e] likewise (a trial's x shift depends on vx alone). What the exact re-scoring reads, on
// the host and (flattened) on the device.
struct AxisShifts {
  std::vector<std::vector<double>> x, y;
};
AxisShifts axis_shifts(const MotionBank& bank);

// Most trials a refinement may re-score: the neighbourhood (81 trials) of as many screened trials
// as max_candidates allows, and at least 2^20 of them.
std::int64_t refine_limit(const OutputPolicy& policy);

// Re-scores the seeds' neighbourhoods, flooding above z_flood. Origins stay inside `region`.
// Sorted by (velocity, y, x). Error when more than `limit` trials would be re-scored.
std::vector<ExactScore> refine(const EncodedStack& stack, const MotionBank& bank, const Region& region,
                               const std::vector<TrialRef>& seeds, double z_flood, std::int64_t limit);

// How both tree engines (cpu-tree, cuda-tree) turn scores into their SearchResult, whose digest
// has z_thr and the sums already set: maxZ with the digest's tie rule, candidates above the
// policy's threshold, the count above z_thr for exact scores.
void offer_tree_score(int x, int y, std::int32_t velocity, float A, float B, const MotionBank& bank,
                      const OutputPolicy& policy, SearchResult& result);  // unrefined: obs_count 0, not counted
void offer_exact_score(const ExactScore& score, const MotionBank& bank, const OutputPolicy& policy,
                       SearchResult& result);
// The max_candidates limit, candidates sorted by (velocity, y, x), the note.
void finish_result(SearchResult& result, const OutputPolicy& policy, const std::string& note);

}  // namespace shiftstack::tree
