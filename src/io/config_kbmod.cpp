// KBMOD's side of the configuration: how each SearchConfiguration key that is not implemented
// here is treated, the keys of older KBMOD versions, and KBMOD's trajectory generators.
#include <algorithm>
#include <cmath>
#include <numbers>

#include "io/config_internal.hpp"
#include "shiftstack/error.hpp"

namespace shiftstack::io {

namespace detail {

const std::vector<KbmodKeyPolicy>& kbmod_key_policies() {
  using J = nlohmann::json;
  // An empty `neutral` list: the key only matters together with another one that is refused
  // when set, so every value is accepted silently.
  static const std::vector<KbmodKeyPolicy> policies = {
      {"debug", false, {J(false)}, "progress is always printed (--quiet silences it) and the run summary times every stage"},
      {"save_config", false, {J(true)}, "the effective configuration is always saved in NAME.summary.json"},
      {"track_filtered", false, {J(false)},
       "the counts removed by each step are in the run summary; --unclustered writes the candidates before clustering"},
      {"cnn_model", false, {}, "used only with cnn_filter"},
      {"cnn_coadd_type", false, {}, "used only with cnn_filter"},
      {"cnn_stamp_radius", false, {}, "used only with cnn_filter"},
      {"cnn_model_type", false, {}, "used only with cnn_filter"},
      {"pred_line_params", false, {}, "used only with pred_line_cluster"},
      {"cnn_filter", true, {J(false)}, "CNN stamp classification (a trained PyTorch model) is not implemented"},
      {"color_scale", true, {J(nullptr)}, "per-filter colour scaling is not implemented"},
      {"nightly_coadds", true, {J(false)}, "per-night coadds are not implemented"},
      {"peak_offset_max", true, {J(nullptr)}, "the stamp peak-offset filter is not implemented"},
      {"pred_line_cluster", true, {J(false)},
       "predictive line clustering is not implemented (cluster_type peaks keeps nearby movers apart)"},
      {"x_pixel_buffer", true, {J(nullptr), J(0)},
       "origins outside the image are not searched; reference_time: mid finds objects that enter the image "
       "after the first epoch"},
      {"y_pixel_buffer", true, {J(nullptr), J(0)},
       "origins outside the image are not searched; reference_time: mid finds objects that enter the image "
       "after the first epoch"},
  };
  return policies;
}

const std::vector<std::pair<std::string, std::string>>& obsolete_kbmod_keys() {
  static const std::vector<std::pair<std::string, std::string>> keys = {
      {"ang_arr", "use generator_config"},
      {"average_angle", "use generator_config"},
      {"bary_dist", "give per-exposure offsets through curve_keywords"},
      {"center_thresh", "stamp filtering is gone from KBMOD"},
      {"chunk_size", ""},
      {"cluster_function", ""},
      {"do_mask", "masks are always applied"},
      {"do_stamp_filter", "stamp filtering is gone from KBMOD"},
      {"encode_phi_bytes", "use encode_num_bytes"},
      {"encode_psi_bytes", "use encode_num_bytes"},
      {"eps", "use cluster_eps"},
      {"file_format", ""},
      {"im_filepath", "inputs are given on the command line"},
      {"ind_output_files", ""},
      {"known_obj_jpl", ""},
      {"known_obj_obs", ""},
      {"known_obj_thresh", ""},
      {"mask_bit_vector", ""},
      {"mask_bits_dict", "plane numbers come from the files' MP_* keywords"},
      {"mask_grow", ""},
      {"mask_num_images", ""},
      {"mask_threshold", ""},
      {"max_lh", ""},
      {"mjd_lims", ""},
      {"mom_lims", "stamp filtering is gone from KBMOD"},
      {"num_cores", "threads follow OMP_NUM_THREADS"},
      {"output_suffix", ""},
      {"peak_offset", "stamp filtering is gone from KBMOD"},
      {"psf_file", "PSF kernels come from each file's PSF HDU"},
      {"repeated_flag_keys", ""},
      {"res_filepath", "use -o or result_filename"},
      {"stamp_filter", ""},
      {"time_file", "times come from the headers"},
      {"v_arr", "use generator_config"},
      {"visit_in_filename", ""},
  };
  return keys;
}

// ---- generator_config -----------------------------------------------------------------------

namespace {

// Velocity lists beyond this are a typo (a billion-entry list is gigabytes before any search).
constexpr std::int64_t max_velocities = 100'000'000;
constexpr std::int64_t max_steps = 10'000'000;

const std::vector<std::pair<std::string, std::vector<std::string>>>& generator_parameters() {
  static const std::vector<std::pair<std::string, std::vector<std::string>>> list = {
      {"VelocityGridSearch", {"vx_steps", "min_vx", "max_vx", "vy_steps", "min_vy", "max_vy"}},
      {"EclipticCenteredSearch", {"velocities", "angles", "angle_units", "velocity_units", "given_ecliptic"}},
      {"SingleVelocitySearch", {"vx", "vy"}},
      {"KBMODV1Search", {"vel_steps", "min_vel", "max_vel", "ang_steps", "min_ang", "max_ang"}},
      {"KBMODV1SearchConfig", {"v_arr", "ang_arr", "average_angle"}},
      {"PencilSearch", {"vx", "vy", "max_ang_offset", "ang_step", "max_vel_offset", "vel_step"}},
  };
  return list;
}

// np.arange(start, stop, step) element count.
std::int64_t arange_count(double start, double stop, double step, const std::string& key) {
  const double n = std::ceil((stop - start) / step);
  return n <= 0 ? 0 : get_count(n, key, 0, max_steps);
}

}  // namespace

VelocityGenerator parse_generator(const YAML::Node& n) {
  const std::string where = "generator_config";
  std::string names;
  for (const auto& [name, keys] : generator_parameters()) names += (names.empty() ? "" : ", ") + name;
  if (!n || !n.IsMap()) throw Error("config key " + where + ": expected a mapping with a name (" + names + ")");
  if (!n["name"]) throw Error("config key " + where + ": needs a name (" + names + ")");
  VelocityGenerator g;
  g.name = get_string(n["name"], where + ".name");
  if (g.name == "RandomVelocitySearch")
    throw Error("config key " + where + ".name: RandomVelocitySearch is not supported: random velocities make runs "
                "irreproducible; use VelocityGridSearch");
  const auto found = std::find_if(generator_parameters().begin(), generator_parameters().end(),
                                  [&](const auto& p) { return p.first == g.name; });
  if (found == generator_parameters().end())
    throw Error("config key " + where + ".name: unknown generator '" + g.name + "' (known: " + names + ")");
  const std::vector<std::string>& keys = found->second;
  for (const auto& kv : n) {
    const std::string k = kv.first.Scalar();
    if (k != "name" && std::find(keys.begin(), keys.end(), k) == keys.end()) {
      std::string list;
      for (const auto& key : keys) list += (list.empty() ? "" : ", ") + key;
      throw Error("config key " + where + "." + k + ": not a parameter of " + g.name + " (known: " + list + ")");
    }
  }
  auto need = [&](const std::string& k) {
    if (!n[k]) throw Error("config key " + where + ": " + g.name + " needs " + k);
    return n[k];
  };
  auto number = [&](const std::string& k) { return get_double(need(k), where + "." + k); };
  auto total = [&](std::int64_t count) {
    if (count > max_velocities)
      throw Error("config key " + where + ": " + g.name + " gives " + std::to_string(count) + " velocities; at most " +
                  std::to_string(max_velocities) + " are supported");
  };
  if (g.name == "VelocityGridSearch") {
    g.vx_steps = int(get_int(need("vx_steps"), where + ".vx_steps", 1, max_steps));
    g.vy_steps = int(get_int(need("vy_steps"), where + ".vy_steps", 1, max_steps));
    g.min_vx = number("min_vx");
    g.max_vx = number("max_vx");
    g.min_vy = number("min_vy");
    g.max_vy = number("max_vy");
    if (g.max_vx < g.min_vx || g.max_vy < g.min_vy) throw Error("config key " + where + ": need min_vx <= max_vx and min_vy <= max_vy");
    if ((g.vx_steps == 1 && g.min_vx != g.max_vx) || (g.vy_steps == 1 && g.min_vy != g.max_vy))
      throw Error("config key " + where + ": one step needs min == max");
    total(std::int64_t(g.vx_steps) * g.vy_steps);
  } else if (g.name == "EclipticCenteredSearch" || g.name == "KBMODV1SearchConfig") {
    const bool v1 = g.name == "KBMODV1SearchConfig";
    const std::string vkey = v1 ? "v_arr" : "velocities", akey = v1 ? "ang_arr" : "angles";
    const auto v = get_numbers(need(vkey), where + "." + vkey, 3);
    const auto a = get_numbers(need(akey), where + "." + akey, 3);
    const std::int64_t nv = get_count(v[2], where + "." + vkey + "[2]", 1, max_steps);
    const std::int64_t na = get_count(a[2], where + "." + akey + "[2]", 1, max_steps);
    total(nv * na);
    if (v[1] < v[0]) throw Error("config key " + where + ": need min <= max in " + vkey);
    if (v1) {
      // KBMOD v1: speeds [v0, v1) and angles average - ang_arr[0] to average + ang_arr[1], upper
      // ends excluded.
      g.vel_steps = int(nv);
      g.min_vel = v[0];
      g.max_vel = v[1];
      g.ang_steps = int(na);
      g.min_ang = -a[0];
      g.max_ang = a[1];
      if (!is_null(n["average_angle"])) g.given_ecliptic = get_double(n["average_angle"], where + ".average_angle");
    } else {
      if (a[1] < a[0]) throw Error("config key " + where + ": need min <= max in angles");
      g.velocities = {v[0], v[1], double(nv)};
      g.angles = {a[0], a[1], double(na)};
      if (n["angle_units"])
        g.angles_in_degrees =
            get_choice(n["angle_units"], where + ".angle_units", {"radian", "rad", "degree", "deg"})[0] == 'd';
      if (n["velocity_units"])
        get_choice(n["velocity_units"], where + ".velocity_units", {"pix / d", "pix/d", "pixel / d", "pix / day"});
      if (!is_null(n["given_ecliptic"])) g.given_ecliptic = get_double(n["given_ecliptic"], where + ".given_ecliptic");
    }
  } else if (g.name == "SingleVelocitySearch") {
    g.vx = number("vx");
    g.vy = number("vy");
  } else if (g.name == "KBMODV1Search") {
    g.vel_steps = int(get_int(need("vel_steps"), where + ".vel_steps", 1, max_steps));
    g.ang_steps = int(get_int(need("ang_steps"), where + ".ang_steps", 1, max_steps));
    g.min_vel = number("min_vel");
    g.max_vel = number("max_vel");
    g.min_ang = number("min_ang");
    g.max_ang = number("max_ang");
    if (g.max_vel < g.min_vel || g.max_ang < g.min_ang) throw Error("config key " + where + ": need min <= max");
    total(std::int64_t(g.vel_steps) * g.ang_steps);
  } else {  // PencilSearch
    g.vx = number("vx");
    g.vy = number("vy");
    auto optional = [&](const std::string& k, double& value) {
      if (n[k]) value = get_double(n[k], where + "." + k);
    };
    optional("max_ang_offset", g.max_ang_offset);
    optional("ang_step", g.ang_step);
    optional("max_vel_offset", g.max_vel_offset);
    optional("vel_step", g.vel_step);
    if (!(g.ang_step > 0 && g.vel_step > 0 && g.max_ang_offset >= 0 && g.max_vel_offset >= 0))
      throw Error("config key " + where + ": PencilSearch needs steps > 0 and offsets >= 0");
    const double speed = std::hypot(g.vx, g.vy);
    const std::int64_t na = arange_count(-g.max_ang_offset, g.max_ang_offset + 1e-8, g.ang_step, where + ".ang_step");
    const std::int64_t nv =
        arange_count(std::max(speed - g.max_vel_offset, 0.0), speed + g.max_vel_offset + 1e-8, g.vel_step, where + ".vel_step");
    total(na * nv);
  }
  return g;
}

}  // namespace detail

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
  auto add_polar = [&](const std::vector<double>& angles, const std::vector<double>& speeds) {
    // KBMOD's order: angles outer, speeds inner.
    for (double a : angles)
      for (double v : speeds) bank.velocity_list.push_back({v * std::cos(a), v * std::sin(a)});
  };
  auto centre_angle = [&](double unit) {
    if (g.given_ecliptic) return *g.given_ecliptic * unit;
    if (ecliptic) return *ecliptic;
    throw Error("generator_config " + g.name + ": no given_ecliptic (average_angle) and no WCS to compute the "
                "ecliptic direction from");
  };
  if (g.name == "VelocityGridSearch") {
    bank.vx_axis = axis(g.min_vx, g.max_vx, g.vx_steps);
    bank.vy_axis = axis(g.min_vy, g.max_vy, g.vy_steps);
  } else if (g.name == "SingleVelocitySearch") {
    bank.velocity_list.push_back({g.vx, g.vy});
  } else if (g.name == "EclipticCenteredSearch") {
    const double unit = g.angles_in_degrees ? std::numbers::pi / 180 : 1.0;
    const double centre = centre_angle(unit);
    add_polar(axis(centre + g.angles[0] * unit, centre + g.angles[1] * unit, int(g.angles[2])),
              axis(g.velocities[0], g.velocities[1], int(g.velocities[2])));
  } else if (g.name == "KBMODV1Search" || g.name == "KBMODV1SearchConfig") {
    const double centre = g.name == "KBMODV1Search" ? 0.0 : centre_angle(1.0);
    std::vector<double> angles(g.ang_steps), speeds(g.vel_steps);
    const double ang_step = (g.max_ang - g.min_ang) / g.ang_steps, vel_step = (g.max_vel - g.min_vel) / g.vel_steps;
    for (int i = 0; i < g.ang_steps; ++i) angles[i] = centre + g.min_ang + i * ang_step;
    for (int i = 0; i < g.vel_steps; ++i) speeds[i] = g.min_vel + i * vel_step;
    add_polar(angles, speeds);
  } else if (g.name == "PencilSearch") {
    const bool at_rest = g.vx == 0 && g.vy == 0;
    const double angle = at_rest ? 0.0 : std::atan2(g.vy, g.vx), speed = std::hypot(g.vx, g.vy);
    // np.arange(start, stop, step): ceil((stop - start) / step) values start + i step.
    auto arange = [](double start, double stop, double step) {
      const double n = std::max(0.0, std::ceil((stop - start) / step));
      std::vector<double> values(static_cast<std::size_t>(n));
      for (std::size_t i = 0; i < values.size(); ++i) values[i] = start + double(i) * step;
      return values;
    };
    const std::vector<double> angles =
        arange(angle - g.max_ang_offset, angle + g.max_ang_offset + 1e-8, g.ang_step);
    const std::vector<double> speeds =
        arange(std::max(speed - g.max_vel_offset, 0.0), speed + g.max_vel_offset + 1e-8, g.vel_step);
    add_polar(angles, speeds);
  } else {
    throw Error("generator_config: unknown generator '" + g.name + "'");
  }
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
