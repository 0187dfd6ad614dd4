// Kit -> FITS files on disk -> reader -> search: the same stack, bit for bit, and the same
// candidates as the search of the kit in memory; the injected source comes out as one row of
// the results table.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "io/fits_util.hpp"
#include "shiftstack/encoding.hpp"
#include "shiftstack/error.hpp"
#include "shiftstack/likelihood.hpp"
#include "shiftstack/search.hpp"
#include "shiftstack/io/config.hpp"
#include "shiftstack/io/fits.hpp"
#include "shiftstack/run.hpp"
#include "shiftstack/io/wcs.hpp"
#include "shiftstack/synth.hpp"
#include "shiftstack/tree.hpp"
#include "test_io_support.hpp"

namespace shiftstack::io {
namespace {

using testing_support::kit_in_memory;
using testing_support::TempDir;

void write_kit(const KitStack& kit, const std::string& dir, bool with_wcs) {
  for (int e = 0; e < kit.stack.size(); ++e) {
    WriteOptions w;
    w.curve_x = kit.bank.curve_at_x(e);
    w.curve_y = kit.bank.curve_at_y(e);
    if (with_wcs) w.extra_cards = synthetic_tan_wcs_cards(kit.stack.width(), kit.stack.height());
    char name[32];
    std::snprintf(name, sizeof name, "exp_%03d.fits", e);
    write_exposure_fits(dir + "/" + name, kit.stack.exposures[e], w);
  }
}

// The search configuration whose bank is the kit's own.
SearchConfig config_for(const KitStack& kit) {
  SearchConfig c = testing_support::kit_search_config(kit);
  c.cpu_only = true;
  c.stamp_radius = 4;
  return c;
}

void expect_same_images(const Image<float>& a, const Image<float>& b, const std::string& what) {
  ASSERT_EQ(a.width, b.width) << what;
  ASSERT_EQ(a.height, b.height) << what;
  for (std::size_t p = 0; p < a.size(); ++p) ASSERT_EQ(a.pixels[p], b.pixels[p]) << what << " pixel " << p;
}

void expect_same_stack(const KitStack& kit, const LoadedStack& loaded) {
  ASSERT_EQ(loaded.stack.size(), kit.stack.size());
  for (int e = 0; e < kit.stack.size(); ++e) {
    const Exposure& a = kit.stack.exposures[e];
    const Exposure& b = loaded.stack.exposures[e];
    const std::string who = "exposure " + std::to_string(e);
    EXPECT_EQ(a.epoch, b.epoch) << who;
    EXPECT_EQ(a.throughput, b.throughput) << who;
    expect_same_images(a.science, b.science, who + " science");
    expect_same_images(a.variance, b.variance, who + " variance");
    expect_same_images(a.psf, b.psf, who + " psf");
    ASSERT_EQ(a.mask.size(), b.mask.size());
    for (std::size_t p = 0; p < a.mask.size(); ++p) ASSERT_EQ(bool(a.mask.pixels[p]), bool(b.mask.pixels[p])) << who;
  }
}

KitOptions small_options() {
  KitOptions o = workload("ci");
  o.exposures = 10;
  o.width = 48;
  o.height = 40;
  o.velocity_displacement = 6;
  o.curve_amplitude = 1.5;
  o.seed = 9;
  return o;
}

TEST(IoRoundTrip, RubinFilesReadBackBitForBit) {
  const KitStack kit = make_kit(small_options());
  TempDir dir;
  write_kit(kit, dir.path(), true);
  const LoadedStack loaded = read_exposures(expand_inputs({dir.path()}), ReadOptions{});
  expect_same_stack(kit, loaded);
  ASSERT_EQ(loaded.curve_x.size(), std::size_t(kit.stack.size()));
  for (int e = 0; e < kit.stack.size(); ++e) {
    EXPECT_EQ(loaded.curve_x[e], kit.bank.curve_at_x(e));
    EXPECT_EQ(loaded.curve_y[e], kit.bank.curve_at_y(e));
    EXPECT_EQ(loaded.info[e].epoch_keyword, "MJD-AVG");
    EXPECT_NE(loaded.info[e].psf.find("kernel"), std::string::npos);
    EXPECT_TRUE(loaded.info[e].has_wcs);
  }
  EXPECT_TRUE(loaded.warnings.empty());
  // The written TAN WCS: CRVAL at CRPIX - 1.
  const SkyPosition c = loaded.wcs[0]->pixel_to_sky(0.5 * (48 + 1) - 1, 0.5 * (40 + 1) - 1);
  EXPECT_NEAR(c.ra, 150.0, 1e-10);
  EXPECT_NEAR(c.dec, 2.0, 1e-10);
}

TEST(IoRoundTrip, CompressedWorkUnitReadsBackBitForBit) {
  const KitStack kit = make_kit(small_options());
  TempDir dir;
  const std::string path = dir.file("workunit.fits");
  write_workunit_fits(path, kit.stack, true);
  // Tile compression is in use (a compressed HDU is a binary table underneath).
  {
    auto file = detail::FitsFile::open_read(path);
    ASSERT_TRUE(file.move_to_name("SCI_0"));
    int status = 0;
    const int compressed = fits_is_compressed_image(file.get(), &status);
    EXPECT_EQ(compressed, 1);
  }
  const LoadedStack loaded = read_exposures({path}, ReadOptions{});
  expect_same_stack(kit, loaded);
  EXPECT_EQ(loaded.info[3].hdus, "SCI_3,MSK_3,VAR_3");
  EXPECT_EQ(loaded.info[3].epoch_keyword, "MJD");
}

TEST(IoRoundTrip, SearchFromFilesEqualsSearchInMemory) {
  // Smaller than `ci` so that the reference engine's check below stays quick.
  KitOptions o = workload("ci");
  o.exposures = 16;
  o.width = o.height = 80;
  o.vx_count = o.vy_count = 13;
  o.velocity_displacement = 10;
  o.seed = 4;
  const KitStack kit = make_kit(o);
  TempDir dir;
  write_kit(kit, dir.path(), true);
  SearchConfig config = config_for(kit);
  config.filter.lh_level = 5.5;  // low enough for noise crossings and a crowd around the source

  RunOptions from_files;
  from_files.inputs = {dir.path()};
  const RunOutput disk = run_search(config, from_files);

  const RunOutput mem = run_search(config, kit_in_memory(kit), RunOptions{});

  // The bank is the kit's.
  EXPECT_EQ(disk.bank.vx_axis, kit.bank.vx_axis);
  EXPECT_EQ(disk.bank.vy_axis, kit.bank.vy_axis);
  EXPECT_EQ(disk.bank.t_ref, kit.bank.t_ref);
  EXPECT_EQ(disk.bank.curve_x, kit.bank.curve_x);
  // Same search, same engine: identical digests and candidates.
  EXPECT_EQ(disk.engine, mem.engine);
  EXPECT_EQ(disk.digest.sumA, mem.digest.sumA);
  EXPECT_EQ(disk.digest.sumB, mem.digest.sumB);
  EXPECT_EQ(disk.digest.maxZ, mem.digest.maxZ);
  EXPECT_EQ(disk.digest.count, mem.digest.count);
  EXPECT_EQ(disk.threshold_crossings, mem.threshold_crossings);
  EXPECT_GT(disk.threshold_crossings, 5);
  ASSERT_EQ(disk.detections.size(), mem.detections.size());
  for (std::size_t i = 0; i < disk.detections.size(); ++i) {
    EXPECT_EQ(disk.detections[i].candidate.x, mem.detections[i].candidate.x);
    EXPECT_EQ(disk.detections[i].candidate.y, mem.detections[i].candidate.y);
    EXPECT_EQ(disk.detections[i].candidate.velocity, mem.detections[i].candidate.velocity);
    EXPECT_EQ(disk.detections[i].likelihood, mem.detections[i].likelihood);
  }

  // And the in-memory digest is the reference engine's on the kit itself (SPEC 4 tolerances).
  auto reference = make_engine("reference");
  OutputPolicy policy;
  policy.collect_candidates = true;
  policy.candidate_threshold = config.filter.lh_level;
  const EncodedStack encoded = encode(compute_likelihood(kit.stack), Encoding::fp32);
  const SearchResult direct = search(*reference, encoded, kit.bank, policy);
  const EngineInfo* info = find_engine(mem.engine);
  ASSERT_NE(info, nullptr) << mem.engine;
  if (info->digest_kind == DigestKind::exhaustive) {
    const DigestComparison cmp = compare(direct.digest, mem.digest, DigestTolerance::fp32());
    EXPECT_TRUE(cmp.agrees) << (cmp.failures.empty() ? "" : cmp.failures.front());
  } else {
    // The automatic choice took a tree engine (cpu-tree where its cost model expects it to pay):
    // its sums are the tree's, within the bounds its positions put on them (the parity suite's
    // rule); maxZ, its trial and the count are exact re-scores.
    ASSERT_EQ(info->digest_kind, DigestKind::refined) << mem.engine;
    const TreeDigestBounds bound = tree_digest_bounds(encoded, kit.bank, {});
    EXPECT_LE(std::abs(mem.digest.sumA - direct.digest.sumA), bound.sumA);
    EXPECT_LE(std::abs(mem.digest.sumB - direct.digest.sumB), bound.sumB);
    EXPECT_NEAR(mem.digest.maxZ, direct.digest.maxZ, 1e-4);
    EXPECT_EQ(mem.digest.argmax_x, direct.digest.argmax_x);
    EXPECT_EQ(mem.digest.argmax_y, direct.digest.argmax_y);
    EXPECT_EQ(mem.digest.argmax_velocity, direct.digest.argmax_velocity);
    EXPECT_EQ(mem.digest.count, direct.digest.count);
  }
  EXPECT_NEAR(double(direct.candidates.size()), double(mem.threshold_crossings), 2.0);
}

// engine auto on CPUs: cpu-tree where its schedule's modelled cost beats the cpu engine's by the
// margin the choice asks, cpu otherwise, and the search stage's detail says which was passed over.
TEST(IoRoundTrip, AutomaticEngineIsTheOneModelledFaster) {
  auto search_detail = [](const RunOutput& run) {
    for (const StageTime& s : run.stages)
      if (s.name == "search") return s.detail;
    return std::string("no search stage");
  };
  auto run_kit = [](const KitOptions& o) {
    const KitStack kit = make_kit(o);
    return run_search(config_for(kit), kit_in_memory(kit), RunOptions{});
  };
  // Few exposures on a small image: modelled about as fast as cpu, so cpu runs.
  KitOptions small = workload("ci");
  small.exposures = 16;
  small.width = small.height = 80;
  small.vx_count = small.vy_count = 13;
  small.velocity_displacement = 10;
  const RunOutput few = run_kit(small);
  EXPECT_EQ(few.engine, "cpu");
  EXPECT_NE(search_detail(few).find("auto passed over cpu-tree: modelled"), std::string::npos) << search_detail(few);
  // A hundred exposures over five nights and a fine bank: the tree pays many times over.
  KitOptions nights = workload("nights");
  nights.width = nights.height = 64;
  const RunOutput many = run_kit(nights);
  EXPECT_EQ(many.engine, "cpu-tree");
  EXPECT_EQ(search_detail(many).find("passed over"), std::string::npos) << search_detail(many);
}

TEST(IoRoundTrip, InjectedSourceIsOneRowOfTheResultsTable) {
  KitOptions o = workload("ci");
  o.seed = 12;
  const KitStack kit = make_kit(o);
  ASSERT_TRUE(kit.truth.injected);
  TempDir dir;
  write_kit(kit, dir.path(), true);
  const SearchConfig config = config_for(kit);  // lh_level 7: above noise for this bank
  RunOptions options;
  options.inputs = {dir.path() + "/exp_*.fits"};  // a glob this time
  RunOutput run = run_search(config, options);
  const OutputPaths paths = OutputPaths::from(dir.file("results.ecsv"));
  write_outputs(run, config, paths);

  ASSERT_EQ(run.detections.size(), 1u) << "the source's threshold crossings should merge into one";
  const Detection& d = run.detections.front();
  EXPECT_LE(std::abs(d.candidate.x - kit.truth.x), 1);
  EXPECT_LE(std::abs(d.candidate.y - kit.truth.y), 1);
  EXPECT_LE(std::abs(d.candidate.velocity % o.vx_count - kit.truth.velocity % o.vx_count), 1);
  EXPECT_LE(std::abs(d.candidate.velocity / o.vx_count - kit.truth.velocity / o.vx_count), 1);
  EXPECT_GT(d.likelihood, 7.0);

  // The FITS table, read back with cfitsio: one row with KBMOD's columns.
  auto file = detail::FitsFile::open_read(paths.fits);
  ASSERT_TRUE(file.move_to_name("RESULTS"));
  long rows = 0;
  int status = 0;
  fits_get_num_rows(file.get(), &rows, &status);
  ASSERT_EQ(rows, 1);
  for (const char* column : {"x", "y", "vx", "vy", "likelihood", "flux", "obs_count", "uuid", "psi_curve",
                             "phi_curve", "obs_valid", "ra_first", "dec_first", "ra_last", "dec_last", "stamp",
                             "coadd_mean", "coadd_median", "coadd_sum", "coadd_weighted"}) {
    int colnum = 0;
    std::string name = column;
    fits_get_colnum(file.get(), CASESEN, name.data(), &colnum, &status);
    EXPECT_EQ(status, 0) << column;
    status = 0;
  }
  int colnum = 0;
  std::string x_name = "x";
  fits_get_colnum(file.get(), CASESEN, x_name.data(), &colnum, &status);
  int x_value = -1;
  fits_read_col(file.get(), TINT, colnum, 1, 1, 1, nullptr, &x_value, nullptr, &status);
  EXPECT_EQ(status, 0);
  EXPECT_EQ(x_value, d.candidate.x);
  // RA/Dec at the first epoch from the written WCS.
  std::string ra_name = "ra_first";
  fits_get_colnum(file.get(), CASESEN, ra_name.data(), &colnum, &status);
  double ra = 0;
  fits_read_col(file.get(), TDOUBLE, colnum, 1, 1, 1, nullptr, &ra, nullptr, &status);
  EXPECT_NEAR(ra, 150.0, 0.01);

  // The ECSV: header, column line, one data row; the summary names the stages.
  std::ifstream ecsv(paths.ecsv);
  std::string line;
  std::getline(ecsv, line);
  EXPECT_EQ(line, "# %ECSV 1.0");
  int data_rows = 0;
  bool header_done = false;
  while (std::getline(ecsv, line)) {
    if (line.rfind("#", 0) == 0) continue;
    if (!header_done) {
      header_done = true;
      EXPECT_EQ(line.rfind("x y vx vy likelihood flux obs_count uuid", 0), 0u) << line;
      continue;
    }
    ++data_rows;
  }
  EXPECT_EQ(data_rows, 1);
  std::ifstream summary_file(paths.summary);
  const nlohmann::json summary = nlohmann::json::parse(summary_file);
  std::vector<std::string> stages;
  for (const auto& s : summary["stages"]) stages.push_back(s["stage"]);
  for (const char* s : {"discover", "read", "likelihood", "encode", "search", "filter", "cluster", "stamps", "write"})
    EXPECT_NE(std::find(stages.begin(), stages.end(), s), stages.end()) << s;
  EXPECT_EQ(summary["counts"]["after_clustering"], 1);
  EXPECT_EQ(summary["inputs"]["exposures"].size(), std::size_t(o.exposures));
  // Stamps: one plane per candidate.
  auto stamps = detail::FitsFile::open_read(paths.stamps);
  ASSERT_TRUE(stamps.move_to_name("COADD_SUM"));
  long naxes[3] = {0, 0, 0};
  fits_get_img_size(stamps.get(), 3, naxes, &status);
  EXPECT_EQ(naxes[0], 2 * config.stamp_radius + 1);
  EXPECT_EQ(naxes[2], 1);
  // No temporary files are left behind.
  for (const auto& entry : std::filesystem::directory_iterator(dir.path()))
    EXPECT_EQ(entry.path().filename().string().find(".tmp-"), std::string::npos) << entry.path();
}

}  // namespace
}  // namespace shiftstack::io
