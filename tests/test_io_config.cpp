// The configuration: defaults, every key of KBMOD's SearchConfiguration (implemented, accepted
// with a notice, or refused all at once), layers, range checks that never wrap, duplicate keys.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <numbers>
#include <sstream>

#include "shiftstack/error.hpp"
#include "shiftstack/io/config.hpp"
#include "test_io_support.hpp"

namespace shiftstack::io {
namespace {

using testing_support::fixture;

template <typename Body>
std::string error_of(Body body) {
  try {
    body();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an Error";
  return "";
}

void expect_error(const std::function<void()>& body, std::initializer_list<std::string> fragments) {
  const std::string message = error_of(body);
  for (const auto& f : fragments) EXPECT_NE(message.find(f), std::string::npos) << "'" << f << "' not in: " << message;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The 45 keys of KBMOD's SearchConfiguration (its _SUPPORTED_PARAMS).
const std::vector<std::string> kbmod_keys = {
    "clip_negative", "cluster_eps", "cluster_type", "cluster_v_scale", "color_scale", "cnn_filter", "cnn_model",
    "cnn_coadd_type", "cnn_stamp_radius", "cnn_model_type", "coadds", "compute_ra_dec", "cpu_only", "debug",
    "do_clustering", "drop_columns", "encode_num_bytes", "generator_config", "generate_psi_phi", "gpu_filter",
    "lh_level", "max_masked_pixels", "max_results", "near_dup_thresh", "nightly_coadds", "num_obs",
    "peak_offset_max", "pred_line_cluster", "pred_line_params", "psf_val", "result_filename", "results_per_pixel",
    "save_all_stamps", "save_config", "separate_col_files", "sigmaG_filter", "sigmaG_lims", "stamp_radius",
    "stamp_type", "timeout_hours", "track_filtered", "x_pixel_bounds", "x_pixel_buffer", "y_pixel_bounds",
    "y_pixel_buffer"};

TEST(IoConfig, DefaultsComeFromTheDumpedText) {
  const SearchConfig c = default_config();
  EXPECT_EQ(c.filter.lh_level, 7.0);
  EXPECT_EQ(c.filter.num_obs, 10);
  EXPECT_EQ(c.generator.name, "VelocityGridSearch");
  EXPECT_EQ(c.generator.vx_steps, 21);
  EXPECT_EQ(c.read.flag_keys, ReadOptions::default_flag_keys());
  EXPECT_EQ(c.read.mask_bitmask, 0xFFFFFFFFull);
  EXPECT_EQ(c.reference_time, "first");
  EXPECT_EQ(c.cluster.space, ClusterSpace::peaks);
  // KBMOD's own defaults where shiftstack does not say otherwise.
  EXPECT_EQ(c.cluster.eps, 20.0);
  EXPECT_EQ(c.cluster.v_scale, 1.0);
  EXPECT_EQ(c.results_per_pixel, 8);
  EXPECT_EQ(c.near_dup_thresh, 10.0);
  EXPECT_FALSE(c.gpu_filter);
  EXPECT_EQ(c.separate_col_files, std::vector<std::string>{"all_stamps"});
  EXPECT_EQ(c.effective["sigmaG_lims"], nlohmann::json::array({25, 75}));
  EXPECT_TRUE(c.notices.empty());
  // The dumped text parses back to itself.
  const SearchConfig again = parse_config(default_config_text(), "dump");
  EXPECT_EQ(again.effective, c.effective);
}

TEST(IoConfig, EveryKbmodKeyIsAcceptedInKbmodsDefaultDump) {
  // KBMOD's SearchConfiguration().to_yaml() and .to_file(): all 45 keys at KBMOD's defaults.
  const std::string dump = read_text(fixture("kbmod/default_config.yaml"));
  for (const auto& key : kbmod_keys) EXPECT_NE(("\n" + dump).find("\n" + key + ":"), std::string::npos) << key;
  for (const char* file : {"kbmod/default_config.yaml", "kbmod/default_config_sections.yaml"}) {
    const SearchConfig c = load_config(fixture(file));
    EXPECT_EQ(c.generator.name, "EclipticCenteredSearch") << file;
    EXPECT_EQ(c.generator.velocities[2], 257) << file;
    EXPECT_NEAR(c.generator.angles[0], -std::numbers::pi / 15, 1e-15) << file;
    EXPECT_EQ(c.filter.lh_level, 10.0) << file;
    EXPECT_EQ(c.results_per_pixel, 8) << file;
    EXPECT_EQ(c.cluster.space, ClusterSpace::all) << file;
    EXPECT_EQ(c.cluster.v_scale, 1.0) << file;
    EXPECT_TRUE(c.coadds.empty()) << file;
    EXPECT_FALSE(c.result_filename) << file;
    // At KBMOD's defaults the unimplemented keys do nothing in KBMOD either: no notice.
    EXPECT_TRUE(c.notices.empty()) << file << ": " << (c.notices.empty() ? "" : c.notices.front());
  }
}

TEST(IoConfig, KeysWithoutEffectGiveOneNoticeEach) {
  const SearchConfig c = parse_config("debug: true\ntrack_filtered: true\nsave_config: false\ncnn_model_type: resnet34\n", "u");
  ASSERT_EQ(c.notices.size(), 3u);
  for (const auto& n : c.notices) EXPECT_NE(n.find("has no effect here"), std::string::npos) << n;
  EXPECT_EQ(c.effective["kbmod_keys_without_effect"]["debug"], true);
}

TEST(IoConfig, UnsupportedKeysAreRefusedAllAtOnceWithReasons) {
  const std::string message = error_of([] {
    parse_config("cnn_filter: true\ncolor_scale: {r: 0.5}\nx_pixel_buffer: 5\nnightly_coadds: true\nlh_levle: 3\n"
                 "peak_offset_max: 2\npred_line_cluster: true\n",
                 "user.yaml");
  });
  EXPECT_NE(message.find("7 problems"), std::string::npos) << message;
  for (const char* key : {"cnn_filter", "color_scale", "x_pixel_buffer", "nightly_coadds", "peak_offset_max",
                          "pred_line_cluster"})
    EXPECT_NE(message.find("KBMOD key '" + std::string(key)), std::string::npos) << key << ": " << message;
  EXPECT_NE(message.find("did you mean 'lh_level'"), std::string::npos) << message;
  EXPECT_NE(message.find("is not implemented"), std::string::npos) << message;
  // Neutral values are accepted silently.
  EXPECT_TRUE(parse_config("cnn_filter: false\nx_pixel_buffer: 0\ncolor_scale: null\n", "u").notices.empty());
}

TEST(IoConfig, OlderKbmodKeysAreNamedAsSuch) {
  expect_error([] { parse_config("im_filepath: /data\n", "old.yaml"); },
               {"old.yaml", "'im_filepath' is a key of older KBMOD versions"});
  // flag_keys is shiftstack's own key now (KBMOD dropped it), so it is accepted.
  EXPECT_EQ(parse_config("flag_keys: [BAD]\n", "u").read.flag_keys, std::vector<std::string>{"BAD"});
}

TEST(IoConfig, IntegersAreRangeCheckedNeverWrapped) {
  // Each of these wraps to a small valid number when narrowed to 32 bits without a check.
  expect_error([] { parse_config("generator_config: {name: VelocityGridSearch, vx_steps: 4294967313, min_vx: 0, "
                                 "max_vx: 1, vy_steps: 2, min_vy: 0, max_vy: 1}\n", "u"); },
               {"vx_steps", "4294967313 is out of range"});
  expect_error([] { parse_config("x_pixel_bounds: [0, 4294967306]\n", "u"); }, {"x_pixel_bounds", "4294967306 is out of range"});
  expect_error([] { parse_config("stamp_radius: 4294967299\n", "u"); }, {"stamp_radius", "out of range"});
  expect_error([] { parse_config("num_obs: 4294967297\n", "u"); }, {"num_obs", "out of range"});
  expect_error([] { parse_config("generator_config: {name: EclipticCenteredSearch, velocities: [0, 10, 1e10], "
                                 "angles: [0, 1, 3]}\n", "u"); },
               {"velocities[2]", "10000000000 is out of range"});
  expect_error([] { parse_config("results_per_pixel: 99999999999999999999\n", "u"); }, {"results_per_pixel", "out of range"});
  expect_error([] { parse_config("max_results: -2\n", "u"); }, {"max_results", "out of range"});
  // And the largest values that are in range still parse.
  EXPECT_EQ(parse_config("x_pixel_bounds: [0, 2147483647]\n", "u").x_bounds.value()[1], 2147483647);
  EXPECT_EQ(parse_config("num_obs: -1\n", "u").filter.num_obs, -1);
}

TEST(IoConfig, DuplicateKeysAreRefused) {
  expect_error([] { parse_config("lh_level: 5\nnum_obs: 3\nlh_level: 6\n", "dup.yaml"); },
               {"dup.yaml line 3", "duplicate key 'lh_level'", "line 1"});
  expect_error([] { parse_config("generator_config:\n  name: SingleVelocitySearch\n  vx: 1\n  vx: 2\n  vy: 0\n", "dup.yaml"); },
               {"duplicate key 'generator_config.vx'"});
  expect_error([] { parse_config("", "u", {"lh_level={a: 1, a: 2}"}); }, {"duplicate key 'a'"});
}

TEST(IoConfig, LayersOverrideInOrderAndEmbeddedLayersSkipOldKeys) {
  const std::vector<ConfigLayer> layers = {
      {"workunit.fits (embedded)", "lh_level: 12\nnum_obs: 4\nim_filepath: /x\nflag_keys: [BAD]\nengine: reference\n", true},
      {"user.yaml", "num_obs: 5\n", false}};
  const SearchConfig c = parse_config(layers, {"stamp_radius=3"});
  EXPECT_EQ(c.filter.lh_level, 12.0);  // from the WorkUnit
  EXPECT_EQ(c.filter.num_obs, 5);      // the file wins
  EXPECT_EQ(c.stamp_radius, 3);        // --set wins over both
  // Only current KBMOD keys come from an embedded configuration; the rest is one notice.
  EXPECT_EQ(c.read.flag_keys, ReadOptions::default_flag_keys());
  EXPECT_EQ(c.engine, "auto");
  ASSERT_EQ(c.notices.size(), 1u);
  EXPECT_NE(c.notices[0].find("im_filepath, flag_keys, engine"), std::string::npos) << c.notices[0];
  EXPECT_EQ(c.sources, (std::vector<std::string>{"workunit.fits (embedded)", "user.yaml", "--set"}));
  // An embedded value KBMOD supports but shiftstack refuses can be overridden by a later layer.
  const std::vector<ConfigLayer> refused = {{"wu", "cnn_filter: true\n", true}};
  expect_error([&] { parse_config(refused); }, {"cnn_filter"});
  EXPECT_NO_THROW(parse_config(refused, {"cnn_filter=false"}));
}

TEST(IoConfig, KbmodKeysOverridesAndErrors) {
  SearchConfig c = parse_config(R"(
lh_level: 9.5
num_obs: 5
sigmaG_lims: [15, 60]
encode_num_bytes: 1
result_filename: out/run.fits
drop_columns: [all_stamps]
timeout_hours: 2.5
generator_config:
  name: EclipticCenteredSearch
  velocities: [10, 20, 3]
  angles: [-10, 10, 5]
  angle_units: degree
  given_ecliptic: 30
)",
                                "user.yaml", {"num_obs=7", "generator_config.velocities=[10, 30, 3]"});
  EXPECT_EQ(c.filter.lh_level, 9.5);
  EXPECT_EQ(c.filter.num_obs, 7);
  EXPECT_EQ(c.filter.sigma_g_options.low_percentile, 15);
  EXPECT_EQ(c.encoding, Encoding::int8);
  EXPECT_EQ(c.result_filename, "out/run.fits");
  EXPECT_EQ(c.drop_columns, std::vector<std::string>{"all_stamps"});
  EXPECT_EQ(c.timeout_hours, 2.5);
  MotionBank bank;
  fill_velocities(c.generator, bank, std::nullopt);
  ASSERT_EQ(bank.velocity_list.size(), 15u);
  // Angle 30 - 10 degrees, speed 10: the first velocity.
  EXPECT_NEAR(bank.velocity_list[0].vx, 10 * std::cos(20 * M_PI / 180), 1e-12);
  EXPECT_NEAR(bank.velocity_list[0].vy, 10 * std::sin(20 * M_PI / 180), 1e-12);
  EXPECT_NEAR(bank.velocity_list[2].vx, 30 * std::cos(20 * M_PI / 180), 1e-12);

  expect_error([] { parse_config("lh_levle: 5\n", "user.yaml"); }, {"user.yaml", "unknown key 'lh_levle'", "did you mean 'lh_level'"});
  expect_error([] { parse_config("lh_level: high\n", "user.yaml"); }, {"lh_level", "expected a finite number"});
  expect_error([] { parse_config("sigmaG_lims: [75, 25]\n", "user.yaml"); }, {"sigmaG_lims"});
  expect_error([] { parse_config("generator_config: {name: VelocityGridSearch, vx_steps: 3}\n", "u"); }, {"needs vy_steps"});
  expect_error([] { parse_config("generator_config: {name: VelocityGridSearch, v_max: 3}\n", "u"); }, {"v_max", "not a parameter"});
  expect_error([] { parse_config("generator_config: {name: RandomVelocitySearch}\n", "u"); }, {"irreproducible"});
  expect_error([] { parse_config("lh_level: [1\n", "broken.yaml"); }, {"broken.yaml", "not valid YAML"});
  expect_error([] { parse_config("", "u", {"lh_level"}); }, {"expected key=value"});
  expect_error([] { parse_config("", "u", {"nothing=1"}); }, {"unknown key 'nothing'"});
  expect_error([] { parse_config("encode_num_bytes: 3\n", "u"); }, {"encode_num_bytes"});
  expect_error([] { parse_config("separate_col_files: ['[']\n", "u"); }, {"not a valid regular expression"});
  expect_error([] { parse_config("x_pixel_bounds: [0, 10]\nreference_time: mid\n", "u"); }, {"need", "reference_time first"});
  expect_error([] { load_config("/nonexistent/config.yaml"); }, {"cannot read the configuration file"});
  // Several problems, one message.
  expect_error([] { parse_config("lh_level: x\nnum_obs: y\n", "u"); }, {"2 problems", "lh_level", "num_obs"});
}

TEST(IoConfig, KbmodGeneratorsGiveKbmodsVelocities) {
  MotionBank bank;
  fill_velocities(parse_config("generator_config: {name: SingleVelocitySearch, vx: 2.5, vy: -1}\n", "u").generator, bank,
                  std::nullopt);
  ASSERT_EQ(bank.size(), 1u);
  EXPECT_EQ(bank.velocity(0).vx, 2.5);
  EXPECT_EQ(bank.velocity(0).vy, -1);
  // KBMODV1Search: steps (max - min) / n, upper ends excluded; angles outer, speeds inner.
  fill_velocities(parse_config("generator_config: {name: KBMODV1Search, vel_steps: 5, min_vel: 0, max_vel: 4, "
                               "ang_steps: 5, min_ang: -0.1, max_ang: 0.1}\n", "u")
                      .generator,
                  bank, std::nullopt);
  ASSERT_EQ(bank.size(), 25u);
  EXPECT_NEAR(bank.velocity(6).vx, 0.8 * std::cos(-0.06), 1e-12);  // angle index 1, speed index 1
  EXPECT_NEAR(bank.velocity(6).vy, 0.8 * std::sin(-0.06), 1e-12);
  // KBMODV1SearchConfig: angles average - ang_arr[0] to average + ang_arr[1].
  fill_velocities(parse_config("generator_config: {name: KBMODV1SearchConfig, v_arr: [1, 3, 2], ang_arr: [0.2, 0.2, 2], "
                               "average_angle: 1.0}\n", "u")
                      .generator,
                  bank, std::nullopt);
  ASSERT_EQ(bank.size(), 4u);
  EXPECT_NEAR(bank.velocity(0).vx, std::cos(0.8), 1e-12);
  EXPECT_NEAR(bank.velocity(3).vy, 2 * std::sin(1.0), 1e-12);
  // PencilSearch: np.arange over angle and speed around (3, 4) (angle atan2(4, 3), speed 5).
  fill_velocities(parse_config("generator_config: {name: PencilSearch, vx: 3, vy: 4, max_ang_offset: 0.1, ang_step: 0.05, "
                               "max_vel_offset: 1, vel_step: 0.5}\n", "u")
                      .generator,
                  bank, std::nullopt);
  ASSERT_EQ(bank.size(), 25u);  // 5 angles x 5 speeds (4, 4.5, 5, 5.5, 6)
  EXPECT_NEAR(std::hypot(bank.velocity(0).vx, bank.velocity(0).vy), 4.0, 1e-12);
  EXPECT_NEAR(std::atan2(bank.velocity(0).vy, bank.velocity(0).vx), std::atan2(4.0, 3.0) - 0.1, 1e-12);
  // The ecliptic generator needs an angle: given, or from a WCS.
  expect_error([&] { fill_velocities(load_config(fixture("kbmod/default_config.yaml")).generator, bank, std::nullopt); },
               {"no given_ecliptic"});
}

}  // namespace
}  // namespace shiftstack::io
