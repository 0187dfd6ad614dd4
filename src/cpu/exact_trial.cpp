#include <cmath>

#include "cpu/exact_trial.hpp"
#include "shiftstack/motion.hpp"

namespace shiftstack {

namespace {
// decode() for one sample; fp32 inline (the refinement's hot path), the rest through decode().
inline DecodedSample sample(const EncodedStack& s, int e, std::size_t pixel) {
  if (s.encoding != Encoding::fp32) return decode(s, e, pixel);
  const std::size_t i = std::size_t(e) * s.plane_size() + pixel;
  const float psi = s.fp32[2 * i], phi = s.fp32[2 * i + 1];
  DecodedSample out;
  if (!(phi > 0)) return out;
  out.psi = s.psi_weight[e] * psi;
  out.phi = s.phi_weight[e] * phi;
  out.valid = true;
  return out;
}
}  // namespace

ExactTrialSums exact_integer_trial(const EncodedStack& s, const std::vector<double>& sx,
                                   const std::vector<double>& sy, int x, int y) {
  ExactTrialSums t;
  for (int e = 0; e < s.exposures; ++e) {
    const int px = x + round_shift(sx[e]), py = y + round_shift(sy[e]);
    if (px < 0 || py < 0 || px >= s.width || py >= s.height) continue;
    const DecodedSample d = sample(s, e, std::size_t(py) * s.width + px);
    if (!d.valid) continue;
    t.A += d.psi;
    t.B += d.phi;
    ++t.obs;
  }
  return t;
}

void exact_integer_trials(const EncodedStack& s, const int* const* shift_x, const int* const* shift_y,
                          const int* x, const int* y, int n, ExactTrialSums* out) {
  for (int t = 0; t < n; ++t) out[t] = ExactTrialSums{};
  for (int e = 0; e < s.exposures; ++e)
    for (int t = 0; t < n; ++t) {
      const int px = x[t] + shift_x[t][e], py = y[t] + shift_y[t][e];
      if (px < 0 || py < 0 || px >= s.width || py >= s.height) continue;
      const DecodedSample d = sample(s, e, std::size_t(py) * s.width + px);
      if (!d.valid) continue;
      out[t].A += d.psi;
      out[t].B += d.phi;
      ++out[t].obs;
    }
}

// B = sum_ij w_i w_j Cov(psi_i, psi_j) over the valid corners, neighbouring pairs from the
// covariance planes.
ExactTrialSums exact_bilinear_trial(const EncodedStack& s, const std::vector<double>& sx,
                                    const std::vector<double>& sy, int x, int y) {
  ExactTrialSums t;
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
      const DecodedSample d = sample(s, e, std::size_t(cy[c]) * s.width + cx[c]);
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

}  // namespace shiftstack
