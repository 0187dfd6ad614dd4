#include "tree/tree_refine.hpp"

#include <algorithm>
#include <cmath>
#include <unordered_set>

#include "cpu/exact_trial.hpp"
#include "shiftstack/motion.hpp"
#include "shiftstack/error.hpp"

namespace shiftstack::tree {

AxisShifts axis_shifts(const MotionBank& bank) {
  const int E = bank.exposures();
  AxisShifts s{std::vector<std::vector<double>>(bank.vx_count(), std::vector<double>(E)),
               std::vector<std::vector<double>>(bank.vy_count(), std::vector<double>(E))};
  for (int e = 0; e < E; ++e) {
    for (std::size_t a = 0; a < s.x.size(); ++a) s.x[a][e] = bank.vx_axis[a] * bank.dt(e) + bank.curve_at_x(e);
    for (std::size_t b = 0; b < s.y.size(); ++b) s.y[b][e] = bank.vy_axis[b] * bank.dt(e) + bank.curve_at_y(e);
  }
  return s;
}

std::int64_t refine_limit(const OutputPolicy& policy) {
  return std::max<std::int64_t>(policy.max_candidates, 1 << 20) * 81;
}

std::vector<ExactScore> refine(const EncodedStack& stack, const MotionBank& bank, const Region& region,
                               const std::vector<TrialRef>& seeds, double z_flood, std::int64_t limit) {
  const int Va = int(bank.vx_count()), Vb = int(bank.vy_count());
  const AxisShifts shifts = axis_shifts(bank);
  const auto& sx = shifts.x;
  const auto& sy = shifts.y;
  const bool integer = bank.mode == ShiftMode::integer;
  auto key = [&](int x, int y, std::int64_t v) {
    return std::uint64_t((v * region.height + (y - region.y0)) * region.width + (x - region.x0));
  };
  // Integer mode: each axis value's shifts rounded once (exact_integer_trial rounds per sample).
  std::vector<std::vector<int>> ix, iy;
  if (integer) {
    auto rounded = [](const std::vector<std::vector<double>>& axis) {
      std::vector<std::vector<int>> out(axis.size());
      for (std::size_t a = 0; a < axis.size(); ++a)
        for (double v : axis[a]) out[a].push_back(round_shift(v));
      return out;
    };
    ix = rounded(sx);
    iy = rounded(sy);
  }
  std::unordered_set<std::uint64_t> seen;
  seen.reserve(seeds.size() * 81);
  std::vector<TrialRef> frontier;
  auto offer_neighbours = [&](const TrialRef& t) {
    const int a = int(t.velocity % Va), b = int(t.velocity / Va);
    for (int db = -1; db <= 1; ++db)
      for (int da = -1; da <= 1; ++da) {
        const int na = a + da, nb = b + db;
        if (na < 0 || nb < 0 || na >= Va || nb >= Vb) continue;
        const std::int32_t v = std::int32_t(nb) * Va + na;
        for (int dy = -1; dy <= 1; ++dy)
          for (int dx = -1; dx <= 1; ++dx) {
            const int x = t.x + dx, y = t.y + dy;
            if (x < region.x0 || y < region.y0 || x >= region.x0 + region.width || y >= region.y0 + region.height)
              continue;
            if (seen.insert(key(x, y, v)).second) frontier.push_back({x, y, v});
          }
      }
  };
  for (const TrialRef& s : seeds) offer_neighbours(s);

  std::vector<ExactScore> scores;
  while (!frontier.empty()) {
    require(std::int64_t(scores.size() + frontier.size()) <= limit,
            "cpu-tree: refinement would re-score more than " + std::to_string(limit) +
                " trials: raise the candidate threshold, lower the screen margin or raise max_candidates");
    std::vector<ExactScore> batch(frontier.size());
    // Groups of consecutive trials (a seed's neighbours are consecutive), each group scored
    // exposure by exposure in integer mode.
    constexpr int group = 64;
    const std::int64_t groups = (std::int64_t(frontier.size()) + group - 1) / group;
#pragma omp parallel for schedule(dynamic, 1)
    for (std::int64_t g = 0; g < groups; ++g) {
      const std::size_t first = std::size_t(g) * group;
      const int n = int(std::min<std::size_t>(group, frontier.size() - first));
      ExactTrialSums sums[group];
      if (integer) {
        const int* shift_x[group];
        const int* shift_y[group];
        int x[group], y[group];
        for (int k = 0; k < n; ++k) {
          const TrialRef& t = frontier[first + k];
          shift_x[k] = ix[std::size_t(t.velocity % Va)].data();
          shift_y[k] = iy[std::size_t(t.velocity / Va)].data();
          x[k] = t.x;
          y[k] = t.y;
        }
        exact_integer_trials(stack, shift_x, shift_y, x, y, n, sums);
      } else {
        for (int k = 0; k < n; ++k) {
          const TrialRef& t = frontier[first + k];
          sums[k] = exact_bilinear_trial(stack, sx[std::size_t(t.velocity % Va)], sy[std::size_t(t.velocity / Va)],
                                         t.x, t.y);
        }
      }
      for (int k = 0; k < n; ++k) {
        const TrialRef& t = frontier[first + k];
        batch[first + k] = {t.x, t.y, t.velocity, sums[k].A, sums[k].B, sums[k].obs};
      }
    }
    frontier.clear();
    for (const ExactScore& s : batch)
      if (s.B > 0 && s.A / std::sqrt(s.B) > z_flood) offer_neighbours({s.x, s.y, s.velocity});
    scores.insert(scores.end(), batch.begin(), batch.end());
  }
  std::sort(scores.begin(), scores.end(), [](const ExactScore& p, const ExactScore& q) {
    if (p.velocity != q.velocity) return p.velocity < q.velocity;
    if (p.y != q.y) return p.y < q.y;
    return p.x < q.x;
  });
  return scores;
}

namespace {

Candidate make_candidate(const MotionBank& bank, int x, int y, std::int32_t v, double A, double B, int obs) {
  const Velocity vel = bank.velocity(std::size_t(v));
  return Candidate{x, y, v, float(vel.vx), float(vel.vy), float(A), float(B), float(A / std::sqrt(B)),
                   float(A / B), obs};
}

void offer_max(Digest& d, double Z, int x, int y, std::int32_t v) {
  if (Z > d.maxZ || (Z == d.maxZ && d.precedes(v, y, x))) {
    d.maxZ = Z;
    d.argmax_x = x, d.argmax_y = y, d.argmax_velocity = v;
  }
}

}  // namespace

void offer_tree_score(int x, int y, std::int32_t velocity, float A, float B, const MotionBank& bank,
                      const OutputPolicy& policy, SearchResult& result) {
  const double Z = double(A) / std::sqrt(double(B));
  offer_max(result.digest, Z, x, y, velocity);
  if (policy.collect_candidates && Z > policy.candidate_threshold)
    result.candidates.push_back(make_candidate(bank, x, y, velocity, A, B, 0));
}

void offer_exact_score(const ExactScore& e, const MotionBank& bank, const OutputPolicy& policy,
                       SearchResult& result) {
  if (!(e.B > 0)) return;
  const double Z = e.A / std::sqrt(e.B);
  if (Z > result.digest.z_thr) ++result.digest.count;
  offer_max(result.digest, Z, e.x, e.y, e.velocity);
  if (policy.collect_candidates && Z > policy.candidate_threshold)
    result.candidates.push_back(make_candidate(bank, e.x, e.y, e.velocity, e.A, e.B, e.obs));
}

void finish_result(SearchResult& result, const OutputPolicy& policy, const std::string& note) {
  require(std::int64_t(result.candidates.size()) <= policy.max_candidates,
          "candidate list of " + std::to_string(result.candidates.size()) + " trials exceeds max_candidates (" +
              std::to_string(policy.max_candidates) + "): raise the candidate threshold or the limit");
  std::sort(result.candidates.begin(), result.candidates.end(), [](const Candidate& a, const Candidate& b) {
    if (a.velocity != b.velocity) return a.velocity < b.velocity;
    if (a.y != b.y) return a.y < b.y;
    return a.x < b.x;
  });
  result.note = note;
}

}  // namespace shiftstack::tree
