#include <cmath>

#include "cpu/exact_trial.hpp"
#include "shiftstack/motion.hpp"

namespace shiftstack {

namespace {
// decode() for one sample, weights applied; false (and zeros) for an invalid one. fp32 is read
// inline (the refinement's hot path), the rest through decode(). Returned through references:
// a DecodedSample returned from both paths was kept on the stack, and reloading its bool after
// a byte store stalled store forwarding on every sample (59% of the refinement's time there).
template <bool Fp32>
inline bool sample(const EncodedStack& s, int e, std::size_t pixel, float& psi, float& phi) {
  if constexpr (Fp32) {
    const std::size_t i = std::size_t(e) * s.plane_size() + pixel;
    const float p = s.fp32[2 * i], f = s.fp32[2 * i + 1];
    const bool valid = f > 0;
    psi = valid ? s.psi_weight[e] * p : 0.0f;
    phi = valid ? s.phi_weight[e] * f : 0.0f;
    return valid;
  } else {
    const DecodedSample d = decode(s, e, pixel);
    psi = d.psi;
    phi = d.phi;
    return d.valid;
  }
}

// Adds exposure e's sample at pixel (px, py) to a trial's sums, if inside the image and valid.
template <bool Fp32>
inline void add_sample(const EncodedStack& s, int e, int px, int py, ExactTrialSums& t) {
  if (px < 0 || py < 0 || px >= s.width || py >= s.height) return;
  float psi, phi;
  if (!sample<Fp32>(s, e, std::size_t(py) * s.width + px, psi, phi)) return;
  t.A += psi;
  t.B += phi;
  ++t.obs;
}

template <bool Fp32>
ExactTrialSums integer_trial(const EncodedStack& s, const std::vector<double>& sx, const std::vector<double>& sy,
                             int x, int y) {
  ExactTrialSums t;
  for (int e = 0; e < s.exposures; ++e) add_sample<Fp32>(s, e, x + round_shift(sx[e]), y + round_shift(sy[e]), t);
  return t;
}

template <bool Fp32>
void integer_trials(const EncodedStack& s, const int* const* shift_x, const int* const* shift_y, const int* x,
                    const int* y, int n, ExactTrialSums* out) {
  for (int t = 0; t < n; ++t) out[t] = ExactTrialSums{};
  for (int e = 0; e < s.exposures; ++e)
    for (int t = 0; t < n; ++t) add_sample<Fp32>(s, e, x[t] + shift_x[t][e], y[t] + shift_y[t][e], out[t]);
}
}  // namespace

ExactTrialSums exact_integer_trial(const EncodedStack& s, const std::vector<double>& sx,
                                   const std::vector<double>& sy, int x, int y) {
  return s.encoding == Encoding::fp32 ? integer_trial<true>(s, sx, sy, x, y) : integer_trial<false>(s, sx, sy, x, y);
}

void exact_integer_trials(const EncodedStack& s, const int* const* shift_x, const int* const* shift_y,
                          const int* x, const int* y, int n, ExactTrialSums* out) {
  if (s.encoding == Encoding::fp32) integer_trials<true>(s, shift_x, shift_y, x, y, n, out);
  else integer_trials<false>(s, shift_x, shift_y, x, y, n, out);
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
      float p, f;
      const std::size_t pixel = std::size_t(cy[c]) * s.width + cx[c];
      valid[c] = s.encoding == Encoding::fp32 ? sample<true>(s, e, pixel, p, f) : sample<false>(s, e, pixel, p, f);
      psi[c] = p;
      phi[c] = f;
      any |= valid[c];
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
