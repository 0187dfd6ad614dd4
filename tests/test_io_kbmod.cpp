// A KBMOD user's data and configurations, end to end: KBMOD's data/small with KBMOD's demo and
// default configurations, WorkUnits written by KBMOD (embedded configuration, shards, images that
// share an epoch, the barycentric "ebd" frame), files holding one image, and nearby movers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "io/fits_util.hpp"
#include "pipeline/stages.hpp"
#include "shiftstack/encoding.hpp"
#include "shiftstack/error.hpp"
#include "shiftstack/io/config.hpp"
#include "shiftstack/io/fits.hpp"
#include "shiftstack/likelihood.hpp"
#include "shiftstack/run.hpp"
#include "shiftstack/synth.hpp"
#include "test_io_support.hpp"

namespace shiftstack::io {
namespace {

using testing_support::fixture;
using testing_support::TempDir;

std::vector<std::string> data_small() {
  std::vector<std::string> files;
  for (int i = 0; i < 10; ++i) files.push_back(fixture("kbmod/small/00000" + std::to_string(i) + ".fits"));
  return files;
}

const Column& column(const ResultTable& t, const std::string& name) {
  const Column* c = t.find(name);
  if (!c) throw Error("no column " + name);
  return *c;
}

// ---- data/small -----------------------------------------------------------------------------

TEST(Kbmod, DataSmallWithTheDemoConfigGivesKbmodsTrajectory) {
  // KBMOD's KBMOD_Demo configuration, unchanged. KBMOD reports (11, 27) moving (16.66, 3.38)
  // px/day with likelihood 40.36 (KBMOD's pipeline, reproduced step by step in numpy: its
  // flux-clipped in-search filter ranks the crossings, the best 8 per starting pixel and the
  // 10 px near-duplicate grid thin them, then sigma-G and the thresholds).
  const SearchConfig config = load_config(fixture("kbmod/demo_config.yaml"));
  RunOptions options;
  options.inputs = data_small();
  const RunOutput run = run_search(config, options);
  ASSERT_EQ(run.detections.size(), 1u);
  const ResultTable t = make_result_table(run, config);
  EXPECT_EQ(column(t, "x").integers[0], 11);
  EXPECT_EQ(column(t, "y").integers[0], 27);
  EXPECT_NEAR(column(t, "vx").reals[0], 17 * std::cos(0.2), 1e-9);  // speed 17, 0.2 rad off the given ecliptic (0)
  EXPECT_NEAR(column(t, "vy").reals[0], 17 * std::sin(0.2), 1e-9);
  EXPECT_NEAR(column(t, "likelihood").reals[0], 40.356, 0.01);
  EXPECT_EQ(column(t, "obs_count").integers[0], 10);
  // KBMOD's own reading of the row: x + vx t from the first epoch is the track, exactly (the
  // search anchors its trials at the first epoch, as KBMOD does).
  const Column& pred_x = column(t, "pred_x");
  for (int e = 0; e < 10; ++e) {
    const double t_e = run.bank.epochs[std::size_t(e)] - run.bank.epochs[0];
    EXPECT_NEAR(pred_x.reals[std::size_t(e)], 11 + column(t, "vx").reals[0] * t_e, 1e-9) << e;
  }
  // Sky positions through each exposure's WCS at those positions, and the table's WCS.
  const SkyPosition first = run.loaded.wcs[0]->pixel_to_sky(11, 27);
  EXPECT_NEAR(column(t, "img_ra").reals[0], first.ra, 1e-12);
  EXPECT_NEAR(column(t, "img_dec").reals[0], first.dec, 1e-12);
  EXPECT_NEAR(column(t, "global_ra").reals[0], first.ra, 1e-12);
  ASSERT_TRUE(t.meta.contains("wcs"));
  const auto wcs = nlohmann::json::parse(t.meta["wcs"].get<std::string>());
  EXPECT_EQ(wcs["NAXIS1"], 64);
  EXPECT_EQ(wcs["CTYPE1"], "RA---TAN-SIP");
  EXPECT_EQ(t.meta["mjd_mid"].size(), 10u);
  EXPECT_EQ(t.meta["num_img"], 10);
  // result_filename is taken as the default output (-o wins in the command).
  EXPECT_EQ(config.result_filename, "./fake_results/results.ecsv");
}

TEST(Kbmod, PixelBoundsAreStartingPixelsAsInKbmod) {
  RunOptions options;
  options.inputs = data_small();
  SearchConfig config = load_config(fixture("kbmod/demo_config.yaml"), {"x_pixel_bounds=[10, 12]", "y_pixel_bounds=[26, 28]"});
  RunOutput run = run_search(config, options);
  EXPECT_EQ(run.digest.trials, 2 * 2 * std::int64_t(run.bank.size()));
  ASSERT_EQ(run.detections.size(), 1u);
  ResultTable t = make_result_table(run, config);
  EXPECT_EQ(column(t, "x").integers[0], 11);
  EXPECT_EQ(column(t, "y").integers[0], 27);
  // Bounds that leave out the starting pixel leave out the object, whatever its later path.
  config = load_config(fixture("kbmod/demo_config.yaml"), {"x_pixel_bounds=[0, 10]"});
  run = run_search(config, options);
  t = make_result_table(run, config);
  for (std::int64_t x : column(t, "x").integers) EXPECT_LT(x, 10);
}

TEST(Kbmod, KbmodsDefaultConfigDumpRunsUnchanged) {
  // All 45 keys at KBMOD's defaults: an ecliptic search of 257 x 129 velocities whose ecliptic
  // direction comes from the WCS. At 92-526 px/day nothing stays in a 64-pixel image for ten
  // epochs, so the table is empty, but it is a valid table.
  const SearchConfig config = load_config(fixture("kbmod/default_config.yaml"));
  RunOptions options;
  options.inputs = data_small();
  const RunOutput run = run_search(config, options);
  EXPECT_EQ(run.bank.size(), 257u * 129u);
  EXPECT_TRUE(run.detections.empty());
  const ResultTable t = make_result_table(run, config);
  EXPECT_EQ(t.rows, 0u);
  EXPECT_NO_THROW(t.check());
}

TEST(Kbmod, ASecondBrightObjectDoesNotHideTheSamplesOwn) {
  // data/small plus a brighter second mover whose track ends 9 px from the sample's: both come
  // back (with friends-of-friends linking they became one row, and the sample's was lost).
  LoadedStack loaded = read_exposures(data_small(), ReadOptions{});
  const Image<float> psf = gaussian_psf(1.4);
  const int r = psf.width / 2;
  for (Exposure& x : loaded.stack.exposures) {
    const double dt = x.epoch - loaded.stack.exposures[0].epoch;
    const int cx = int(std::lround(8 + 14 * dt)), cy = int(std::lround(45 - 3.2 * dt));
    for (int dy = -r; dy <= r; ++dy)
      for (int dx = -r; dx <= r; ++dx) x.science(cx + dx, cy + dy) += 600 * psf(dx + r, dy + r);
  }
  const SearchConfig config = load_config(fixture("kbmod/demo_config.yaml"));
  const RunOutput run = run_search(config, std::move(loaded), RunOptions{});
  const ResultTable t = make_result_table(run, config);
  bool own = false, second = false;
  for (std::size_t i = 0; i < t.rows; ++i) {
    const auto x = column(t, "x").integers[i], y = column(t, "y").integers[i];
    own = own || (std::abs(x - 11) <= 1 && std::abs(y - 27) <= 1);
    second = second || (std::abs(x - 8) <= 1 && std::abs(y - 45) <= 1);
  }
  EXPECT_TRUE(own) << t.rows << " rows";
  EXPECT_TRUE(second) << t.rows << " rows";
}

// ---- nearby movers ------------------------------------------------------------------------

// Adds a point source on bank trajectory (x, y, velocity) with stack SNR `snr`: flux
// snr / sqrt(B), B along the trajectory from the actual maps (masks, variance, PSF, throughput).
void inject(ExposureStack& stack, const MotionBank& bank, int x, int y, std::size_t velocity, double snr) {
  const LikelihoodStack maps = compute_likelihood(stack);
  const LightCurve curve = light_curve(maps, bank, x, y, velocity);
  double B = 0;
  for (double phi : curve.phi) B += phi;
  const double flux = snr / std::sqrt(B);
  for (int e = 0; e < stack.size(); ++e) {
    Exposure& ex = stack.exposures[std::size_t(e)];
    const PixelIndex p = sampled_pixel(bank, x, y, velocity, e);
    const int r = ex.psf.width / 2;
    for (int dy = -r; dy <= r; ++dy)
      for (int dx = -r; dx <= r; ++dx) {
        const int px = p.x + dx, py = p.y + dy;
        if (px >= 0 && py >= 0 && px < ex.science.width && py < ex.science.height)
          ex.science(px, py) += float(flux * ex.throughput * ex.psf(dx + r, dy + r));
      }
  }
}

struct Movers {
  RunOutput run;
  SearchConfig config;
  int found_a = 0, found_b = 0;
};

// Two parallel SNR-45 movers `separation` pixels apart in y on the ci kit, searched with the
// default configuration (the kit's velocity grid), clustered as `space` says.
Movers two_movers(int separation, ClusterSpace space) {
  KitOptions o = workload("ci");
  o.inject = false;
  o.seed = 5;
  KitStack kit = make_kit(o);
  const std::size_t v = kit.bank.size() / 2 + 3;  // a moving trajectory near the middle of the grid
  const int x = 50, ya = 40, yb = 40 + separation;
  inject(kit.stack, kit.bank, x, ya, v, 45);
  inject(kit.stack, kit.bank, x, yb, v, 45);
  Movers m;
  m.config = testing_support::kit_search_config(kit);
  m.config.cpu_only = true;
  m.config.stamp_radius = 2;
  m.config.cluster.space = space;
  LoadedStack loaded;
  loaded.stack = kit.stack;
  m.run = run_search(m.config, std::move(loaded), RunOptions{});
  const double dvx = kit.bank.vx_axis[1] - kit.bank.vx_axis[0];
  for (const Detection& d : m.run.detections) {
    const Velocity got = m.run.bank.velocity(std::size_t(d.candidate.velocity)), want = kit.bank.velocity(v);
    const bool velocity_ok = std::abs(got.vx - want.vx) <= 1.01 * dvx && std::abs(got.vy - want.vy) <= 1.01 * dvx;
    if (!velocity_ok || std::abs(d.candidate.x - x) > 1) continue;
    m.found_a += std::abs(d.candidate.y - ya) <= 1;
    m.found_b += std::abs(d.candidate.y - yb) <= 1;
  }
  return m;
}

TEST(Kbmod, TwoParallelMoversTwentyAndFortyPixelsApartAreBothReturned) {
  for (int separation : {20, 40}) {
    const Movers m = two_movers(separation, ClusterSpace::peaks);
    EXPECT_EQ(m.found_a, 1) << separation << " px: " << m.run.detections.size() << " rows";
    EXPECT_EQ(m.found_b, 1) << separation << " px: " << m.run.detections.size() << " rows";
    // No extra rows for the same two sources (noise may add a faint stray).
    int bright = 0;
    for (const Detection& d : m.run.detections) bright += d.likelihood > 20;
    EXPECT_EQ(bright, 2) << separation << " px";
  }
  // KBMOD's default linking (DBSCAN in (x, y, vx, vy), eps 20) joins the pair 20 px apart.
  const Movers linked = two_movers(20, ClusterSpace::all);
  EXPECT_EQ(linked.found_a + linked.found_b, 1) << linked.run.detections.size() << " rows";
}

// ---- WorkUnits ------------------------------------------------------------------------------

TEST(Kbmod, WorkUnitsWrittenByKbmodReadWithTheirConfiguration) {
  const std::string whole = fixture("kbmod/small_workunit.fits");
  std::vector<std::string> warnings;
  const auto layers = embedded_config_layers({whole}, warnings);
  ASSERT_EQ(layers.size(), 1u);
  EXPECT_TRUE(layers[0].embedded);
  const SearchConfig config = parse_config(layers);
  EXPECT_EQ(config.filter.lh_level, 10.0);  // the demo configuration KBMOD stored in it
  EXPECT_EQ(config.filter.sigma_g_options.low_percentile, 15);
  EXPECT_TRUE(config.gpu_filter);
  EXPECT_EQ(config.generator.name, "EclipticCenteredSearch");

  const LoadedStack a = read_exposures({whole}, config.read);
  // Sharded: the primary file alone, or the folder holding it and its shards, read each image once.
  const LoadedStack b = read_exposures({fixture("kbmod/sharded/small.fits")}, config.read);
  const LoadedStack c = read_exposures(expand_inputs({fixture("kbmod/sharded")}), config.read);
  const LoadedStack files = read_exposures(data_small(), config.read);
  for (const LoadedStack* s : {&a, &b, &c}) {
    ASSERT_EQ(s->stack.size(), 10);
    for (int e = 0; e < 10; ++e) {
      EXPECT_DOUBLE_EQ(s->stack.exposures[std::size_t(e)].epoch, files.stack.exposures[std::size_t(e)].epoch);
      // KBMOD quantizes what it compresses in steps of 0.01.
      EXPECT_NEAR(s->stack.exposures[std::size_t(e)].science(11, 27), files.stack.exposures[std::size_t(e)].science(11, 27), 0.01);
      EXPECT_TRUE(s->wcs[std::size_t(e)].has_value());
    }
  }
  for (int e = 0; e < 10; ++e)
    EXPECT_EQ(b.stack.exposures[std::size_t(e)].science.pixels, c.stack.exposures[std::size_t(e)].science.pixels);
  EXPECT_EQ(b.info[3].hdus, "SCI_3,MSK_3,VAR_3");
}

TEST(Kbmod, KbmodsTestWorkUnitWithSharedEpochsRuns) {
  // KBMOD's tests/data/shifted_wcs_diff_dimms_tiled.fits: images 2 and 3 share an epoch; its
  // embedded configuration comes from an older KBMOD (30 keys no longer read are ignored).
  const std::string path = fixture("kbmod/shifted_wcs_diff_dimms_tiled.fits");
  std::vector<std::string> warnings;
  const SearchConfig config = parse_config(embedded_config_layers({path}, warnings));
  ASSERT_EQ(config.notices.size(), 1u);
  EXPECT_NE(config.notices[0].find("30 keys"), std::string::npos) << config.notices[0];
  const LoadedStack loaded = read_exposures({path}, config.read);
  ASSERT_EQ(loaded.stack.size(), 4);
  EXPECT_EQ(loaded.stack.exposures[2].epoch, 60416.0);
  EXPECT_EQ(loaded.stack.exposures[3].epoch, 60416.0);
  const bool noted = std::any_of(loaded.warnings.begin(), loaded.warnings.end(),
                                 [](const std::string& w) { return w.find("kept as separate exposures") != std::string::npos; });
  EXPECT_TRUE(noted);
  // The whole run, with the embedded ecliptic search (33153 velocities), to the table.
  RunOptions options;
  options.inputs = {path};
  const RunOutput run = run_search(config, options);
  EXPECT_EQ(run.bank.size(), 257u * 129u);
  EXPECT_NO_THROW(make_result_table(run, config).check());
}

TEST(Kbmod, EbdWorkUnitSkyPositionsGoThroughTheOriginalImages) {
  // A WorkUnit reprojected by KBMOD to the barycentric frame at 40 AU. KBMOD turns grid
  // positions into observed ones by undoing the parallax (an ephemeris); shiftstack maps them
  // through each exposure's original image (ebd WCS inverted, then the original WCS). The two
  // routes agree to the accuracy of KBMOD's fitted ebd WCS.
  const std::string path = fixture("kbmod/ebd_workunit.fits");
  std::vector<std::string> warnings;
  const SearchConfig config = parse_config(embedded_config_layers({path}, warnings));
  const LoadedStack loaded = read_exposures({path}, config.read);
  ASSERT_EQ(loaded.frame.frame, "ebd");
  EXPECT_TRUE(loaded.frame.reprojected);
  EXPECT_EQ(loaded.frame.barycentric_distance, 40.0);
  ASSERT_EQ(loaded.frame.originals.size(), 4u);

  std::ifstream in(fixture("kbmod/ebd_expected.json"));
  const nlohmann::json expected = nlohmann::json::parse(in);
  MotionBank bank;
  for (const auto& x : loaded.stack.exposures) bank.epochs.push_back(x.epoch);
  bank.t_ref = bank.epochs[0];
  bank.velocity_list = {{0, 0}};
  int compared = 0;
  for (const auto& p : expected["points"]) {
    const double x = p["x"], y = p["y"];
    if (x != std::floor(x) || y != std::floor(y)) continue;  // detections sit on pixels
    Detection d;
    d.candidate.x = int(x);
    d.candidate.y = int(y);
    const SkyStage sky = sky_stage(loaded, bank, {d}, config);
    const int e = p["exposure"];
    const SkyPosition got = sky.image[0][std::size_t(e)];
    const double cos_dec = std::cos(double(p["dec"]) * M_PI / 180);
    constexpr double arcsec = 1.0 / 3600;
    EXPECT_NEAR((got.ra - double(p["ra"])) * cos_dec, 0, 0.02 * arcsec) << x << "," << y << " exposure " << e;
    EXPECT_NEAR(got.dec, double(p["dec"]), 0.02 * arcsec) << x << "," << y << " exposure " << e;
    // The frame's own WCS is about a degree away: the parallax at 40 AU.
    ASSERT_TRUE(sky.have_global);
    EXPECT_GT(std::abs(sky.global[0][std::size_t(e)].ra - double(p["ra"])), 0.5);
    ++compared;
  }
  EXPECT_EQ(compared, 12);
  // A whole run records the frame in the table.
  RunOptions options;
  options.inputs = {path};
  const RunOutput run = run_search(parse_config(embedded_config_layers({path}, warnings), {"num_obs=3"}), options);
  const ResultTable t = make_result_table(run, config);
  EXPECT_EQ(t.meta["reprojection_frame"], "ebd");
  EXPECT_EQ(t.meta["barycentric_distance"], 40.0);
}

// ---- files holding one image ----------------------------------------------------------------

TEST(Kbmod, SingleImageFilesUseAnEstimatedOrGivenVariance) {
  TempDir dir;
  // astropy's sip-wcs.fits (a real int16 frame with MJD-OBS) and a copy a day later.
  const std::string first = fixture("astropy/sip-wcs.fits"), second = dir.file("later.fits");
  {
    auto in = detail::FitsFile::open_read(first);
    const detail::Header h = detail::Header::read(in);
    Image<float> image = detail::read_float_image(in, h, "image");
    auto out = detail::FitsFile::create(second);
    long axes[2] = {image.width, image.height};
    int status = 0;
    fits_create_img(out.get(), FLOAT_IMG, 2, axes, &status);
    double mjd = 55806.1;
    fits_update_key(out.get(), TDOUBLE, "MJD-OBS", &mjd, nullptr, &status);
    fits_write_img(out.get(), TFLOAT, 1, LONGLONG(image.size()), image.pixels.data(), &status);
    out.check(status, "writing");
    out.close();
  }
  try {
    read_exposures({first, second}, ReadOptions{});
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("single_image_variance"), std::string::npos) << e.what();
  }
  ReadOptions o;
  o.single_image_variance = SingleImageVariance{true, 0};
  const LoadedStack estimated = read_exposures({first, second}, o);
  ASSERT_EQ(estimated.stack.size(), 2);
  // (1.4826 MAD)^2 of the frame, computed here independently with a full sort.
  std::vector<float> v = estimated.stack.exposures[0].science.pixels;
  std::sort(v.begin(), v.end());
  const double median = 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);  // even count: the mean of the middle two
  std::vector<double> dev;
  for (float p : v) dev.push_back(std::abs(p - median));
  std::sort(dev.begin(), dev.end());
  const double mad = dev[dev.size() / 2];
  const double variance = estimated.stack.exposures[0].variance(3, 4);
  EXPECT_NEAR(variance, std::pow(1.4826 * mad, 2), 0.02 * variance);  // median conventions differ by a pixel
  EXPECT_NE(estimated.info[0].variance.find("estimated"), std::string::npos);
  EXPECT_TRUE(estimated.wcs[0].has_value());
  // A raw frame is not background-subtracted, and the reader says so.
  EXPECT_TRUE(std::any_of(estimated.warnings.begin(), estimated.warnings.end(),
                          [](const std::string& w) { return w.find("background-subtracted") != std::string::npos; }));
  o.single_image_variance = SingleImageVariance{false, 4.5};
  const LoadedStack given = read_exposures({first, second}, o);
  EXPECT_EQ(given.stack.exposures[1].variance(10, 10), 4.5f);
}

// ---- results --------------------------------------------------------------------------------

TEST(Kbmod, ResultColumnsFollowKbmodsMeaning) {
  KitOptions o = workload("ci");
  o.seed = 11;
  o.injected_snr = 20;
  const KitStack kit = make_kit(o);
  SearchConfig config = testing_support::kit_search_config(kit);  // trials anchored at mid-span
  config.cpu_only = true;
  config.stamp_radius = 2;
  config.save_all_stamps = true;
  config.drop_columns = {"coadd_mean"};
  LoadedStack loaded;
  loaded.stack = kit.stack;
  RunOptions options;
  options.keep_unclustered = true;
  RunOutput run = run_search(config, std::move(loaded), options);
  ASSERT_GE(run.detections.size(), 1u);
  const ResultTable t = make_result_table(run, config);
  const int E = kit.stack.size();
  int first = 0;
  for (int e = 1; e < E; ++e)
    if (kit.bank.epochs[std::size_t(e)] < kit.bank.epochs[std::size_t(first)]) first = e;
  for (std::size_t i = 0; i < t.rows; ++i) {
    const Candidate& c = run.detections[i].candidate;
    const PixelIndex start = sampled_pixel(run.bank, c.x, c.y, std::size_t(c.velocity), first);
    EXPECT_EQ(column(t, "x").integers[i], start.x);
    EXPECT_EQ(column(t, "y").integers[i], start.y);
    EXPECT_EQ(column(t, "x_ref").integers[i], c.x);
    for (int e = 0; e < E; ++e) {
      const PixelPosition p = predicted_position(run.bank, c.x, c.y, std::size_t(c.velocity), e);
      EXPECT_EQ(column(t, "pred_x").reals[i * std::size_t(E) + std::size_t(e)], p.x);
      EXPECT_EQ(column(t, "pred_y").reals[i * std::size_t(E) + std::size_t(e)], p.y);
    }
  }
  // all_stamps: the science pixel the search sampled at each epoch sits at the stamp's centre.
  const Column& all = column(t, "all_stamps");
  ASSERT_EQ(all.shape, (std::vector<int>{E, 5, 5}));
  const Candidate& best = run.detections[0].candidate;
  for (int e = 0; e < E; ++e) {
    const Exposure& x = kit.stack.exposures[std::size_t(e)];
    const PixelIndex p = sampled_pixel(run.bank, best.x, best.y, std::size_t(best.velocity), e);
    const float centre = float(all.reals[std::size_t(e) * 25 + 12]);
    if (!x.mask.empty() && x.mask(p.x, p.y))
      EXPECT_TRUE(std::isnan(centre)) << e;
    else
      EXPECT_EQ(centre, x.science(p.x, p.y)) << e;
  }
  EXPECT_EQ(t.find("coadd_mean"), nullptr);
  EXPECT_NE(t.find("coadd_median"), nullptr);
  EXPECT_EQ(t.meta["reference_time"], "mid");

  // Files: all_stamps goes to NAME_all_stamps.fits (KBMOD's separate_col_files), the rest to the
  // tables; --unclustered keeps every filtered detection with the row it joined.
  TempDir dir;
  OutputPaths paths = OutputPaths::from(dir.file("r.ecsv"));
  paths.unclustered = paths.base + ".unclustered.ecsv";
  write_outputs(run, config, paths);
  std::ifstream ecsv(paths.ecsv);
  std::stringstream text;
  text << ecsv.rdbuf();
  EXPECT_EQ(text.str().find("all_stamps"), std::string::npos);
  auto separate = detail::FitsFile::open_read(dir.file("r_all_stamps.fits"));
  const detail::Header primary = detail::Header::read(separate);
  EXPECT_EQ(primary.number("NUMRES").value_or(-1), double(t.rows));
  EXPECT_EQ(primary.text("COLNAME").value_or(""), "all_stamps");
  ASSERT_TRUE(separate.move_to_name("IMG_0"));
  int status = 0, naxis = 0;
  long axes[3] = {0, 0, 0};
  fits_get_img_dim(separate.get(), &naxis, &status);
  fits_get_img_size(separate.get(), 3, axes, &status);
  EXPECT_EQ(status, 0);
  EXPECT_EQ(naxis, 3);
  EXPECT_EQ(axes[0], 5);
  EXPECT_EQ(axes[2], E);
  const ResultTable loose = make_unclustered_table(run, config);
  EXPECT_EQ(loose.rows, run.unclustered.size());
  EXPECT_EQ(loose.rows, std::size_t(run.before_clustering));
  for (std::int64_t row : column(loose, "cluster_row").integers) EXPECT_LT(row, std::int64_t(t.rows));
  EXPECT_TRUE(std::filesystem::exists(paths.unclustered));
}

TEST(Kbmod, EnginesReportProgressUpToTheWholeScan) {
  KitOptions o = workload("ci");
  const KitStack kit = make_kit(o);
  const EncodedStack s = encode(compute_likelihood(kit.stack), Encoding::fp32);
  for (const char* name : {"reference", "cpu"}) {
    auto engine = make_engine(name);
    std::vector<std::pair<std::int64_t, std::int64_t>> reports;
    OutputPolicy policy;
    policy.progress = [&](std::int64_t done, std::int64_t total) { reports.emplace_back(done, total); };
    Region region{0, 0, 64, 48};
    search(*engine, s, kit.bank, policy, region);
    ASSERT_FALSE(reports.empty()) << name;
    const std::int64_t total = std::int64_t(64 * 48) * std::int64_t(kit.bank.size());
    for (std::size_t i = 0; i < reports.size(); ++i) {
      EXPECT_EQ(reports[i].second, total) << name;
      if (i) EXPECT_GE(reports[i].first, reports[i - 1].first) << name;
    }
    EXPECT_EQ(reports.back().first, total) << name;
  }
}

TEST(Kbmod, TimeoutHoursStopsBetweenStages) {
  RunOptions options;
  options.inputs = data_small();
  const SearchConfig config = load_config(fixture("kbmod/demo_config.yaml"), {"timeout_hours=1e-12"});
  try {
    run_search(config, options);
    ADD_FAILURE() << "expected the run to stop";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("timeout_hours"), std::string::npos) << e.what();
  }
}

TEST(Kbmod, OutputExtensionsAreChecked) {
  try {
    OutputPaths::from("results.csv");
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(".ecsv and .fits"), std::string::npos) << e.what();
  }
  EXPECT_EQ(OutputPaths::from("out/r.fits").ecsv, "out/r.ecsv");
  EXPECT_EQ(OutputPaths::from("out/r").fits, "out/r.fits");
  EXPECT_EQ(OutputPaths::from("run.1/r.ecsv").base, "run.1/r");
}

}  // namespace
}  // namespace shiftstack::io
