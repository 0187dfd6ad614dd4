// The YAML configuration: the default text below is both what `dump-config` prints and the
// source of every default, so the two cannot drift apart.
#include "shiftstack/io/config.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <numbers>
#include <set>
#include <sstream>

#include "shiftstack/error.hpp"
#include "shiftstack/multi_device.hpp"

namespace shiftstack::io {

const std::string& default_config_text() {
  static const std::string text = R"(# shiftstack search configuration (YAML). Print the defaults with `shiftstack dump-config`;
# override any key on the command line with --set key=value (generator_config.key=value).
# Keys marked [KBMOD] mean what they mean in KBMOD's SearchConfiguration. Unknown keys are errors.

# ---- input ---------------------------------------------------------------------------------
layout: auto                # auto | rubin | workunit (KBMOD WorkUnit: SCI_i, VAR_i, MSK_i, PSF_i)
science_hdu: IMAGE          # EXTNAME of the science plane (Rubin layout); unnamed files: HDU 1
mask_hdu: MASK              # EXTNAME of the mask plane (unnamed files: HDU 2); may be absent
variance_hdu: VARIANCE      # EXTNAME of the noise plane (unnamed files: HDU 3)
variance_type: variance     # variance | sigma | weight (inverse variance): what that plane holds
mask_type: planes           # planes: bits named by MP_* keywords | bitmask: integer codes (DECam)
flag_keys: [BAD, CLIPPED, CR, CROSSTALK, EDGE, INTRP, NO_DATA, SAT, SENSOR_EDGE, SUSPECT]  # [KBMOD] planes that reject a pixel
mask_bitmask: 0xFFFFFFFF    # mask_type bitmask: a pixel whose code has any of these bits is rejected
max_masked_pixels: 0.5      # [KBMOD] exposures with a larger masked fraction are dropped
epoch_keyword: auto         # auto: DATE-AVG, MJD-AVG, MJD-OBS, MJD, then DATE-OBS + EXPTIME/2; or one keyword
throughput_keyword: THROUGHP  # relative throughput a_e of each exposure; 1 when absent
curve_keywords: [CURVE_X, CURVE_Y]  # per-exposure common-curve offsets (pixels); 0 when absent
psf_hdu: PSF                # per-exposure PSF kernel HDU (WorkUnits: PSF_i); without one: psf_val
psf_val: 1.4                # [KBMOD] Gaussian PSF sigma in pixels for files without a kernel

# ---- search --------------------------------------------------------------------------------
generator_config:           # [KBMOD] the velocities searched, pixels per day
  name: VelocityGridSearch  # or EclipticCenteredSearch with velocities: [min, max, n],
  vx_steps: 21              #   angles: [min, max, n], angle_units: radian|degree and
  min_vx: -20.0             #   given_ecliptic: angle (null: computed from the WCS)
  max_vx: 20.0
  vy_steps: 21
  min_vy: -20.0
  max_vy: 20.0
reference_time: mid         # mid | first | an MJD: the origins (x, y) are positions at this time
shift_mode: integer         # integer (KBMOD's rounding) | fractional (bilinear, exact variance)
encode_num_bytes: -1        # [KBMOD] psi/phi storage: -1 float32, 2 float16, 1 int8 scaled to the noise
engine: auto                # auto: the fastest available engine; or one by name (reference, cpu, ...)
cpu_only: false             # [KBMOD] with engine auto, never pick a GPU engine
likelihood_device: auto     # psi/phi maps and encoding: auto (GPU if present and allowed) | gpu | cpu
gpus: 1                     # GPUs one search is split over: 1 | all | N (the first N) | [0, 1] (a repeat shares a card)
x_pixel_bounds: null        # [KBMOD] [start, end) of the origins' x; null: the whole image
y_pixel_bounds: null        # [KBMOD] [start, end) of the origins' y
max_candidates: 67108864    # more threshold crossings than this stop the run (never truncated)

# ---- filtering -----------------------------------------------------------------------------
lh_level: 7.0               # [KBMOD] minimum likelihood psi/sqrt(phi), in the search and after clipping
num_obs: 10                 # [KBMOD] minimum valid observations; more than the exposures (or -1): all
sigmaG_filter: true         # [KBMOD] clip outlying epochs of each light curve (sigma-G)
sigmaG_lims: [25, 75]       # [KBMOD] percentiles that estimate sigma
sigmaG_nsigma: 2.0          # half-width of the kept band, in units of sigma_G (KBMOD uses 2)
clip_negative: false        # [KBMOD] percentiles over positive values only

# ---- clustering ----------------------------------------------------------------------------
do_clustering: true         # [KBMOD] merge duplicate detections of one source
cluster_type: all           # [KBMOD] all: (x, y, vx*s, vy*s) | position | mid_position | start_end_position
cluster_eps: 4.0            # [KBMOD] friends-of-friends linking length, pixels
cluster_v_scale: half_span  # [KBMOD] s in days for cluster_type all; half_span: half the epoch span

# ---- output --------------------------------------------------------------------------------
max_results: 100000         # [KBMOD] keep the best this many after clustering; -1: all
stamp_radius: 10            # [KBMOD] stamps are (2 r + 1) pixels on a side
stamp_type: sum             # [KBMOD] the coadd written as the `stamp` column: sum|mean|median|weighted
coadds: [mean, median, sum, weighted]  # [KBMOD] coadds written as coadd_<type> columns
compute_ra_dec: true        # [KBMOD] RA/Dec at the first and last epoch (needs a WCS)
)";
  return text;
}

namespace {

// KBMOD keys that have no counterpart here, with the reason (an error says which).
const std::map<std::string, std::string>& unsupported_kbmod_keys() {
  static const std::map<std::string, std::string> keys = {
      {"results_per_pixel", "shiftstack keeps every trial above lh_level instead of a top-k per pixel"},
      {"x_pixel_buffer", "origins outside the image are not searched; use x_pixel_bounds"},
      {"y_pixel_buffer", "origins outside the image are not searched; use y_pixel_bounds"},
      {"do_stamp_filter", "stamp filtering is not implemented"},
      {"center_thresh", "stamp filtering is not implemented"},
      {"peak_offset", "stamp filtering is not implemented"},
      {"peak_offset_max", "stamp filtering is not implemented"},
      {"mom_lims", "stamp filtering is not implemented"},
      {"gpu_filter", "filtering runs on the CPU"},
      {"chunk_size", "filtering is not batched"},
      {"bary_dist", "give per-exposure offsets through curve_keywords instead"},
      {"im_filepath", "inputs are given on the command line"},
      {"result_filename", "use -o on the command line"},
      {"res_filepath", "use -o on the command line"},
      {"save_all_stamps", "only coadded stamps are written"},
      {"psf_file", "PSF kernels come from each file's PSF HDU"},
      {"cnn_filter", "no CNN filtering"},
      {"track_filtered", "filter counts are in the run summary"},
      {"near_dup_thresh", "duplicates are merged by clustering"},
      {"pred_line_cluster", "not implemented"},
      {"nightly_coadds", "not implemented"},
      {"color_scale", "not implemented"},
      {"max_lh", "not implemented"},
      {"v_arr", "use generator_config"},
      {"ang_arr", "use generator_config"},
      {"average_angle", "use generator_config: EclipticCenteredSearch given_ecliptic"},
      {"do_mask", "masks are always applied; choose planes with flag_keys"},
      {"mask_bits_dict", "plane numbers come from the files' MP_* keywords"},
      {"repeated_flag_keys", "not implemented"},
      {"encode_psi_bytes", "use encode_num_bytes"},
      {"encode_phi_bytes", "use encode_num_bytes"},
      {"debug", "progress is always printed (--quiet silences it)"},
      {"num_cores", "threads follow OMP_NUM_THREADS"},
      {"drop_columns", "not implemented"},
      {"separate_col_files", "stamps are written to their own FITS file"},
      {"generate_psi_phi", "psi/phi curves are always written"},
      {"timeout_hours", "not implemented"},
      {"save_config", "the effective configuration is always in the run summary"},
  };
  return keys;
}

std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

[[noreturn]] void unknown_key(const std::string& key, const std::string& source,
                              const std::vector<std::string>& known) {
  const auto& unsupported = unsupported_kbmod_keys();
  if (auto it = unsupported.find(key); it != unsupported.end())
    throw Error(source + ": KBMOD key '" + key + "' is not supported by shiftstack: " + it->second);
  std::string best;
  std::size_t best_distance = 4;  // suggest only close spellings
  for (const auto& k : known) {
    const std::size_t d = edit_distance(key, k);
    if (d < best_distance) {
      best_distance = d;
      best = k;
    }
  }
  throw Error(source + ": unknown key '" + key + "'" + (best.empty() ? "" : " (did you mean '" + best + "'?)") +
              "; `shiftstack dump-config` lists every key");
}

YAML::Node load_yaml(const std::string& text, const std::string& source) {
  try {
    return YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw Error(source + ": not valid YAML: " + e.what());
  }
}

// ---- typed access with messages naming the key --------------------------------------------

std::string scalar_text(const YAML::Node& n, const std::string& key) {
  if (!n.IsScalar()) throw Error("config key " + key + ": expected a single value");
  return n.Scalar();
}

double get_double(const YAML::Node& n, const std::string& key) {
  const std::string text = scalar_text(n, key);
  try {
    std::size_t used = 0;
    const double v = std::stod(text, &used);
    if (used == text.size() && std::isfinite(v)) return v;
  } catch (const std::exception&) {
  }
  throw Error("config key " + key + ": expected a finite number, got '" + text + "'");
}

std::int64_t get_int(const YAML::Node& n, const std::string& key) {
  const std::string text = scalar_text(n, key);
  try {
    std::size_t used = 0;
    const long long v = std::stoll(text, &used, 0);
    if (used == text.size()) return v;
  } catch (const std::exception&) {
  }
  throw Error("config key " + key + ": expected an integer, got '" + text + "'");
}

std::uint64_t get_unsigned(const YAML::Node& n, const std::string& key) {
  const std::string text = scalar_text(n, key);
  try {
    std::size_t used = 0;
    if (!text.empty() && text[0] != '-') {
      const unsigned long long v = std::stoull(text, &used, 0);  // base 0: 0x... is hexadecimal
      if (used == text.size()) return v;
    }
  } catch (const std::exception&) {
  }
  throw Error("config key " + key + ": expected a non-negative integer (0x... allowed), got '" + text + "'");
}

bool get_bool(const YAML::Node& n, const std::string& key) {
  const std::string text = scalar_text(n, key);
  if (text == "true" || text == "True" || text == "TRUE" || text == "yes") return true;
  if (text == "false" || text == "False" || text == "FALSE" || text == "no") return false;
  throw Error("config key " + key + ": expected true or false, got '" + text + "'");
}

std::string get_string(const YAML::Node& n, const std::string& key) { return scalar_text(n, key); }

std::string get_choice(const YAML::Node& n, const std::string& key, const std::vector<std::string>& choices) {
  const std::string v = get_string(n, key);
  if (std::find(choices.begin(), choices.end(), v) != choices.end()) return v;
  std::string list;
  for (const auto& c : choices) list += (list.empty() ? "" : ", ") + c;
  throw Error("config key " + key + ": '" + v + "' is not one of " + list);
}

std::vector<std::string> get_strings(const YAML::Node& n, const std::string& key) {
  if (!n.IsSequence()) throw Error("config key " + key + ": expected a list, e.g. [A, B]");
  std::vector<std::string> out;
  for (const auto& item : n) out.push_back(scalar_text(item, key));
  return out;
}

std::vector<double> get_numbers(const YAML::Node& n, const std::string& key, std::size_t count) {
  if (!n.IsSequence() || n.size() != count)
    throw Error("config key " + key + ": expected a list of " + std::to_string(count) + " numbers");
  std::vector<double> out;
  for (const auto& item : n) out.push_back(get_double(item, key));
  return out;
}

std::optional<std::array<int, 2>> get_bounds(const YAML::Node& n, const std::string& key) {
  if (n.IsNull()) return std::nullopt;
  if (!n.IsSequence() || n.size() != 2) throw Error("config key " + key + ": expected null or [start, end]");
  const std::int64_t a = get_int(n[0], key), b = get_int(n[1], key);
  if (a < 0 || b <= a) throw Error("config key " + key + ": need 0 <= start < end, got [" + std::to_string(a) + ", " + std::to_string(b) + "]");
  return std::array<int, 2>{int(a), int(b)};
}

nlohmann::json to_json(const YAML::Node& n) {
  if (!n || n.IsNull()) return nullptr;
  if (n.IsSequence()) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& item : n) out.push_back(to_json(item));
    return out;
  }
  if (n.IsMap()) {
    nlohmann::json out = nlohmann::json::object();
    for (const auto& kv : n) out[kv.first.Scalar()] = to_json(kv.second);
    return out;
  }
  const std::string text = n.Scalar();
  if (text == "true") return true;
  if (text == "false") return false;
  try {
    std::size_t used = 0;
    const long long i = std::stoll(text, &used, 10);
    if (used == text.size()) return i;
  } catch (const std::exception&) {
  }
  try {
    std::size_t used = 0;
    const double d = std::stod(text, &used);
    if (used == text.size()) return d;
  } catch (const std::exception&) {
  }
  return text;
}

// ---- generator_config -----------------------------------------------------------------------

VelocityGenerator parse_generator(const YAML::Node& n) {
  const std::string where = "generator_config";
  if (!n.IsMap()) throw Error("config key " + where + ": expected a mapping with a name");
  if (!n["name"]) throw Error("config key " + where + ": needs a name (VelocityGridSearch or EclipticCenteredSearch)");
  VelocityGenerator g;
  g.name = get_choice(n["name"], where + ".name", {"VelocityGridSearch", "EclipticCenteredSearch"});
  std::vector<std::string> keys;
  if (g.name == "VelocityGridSearch") {
    keys = {"name", "vx_steps", "min_vx", "max_vx", "vy_steps", "min_vy", "max_vy"};
  } else {
    keys = {"name", "velocities", "angles", "angle_units", "velocity_units", "given_ecliptic"};
  }
  for (const auto& kv : n) {
    const std::string k = kv.first.Scalar();
    if (std::find(keys.begin(), keys.end(), k) == keys.end()) {
      std::string list;
      for (const auto& key : keys) list += (list.empty() ? "" : ", ") + key;
      throw Error("config key " + where + "." + k + ": not a parameter of " + g.name + " (known: " + list + ")");
    }
  }
  auto need = [&](const std::string& k) {
    if (!n[k]) throw Error("config key " + where + ": " + g.name + " needs " + k);
    return n[k];
  };
  if (g.name == "VelocityGridSearch") {
    g.vx_steps = int(get_int(need("vx_steps"), where + ".vx_steps"));
    g.vy_steps = int(get_int(need("vy_steps"), where + ".vy_steps"));
    g.min_vx = get_double(need("min_vx"), where + ".min_vx");
    g.max_vx = get_double(need("max_vx"), where + ".max_vx");
    g.min_vy = get_double(need("min_vy"), where + ".min_vy");
    g.max_vy = get_double(need("max_vy"), where + ".max_vy");
    if (g.vx_steps < 1 || g.vy_steps < 1) throw Error("config key " + where + ": vx_steps and vy_steps must be >= 1");
    if (g.max_vx < g.min_vx || g.max_vy < g.min_vy) throw Error("config key " + where + ": need min_vx <= max_vx and min_vy <= max_vy");
    if ((g.vx_steps == 1 && g.min_vx != g.max_vx) || (g.vy_steps == 1 && g.min_vy != g.max_vy))
      throw Error("config key " + where + ": one step needs min == max");
  } else {
    const auto v = get_numbers(need("velocities"), where + ".velocities", 3);
    const auto a = get_numbers(need("angles"), where + ".angles", 3);
    g.velocities = {v[0], v[1], v[2]};
    g.angles = {a[0], a[1], a[2]};
    if (v[2] < 1 || v[2] != std::floor(v[2]) || a[2] < 1 || a[2] != std::floor(a[2]))
      throw Error("config key " + where + ": the step counts (third values) must be integers >= 1");
    if (v[1] < v[0] || a[1] < a[0]) throw Error("config key " + where + ": need min <= max for velocities and angles");
    if (n["angle_units"]) g.angles_in_degrees = get_choice(n["angle_units"], where + ".angle_units", {"radian", "rad", "degree", "deg"})[0] == 'd';
    if (n["velocity_units"]) get_choice(n["velocity_units"], where + ".velocity_units", {"pix / d", "pix/d"});
    if (n["given_ecliptic"] && !n["given_ecliptic"].IsNull()) g.given_ecliptic = get_double(n["given_ecliptic"], where + ".given_ecliptic");
  }
  return g;
}

// ---- the whole file -----------------------------------------------------------------------

SearchConfig convert(const YAML::Node& c) {
  SearchConfig s;
  ReadOptions& r = s.read;
  const std::string layout = get_choice(c["layout"], "layout", {"auto", "rubin", "workunit"});
  r.layout = layout == "rubin" ? Layout::rubin : layout == "workunit" ? Layout::workunit : Layout::automatic;
  r.science_hdu = get_string(c["science_hdu"], "science_hdu");
  r.mask_hdu = get_string(c["mask_hdu"], "mask_hdu");
  r.variance_hdu = get_string(c["variance_hdu"], "variance_hdu");
  const std::string variance = get_choice(c["variance_type"], "variance_type", {"variance", "sigma", "weight"});
  r.variance_kind = variance == "sigma" ? VarianceKind::sigma : variance == "weight" ? VarianceKind::weight : VarianceKind::variance;
  r.mask_kind = get_choice(c["mask_type"], "mask_type", {"planes", "bitmask"}) == "bitmask" ? MaskKind::bitmask : MaskKind::planes;
  r.flag_keys = get_strings(c["flag_keys"], "flag_keys");
  r.mask_bitmask = get_unsigned(c["mask_bitmask"], "mask_bitmask");
  r.max_masked_fraction = get_double(c["max_masked_pixels"], "max_masked_pixels");
  if (r.max_masked_fraction < 0 || r.max_masked_fraction > 1) throw Error("config key max_masked_pixels: must be in [0, 1]");
  r.epoch_keyword = get_string(c["epoch_keyword"], "epoch_keyword");
  r.throughput_keyword = c["throughput_keyword"].IsNull() ? "" : get_string(c["throughput_keyword"], "throughput_keyword");
  const auto curve = get_strings(c["curve_keywords"], "curve_keywords");
  if (curve.size() != 2) throw Error("config key curve_keywords: expected [KEY_X, KEY_Y]");
  r.curve_keywords = {curve[0], curve[1]};
  r.psf_hdu = c["psf_hdu"].IsNull() ? "" : get_string(c["psf_hdu"], "psf_hdu");
  r.psf_sigma = get_double(c["psf_val"], "psf_val");
  if (r.psf_sigma <= 0) throw Error("config key psf_val: must be > 0");

  s.generator = parse_generator(c["generator_config"]);
  s.reference_time = get_string(c["reference_time"], "reference_time");
  if (s.reference_time != "mid" && s.reference_time != "first") get_double(c["reference_time"], "reference_time (mid, first or an MJD)");
  s.shift_mode = get_choice(c["shift_mode"], "shift_mode", {"integer", "fractional"}) == "fractional" ? ShiftMode::fractional : ShiftMode::integer;
  const std::int64_t bytes = get_int(c["encode_num_bytes"], "encode_num_bytes");
  if (bytes == -1 || bytes == 4) {
    s.encoding = Encoding::fp32;
  } else if (bytes == 2) {
    s.encoding = Encoding::fp16;
  } else if (bytes == 1) {
    s.encoding = Encoding::int8;
  } else {
    throw Error("config key encode_num_bytes: -1 (float32), 2 (float16) or 1 (int8), got " + std::to_string(bytes));
  }
  s.engine = get_string(c["engine"], "engine");
  s.cpu_only = get_bool(c["cpu_only"], "cpu_only");
  s.likelihood_device = get_choice(c["likelihood_device"], "likelihood_device", {"auto", "gpu", "cpu"});
  // gpus: a scalar (1, all, N, "0,1") or a list of device indices; checked where devices are known.
  if (c["gpus"].IsSequence()) {
    s.gpus.clear();
    for (const auto& d : c["gpus"]) s.gpus += std::to_string(get_int(d, "gpus")) + ",";
    if (c["gpus"].size() > 1) s.gpus.pop_back();  // "1," stays a one-device list
  } else {
    s.gpus = get_string(c["gpus"], "gpus");
  }
  try {
    if (s.gpus != "all") parse_device_list(s.gpus, std::numeric_limits<int>::max());  // syntax only here
  } catch (const Error& e) {
    throw Error(std::string("config key gpus: ") + e.what());
  }
  s.x_bounds = get_bounds(c["x_pixel_bounds"], "x_pixel_bounds");
  s.y_bounds = get_bounds(c["y_pixel_bounds"], "y_pixel_bounds");
  s.max_candidates = get_int(c["max_candidates"], "max_candidates");
  if (s.max_candidates < 1) throw Error("config key max_candidates: must be >= 1");

  s.filter.lh_level = get_double(c["lh_level"], "lh_level");
  s.filter.num_obs = int(get_int(c["num_obs"], "num_obs"));
  s.filter.sigma_g = get_bool(c["sigmaG_filter"], "sigmaG_filter");
  const auto lims = get_numbers(c["sigmaG_lims"], "sigmaG_lims", 2);
  s.filter.sigma_g_options.low_percentile = lims[0];
  s.filter.sigma_g_options.high_percentile = lims[1];
  s.filter.sigma_g_options.n_sigma = get_double(c["sigmaG_nsigma"], "sigmaG_nsigma");
  s.filter.sigma_g_options.clip_negative = get_bool(c["clip_negative"], "clip_negative");
  try {
    validate(s.filter.sigma_g_options);
  } catch (const Error& e) {
    throw Error(std::string("config: ") + e.what());
  }

  s.do_clustering = get_bool(c["do_clustering"], "do_clustering");
  try {
    s.cluster.space = parse_cluster_space(get_string(c["cluster_type"], "cluster_type"));
  } catch (const Error& e) {
    throw Error(std::string("config key cluster_type: ") + e.what());
  }
  s.cluster.eps = get_double(c["cluster_eps"], "cluster_eps");
  if (s.cluster.eps <= 0) throw Error("config key cluster_eps: must be > 0");
  if (c["cluster_v_scale"].IsScalar() && c["cluster_v_scale"].Scalar() == "half_span") {
    s.cluster.v_scale = -1;
  } else {
    s.cluster.v_scale = get_double(c["cluster_v_scale"], "cluster_v_scale (a number of days or half_span)");
    if (s.cluster.v_scale < 0) throw Error("config key cluster_v_scale: must be >= 0");
  }

  s.max_results = get_int(c["max_results"], "max_results");
  if (s.max_results < -1 || s.max_results == 0) throw Error("config key max_results: -1 (all) or >= 1");
  s.stamp_radius = int(get_int(c["stamp_radius"], "stamp_radius"));
  constexpr int max_stamp_radius = 1000;  // a stamp wider than a CCD is a typo
  if (s.stamp_radius < 0 || s.stamp_radius > max_stamp_radius) throw Error("config key stamp_radius: must be in [0, 1000]");
  try {
    s.stamp_type = parse_coadd_type(get_string(c["stamp_type"], "stamp_type"));
    s.coadds.clear();
    for (const auto& name : get_strings(c["coadds"], "coadds")) {
      const CoaddType t = parse_coadd_type(name);
      if (std::find(s.coadds.begin(), s.coadds.end(), t) == s.coadds.end()) s.coadds.push_back(t);
    }
  } catch (const Error& e) {
    throw Error(std::string("config: ") + e.what());
  }
  s.compute_ra_dec = get_bool(c["compute_ra_dec"], "compute_ra_dec");
  s.effective = to_json(c);
  return s;
}

}  // namespace

SearchConfig parse_config(const std::string& yaml, const std::string& source,
                          const std::vector<std::string>& overrides) {
  YAML::Node merged = YAML::Clone(load_yaml(default_config_text(), "default configuration"));
  std::vector<std::string> known;
  for (const auto& kv : merged) known.push_back(kv.first.Scalar());

  const YAML::Node user = load_yaml(yaml, source);
  if (user && !user.IsNull()) {
    if (!user.IsMap()) throw Error(source + ": expected a mapping of keys to values at the top level");
    for (const auto& kv : user) {
      const std::string key = kv.first.Scalar();
      if (std::find(known.begin(), known.end(), key) == known.end()) unknown_key(key, source, known);
      // generator_config is replaced whole (its keys depend on the generator's name).
      merged[key] = kv.second;
    }
  }
  for (const auto& override_text : overrides) {
    const std::size_t eq = override_text.find('=');
    if (eq == std::string::npos || eq == 0)
      throw Error("--set " + override_text + ": expected key=value");
    const std::string path = override_text.substr(0, eq);
    const YAML::Node value = load_yaml(override_text.substr(eq + 1), "--set " + path);
    const std::size_t dot = path.find('.');
    const std::string key = path.substr(0, dot);
    if (std::find(known.begin(), known.end(), key) == known.end()) unknown_key(key, "--set", known);
    if (dot == std::string::npos) {
      merged[key] = value;
    } else {
      if (key != "generator_config" || path.find('.', dot + 1) != std::string::npos)
        throw Error("--set " + path + ": only generator_config.<key> has sub-keys");
      merged[key][path.substr(dot + 1)] = value;
    }
  }
  try {
    return convert(merged);
  } catch (const YAML::Exception& e) {
    throw Error(source + ": " + e.what());
  }
}

SearchConfig load_config(const std::string& path, const std::vector<std::string>& overrides) {
  std::ifstream in(path);
  if (!in) throw Error(path + ": cannot read the configuration file");
  std::stringstream text;
  text << in.rdbuf();
  return parse_config(text.str(), path, overrides);
}

SearchConfig default_config() { return parse_config("", "defaults"); }

// ---- velocities ---------------------------------------------------------------------------

void fill_velocities(const VelocityGenerator& g, MotionBank& bank, std::optional<double> ecliptic) {
  bank.vx_axis.clear();
  bank.vy_axis.clear();
  bank.velocity_list.clear();
  // End points included; written as min + (max - min) * i / (n - 1) so that a grid given by
  // its ends reproduces the same doubles as one built that way in memory.
  auto axis = [](double lo, double hi, int n) {
    std::vector<double> a(n);
    for (int i = 0; i < n; ++i) a[i] = n == 1 ? lo : lo + (hi - lo) * i / (n - 1);
    return a;
  };
  if (g.name == "VelocityGridSearch") {
    bank.vx_axis = axis(g.min_vx, g.max_vx, g.vx_steps);
    bank.vy_axis = axis(g.min_vy, g.max_vy, g.vy_steps);
    return;
  }
  const double unit = g.angles_in_degrees ? std::numbers::pi / 180 : 1.0;
  double centre = 0;
  if (g.given_ecliptic) {
    centre = *g.given_ecliptic * unit;
  } else if (ecliptic) {
    centre = *ecliptic;
  } else {
    throw Error("generator_config EclipticCenteredSearch: no given_ecliptic and no WCS to compute the "
                "ecliptic direction from");
  }
  const auto angles = axis(centre + g.angles[0] * unit, centre + g.angles[1] * unit, int(g.angles[2]));
  const auto speeds = axis(g.velocities[0], g.velocities[1], int(g.velocities[2]));
  for (double a : angles)
    for (double v : speeds) bank.velocity_list.push_back({v * std::cos(a), v * std::sin(a)});
}

double ecliptic_angle(const Wcs& wcs, double x, double y) {
  // Mean obliquity of the ecliptic at J2000 (IAU 2006), in degrees; the tilt of the plane to
  // within arcseconds is all a search direction needs.
  constexpr double obliquity_degrees = 23.4392794;
  const double eps = obliquity_degrees * std::numbers::pi / 180;
  const SkyPosition p = wcs.pixel_to_sky(x, y);
  const double ra = p.ra * std::numbers::pi / 180, dec = p.dec * std::numbers::pi / 180;
  // Equatorial unit vector -> ecliptic longitude/latitude.
  const double ex = std::cos(dec) * std::cos(ra), ey = std::cos(dec) * std::sin(ra), ez = std::sin(dec);
  const double ly = std::cos(eps) * ey + std::sin(eps) * ez, lz = -std::sin(eps) * ey + std::cos(eps) * ez;
  const double lambda = std::atan2(ly, ex), beta = std::asin(std::clamp(lz, -1.0, 1.0));
  // A small step along increasing ecliptic longitude, back to equatorial, then to pixels.
  constexpr double step = 12.0 / 3600 * std::numbers::pi / 180;  // 12 arcseconds, as KBMOD
  const double l2 = lambda + step;
  const double qx = std::cos(beta) * std::cos(l2), qy = std::cos(beta) * std::sin(l2), qz = std::sin(beta);
  const double ry = std::cos(eps) * qy - std::sin(eps) * qz, rz = std::sin(eps) * qy + std::cos(eps) * qz;
  const double ra2 = std::atan2(ry, qx) * 180 / std::numbers::pi;
  const double dec2 = std::asin(std::clamp(rz, -1.0, 1.0)) * 180 / std::numbers::pi;
  double x2 = 0, y2 = 0;
  wcs.sky_to_pixel(ra2 < 0 ? ra2 + 360 : ra2, dec2, x2, y2);
  return std::atan2(y2 - y, x2 - x);
}

}  // namespace shiftstack::io
