// The search configuration: one commented YAML file (`shiftstack dump-config` prints the
// defaults). Every key of KBMOD's SearchConfiguration is accepted: implemented with KBMOD's
// meaning, accepted with a one-line notice where it has no effect here, or refused (one error
// lists every such key with the reason). docs/user-guide.md has the full mapping.
// Configurations come in layers, later ones overriding earlier ones key by key: the defaults, a
// WorkUnit's embedded configuration, the configuration file, then --set overrides.
#pragma once
#include <array>
#include <cstdint>
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

// KBMOD's trajectory generators (the `name` of generator_config). Velocities are pixels per
// day; angles are radians from +x towards +y once parsed (angle_units converts).
struct VelocityGenerator {
  std::string name = "VelocityGridSearch";
  // VelocityGridSearch: a Cartesian grid, end points included.
  int vx_steps = 21, vy_steps = 21;
  double min_vx = -20, max_vx = 20, min_vy = -20, max_vy = 20;
  // EclipticCenteredSearch: speeds [min, max, n] times angles [min, max, n] around the
  // ecliptic direction in the image (given, or computed from the WCS), end points included.
  // KBMODV1SearchConfig fills the same fields from v_arr, ang_arr and average_angle.
  std::array<double, 3> velocities{0, 0, 0}, angles{0, 0, 0};
  bool angles_in_degrees = false;        // units of angles and given_ecliptic as written
  std::optional<double> given_ecliptic;  // nullopt = from the WCS
  // KBMODV1Search: speeds and absolute angles, n steps each with the upper end excluded.
  int vel_steps = 0, ang_steps = 0;
  double min_vel = 0, max_vel = 0, min_ang = 0, max_ang = 0;
  // SingleVelocitySearch (vx, vy) and PencilSearch (a cone around (vx, vy)).
  double vx = 0, vy = 0;
  double max_ang_offset = 0.2618, ang_step = 0.035, max_vel_offset = 10, vel_step = 0.5;
};

struct SearchConfig {
  ReadOptions read;
  VelocityGenerator generator;
  // "first" (KBMOD's anchoring), "mid" or an MJD: the time at which the search places its
  // origins. Result x, y are always first-epoch positions.
  std::string reference_time = "first";
  ShiftMode shift_mode = ShiftMode::integer;
  Encoding encoding = Encoding::fp32;
  std::string engine = "auto";
  bool cpu_only = false;
  std::string likelihood_device = "auto";  // where psi/phi are computed and encoded: auto, gpu, cpu
  std::string gpus = "1";  // devices one search is split over: 1, all, N, or a list "0,1" (multi_device.hpp)
  // KBMOD's x/y_pixel_bounds: [start, end) of the trajectories' pixel at the first epoch.
  std::optional<std::array<int, 2>> x_bounds, y_bounds;
  std::optional<int> results_per_pixel = 8;  // best k per starting pixel (KBMOD); nullopt = all above lh_level
  std::int64_t max_candidates = std::int64_t(1) << 26;
  std::optional<double> timeout_hours;   // checked between stages
  FilterOptions filter;
  std::optional<double> near_dup_thresh = 10;  // KBMOD's grid thinning before the filter, pixels
  bool gpu_filter = false;                // KBMOD's in-search sigma-G prefilter (run on the host here)
  bool do_clustering = true;
  ClusterOptions cluster;
  std::int64_t max_results = 100000;  // -1 = all
  int stamp_radius = 10;
  CoaddType stamp_type = CoaddType::sum;
  std::vector<CoaddType> coadds = {CoaddType::mean, CoaddType::median, CoaddType::sum, CoaddType::weighted};
  bool save_all_stamps = false;          // the all_stamps column: one stamp per epoch
  bool compute_ra_dec = true;
  bool generate_psi_phi = true;          // write psi_curve and phi_curve
  std::vector<std::string> drop_columns;         // result columns not written
  std::vector<std::string> separate_col_files = {"all_stamps"};  // regexes: columns in own files
  std::optional<std::string> result_filename;    // output when no -o is given

  std::vector<std::string> notices;      // keys accepted without effect here, one line each
  std::vector<std::string> sources;      // the layers this configuration was built from
  nlohmann::json effective;  // every key with its value, as used (for the run summary)
};

// One layer of configuration: YAML text (a mapping) and where it came from. From an embedded
// layer (a WorkUnit's stored configuration) only keys of current KBMOD and of shiftstack are
// taken; keys of older KBMOD versions are ignored with one notice instead of refused.
struct ConfigLayer {
  std::string source;
  std::string yaml;
  bool embedded = false;
};

// The default configuration file, with comments (what `shiftstack dump-config` prints).
const std::string& default_config_text();

// Merges the layers over the defaults, then applies `overrides` ("key=value" or
// "generator_config.key=value", values in YAML syntax). Every problem (unknown or refused keys,
// bad values, duplicate keys) is reported in one Error.
SearchConfig parse_config(const std::vector<ConfigLayer>& layers, const std::vector<std::string>& overrides = {});
SearchConfig parse_config(const std::string& yaml, const std::string& source,
                          const std::vector<std::string>& overrides = {});
SearchConfig load_config(const std::string& path, const std::vector<std::string>& overrides = {});
SearchConfig default_config();
// The file's text as a layer (Error when unreadable).
ConfigLayer config_file_layer(const std::string& path);

// The embedded configurations of the WorkUnits among `files` (KBMOD_CONFIG tables), as embedded
// layers: the first WorkUnit's only; a warning names any other whose configuration differs.
std::vector<ConfigLayer> embedded_config_layers(const std::vector<std::string>& files, std::vector<std::string>& warnings);

// The velocity bank the generator describes (epochs, t_ref, mode and common curve are the
// caller's). `ecliptic_angle` (radians, image x towards y) is used by the ecliptic generators
// when the config gives none.
void fill_velocities(const VelocityGenerator& generator, MotionBank& bank,
                     std::optional<double> ecliptic_angle);

// Angle of the ecliptic's direction of increasing longitude at pixel (x, y) of an image,
// in radians from +x towards +y (KBMOD's convention for EclipticCenteredSearch).
double ecliptic_angle(const Wcs& wcs, double x, double y);

namespace detail {
// The KBMOD keys that are not implemented here: each accepted with a notice or refused.
// `neutral` lists the YAML values (as JSON) at which the key does nothing in KBMOD either.
struct KbmodKeyPolicy {
  std::string name;
  bool refused_unless_neutral = false;  // false: accepted, a notice when not neutral
  std::vector<nlohmann::json> neutral;
  std::string reason;
};
const std::vector<KbmodKeyPolicy>& kbmod_key_policies();
// Keys of older KBMOD versions (not in current KBMOD's SearchConfiguration), with a hint.
const std::vector<std::pair<std::string, std::string>>& obsolete_kbmod_keys();
}  // namespace detail

}  // namespace shiftstack::io
