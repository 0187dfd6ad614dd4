// Trajectory positions and per-exposure light curves, sampled exactly as the reference engine
// samples them, so that the sums of a light curve are the search's A and B.
#include <cmath>
#include <limits>

#include "shiftstack/error.hpp"
#include "shiftstack/pipeline.hpp"

namespace shiftstack {

PixelPosition predicted_position(const MotionBank& bank, int x, int y, std::size_t velocity, int e) {
  return {x + bank.shift_x(velocity, e), y + bank.shift_y(velocity, e)};
}

PixelIndex sampled_pixel(const MotionBank& bank, int x, int y, std::size_t velocity, int e) {
  if (bank.mode == ShiftMode::integer)
    return {x + round_shift(bank.shift_x(velocity, e)), y + round_shift(bank.shift_y(velocity, e))};
  const PixelPosition p = predicted_position(bank, x, y, velocity, e);
  return {round_shift(p.x), round_shift(p.y)};
}

namespace {

bool inside(const LikelihoodStack& s, int x, int y) {
  return x >= 0 && y >= 0 && x < s.width && y < s.height;
}

// Bilinear sample with its exact variance (SPEC 2), corner by corner as the reference engine:
// a corner counts when it is inside the image, has a non-zero weight and phi > 0.
void bilinear_sample(const LikelihoodStack& s, int e, double u, double v, double& psi, double& phi,
                     bool& valid) {
  const int ix = int(std::floor(u)), iy = int(std::floor(v));
  const double fx = u - ix, fy = v - iy;
  const int cx[4] = {ix, ix + 1, ix, ix + 1}, cy[4] = {iy, iy, iy + 1, iy + 1};
  const double w[4] = {(1 - fx) * (1 - fy), fx * (1 - fy), (1 - fx) * fy, fx * fy};
  bool ok[4];
  psi = phi = 0;
  valid = false;
  for (int c = 0; c < 4; ++c) {
    ok[c] = inside(s, cx[c], cy[c]) && w[c] != 0 && s.phi[s.index(e, cx[c], cy[c])] > 0;
    if (!ok[c]) continue;
    valid = true;
    psi += w[c] * s.psi[s.index(e, cx[c], cy[c])];
    phi += w[c] * w[c] * s.phi[s.index(e, cx[c], cy[c])];
  }
  if (!valid) return;
  auto cov = [&](const std::vector<float>& plane, int px, int py) { return double(plane[s.index(e, px, py)]); };
  if (ok[0] && ok[1]) phi += 2 * w[0] * w[1] * cov(s.cov_right, ix, iy);
  if (ok[2] && ok[3]) phi += 2 * w[2] * w[3] * cov(s.cov_right, ix, iy + 1);
  if (ok[0] && ok[2]) phi += 2 * w[0] * w[2] * cov(s.cov_down, ix, iy);
  if (ok[1] && ok[3]) phi += 2 * w[1] * w[3] * cov(s.cov_down, ix + 1, iy);
  if (ok[0] && ok[3]) phi += 2 * w[0] * w[3] * cov(s.cov_diag, ix, iy);
  if (ok[1] && ok[2]) phi += 2 * w[1] * w[2] * cov(s.cov_antidiag, ix, iy);
}

}  // namespace

LightCurve light_curve(const LikelihoodStack& s, const MotionBank& bank, int x, int y,
                       std::size_t velocity) {
  const int E = s.exposures;
  require(bank.exposures() == E, "light curve: the motion bank has " +
                                     std::to_string(bank.exposures()) + " epochs, the stack " +
                                     std::to_string(E) + " exposures");
  require(velocity < bank.size(), "light curve: velocity index " + std::to_string(velocity) +
                                      " outside the bank of " + std::to_string(bank.size()));
  const bool fractional = bank.mode == ShiftMode::fractional;
  require(!fractional || s.has_covariances(),
          "light curve: fractional shifts need the likelihood's covariance planes");
  LightCurve c;
  c.psi.assign(E, 0.0);
  c.phi.assign(E, 0.0);
  c.valid.assign(E, 0);
  for (int e = 0; e < E; ++e) {
    const double a = s.throughput.empty() ? 1.0 : s.throughput[e];
    double psi = 0, phi = 0;
    bool valid = false;
    if (fractional) {
      const PixelPosition p = predicted_position(bank, x, y, velocity, e);
      bilinear_sample(s, e, p.x, p.y, psi, phi, valid);
    } else {
      const PixelIndex p = sampled_pixel(bank, x, y, velocity, e);
      if (inside(s, p.x, p.y)) {
        phi = s.phi[s.index(e, p.x, p.y)];
        psi = s.psi[s.index(e, p.x, p.y)];
        valid = phi > 0;
      }
    }
    if (!valid) continue;
    c.psi[e] = a * psi;
    c.phi[e] = a * a * phi;
    c.valid[e] = 1;
  }
  return c;
}

std::vector<double> likelihood_curve(const LightCurve& curve) {
  std::vector<double> lh(curve.psi.size(), std::numeric_limits<double>::quiet_NaN());
  for (std::size_t e = 0; e < lh.size(); ++e)
    if (curve.valid[e] && curve.phi[e] > 0) lh[e] = curve.psi[e] / std::sqrt(curve.phi[e]);
  return lh;
}

}  // namespace shiftstack
