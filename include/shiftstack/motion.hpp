// The motion bank (SPEC section 2): epochs, reference time, velocities and a common curve.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace shiftstack {

enum class ShiftMode { integer, fractional };

struct Velocity {
  double vx = 0, vy = 0;  // pixels per day
  bool operator==(const Velocity&) const = default;
};

struct MotionBank {
  std::vector<double> epochs;  // t_e, days, in stack order (any order allowed)
  double t_ref = 0;            // reference time; origins are positions at t_ref
  // Cartesian grid: velocity index v = iy * vx_axis.size() + ix.
  std::vector<double> vx_axis, vy_axis;
  // Non-Cartesian banks (speed x angle, explicit lists) fill this instead; it wins when set.
  std::vector<Velocity> velocity_list;
  // Common curve c_e shared by all trajectories; empty means zero.
  std::vector<double> curve_x, curve_y;
  ShiftMode mode = ShiftMode::integer;

  bool is_cartesian() const { return velocity_list.empty(); }
  std::size_t vx_count() const { return vx_axis.size(); }
  std::size_t vy_count() const { return vy_axis.size(); }
  std::size_t size() const {
    return is_cartesian() ? vx_axis.size() * vy_axis.size() : velocity_list.size();
  }
  int exposures() const { return int(epochs.size()); }
  Velocity velocity(std::size_t v) const {
    if (!is_cartesian()) return velocity_list[v];
    return {vx_axis[v % vx_axis.size()], vy_axis[v / vx_axis.size()]};
  }
  double dt(int e) const { return epochs[e] - t_ref; }
  double curve_at_x(int e) const { return curve_x.empty() ? 0.0 : curve_x[e]; }
  double curve_at_y(int e) const { return curve_y.empty() ? 0.0 : curve_y[e]; }
  // s_{v,e} = v * (t_e - t_ref) + c_e, in pixels.
  double shift_x(std::size_t v, int e) const { return velocity(v).vx * dt(e) + curve_at_x(e); }
  double shift_y(std::size_t v, int e) const { return velocity(v).vy * dt(e) + curve_at_y(e); }
  // Every field equal (a NaN never is): the same trials and shifts, for caches keyed on a bank.
  bool operator==(const MotionBank&) const = default;
};

// Integer mode rounding, KBMOD's convention: round(s) = floor(s + 0.5). Saturates at
// +-2^30 (NaN gives +2^30) instead of overflowing the int; search() refuses banks whose
// shifts come anywhere near that (SearchLimits::max_shift_pixels).
inline int round_shift(double s) {
  constexpr double limit = double(1 << 30);
  const double r = std::floor(s + 0.5);
  return r < limit ? (r > -limit ? int(r) : -(1 << 30)) : (1 << 30);
}

// t_ref = middle of the epoch span.
double mid_span(const std::vector<double>& epochs);

// Checks the bank against a stack of `exposures` exposures: epochs finite and of the right count,
// non-empty velocities, finite values, curve sizes. Throws Error otherwise.
void validate(const MotionBank& bank, int exposures);

// Precomputed integer shifts for a Cartesian bank: shifts_x[ix * E + e], shifts_y[iy * E + e].
// The separable tables every fast engine and the Fourier route use.
struct SeparableShifts {
  int exposures = 0;
  std::vector<std::int32_t> x, y;
};
SeparableShifts integer_shifts(const MotionBank& bank);
// The same with floor(s): the first bilinear corner of fractional shifts.
SeparableShifts floor_shifts(const MotionBank& bank);

// Largest |integer shift| over the bank in x and in y (for halos and Fourier padding).
struct ShiftExtent {
  int min_x = 0, max_x = 0, min_y = 0, max_y = 0;
};
ShiftExtent shift_extent(const MotionBank& bank);

}  // namespace shiftstack
