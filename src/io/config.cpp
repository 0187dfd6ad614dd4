// The YAML configuration: the default text below is both what `dump-config` prints and the
// source of every default, so the two cannot drift apart. Layers are merged key by key, then
// the merged mapping is converted with every problem collected into one error.
#include "shiftstack/io/config.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "io/config_internal.hpp"
#include "shiftstack/error.hpp"
#include "shiftstack/multi_device.hpp"
#include "shiftstack/spelling.hpp"

namespace shiftstack::io {

const std::string& default_config_text() {
  static const std::string text = R"(# shiftstack search configuration (YAML). Print the defaults with `shiftstack dump-config`;
# override any key on the command line with --set key=value (generator_config.key=value).
# Keys marked [KBMOD] mean what they mean in KBMOD's SearchConfiguration; every other key of
# KBMOD's is accepted too (docs/user-guide.md says how each is treated). Unknown keys are errors.
# Order of precedence: these defaults < a WorkUnit's embedded configuration < this file < --set.

# ---- input ---------------------------------------------------------------------------------
layout: auto                # auto | rubin | workunit (KBMOD WorkUnit: SCI_i, VAR_i, MSK_i, PSF_i) | single
science_hdu: IMAGE          # EXTNAME of the science plane (Rubin layout); unnamed files: HDU 1
mask_hdu: MASK              # EXTNAME of the mask plane (unnamed files: HDU 2); may be absent
variance_hdu: VARIANCE      # EXTNAME of the noise plane (unnamed files: HDU 3)
variance_type: variance     # variance | sigma | weight (inverse variance): what that plane holds
single_image_variance: null # files with one image and no noise plane: estimate (from the image's
                            #   spread, (1.4826 MAD)^2) or a number; null: such files are an error
mask_type: planes           # planes: bits named by MP_* keywords | bitmask: integer codes (DECam)
flag_keys: [BAD, CLIPPED, CR, CROSSTALK, EDGE, INTRP, NO_DATA, SAT, SENSOR_EDGE, SUSPECT]  # mask planes that reject a pixel
mask_bitmask: 0xFFFFFFFF    # mask_type bitmask: a pixel whose code has any of these bits is rejected
max_masked_pixels: 0.5      # [KBMOD] exposures with a larger masked fraction are dropped
epoch_keyword: auto         # auto: DATE-AVG, MJD-AVG, MJD-OBS, MJD, then DATE-OBS + EXPTIME/2; or one keyword
throughput_keyword: THROUGHP  # relative throughput a_e of each exposure; 1 when absent
curve_keywords: [CURVE_X, CURVE_Y]  # per-exposure common-curve offsets (pixels); 0 when absent
psf_hdu: PSF                # per-exposure PSF kernel HDU (WorkUnits: PSF_i); without one: psf_val
psf_val: 1.4                # [KBMOD] Gaussian PSF sigma in pixels for files without a kernel

# ---- search --------------------------------------------------------------------------------
generator_config:           # [KBMOD] the velocities searched, pixels per day: VelocityGridSearch,
  name: VelocityGridSearch  #   EclipticCenteredSearch (velocities: [min, max, n], angles: [min, max, n],
  vx_steps: 21              #   angle_units, given_ecliptic: null = from the WCS), SingleVelocitySearch,
  min_vx: -20.0             #   KBMODV1Search, KBMODV1SearchConfig or PencilSearch
  max_vx: 20.0
  vy_steps: 21
  min_vy: -20.0
  max_vy: 20.0
reference_time: first       # where the search anchors its trials: first (KBMOD's: integer pixels at the first
                            #   epoch) | mid (mid-span: also finds objects that enter the field later) | an MJD.
                            #   Result x, y are always positions at the first epoch, as in KBMOD
shift_mode: integer         # integer (KBMOD's rounding) | fractional (bilinear, exact variance)
encode_num_bytes: -1        # [KBMOD] psi/phi storage: -1 or 4 float32, 2 float16, 1 int8 scaled to the noise
engine: auto                # auto: the fastest available engine for this search; or one by name (reference, cpu, ...)
cpu_only: false             # [KBMOD] with engine auto, never pick a GPU engine
likelihood_device: auto     # psi/phi maps and encoding: auto (GPU if present and allowed) | gpu | cpu
gpus: 1                     # GPUs one search is split over: 1 | all | N (the first N) | [0, 1] (a repeat shares a card)
x_pixel_bounds: null        # [KBMOD] [start, end): the trajectories' x at the first epoch; null: all
y_pixel_bounds: null        # [KBMOD] [start, end): the trajectories' y at the first epoch
results_per_pixel: 8        # [KBMOD] before the light-curve filter, keep the best this many trials per
                            #   starting pixel (by search score, or the gpu_filter likelihood); null: all
max_candidates: 67108864    # more threshold crossings than this stop the run (never truncated)
timeout_hours: null         # [KBMOD] stop (between stages) once the run has taken this long

# ---- filtering -----------------------------------------------------------------------------
lh_level: 7.0               # [KBMOD] minimum likelihood psi/sqrt(phi), in the search and after clipping (KBMOD: 10)
num_obs: 10                 # [KBMOD] minimum valid observations; -1 or more than the exposures: all
sigmaG_filter: true         # [KBMOD] clip outlying epochs of each light curve (sigma-G)
sigmaG_lims: [25, 75]       # [KBMOD] percentiles that estimate sigma
sigmaG_nsigma: 2.0          # half-width of the kept band, in units of sigma_G (KBMOD uses 2)
clip_negative: false        # [KBMOD] percentiles over positive values only
gpu_filter: false           # [KBMOD] also KBMOD's in-search sigma-G prefilter (per-epoch fluxes), which
                            #   ranks and cuts the crossings before the thinning below (runs on the host)
near_dup_thresh: 10         # [KBMOD] before the light-curve filter, keep the best trial per bin of this many
                            #   pixels in first and last position; null or 0: off

# ---- clustering ----------------------------------------------------------------------------
do_clustering: true         # [KBMOD] merge duplicate detections of one source
cluster_type: peaks         # [KBMOD] peaks (shiftstack's, see docs) | all | position | mid_position |
                            #   start_end_position | nn_start | nn_start_end | grid_start | grid_start_end
cluster_eps: 20.0           # [KBMOD] linking length or bin width, pixels (KBMOD's types; peaks derives its own)
cluster_v_scale: 1.0        # [KBMOD] days per unit velocity for cluster_type all; half_span: half the epoch span

# ---- output --------------------------------------------------------------------------------
result_filename: null       # [KBMOD] results table (.ecsv or .fits) when -o is not given; null: results.ecsv
max_results: 100000         # [KBMOD] keep the best this many after clustering; -1: all
stamp_radius: 10            # [KBMOD] stamps are (2 r + 1) pixels on a side
stamp_type: sum             # [KBMOD] the coadd written as the `stamp` column: sum|mean|median|weighted
coadds: [mean, median, sum, weighted]  # [KBMOD] coadds written as coadd_<type> columns
save_all_stamps: false      # [KBMOD] an all_stamps column: the stamp of every epoch
separate_col_files: [all_stamps]  # [KBMOD] columns (regular expressions) written to NAME_<column> files
drop_columns: []            # [KBMOD] result columns not to write
generate_psi_phi: true      # [KBMOD] write the psi_curve and phi_curve columns
compute_ra_dec: true        # [KBMOD] sky positions per epoch (img_ra, img_dec, global_ra, global_dec)
)";
  return text;
}

namespace {

using namespace detail;

YAML::Node load_yaml(const std::string& text, const std::string& source) {
  try {
    YAML::Node node = YAML::Load(text);
    check_duplicate_keys(node, source);
    return node;
  } catch (const YAML::Exception& e) {
    throw Error(source + ": not valid YAML: " + e.what());
  }
}

// Collects every problem of a configuration so that one error can list them all.
struct Problems {
  std::vector<std::string> list;
  template <typename Body>
  void check(Body body) {
    try {
      body();
    } catch (const Error& e) {
      list.push_back(e.what());
    } catch (const YAML::Exception& e) {
      list.push_back(std::string("config: ") + e.what());
    }
  }
  void throw_if_any() const {
    if (list.empty()) return;
    if (list.size() == 1) throw Error(list.front());
    std::string text = "the configuration has " + std::to_string(list.size()) + " problems:";
    for (const auto& p : list) text += "\n  - " + p;
    throw Error(text);
  }
};

std::string unknown_key_message(const std::string& key, const std::string& source, const std::vector<std::string>& known) {
  for (const auto& [name, hint] : obsolete_kbmod_keys())
    if (name == key)
      return source + ": '" + key + "' is a key of older KBMOD versions; current KBMOD no longer reads it either" +
             (hint.empty() ? "" : " (" + hint + ")") + "; delete it";
  const std::string best = closest_name(key, known, 4);  // suggest only close spellings
  return source + ": unknown key '" + key + "'" + (best.empty() ? "" : " (did you mean '" + best + "'?)") +
         "; `shiftstack dump-config` lists every key";
}

const KbmodKeyPolicy* find_policy(const std::string& key) {
  for (const auto& p : kbmod_key_policies())
    if (p.name == key) return &p;
  return nullptr;
}

// Keys of current KBMOD's SearchConfiguration: the [KBMOD] keys of the default text plus the
// policy table (the only keys taken from an embedded WorkUnit configuration).
bool is_kbmod_key(const std::string& key) {
  static const std::set<std::string> implemented = {
      "clip_negative", "cluster_eps", "cluster_type", "cluster_v_scale", "coadds", "compute_ra_dec", "cpu_only",
      "do_clustering", "drop_columns", "encode_num_bytes", "generate_psi_phi", "generator_config", "lh_level",
      "max_masked_pixels", "max_results", "near_dup_thresh", "num_obs", "psf_val", "result_filename",
      "results_per_pixel", "save_all_stamps", "gpu_filter", "separate_col_files", "sigmaG_filter", "sigmaG_lims", "stamp_radius",
      "stamp_type", "timeout_hours", "x_pixel_bounds", "y_pixel_bounds"};
  return implemented.count(key) || find_policy(key);
}

std::optional<std::array<int, 2>> get_bounds(const YAML::Node& n, const std::string& key) {
  if (is_null(n)) return std::nullopt;
  if (!n.IsSequence() || n.size() != 2) throw Error("config key " + key + ": expected [start, end] or null");
  constexpr std::int64_t limit = std::numeric_limits<int>::max();
  const std::int64_t a = get_int(n[0], key + "[0]", 0, limit), b = get_int(n[1], key + "[1]", 0, limit);
  if (a >= b) throw Error("config key " + key + ": expected start < end, got [" + std::to_string(a) + ", " + std::to_string(b) + "]");
  return std::array<int, 2>{int(a), int(b)};
}

// The merged mapping -> SearchConfig, one problem per key at most.
SearchConfig convert(const YAML::Node& c, Problems& p) {
  SearchConfig s;
  ReadOptions& r = s.read;
  constexpr std::int64_t int_max = std::numeric_limits<int>::max();
  p.check([&] {
    const std::string layout = get_choice(c["layout"], "layout", {"auto", "rubin", "workunit", "single"});
    r.layout = layout == "rubin"      ? Layout::rubin
               : layout == "workunit" ? Layout::workunit
               : layout == "single"   ? Layout::single
                                      : Layout::automatic;
  });
  p.check([&] { r.science_hdu = get_string(c["science_hdu"], "science_hdu"); });
  p.check([&] { r.mask_hdu = get_string(c["mask_hdu"], "mask_hdu"); });
  p.check([&] { r.variance_hdu = get_string(c["variance_hdu"], "variance_hdu"); });
  p.check([&] {
    const std::string v = get_choice(c["variance_type"], "variance_type", {"variance", "sigma", "weight"});
    r.variance_kind = v == "sigma" ? VarianceKind::sigma : v == "weight" ? VarianceKind::weight : VarianceKind::variance;
  });
  p.check([&] {
    const YAML::Node n = c["single_image_variance"];
    if (is_null(n)) return;
    if (n.IsScalar() && n.Scalar() == "estimate") {
      r.single_image_variance = SingleImageVariance{true, 0};
      return;
    }
    const double v = get_double(n, "single_image_variance (estimate or a variance > 0)");
    if (!(v > 0)) throw Error("config key single_image_variance: a variance must be > 0, got " + n.Scalar());
    r.single_image_variance = SingleImageVariance{false, v};
  });
  p.check([&] {
    r.mask_kind = get_choice(c["mask_type"], "mask_type", {"planes", "bitmask"}) == "bitmask" ? MaskKind::bitmask : MaskKind::planes;
  });
  p.check([&] { r.flag_keys = get_strings(c["flag_keys"], "flag_keys"); });
  p.check([&] { r.mask_bitmask = get_unsigned(c["mask_bitmask"], "mask_bitmask"); });
  p.check([&] {
    r.max_masked_fraction = get_double(c["max_masked_pixels"], "max_masked_pixels");
    if (r.max_masked_fraction < 0 || r.max_masked_fraction > 1) throw Error("config key max_masked_pixels: must be in [0, 1]");
  });
  p.check([&] { r.epoch_keyword = get_string(c["epoch_keyword"], "epoch_keyword"); });
  p.check([&] { r.throughput_keyword = is_null(c["throughput_keyword"]) ? "" : get_string(c["throughput_keyword"], "throughput_keyword"); });
  p.check([&] {
    const auto curve = get_strings(c["curve_keywords"], "curve_keywords");
    if (curve.size() != 2) throw Error("config key curve_keywords: expected [KEY_X, KEY_Y]");
    r.curve_keywords = {curve[0], curve[1]};
  });
  p.check([&] { r.psf_hdu = is_null(c["psf_hdu"]) ? "" : get_string(c["psf_hdu"], "psf_hdu"); });
  p.check([&] {
    r.psf_sigma = get_double(c["psf_val"], "psf_val");
    if (r.psf_sigma <= 0) throw Error("config key psf_val: must be > 0");
  });

  p.check([&] { s.generator = parse_generator(c["generator_config"]); });
  p.check([&] {
    s.reference_time = get_string(c["reference_time"], "reference_time");
    if (s.reference_time != "mid" && s.reference_time != "first")
      get_double(c["reference_time"], "reference_time (first, mid or an MJD)");
  });
  p.check([&] {
    s.shift_mode = get_choice(c["shift_mode"], "shift_mode", {"integer", "fractional"}) == "fractional" ? ShiftMode::fractional
                                                                                                        : ShiftMode::integer;
  });
  p.check([&] {
    const std::string text = scalar_text(c["encode_num_bytes"], "encode_num_bytes");
    const std::int64_t bytes = get_int(c["encode_num_bytes"], "encode_num_bytes", -1, 4);
    if (bytes == -1 || bytes == 4) {
      s.encoding = Encoding::fp32;
    } else if (bytes == 2) {
      s.encoding = Encoding::fp16;
    } else if (bytes == 1) {
      s.encoding = Encoding::int8;
    } else {
      throw Error("config key encode_num_bytes: -1 or 4 (float32), 2 (float16) or 1 (int8), got " + text);
    }
  });
  p.check([&] { s.engine = get_string(c["engine"], "engine"); });
  p.check([&] { s.cpu_only = get_bool(c["cpu_only"], "cpu_only"); });
  p.check([&] { s.likelihood_device = get_choice(c["likelihood_device"], "likelihood_device", {"auto", "gpu", "cpu"}); });
  p.check([&] {
    // gpus: a scalar (1, all, N, "0,1") or a list of device indices; checked where devices are known.
    constexpr std::int64_t max_device = 1 << 16;
    if (c["gpus"].IsSequence()) {
      s.gpus.clear();
      for (const auto& d : c["gpus"]) s.gpus += std::to_string(get_int(d, "gpus", 0, max_device)) + ",";
      if (c["gpus"].size() > 1) s.gpus.pop_back();  // "1," stays a one-device list
    } else {
      s.gpus = get_string(c["gpus"], "gpus");
    }
    try {
      if (s.gpus != "all") parse_device_list(s.gpus, std::numeric_limits<int>::max());  // syntax only here
    } catch (const Error& e) {
      throw Error(std::string("config key gpus: ") + e.what());
    }
  });
  p.check([&] { s.x_bounds = get_bounds(c["x_pixel_bounds"], "x_pixel_bounds"); });
  p.check([&] { s.y_bounds = get_bounds(c["y_pixel_bounds"], "y_pixel_bounds"); });
  p.check([&] {
    // Pixel bounds are first-epoch positions (KBMOD): the search then places its origins there.
    const bool bounded = s.x_bounds || s.y_bounds;
    if (bounded && s.reference_time != "first")
      throw Error("config: x_pixel_bounds and y_pixel_bounds are positions at the first epoch (as in KBMOD) and need "
                  "reference_time first, not " + s.reference_time);
  });
  p.check([&] {
    s.results_per_pixel.reset();
    if (!is_null(c["results_per_pixel"]))
      s.results_per_pixel = int(get_int(c["results_per_pixel"], "results_per_pixel", 1, 1'000'000));
  });
  p.check([&] { s.max_candidates = get_int(c["max_candidates"], "max_candidates", 1, std::numeric_limits<std::int64_t>::max()); });
  p.check([&] {
    if (is_null(c["timeout_hours"])) return;
    s.timeout_hours = get_double(c["timeout_hours"], "timeout_hours");
    if (!(*s.timeout_hours > 0)) throw Error("config key timeout_hours: must be > 0 or null");
  });

  p.check([&] { s.filter.lh_level = get_double(c["lh_level"], "lh_level"); });
  p.check([&] { s.filter.num_obs = int(get_int(c["num_obs"], "num_obs", -1, int_max)); });
  p.check([&] { s.filter.sigma_g = get_bool(c["sigmaG_filter"], "sigmaG_filter"); });
  p.check([&] { s.gpu_filter = get_bool(c["gpu_filter"], "gpu_filter"); });
  p.check([&] {
    const auto lims = get_numbers(c["sigmaG_lims"], "sigmaG_lims", 2);
    s.filter.sigma_g_options.low_percentile = lims[0];
    s.filter.sigma_g_options.high_percentile = lims[1];
    s.filter.sigma_g_options.n_sigma = get_double(c["sigmaG_nsigma"], "sigmaG_nsigma");
    s.filter.sigma_g_options.clip_negative = get_bool(c["clip_negative"], "clip_negative");
    try {
      validate(s.filter.sigma_g_options);
    } catch (const Error& e) {
      throw Error(std::string("config key sigmaG_lims: ") + e.what());
    }
  });
  p.check([&] {
    s.near_dup_thresh.reset();
    if (is_null(c["near_dup_thresh"])) return;
    const std::int64_t bin = get_int(c["near_dup_thresh"], "near_dup_thresh", 0, 1'000'000);
    if (bin > 0) s.near_dup_thresh = double(bin);  // KBMOD: 0 or less turns it off
  });

  p.check([&] { s.do_clustering = get_bool(c["do_clustering"], "do_clustering"); });
  p.check([&] {
    try {
      s.cluster.space = parse_cluster_space(get_string(c["cluster_type"], "cluster_type"));
    } catch (const Error& e) {
      throw Error(std::string("config key cluster_type: ") + e.what());
    }
  });
  p.check([&] {
    s.cluster.eps = get_double(c["cluster_eps"], "cluster_eps");
    if (s.cluster.eps <= 0) throw Error("config key cluster_eps: must be > 0");
  });
  p.check([&] {
    if (c["cluster_v_scale"].IsScalar() && c["cluster_v_scale"].Scalar() == "half_span") {
      s.cluster.v_scale = -1;
      return;
    }
    s.cluster.v_scale = get_double(c["cluster_v_scale"], "cluster_v_scale (a number of days or half_span)");
    if (s.cluster.v_scale < 0) throw Error("config key cluster_v_scale: must be >= 0");
  });

  p.check([&] {
    if (!is_null(c["result_filename"])) s.result_filename = get_string(c["result_filename"], "result_filename");
  });
  p.check([&] {
    s.max_results = get_int(c["max_results"], "max_results", -1, std::numeric_limits<std::int64_t>::max());
    if (s.max_results == 0) throw Error("config key max_results: -1 (all) or >= 1");
  });
  p.check([&] { s.stamp_radius = int(get_int(c["stamp_radius"], "stamp_radius", 0, 1000)); });
  p.check([&] {
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
  });
  p.check([&] { s.save_all_stamps = get_bool(c["save_all_stamps"], "save_all_stamps"); });
  p.check([&] {
    s.separate_col_files = get_strings(c["separate_col_files"], "separate_col_files");
    for (const auto& pattern : s.separate_col_files) {
      try {
        std::regex check(pattern);
      } catch (const std::regex_error& e) {
        throw Error("config key separate_col_files: '" + pattern + "' is not a valid regular expression");
      }
    }
  });
  p.check([&] { s.drop_columns = get_strings(c["drop_columns"], "drop_columns"); });
  p.check([&] { s.generate_psi_phi = get_bool(c["generate_psi_phi"], "generate_psi_phi"); });
  p.check([&] { s.compute_ra_dec = get_bool(c["compute_ra_dec"], "compute_ra_dec"); });
  s.effective = to_json(c);
  return s;
}

// One key of a layer (or --set) into the merged mapping, or a problem, or a notice.
struct Merger {
  YAML::Node merged;
  std::vector<std::string> known;
  std::map<std::string, std::pair<YAML::Node, std::string>> policy_keys;  // key -> (value, source)
  Problems problems;

  void take(const std::string& key, const YAML::Node& value, const std::string& source, bool embedded,
            std::vector<std::string>& ignored) {
    const bool ours = std::find(known.begin(), known.end(), key) != known.end();
    if (embedded && !is_kbmod_key(key)) {
      ignored.push_back(key);
      return;
    }
    if (ours) {
      merged[key] = value;  // generator_config is replaced whole (its keys depend on its name)
    } else if (find_policy(key)) {
      policy_keys[key] = {value, source};
    } else {
      problems.list.push_back(unknown_key_message(key, source, known));
    }
  }
};

}  // namespace

SearchConfig parse_config(const std::vector<ConfigLayer>& layers, const std::vector<std::string>& overrides) {
  Merger m;
  m.merged = YAML::Clone(load_yaml(default_config_text(), "default configuration"));
  for (const auto& kv : m.merged) m.known.push_back(kv.first.Scalar());
  std::vector<std::string> notices, sources;

  for (const auto& layer : layers) {
    YAML::Node user;
    try {
      user = load_yaml(layer.yaml, layer.source);
    } catch (const Error& e) {
      m.problems.list.push_back(e.what());
      continue;
    }
    sources.push_back(layer.source);
    if (is_null(user)) continue;
    if (!user.IsMap()) {
      m.problems.list.push_back(layer.source + ": expected a mapping of keys to values at the top level");
      continue;
    }
    std::vector<std::string> ignored;
    for (const auto& kv : user) m.take(kv.first.Scalar(), kv.second, layer.source, layer.embedded, ignored);
    if (!ignored.empty()) {
      std::string list;
      for (const auto& k : ignored) list += (list.empty() ? "" : ", ") + k;
      notices.push_back(layer.source + ": " + std::to_string(ignored.size()) +
                        " keys that are not in current KBMOD's SearchConfiguration were ignored: " + list);
    }
  }
  for (const auto& override_text : overrides) {
    const std::size_t eq = override_text.find('=');
    if (eq == std::string::npos || eq == 0) {
      m.problems.list.push_back("--set " + override_text + ": expected key=value");
      continue;
    }
    const std::string path = override_text.substr(0, eq);
    YAML::Node value;
    try {
      value = load_yaml(override_text.substr(eq + 1), "--set " + path);
    } catch (const Error& e) {
      m.problems.list.push_back(e.what());
      continue;
    }
    const std::size_t dot = path.find('.');
    const std::string key = path.substr(0, dot);
    if (dot == std::string::npos) {
      std::vector<std::string> ignored;
      m.take(key, value, "--set", false, ignored);
    } else if (key != "generator_config" || path.find('.', dot + 1) != std::string::npos) {
      m.problems.list.push_back("--set " + path + ": only generator_config.<key> has sub-keys");
    } else {
      m.merged[key][path.substr(dot + 1)] = value;
    }
  }
  if (!overrides.empty()) sources.push_back("--set");

  // KBMOD keys without an implementation: silent at values that do nothing in KBMOD either.
  for (const auto& [key, given] : m.policy_keys) {
    const KbmodKeyPolicy& policy = *find_policy(key);
    const nlohmann::json value = to_json(given.first);
    const bool neutral = policy.neutral.empty() ||
                         std::find(policy.neutral.begin(), policy.neutral.end(), value) != policy.neutral.end();
    if (neutral) continue;
    if (policy.refused_unless_neutral) {
      m.problems.list.push_back(given.second + ": KBMOD key '" + key + ": " + value.dump() + "' is not supported: " +
                                policy.reason + " (accepted only as " + nlohmann::json(policy.neutral).dump() + ")");
    } else {
      notices.push_back("KBMOD key '" + key + ": " + value.dump() + "' has no effect here: " + policy.reason);
    }
  }

  SearchConfig config = convert(m.merged, m.problems);
  m.problems.throw_if_any();
  config.notices = std::move(notices);
  config.sources = std::move(sources);
  nlohmann::json accepted = nlohmann::json::object();
  for (const auto& [key, given] : m.policy_keys) accepted[key] = to_json(given.first);
  if (!accepted.empty()) config.effective["kbmod_keys_without_effect"] = accepted;
  return config;
}

SearchConfig parse_config(const std::string& yaml, const std::string& source, const std::vector<std::string>& overrides) {
  return parse_config(std::vector<ConfigLayer>{{source, yaml, false}}, overrides);
}

ConfigLayer config_file_layer(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(path + ": cannot read the configuration file");
  std::stringstream text;
  text << in.rdbuf();
  return {path, text.str(), false};
}

SearchConfig load_config(const std::string& path, const std::vector<std::string>& overrides) {
  return parse_config(std::vector<ConfigLayer>{config_file_layer(path)}, overrides);
}

SearchConfig default_config() { return parse_config("", "defaults"); }

}  // namespace shiftstack::io
