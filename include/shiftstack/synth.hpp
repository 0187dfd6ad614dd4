// The benchmark kit (SPEC section 3): deterministic synthetic stacks with an injected source.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "shiftstack/motion.hpp"
#include "shiftstack/stack.hpp"

namespace shiftstack {

struct KitOptions {
  std::string name = "custom";
  int exposures = 32, width = 128, height = 128;
  int vx_count = 17, vy_count = 17;
  double velocity_displacement = 16;  // max |v (t - t_ref)| over the span, pixels
  double curve_amplitude = 3;         // max |c_e|, pixels
  double span_days = 10;
  // Cadence: 0 spreads the exposures over the span in jittered slots; n > 0 observes on n
  // nights (starts spread irregularly over the span), exposures / n per night at irregular
  // times within night_days.
  int nights = 0;
  double night_days = 0.25;
  std::uint64_t seed = 1;
  ShiftMode shift_mode = ShiftMode::integer;

  // Each feature is switchable for tests.
  bool varying_variance = true;   // smooth gradient/bump plus per-exposure sky level
  bool masked_holes = true;       // random masked holes
  bool bad_column = true;         // a masked column that moves between exposures
  bool variable_seeing = true;    // Gaussian PSF sigma in [psf_sigma_min, psf_sigma_max]
  bool irregular_epochs = true;   // irregular epochs and exposure times (-> throughput, sky)
  bool common_curve = true;       // quadratic-plus-periodic track c_e
  bool inject = true;             // one source on a bank trajectory
  // The source's velocity drawn uniformly inside the bank's range and its origin at a random
  // sub-pixel position, injected at its exact (unrounded) positions; Truth then names the
  // nearest bank trial.
  bool inject_off_grid = false;
  bool noise = true;              // Gaussian noise (off: the injected source alone)
  double psf_sigma_min = 1.0, psf_sigma_max = 1.65;
  double injected_snr = 8;
};

// Named workloads of SPEC 3 (dense, kbmod, deep, ci) and the multi-night `nights` (5 nights x
// 20 exposures over a week, 256 x 256, 65 x 65 velocities). Error for any other name.
KitOptions workload(const std::string& name);
const std::vector<std::string>& workload_names();

struct Truth {
  bool injected = false;
  int x = 0, y = 0;              // origin at t_ref (off-grid: the nearest pixel)
  std::int64_t velocity = -1;    // bank index (off-grid: the nearest bank velocity)
  double vx = 0, vy = 0;         // the source's own velocity
  double x_true = 0, y_true = 0; // the source's origin at t_ref (sub-pixel when off-grid)
  double flux = 0;               // f = snr / sqrt(B_true)
  double B = 0;                  // B along the true trajectory, from the actual maps
  double snr = 0;
};

struct KitStack {
  ExposureStack stack;
  MotionBank bank;
  Truth truth;
  KitOptions options;
};

KitStack make_kit(const KitOptions& options);

// Gaussian PSF kernel of the given sigma, odd size covering +-ceil(4 sigma), normalized to 1.
Image<float> gaussian_psf(double sigma);

}  // namespace shiftstack
