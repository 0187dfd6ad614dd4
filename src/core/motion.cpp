#include <algorithm>
#include <cmath>
#include <set>
#include <string>

#include "shiftstack/error.hpp"
#include "shiftstack/motion.hpp"

namespace shiftstack {

double mid_span(const std::vector<double>& epochs) {
  require(!epochs.empty(), "no epochs");
  auto [lo, hi] = std::minmax_element(epochs.begin(), epochs.end());
  return 0.5 * (*lo + *hi);
}

void validate(const MotionBank& bank, int exposures) {
  require(bank.exposures() == exposures,
          "motion bank has " + std::to_string(bank.exposures()) + " epochs but the stack has " +
              std::to_string(exposures) + " exposures");
  require(exposures > 0, "motion bank has no epochs");
  require(bank.size() > 0, "motion bank has no velocities");
  require(std::isfinite(bank.t_ref), "motion bank t_ref is not finite");
  // Exposures may share an epoch (two snaps, two detectors on one grid): each still adds its own
  // independent samples to A and B.
  for (int e = 0; e < exposures; ++e)
    require(std::isfinite(bank.epochs[e]), "epoch " + std::to_string(e) + " is not finite");
  require(bank.curve_x.empty() || int(bank.curve_x.size()) == exposures,
          "common curve x has " + std::to_string(bank.curve_x.size()) + " values for " +
              std::to_string(exposures) + " exposures");
  require(bank.curve_y.empty() || int(bank.curve_y.size()) == exposures,
          "common curve y has " + std::to_string(bank.curve_y.size()) + " values for " +
              std::to_string(exposures) + " exposures");
  for (double c : bank.curve_x) require(std::isfinite(c), "common curve x is not finite");
  for (double c : bank.curve_y) require(std::isfinite(c), "common curve y is not finite");
  for (double v : bank.vx_axis) require(std::isfinite(v), "velocity grid vx is not finite");
  for (double v : bank.vy_axis) require(std::isfinite(v), "velocity grid vy is not finite");
  for (const auto& v : bank.velocity_list)
    require(std::isfinite(v.vx) && std::isfinite(v.vy), "velocity list has a non-finite value");
}

namespace {
// Per-axis shift tables of a Cartesian bank, each shift s = v * (t_e - t_ref) + c_e made integer
// by `to_pixel`.
template <typename ToPixel>
SeparableShifts separable_shifts(const MotionBank& bank, const char* what, ToPixel to_pixel) {
  require(bank.is_cartesian(), std::string(what) + " needs a Cartesian velocity grid");
  const int E = bank.exposures();
  SeparableShifts s;
  s.exposures = E;
  s.x.resize(bank.vx_count() * E);
  s.y.resize(bank.vy_count() * E);
  for (std::size_t a = 0; a < bank.vx_count(); ++a)
    for (int e = 0; e < E; ++e)
      s.x[a * E + e] = to_pixel(bank.vx_axis[a] * bank.dt(e) + bank.curve_at_x(e));
  for (std::size_t b = 0; b < bank.vy_count(); ++b)
    for (int e = 0; e < E; ++e)
      s.y[b * E + e] = to_pixel(bank.vy_axis[b] * bank.dt(e) + bank.curve_at_y(e));
  return s;
}
}  // namespace

SeparableShifts integer_shifts(const MotionBank& bank) {
  return separable_shifts(bank, "integer_shifts", round_shift);
}

SeparableShifts floor_shifts(const MotionBank& bank) {
  return separable_shifts(bank, "floor_shifts", [](double s) { return std::int32_t(std::floor(s)); });
}

ShiftExtent shift_extent(const MotionBank& bank) {
  ShiftExtent ext;
  const bool fractional = bank.mode == ShiftMode::fractional;
  auto lo = [&](double s) { return fractional ? int(std::floor(s)) : round_shift(s); };
  auto hi = [&](double s) { return fractional ? int(std::floor(s)) + 1 : round_shift(s); };
  bool first = true;
  auto visit = [&](double sx, double sy) {
    if (first) {
      ext = {lo(sx), hi(sx), lo(sy), hi(sy)};
      first = false;
      return;
    }
    ext.min_x = std::min(ext.min_x, lo(sx));
    ext.max_x = std::max(ext.max_x, hi(sx));
    ext.min_y = std::min(ext.min_y, lo(sy));
    ext.max_y = std::max(ext.max_y, hi(sy));
  };
  const int E = bank.exposures();
  if (bank.is_cartesian() && !bank.vx_axis.empty() && !bank.vy_axis.empty()) {
    // x depends only on vx and y only on vy, each through s = v dt + c, which (rounded as
    // computed) never decreases or never increases with v; lo and hi never decrease with s. So
    // the extremes lie at each axis's smallest and largest value: four visits per exposure.
    const auto [vx_lo, vx_hi] = std::minmax_element(bank.vx_axis.begin(), bank.vx_axis.end());
    const auto [vy_lo, vy_hi] = std::minmax_element(bank.vy_axis.begin(), bank.vy_axis.end());
    for (int e = 0; e < E; ++e)
      for (double vx : {*vx_lo, *vx_hi})
        for (double vy : {*vy_lo, *vy_hi})
          visit(vx * bank.dt(e) + bank.curve_at_x(e), vy * bank.dt(e) + bank.curve_at_y(e));
  } else {
    for (std::size_t v = 0; v < bank.size(); ++v)
      for (int e = 0; e < E; ++e) visit(bank.shift_x(v, e), bank.shift_y(v, e));
  }
  return ext;
}

}  // namespace shiftstack
