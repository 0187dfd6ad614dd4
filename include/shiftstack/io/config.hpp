// The search configuration: one commented YAML file (`shiftstack dump-config` prints the
// defaults). Keys KBMOD users know (lh_level, num_obs, sigmaG_lims, generator_config, ...)
// keep KBMOD's meaning; the README has the full mapping. Unknown keys are errors.
#pragma once
#include <array>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "shiftstack/encoding.hpp"
#include "shiftstack/io/fits.hpp"
#include "shiftstack/motion.hpp"
#include "shiftstack/pipeline.hpp"
#include "shiftstack/search.hpp"

namespace shiftstack::io {

// KBMOD's trajectory generators that make sense for a pixel-grid search.
struct VelocityGenerator {
  std::string name = "VelocityGridSearch";  // or EclipticCenteredSearch
  // VelocityGridSearch: a Cartesian grid, pixels per day, end points included.
  int vx_steps = 21, vy_steps = 21;
  double min_vx = -20, max_vx = 20, min_vy = -20, max_vy = 20;
  // EclipticCenteredSearch: speeds [min, max, n] (pixels/day) times angles [min, max, n]
  // around the ecliptic direction in the image (given, or computed from the WCS).
  std::array<double, 3> velocities{0, 0, 0}, angles{0, 0, 0};
  bool angles_in_degrees = false;
  std::optional<double> given_ecliptic;  // in the angle units; nullopt = from the WCS
};

struct SearchConfig {
  ReadOptions read;
  VelocityGenerator generator;
  std::string reference_time = "mid";  // "mid", "first" or an MJD as text
  ShiftMode shift_mode = ShiftMode::integer;
  Encoding encoding = Encoding::fp32;
  std::string engine = "auto";
  bool cpu_only = false;
  std::string likelihood_device = "auto";  // where psi/phi are computed and encoded: auto, gpu, cpu
  std::string gpus = "1";  // devices one search is split over: 1, all, N, or a list "0,1" (multi_device.hpp)
  std::optional<std::array<int, 2>> x_bounds, y_bounds;  // [start, end) of origins
  std::int64_t max_candidates = std::int64_t(1) << 26;
  FilterOptions filter;
  bool do_clustering = true;
  ClusterOptions cluster;
  std::int64_t max_results = 100000;  // -1 = all
  int stamp_radius = 10;
  CoaddType stamp_type = CoaddType::sum;
  std::vector<CoaddType> coadds = {CoaddType::mean, CoaddType::median, CoaddType::sum, CoaddType::weighted};
  bool compute_ra_dec = true;

  nlohmann::json effective;  // every key with its value, as used (for the run summary)
};

// The default configuration file, with comments (what `shiftstack dump-config` prints).
const std::string& default_config_text();

// Parses a YAML configuration over the defaults, then applies `overrides` ("key=value" or
// "generator_config.key=value", values in YAML syntax). `source` names the text in errors.
SearchConfig parse_config(const std::string& yaml, const std::string& source,
                          const std::vector<std::string>& overrides = {});
SearchConfig load_config(const std::string& path, const std::vector<std::string>& overrides = {});
SearchConfig default_config();

// The velocity bank the generator describes (epochs, t_ref, mode and common curve are the
// caller's). `ecliptic_angle` (radians, image x towards y) is used by EclipticCenteredSearch
// when the config gives none.
void fill_velocities(const VelocityGenerator& generator, MotionBank& bank,
                     std::optional<double> ecliptic_angle);

// Angle of the ecliptic's direction of increasing longitude at pixel (x, y) of an image,
// in radians from +x towards +y (KBMOD's convention for EclipticCenteredSearch).
double ecliptic_angle(const Wcs& wcs, double x, double y);

}  // namespace shiftstack::io
