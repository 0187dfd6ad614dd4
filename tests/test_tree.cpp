// The tree engines (cpu-tree, cpu-tree-screen): the plan's positions against the exhaustive
// rounding, the executor against a direct gather at the plan's own positions (so Var(A) = B
// holds trial by trial), independence from tiles, cuts and threads, the refinement against the
// reference, the fallbacks, and the null calibration of the unrefined statistic.
#include <gtest/gtest.h>
#include <omp.h>

#include <atomic>
#include <cmath>
#include <limits>
#include <map>

#include <nlohmann/json.hpp>

#include "shiftstack/tree.hpp"
#include "shiftstack/validation.hpp"
#include "test_support.hpp"

using namespace shiftstack;
using namespace shiftstack::testing;

namespace {

// Small enough to list every trial: 20 exposures over 10 days, 7 x 5 velocities.
KitOptions small_tree_kit(std::uint64_t seed = 3) {
  KitOptions o = workload("ci");
  o.exposures = 20;
  o.width = 48;
  o.height = 40;
  o.vx_count = 7;
  o.vy_count = 5;
  o.velocity_displacement = 6;
  o.seed = seed;
  return o;
}

OutputPolicy every_trial() {
  OutputPolicy p;
  p.collect_candidates = true;
  p.candidate_threshold = -std::numeric_limits<double>::infinity();
  return p;
}

SearchResult run_tree(const TreeOptions& o, const EncodedStack& stack, const MotionBank& bank,
                      const OutputPolicy& policy, Region region = {}, TreeStats* stats = nullptr) {
  TreeEngine engine(o, o.refine ? "cpu-tree" : "cpu-tree-screen");
  SearchResult r = search(engine, stack, bank, policy, region);
  if (stats) *stats = engine.last_stats();
  return r;
}

// The tree itself even where it would not pay on these small stacks (no fallback to cpu).
TreeOptions tree_only(bool refine = true) {
  TreeOptions o;
  o.refine = refine;
  o.fallback_fraction = 1e9;
  return o;
}

// A and B of one trial at the tree's own positions, in double, through decode().
std::pair<double, double> gather_at(const EncodedStack& s, const TreeShiftTables& t, int x, int y, std::size_t v,
                                    std::size_t vx_count) {
  const std::size_t a = v % vx_count, b = v / vx_count;
  double A = 0, B = 0;
  for (int e = 0; e < s.exposures; ++e) {
    const int px = x + t.x[a * t.exposures + e], py = y + t.y[b * t.exposures + e];
    if (px < 0 || py < 0 || px >= s.width || py >= s.height) continue;
    const DecodedSample d = decode(s, e, std::size_t(py) * s.width + px);
    if (!d.valid) continue;
    A += d.psi;
    B += d.phi;
  }
  return {A, B};
}

}  // namespace

TEST(TreePlan, PositionsWithinOnePixelOfTheExhaustiveRounding) {
  for (const char* name : {"ci", "kbmod"}) {
    const MotionBank bank = make_kit([&] {
                              KitOptions o = workload(name);
                              o.width = o.height = 80;  // the bank does not depend on the image
                              o.velocity_displacement = 16;
                              o.inject = false;
                              return o;
                            }())
                                .bank;
    const TreePositionError e = tree_position_error(bank);
    EXPECT_EQ(e.pairs, std::int64_t(bank.size()) * bank.exposures());
    EXPECT_LE(e.max_abs, 1) << name;
    // Measured 0.56 (ci) and 0.61 (kbmod) of (velocity, exposure) pairs land on the exhaustive
    // pixel; half is a floor a regression in the plan would cross.
    EXPECT_GT(e.exact_fraction, 0.5) << name;
    EXPECT_NEAR(e.exact_fraction + e.one_pixel_fraction, 1.0, 1e-12) << name;
    EXPECT_LT(e.rms_tree, 0.45) << name;
    EXPECT_NEAR(e.rms_exhaustive, std::sqrt(1.0 / 12), 0.02) << name;  // uniform rounding residual
  }
}

TEST(TreeExecutor, EveryTrialIsTheGatherAtThePlansPositions) {
  const KitStack kit = make_kit(small_tree_kit());
  const EncodedStack stack = encode_kit(kit);
  const TreeShiftTables shifts = tree_shift_tables(kit.bank);
  // Schedules that cut the tree at different levels and tile it differently must compute the
  // same operator, float for float (every map is the same sequence of additions).
  std::vector<SearchResult> results;
  // Fused roots (formed from their grandchildren) included: the same floats again.
  for (auto [cut, tw, th, fuse] : {std::tuple{0, 0, 0, 0}, {1, 16, 8, 0}, {2, 48, 40, 1}, {20, 32, 16, 0}, {3, 20, 13, 0},
                                   {3, 20, 13, 1}, {20, 16, 8, 1}}) {
    TreeOptions o = tree_only(false);
    o.cut_level = cut, o.tile_width = tw, o.tile_height = th, o.fuse_root = fuse;
    TreeStats stats;
    results.push_back(run_tree(o, stack, kit.bank, every_trial(), {}, &stats));
    ASSERT_FALSE(stats.fell_back) << stats.fallback_reason;
    // Fusion needs both children of the root formed per tile (cut level 2 or deeper).
    EXPECT_EQ(stats.fused_root, fuse == 1 && cut != 1) << "schedule cut " << cut << " fuse " << fuse;
  }
  const SearchResult& r = results.front();
  ASSERT_EQ(std::int64_t(r.candidates.size()), r.digest.scored);
  std::int64_t checked = 0;
  for (const Candidate& c : r.candidates) {
    const auto [A, B] = gather_at(stack, shifts, c.x, c.y, std::size_t(c.velocity), kit.bank.vx_count());
    ASSERT_GT(B, 0);
    EXPECT_NEAR(c.A, A, 1e-5 * std::sqrt(B) + 1e-6 * std::abs(A)) << "A at trial " << checked;
    EXPECT_NEAR(c.B, B, 1e-5 * B) << "B at trial " << checked;
    ++checked;
  }
  for (std::size_t k = 1; k < results.size(); ++k) {
    ASSERT_EQ(results[k].candidates.size(), r.candidates.size()) << "schedule " << k;
    for (std::size_t i = 0; i < r.candidates.size(); ++i) {
      ASSERT_EQ(results[k].candidates[i].velocity, r.candidates[i].velocity);
      ASSERT_EQ(results[k].candidates[i].x, r.candidates[i].x);
      ASSERT_EQ(results[k].candidates[i].y, r.candidates[i].y);
      EXPECT_EQ(results[k].candidates[i].A, r.candidates[i].A) << "schedule " << k << " trial " << i;
      EXPECT_EQ(results[k].candidates[i].B, r.candidates[i].B) << "schedule " << k << " trial " << i;
    }
    EXPECT_EQ(results[k].digest.scored, r.digest.scored);
    EXPECT_NEAR(results[k].digest.sumB, r.digest.sumB, 1e-5 * r.digest.sumB);
  }
}

TEST(TreeExecutor, FewExposuresReadInPlaceAndHalfFusedRoots) {
  // E = 2: both children of the root are single exposures read in place from the band copy.
  // E = 3: one side is such a leaf and the other a pair, so a fused root sums the pair's two
  // exposures and the leaf beside a row of zeros. Every trial must be the gather at the plan's
  // positions either way.
  for (int exposures : {2, 3}) {
    KitOptions k = small_tree_kit(11);
    k.exposures = exposures;
    const KitStack kit = make_kit(k);
    const EncodedStack stack = encode_kit(kit);
    const TreeShiftTables shifts = tree_shift_tables(kit.bank);
    for (int fuse : {0, 1}) {
      TreeOptions o = tree_only(false);
      o.fuse_root = fuse;
      TreeStats stats;
      const SearchResult r = run_tree(o, stack, kit.bank, every_trial(), {}, &stats);
      ASSERT_FALSE(stats.fell_back) << stats.fallback_reason;
      EXPECT_EQ(stats.fused_root, fuse == 1 && exposures == 3) << "E = " << exposures;
      ASSERT_EQ(std::int64_t(r.candidates.size()), r.digest.scored);
      ASSERT_GT(r.digest.scored, 0);
      for (const Candidate& c : r.candidates) {
        const auto [A, B] = gather_at(stack, shifts, c.x, c.y, std::size_t(c.velocity), kit.bank.vx_count());
        ASSERT_NEAR(c.A, A, 1e-5 * std::sqrt(B) + 1e-6 * std::abs(A)) << "E = " << exposures << " fuse " << fuse;
        ASSERT_NEAR(c.B, B, 1e-5 * B) << "E = " << exposures << " fuse " << fuse;
      }
    }
  }
}

TEST(TreeExecutor, SameDigestOnAnyThreadCount) {
  const KitStack kit = make_kit(small_kit(5));
  const EncodedStack stack = encode_kit(kit);
  const int threads = omp_get_max_threads();
  std::vector<Digest> digests;
  for (int n : {1, 2, 3}) {
    omp_set_num_threads(n);
    digests.push_back(run_tree(tree_only(), stack, kit.bank, OutputPolicy{}).digest);
  }
  omp_set_num_threads(threads);
  for (std::size_t k = 1; k < digests.size(); ++k) {
    EXPECT_EQ(digests[k].sumA, digests[0].sumA);
    EXPECT_EQ(digests[k].sumB, digests[0].sumB);
    EXPECT_EQ(digests[k].maxZ, digests[0].maxZ);
    EXPECT_EQ(digests[k].count, digests[0].count);
    EXPECT_EQ(digests[k].argmax_velocity, digests[0].argmax_velocity);
  }
}

TEST(TreeExecutor, RegionAwayFromTheOriginAndEdgeTiles) {
  const KitStack kit = make_kit(small_tree_kit(7));
  const EncodedStack stack = encode_kit(kit, Encoding::int8);
  const TreeShiftTables shifts = tree_shift_tables(kit.bank);
  const Region region{5, 3, 37, 29};
  TreeOptions o = tree_only(false);
  o.tile_width = 16, o.tile_height = 8;  // edge tiles of 5 columns and 5 rows
  TreeStats stats;
  const SearchResult r = run_tree(o, stack, kit.bank, every_trial(), region, &stats);
  ASSERT_FALSE(stats.fell_back) << stats.fallback_reason;
  EXPECT_EQ(r.digest.trials, region.count() * std::int64_t(kit.bank.size()));
  ASSERT_EQ(std::int64_t(r.candidates.size()), r.digest.scored);
  for (const Candidate& c : r.candidates) {
    ASSERT_TRUE(c.x >= region.x0 && c.x < region.x0 + region.width && c.y >= region.y0 &&
                c.y < region.y0 + region.height);
    const auto [A, B] = gather_at(stack, shifts, c.x, c.y, std::size_t(c.velocity), kit.bank.vx_count());
    EXPECT_NEAR(c.A, A, 1e-5 * std::sqrt(B) + 1e-6 * std::abs(A));
    EXPECT_NEAR(c.B, B, 1e-5 * B);
  }
}

TEST(TreeRefinement, CandidatesAboveThresholdAreTheReferences) {
  // Fractional and int8 included: the screen is integer, the re-scoring exact in the bank's mode.
  for (auto [mode, encoding] : {std::pair{ShiftMode::integer, Encoding::fp32},
                                {ShiftMode::fractional, Encoding::fp32},
                                {ShiftMode::integer, Encoding::int8}}) {
    KitOptions k = small_tree_kit(11);
    k.shift_mode = mode;
    const KitStack kit = make_kit(k);
    const EncodedStack stack = encode_kit(kit, encoding);
    OutputPolicy policy;
    policy.collect_candidates = true;
    policy.candidate_threshold = 5.0;
    auto reference = make_engine("reference");
    const SearchResult ref = search(*reference, stack, kit.bank, policy);
    TreeStats stats;
    const SearchResult tree = run_tree(tree_only(), stack, kit.bank, policy, {}, &stats);
    ASSERT_FALSE(stats.fell_back) << stats.fallback_reason;
    ASSERT_GT(ref.candidates.size(), 10u);
    ASSERT_EQ(tree.candidates.size(), ref.candidates.size());
    for (std::size_t i = 0; i < ref.candidates.size(); ++i) {
      EXPECT_EQ(tree.candidates[i].velocity, ref.candidates[i].velocity);
      EXPECT_EQ(tree.candidates[i].x, ref.candidates[i].x);
      EXPECT_EQ(tree.candidates[i].y, ref.candidates[i].y);
      EXPECT_EQ(tree.candidates[i].Z, ref.candidates[i].Z);  // the same arithmetic
      EXPECT_EQ(tree.candidates[i].obs_count, ref.candidates[i].obs_count);
    }
    EXPECT_EQ(tree.digest.maxZ, ref.digest.maxZ);
    EXPECT_EQ(tree.digest.argmax_x, ref.digest.argmax_x);
    EXPECT_EQ(tree.digest.argmax_y, ref.digest.argmax_y);
    EXPECT_EQ(tree.digest.argmax_velocity, ref.digest.argmax_velocity);
    EXPECT_EQ(tree.digest.count, ref.digest.count);
    EXPECT_GT(stats.refined, stats.screened);
  }
}

TEST(TreeRefinement, MaxZIsExactEvenWhenNothingPassesTheFirstScreen) {
  KitOptions k = small_tree_kit(13);
  k.inject = false;
  const KitStack kit = make_kit(k);
  const EncodedStack stack = encode_kit(kit);
  TreeOptions o = tree_only();
  o.screen_margin = 0;  // a null cube: almost surely nothing above z_thr itself
  TreeStats stats;
  const SearchResult tree = run_tree(o, stack, kit.bank, OutputPolicy{}, {}, &stats);
  auto reference = make_engine("reference");
  const SearchResult ref = search(*reference, stack, kit.bank, OutputPolicy{});
  ASSERT_GE(tree.digest.argmax_velocity, 0);
  EXPECT_GT(stats.screen_passes, 0);
  // An exact score of a trial the reference also scored.
  const auto shifts_ok = tree.digest.maxZ <= ref.digest.maxZ + 1e-12;
  EXPECT_TRUE(shifts_ok) << tree.digest.maxZ << " vs " << ref.digest.maxZ;
  EXPECT_GT(tree.digest.maxZ, ref.digest.maxZ - 1.5);
  EXPECT_EQ(tree.digest.count, ref.digest.count);
}

TEST(TreeEngine, FallsBackToTheExhaustiveEngineAndSaysWhy) {
  KitOptions k = small_tree_kit(17);
  KitStack kit = make_kit(k);
  const EncodedStack stack = encode_kit(kit);
  MotionBank list = kit.bank;
  for (std::size_t v = 0; v < kit.bank.size(); ++v) list.velocity_list.push_back(kit.bank.velocity(v));
  OutputPolicy top;
  top.top_k = 2;
  for (const auto& [bank, policy, why] :
       {std::tuple{&list, OutputPolicy{}, "not a Cartesian grid"}, {&kit.bank, top, "top-k"}}) {
    TreeStats stats;
    const SearchResult tree = run_tree(TreeOptions{}, stack, *bank, policy, {}, &stats);
    auto cpu = make_engine("cpu");
    const SearchResult exhaustive = search(*cpu, stack, *bank, policy);
    EXPECT_TRUE(stats.fell_back);
    EXPECT_NE(stats.fallback_reason.find(why), std::string::npos) << stats.fallback_reason;
    EXPECT_NE(tree.note.find("ran the exhaustive cpu engine"), std::string::npos) << tree.note;
    EXPECT_EQ(tree.digest.sumA, exhaustive.digest.sumA);
    EXPECT_EQ(tree.digest.maxZ, exhaustive.digest.maxZ);
    EXPECT_EQ(tree.top_k.size(), exhaustive.top_k.size());
  }
  // Too few exposures for the tree to pay: 2 exposures, 7 x 5 velocities.
  k.exposures = 2;
  kit = make_kit(k);
  TreeOptions o;
  o.fallback_fraction = 0.25;
  TreeStats stats;
  run_tree(o, encode_kit(kit), kit.bank, OutputPolicy{}, {}, &stats);
  EXPECT_TRUE(stats.fell_back);
  EXPECT_NE(stats.fallback_reason.find("additions per trial"), std::string::npos) << stats.fallback_reason;
}

TEST(TreeEngine, ReportsProgressAndStopsOnRequest) {
  const KitStack kit = make_kit(small_tree_kit());
  const EncodedStack stack = encode_kit(kit);
  TreeOptions o = tree_only();
  o.tile_width = 16, o.tile_height = 8;  // 3 x 5 tiles, so a stop leaves some of them
  const std::int64_t trials = std::int64_t(kit.stack.width()) * kit.stack.height() * std::int64_t(kit.bank.size());
  {
    // A whole search ends on done == total.
    OutputPolicy policy;
    std::int64_t last_done = -1, last_total = -1;
    policy.progress = [&](std::int64_t done, std::int64_t total) { last_done = done, last_total = total; };
    run_tree(o, stack, kit.bank, policy);
    EXPECT_EQ(last_total, trials);
    EXPECT_EQ(last_done, trials);
  }
  {
    // The first report asks for a stop: the search ends with Cancelled before finishing the tiles.
    std::atomic<bool> stop{false};
    OutputPolicy policy;
    policy.stop = &stop;
    std::int64_t first_done = -1;
    policy.progress = [&](std::int64_t done, std::int64_t) {
      if (first_done < 0) first_done = done;
      stop = true;
    };
    const int threads = omp_get_max_threads();
    omp_set_num_threads(1);  // one tile at a time, so the stop is seen before the next
    EXPECT_THROW(run_tree(o, stack, kit.bank, policy), Cancelled);
    omp_set_num_threads(threads);
    EXPECT_GT(first_done, 0);
    EXPECT_LT(first_done, trials);
  }
}

TEST(TreeEngine, BadOptionsAreErrors) {
  TreeOptions o;
  o.screen_margin = -1;
  EXPECT_THROW(TreeEngine{o}, Error);
  o = TreeOptions{};
  o.oversample = 0;
  EXPECT_THROW(TreeEngine{o}, Error);
  o = TreeOptions{};
  o.tile_width = -3;
  EXPECT_THROW(TreeEngine{o}, Error);
}

TEST(TreeEngine, DigestSumsWithinTheStatedBounds) {
  const KitStack kit = make_kit(small_kit(19));
  const EncodedStack stack = encode_kit(kit);
  auto exhaustive = make_engine("cpu");
  const SearchResult ref = search(*exhaustive, stack, kit.bank, OutputPolicy{});
  const SearchResult tree = run_tree(tree_only(), stack, kit.bank, OutputPolicy{});
  const TreeDigestBounds bound = tree_digest_bounds(stack, kit.bank, {});
  EXPECT_LE(std::abs(tree.digest.sumA - ref.digest.sumA), bound.sumA);
  EXPECT_LE(std::abs(tree.digest.sumB - ref.digest.sumB), bound.sumB);
  // The bound is not vacuous: well below the sums themselves.
  EXPECT_LT(bound.sumB, 0.2 * ref.digest.sumB);
}

TEST(TreeSensitivity, UnrefinedNullVarianceIsOne) {
  // Null cubes: the unrefined tree Z over every trial has unit variance like the exhaustive Z;
  // the tolerance is four standard errors of the mean over cubes.
  const int cubes = 6;
  std::vector<double> tree_var, ref_var;
  for (int c = 0; c < cubes; ++c) {
    KitOptions k = small_kit(100 + c);
    k.width = k.height = 48;
    k.velocity_displacement = 8;
    k.inject = false;
    const KitStack kit = make_kit(k);
    const EncodedStack stack = encode_kit(kit);
    for (auto* out : {&tree_var, &ref_var}) {
      const SearchResult r = out == &tree_var ? run_tree(tree_only(false), stack, kit.bank, every_trial())
                                              : all_trials("cpu", stack, kit.bank);
      double n = 0, sum = 0, sum2 = 0;
      for (const Candidate& x : r.candidates) {
        n += 1;
        sum += x.Z;
        sum2 += double(x.Z) * x.Z;
      }
      out->push_back((sum2 - sum * sum / n) / (n - 1));
    }
  }
  auto mean_se = [](const std::vector<double>& v) {
    double m = 0;
    for (double x : v) m += x;
    m /= v.size();
    double s2 = 0;
    for (double x : v) s2 += (x - m) * (x - m);
    return std::pair{m, std::sqrt(s2 / (v.size() - 1) / v.size())};
  };
  const auto [tree_mean, tree_se] = mean_se(tree_var);
  const auto [ref_mean, ref_se] = mean_se(ref_var);
  EXPECT_NEAR(tree_mean, 1.0, 4 * tree_se + 1e-3) << "exhaustive: " << ref_mean << " +- " << ref_se;
  EXPECT_NEAR(ref_mean, 1.0, 4 * ref_se + 1e-3);
}

// The study's provenance is written as JSON values, whatever the revision or card names hold
// (SHIFTSTACK_COMMIT and --commit are free text): quotes and backslashes survive a round trip.
TEST(TreeStudyReport, ProvenanceSurvivesQuotesAndBackslashes) {
  TreeStudyReport report;
  Provenance p;
  p.card = "card \"A\"";
  p.commit = "abc\"def\\ghi";
  p.date = "2026-12-02T00:00:00Z";
  p.command = "shiftstack validate --tree-study --commit 'abc\"def'";
  const nlohmann::json j = nlohmann::json::parse(to_json(report, p));
  EXPECT_EQ(j["provenance"]["card"], p.card);
  EXPECT_EQ(j["provenance"]["commit"], p.commit);
  EXPECT_EQ(j["provenance"]["date"], p.date);
  EXPECT_EQ(j["provenance"]["command"], p.command);
}
