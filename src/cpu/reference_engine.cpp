// The `reference` engine: the oracle every other engine is tested against. Plain loops, double
// accumulation, one decode() call per sample; parallel over origin rows only, with the per-row
// digests merged in row order so the result is the same on any thread count.
#include <algorithm>
#include <cmath>
#include <limits>

#include "core/engine_registry.hpp"
#include "shiftstack/error.hpp"
#include "shiftstack/search.hpp"

namespace shiftstack {

void register_cpu_fast_engine();  // cpu_engine.cpp

namespace {

struct TrialSums {
  double A = 0, B = 0;
  int obs = 0;
};

// Integer mode: the nearest pixel, floor(x + s + 0.5).
TrialSums integer_trial(const EncodedStack& s, const std::vector<double>& sx,
                        const std::vector<double>& sy, int x, int y) {
  TrialSums t;
  for (int e = 0; e < s.exposures; ++e) {
    const int px = x + round_shift(sx[e]), py = y + round_shift(sy[e]);
    if (px < 0 || py < 0 || px >= s.width || py >= s.height) continue;
    const DecodedSample d = decode(s, e, std::size_t(py) * s.width + px);
    if (!d.valid) continue;
    t.A += d.psi;
    t.B += d.phi;
    ++t.obs;
  }
  return t;
}

// Fractional mode: bilinear A = sum_i w_i psi_i over valid corners; B its exact variance,
// sum_ij w_i w_j Cov(psi_i, psi_j), with the covariances of neighbouring samples (SPEC 2).
TrialSums bilinear_trial(const EncodedStack& s, const std::vector<double>& sx,
                         const std::vector<double>& sy, int x, int y) {
  TrialSums t;
  const std::size_t plane = s.plane_size();
  for (int e = 0; e < s.exposures; ++e) {
    const double u = x + sx[e], v = y + sy[e];
    const int ix = int(std::floor(u)), iy = int(std::floor(v));
    const double fx = u - ix, fy = v - iy;
    // Corners 0:(ix,iy) 1:(ix+1,iy) 2:(ix,iy+1) 3:(ix+1,iy+1).
    const int cx[4] = {ix, ix + 1, ix, ix + 1}, cy[4] = {iy, iy, iy + 1, iy + 1};
    const double w[4] = {(1 - fx) * (1 - fy), fx * (1 - fy), (1 - fx) * fy, fx * fy};
    bool valid[4];
    double psi[4] = {}, phi[4] = {};
    bool any = false;
    for (int c = 0; c < 4; ++c) {
      valid[c] = false;
      if (cx[c] < 0 || cy[c] < 0 || cx[c] >= s.width || cy[c] >= s.height || w[c] == 0) continue;
      const DecodedSample d = decode(s, e, std::size_t(cy[c]) * s.width + cx[c]);
      valid[c] = d.valid;
      psi[c] = d.psi;
      phi[c] = d.phi;
      any |= d.valid;
    }
    if (!any) continue;
    ++t.obs;
    const double weight = s.phi_weight[e];
    auto cov = [&](const std::vector<float>& plane_data, int px, int py) {
      return weight * plane_data[e * plane + std::size_t(py) * s.width + px];
    };
    for (int c = 0; c < 4; ++c)
      if (valid[c]) {
        t.A += w[c] * psi[c];
        t.B += w[c] * w[c] * phi[c];
      }
    // Each neighbouring pair once, doubled.
    if (valid[0] && valid[1]) t.B += 2 * w[0] * w[1] * cov(s.cov_right, ix, iy);
    if (valid[2] && valid[3]) t.B += 2 * w[2] * w[3] * cov(s.cov_right, ix, iy + 1);
    if (valid[0] && valid[2]) t.B += 2 * w[0] * w[2] * cov(s.cov_down, ix, iy);
    if (valid[1] && valid[3]) t.B += 2 * w[1] * w[3] * cov(s.cov_down, ix + 1, iy);
    if (valid[0] && valid[3]) t.B += 2 * w[0] * w[3] * cov(s.cov_diag, ix, iy);
    if (valid[1] && valid[2]) t.B += 2 * w[1] * w[2] * cov(s.cov_antidiag, ix, iy);
  }
  return t;
}

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
    ProgressCounter progress(in.policy.progress, r.count() * V);

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
          const TrialSums t = bank.mode == ShiftMode::integer ? integer_trial(s, sx[v], sy[v], x, y)
                                                              : bilinear_trial(s, sx[v], sy[v], x, y);
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
      progress.add(std::int64_t(r.width) * V);
    }
    if (in.policy.stop_requested()) throw Cancelled("reference engine: search stopped on request");
    progress.finish();
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
