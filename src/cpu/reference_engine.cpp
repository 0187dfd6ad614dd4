// The `reference` engine: the oracle every other engine is tested against. Plain loops, double
// accumulation, one decode() call per sample; parallel over origin rows only, with the per-row
// digests merged in row order so the result is the same on any thread count.
#include <algorithm>
#include <cmath>
#include <limits>

#include "core/engine_registry.hpp"
#include "cpu/exact_trial.hpp"
#include "shiftstack/error.hpp"
#include "shiftstack/search.hpp"

namespace shiftstack {

void register_cpu_fast_engine();  // cpu_engine.cpp

namespace {

class ReferenceEngine final : public Engine {
 public:
  std::string name() const override { return "reference"; }
  std::string unsupported_reason(const SearchInput&) const override { return {}; }

  SearchResult search(const SearchInput& in) override {
    const EncodedStack& s = *in.stack;
    const MotionBank& bank = *in.bank;
    const Region r = in.region;
    const std::int64_t V = std::int64_t(bank.size());
    const int k = in.policy.top_k;
    const double z_thr = digest_threshold(in);

    // Shifts per velocity and exposure, in double, straight from SPEC 2.
    std::vector<std::vector<double>> sx(V, std::vector<double>(s.exposures)), sy = sx;
    for (std::int64_t v = 0; v < V; ++v)
      for (int e = 0; e < s.exposures; ++e) {
        sx[v][e] = bank.shift_x(v, e);
        sy[v][e] = bank.shift_y(v, e);
      }

    SearchResult result;
    std::vector<Digest> row_digest(r.height);
    std::vector<std::vector<Candidate>> row_candidates(r.height);
    if (k > 0) result.top_k.resize(std::size_t(r.count()) * k);
    bool overflow = false;

#pragma omp parallel for schedule(dynamic, 1)
    for (int j = 0; j < r.height; ++j) {
      if (in.policy.stop_requested()) continue;  // a stop request skips the remaining rows
      Digest& digest = row_digest[j];
      digest.z_thr = z_thr;
      std::vector<Candidate> best;
      for (int i = 0; i < r.width; ++i) {
        const int x = r.x0 + i, y = r.y0 + j;
        best.clear();
        for (std::int64_t v = 0; v < V; ++v) {
          const ExactTrialSums t = bank.mode == ShiftMode::integer ? exact_integer_trial(s, sx[v], sy[v], x, y)
                                                                   : exact_bilinear_trial(s, sx[v], sy[v], x, y);
          if (!(t.B > 0)) continue;
          const double Z = t.A / std::sqrt(t.B);
          digest.add(t.A, t.B, Z, x, y, v);
          const bool wanted = (in.policy.collect_candidates && Z > in.policy.candidate_threshold);
          if (!wanted && k == 0) continue;
          const Velocity vel = bank.velocity(v);
          const Candidate c{x, y, std::int32_t(v), float(vel.vx), float(vel.vy), float(t.A),
                            float(t.B), float(Z), float(t.A / t.B), t.obs};
          if (wanted) row_candidates[j].push_back(c);
          if (k > 0) {
            best.push_back(c);
            std::push_heap(best.begin(), best.end(), better_candidate);  // worst on top
            if (int(best.size()) > k) {
              std::pop_heap(best.begin(), best.end(), better_candidate);
              best.pop_back();
            }
          }
        }
        if (k > 0) {
          std::sort(best.begin(), best.end(), better_candidate);
          Candidate* out = &result.top_k[(std::size_t(j) * r.width + i) * k];
          for (int n = 0; n < k; ++n) {
            if (n < int(best.size())) {
              out[n] = best[n];
            } else {
              out[n] = Candidate{x, y, -1, 0, 0, 0, 0, -std::numeric_limits<float>::infinity(), 0, 0};
            }
          }
        }
      }
    }
    if (in.policy.stop_requested()) throw Cancelled("reference engine: search stopped on request");
    result.digest.z_thr = z_thr;
    std::int64_t total = 0;
    for (int j = 0; j < r.height; ++j) {
      result.digest.merge(row_digest[j]);
      total += std::int64_t(row_candidates[j].size());
    }
    overflow = total > in.policy.max_candidates;
    require(!overflow, "candidate list of " + std::to_string(total) + " trials exceeds max_candidates (" +
                           std::to_string(in.policy.max_candidates) +
                           "): raise the candidate threshold or the limit");
    for (auto& list : row_candidates)
      result.candidates.insert(result.candidates.end(), list.begin(), list.end());
    std::sort(result.candidates.begin(), result.candidates.end(),
              [](const Candidate& a, const Candidate& b) {
                if (a.velocity != b.velocity) return a.velocity < b.velocity;
                if (a.y != b.y) return a.y < b.y;
                return a.x < b.x;
              });
    return result;
  }
};

}  // namespace

void register_cpu_engines() {
  register_engine({"reference", "double-precision CPU oracle: plain loops, auditable", false, 0,
                   [] { return std::make_unique<ReferenceEngine>(); }, nullptr});
  register_cpu_fast_engine();
}

}  // namespace shiftstack
