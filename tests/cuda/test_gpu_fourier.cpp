// The Fourier-route CUDA engines (cuda-fourier, cuda-gemm, cuda-tc) against independent
// computations: the `reference` engine on `ci` and a small stack, the CPU emulation of the
// tensor-core operator, and on `dense` the exact FP32 gather (cuda-fast) where it is built.
// SPEC 4 tolerances: FP32 for cuda-fourier, reduced for the FP16 tensor-core paths.
// DISABLED_DenseStageTimes prints the stage split of each engine on `dense` (no pass/fail on time):
//   shiftstack_gpu_tests --gtest_also_run_disabled_tests --gtest_filter='*DenseStageTimes*'
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <mutex>
#include <set>

#include <cuda_runtime.h>
#include <cufft.h>

#include "../../src/cuda/spectral/row_windows.hpp"
#include "../../src/cuda/spectral/spectral_engine.hpp"
#include "../test_support.hpp"
#include "shiftstack/tc_emulation.hpp"

using namespace shiftstack;
using namespace shiftstack::testing;

namespace {

const std::vector<std::string> kEngines = {"cuda-fourier", "cuda-gemm", "cuda-tc"};

const EngineInfo* find_info(const std::string& name) {
  for (const auto& info : engines())
    if (info.name == name) return &info;
  return nullptr;
}

bool device_present() {
  const EngineInfo* info = find_info("cuda-tc");
  return info && info->available();
}

DigestTolerance tolerance_for(const std::string& engine) {
  return find_info(engine)->reduced_arithmetic ? DigestTolerance::reduced() : DigestTolerance::fp32();
}

struct Case {
  KitStack kit;
  EncodedStack stack;
  SearchResult reference;
  std::int64_t near_threshold = 0;  // reference trials within 1e-4 of z_thr
};

OutputPolicy listing_policy(double z_thr) {
  OutputPolicy policy;
  policy.collect_candidates = true;
  policy.candidate_threshold = z_thr - 1e-4;
  return policy;
}

// Reference runs, made once per (workload, encoding) and kept for the whole binary.
const Case& case_for(const std::string& workload_name, Encoding encoding, const std::string& reference_engine) {
  static std::map<std::string, Case> cache;
  static std::mutex lock;
  std::lock_guard guard(lock);
  const std::string key = workload_name + "/" + to_string(encoding) + "/" + reference_engine;
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  Case c;
  if (workload_name == "tiny" || workload_name == "tiny-fractional") {
    KitOptions o = workload("ci");
    o.exposures = 12, o.width = 64, o.height = 48, o.vx_count = 5, o.vy_count = 7;
    o.velocity_displacement = 6, o.curve_amplitude = 2;
    if (workload_name == "tiny-fractional") o.shift_mode = ShiftMode::fractional;
    c.kit = make_kit(o);
  } else {
    // "<workload>-fractional": the kit workload with bilinear shifts.
    const std::string suffix = "-fractional";
    const bool fractional = workload_name.size() > suffix.size() &&
                            workload_name.compare(workload_name.size() - suffix.size(), suffix.size(), suffix) == 0;
    KitOptions o = workload(fractional ? workload_name.substr(0, workload_name.size() - suffix.size()) : workload_name);
    if (fractional) o.shift_mode = ShiftMode::fractional;
    c.kit = make_kit(o);
  }
  c.stack = encode_kit(c.kit, encoding);
  auto engine = make_engine(reference_engine);
  const double z_thr = bonferroni_threshold(0.05, double(c.stack.width) * c.stack.height * c.kit.bank.size());
  c.reference = search(*engine, c.stack, c.kit.bank, listing_policy(z_thr));
  for (const auto& cand : c.reference.candidates)
    if (std::abs(cand.Z - c.reference.digest.z_thr) <= 1e-4) ++c.near_threshold;
  return cache.emplace(key, std::move(c)).first->second;
}

// Two top-k lists, entry by entry: the same origins and, where they name the same trial, Z within
// z_tolerance and the same obs_count. Returns how many entries name other trials (near-ties may
// swap).
std::size_t compare_top_k(const std::vector<Candidate>& got, const std::vector<Candidate>& want, double z_tolerance) {
  EXPECT_EQ(got.size(), want.size());
  std::size_t differing = 0;
  for (std::size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
    const Candidate &a = got[i], &b = want[i];
    EXPECT_EQ(a.x, b.x) << "top-k entry " << i;
    EXPECT_EQ(a.y, b.y) << "top-k entry " << i;
    if (a.velocity != b.velocity) {
      ++differing;
    } else if (std::isfinite(b.Z)) {
      EXPECT_NEAR(a.Z, b.Z, z_tolerance) << "top-k entry " << i;
      EXPECT_EQ(a.obs_count, b.obs_count) << "top-k entry " << i;
    }
  }
  return differing;
}

void expect_agreement(const std::string& engine_name, const Case& c, const SearchResult& r,
                      const DigestTolerance& tol) {
  const DigestComparison cmp = compare(c.reference.digest, r.digest, tol, c.near_threshold);
  std::printf("  %-13s %s\n  %-13s %s\n  d maxZ %.3g, rel sumA %.3g, rel sumB %.3g, d count %lld\n",
              c.reference.engine.c_str(), describe(c.reference.digest).c_str(), engine_name.c_str(),
              describe(r.digest).c_str(), cmp.d_maxZ, cmp.rel_sumA, cmp.rel_sumB, (long long)cmp.d_count);
  for (const auto& f : cmp.failures) ADD_FAILURE() << engine_name << ": " << f;
  EXPECT_EQ(r.digest.scored, c.reference.digest.scored) << "the exact no-sample test must match the gather";
}

const cuda::SpectralDiagnostics& diagnostics_of(Engine& engine) {
  auto* spectral = dynamic_cast<cuda::SpectralEngine*>(&engine);
  if (!spectral) throw Error("not a Fourier-route engine");
  return spectral->diagnostics();
}

}  // namespace

struct EngineEncoding {
  std::string engine;
  Encoding encoding;
};

class GpuFourierCi : public ::testing::TestWithParam<EngineEncoding> {};

TEST_P(GpuFourierCi, AgreesWithReference) {
  if (!device_present()) GTEST_SKIP() << "no CUDA device";
  const auto& [name, encoding] = GetParam();
  const Case& c = case_for("ci", encoding, "reference");
  auto engine = make_engine(name);
  const SearchResult r = search(*engine, c.stack, c.kit.bank, listing_policy(c.reference.digest.z_thr));
  expect_agreement(name, c, r, tolerance_for(name));
  const cuda::SpectralDiagnostics& d = diagnostics_of(*engine);
  EXPECT_EQ(d.clamped_trials, 0) << "FFT-route B fell below the smallest positive contribution";
  EXPECT_GT(d.b_floor, 0.0f);
  // Candidates: every listed trial is above the threshold and sorted by (velocity, y, x).
  for (std::size_t i = 0; i < r.candidates.size(); ++i) {
    EXPECT_GT(r.candidates[i].Z, listing_policy(c.reference.digest.z_thr).candidate_threshold);
    EXPECT_GT(r.candidates[i].obs_count, 0);
    if (i) {
      EXPECT_LE(r.candidates[i - 1].velocity, r.candidates[i].velocity);
    }
  }
  const double band = tolerance_for(name).count_fraction > 0
                          ? std::max(2.0, 0.005 * double(c.reference.candidates.size()))
                          : double(c.near_threshold);
  EXPECT_LE(std::abs(double(r.candidates.size()) - double(c.reference.candidates.size())), band);
}

INSTANTIATE_TEST_SUITE_P(
    Engines, GpuFourierCi,
    ::testing::Values(EngineEncoding{"cuda-fourier", Encoding::fp32}, EngineEncoding{"cuda-fourier", Encoding::fp16},
                      EngineEncoding{"cuda-fourier", Encoding::int8}, EngineEncoding{"cuda-gemm", Encoding::fp32},
                      EngineEncoding{"cuda-gemm", Encoding::int8}, EngineEncoding{"cuda-tc", Encoding::fp32},
                      EngineEncoding{"cuda-tc", Encoding::fp16}, EngineEncoding{"cuda-tc", Encoding::int8}),
    [](const auto& p) {
      std::string n = p.param.engine + "_" + to_string(p.param.encoding);
      for (char& ch : n)
        if (ch == '-') ch = '_';
      return n;
    });

// A stack small enough for compute-sanitizer (memcheck, racecheck): shapes that leave partial
// tiles everywhere (5 x 7 velocities, 12 exposures, 64 x 48 pixels), plus top-k and a region.
TEST(GpuFourier, TinyStackAllEnginesWithTopK) {
  if (!device_present()) GTEST_SKIP() << "no CUDA device";
  const Case& c = case_for("tiny", Encoding::fp32, "reference");
  auto reference = make_engine("reference");
  // k = 3, and 16, the most the engines keep (kMaxTopK: 64 KB of lists per top-k block).
  for (int k : {3, 16}) {
    OutputPolicy policy = listing_policy(c.reference.digest.z_thr);
    policy.top_k = k;
    const SearchResult ref = search(*reference, c.stack, c.kit.bank, policy);
    for (const std::string& name : kEngines) {
      SCOPED_TRACE(name + ", k = " + std::to_string(k));
      auto engine = make_engine(name);
      const SearchResult r = search(*engine, c.stack, c.kit.bank, policy);
      Case view{c.kit, {}, ref, c.near_threshold};
      expect_agreement(name, view, r, tolerance_for(name));
      const std::size_t differing = compare_top_k(r.top_k, ref.top_k, find_info(name)->reduced_arithmetic ? 2e-3 : 1e-4);
      EXPECT_LE(differing, std::max<std::size_t>(2, r.top_k.size() / 200)) << "top-k entries naming other trials";
      if (k != 3) continue;
      // A sub-region: the same trials as the whole-image run restricted to it.
      const Region part{7, 5, 30, 20};
      const SearchResult sub = search(*engine, c.stack, c.kit.bank, OutputPolicy{}, part);
      const SearchResult sub_ref = search(*reference, c.stack, c.kit.bank, OutputPolicy{}, part);
      const DigestComparison cmp = compare(sub_ref.digest, sub.digest, tolerance_for(name));
      for (const auto& f : cmp.failures) ADD_FAILURE() << "region: " << f;
    }
  }
}

// cuda-tc's three integer contraction kernels, each forced on the tiny stack (partial tiles, a
// region, top-k; small enough for compute-sanitizer): mma.sync is the default, the wgmma kernels
// (one warpgroup; or two that hand one channel each to the full-spectrum store) run only when
// asked for.
TEST(GpuFourier, EveryTensorCoreKernelMatchesReference) {
  if (!device_present()) GTEST_SKIP() << "no CUDA device";
  const Case& c = case_for("tiny", Encoding::fp32, "reference");
  OutputPolicy policy = listing_policy(c.reference.digest.z_thr);
  policy.top_k = 3;
  auto reference = make_engine("reference");
  const SearchResult ref = search(*reference, c.stack, c.kit.bank, policy);
  const Region part{7, 5, 30, 20};
  const SearchResult sub_ref = search(*reference, c.stack, c.kit.bank, OutputPolicy{}, part);
  for (const char* kernel : {"mma", "wgmma", "wgmma-split"}) {
    SCOPED_TRACE(kernel);
    setenv("SHIFTSTACK_TC_KERNEL", kernel, 1);
    auto engine = make_engine("cuda-tc");
    const SearchResult r = search(*engine, c.stack, c.kit.bank, policy);
    Case view{c.kit, {}, ref, c.near_threshold};
    expect_agreement("cuda-tc", view, r, tolerance_for("cuda-tc"));
    const std::size_t differing = compare_top_k(r.top_k, ref.top_k, 2e-3);
    EXPECT_LE(differing, std::max<std::size_t>(2, r.top_k.size() / 200)) << "top-k entries naming other trials";
    const SearchResult sub = search(*engine, c.stack, c.kit.bank, OutputPolicy{}, part);
    for (const auto& f : compare(sub_ref.digest, sub.digest, tolerance_for("cuda-tc")).failures)
      ADD_FAILURE() << "region: " << f;
  }
  unsetenv("SHIFTSTACK_TC_KERNEL");
}

// A search cut into many velocity chunks (forced: searches this small fit in one) gives the same
// digest, candidates and top-k lists as one chunk: each chunk's lists merge into the last's.
TEST(GpuFourier, ManyVelocityChunksAgreeWithOne) {
  if (!device_present()) GTEST_SKIP() << "no CUDA device";
  const Case& c = case_for("ci", Encoding::fp32, "reference");
  OutputPolicy policy = listing_policy(c.reference.digest.z_thr);
  policy.top_k = 4;
  for (const std::string& name : kEngines) {
    SCOPED_TRACE(name);
    auto engine = make_engine(name);
    const SearchResult one = search(*engine, c.stack, c.kit.bank, policy);
    EXPECT_EQ(diagnostics_of(*engine).velocity_chunks, 1);
    setenv("SHIFTSTACK_FOURIER_CHUNK_ROWS", "1", 1);
    const SearchResult many = search(*engine, c.stack, c.kit.bank, policy);
    unsetenv("SHIFTSTACK_FOURIER_CHUNK_ROWS");
    EXPECT_GE(diagnostics_of(*engine).velocity_chunks, 2);
    for (const auto& f : compare(one.digest, many.digest, tolerance_for(name)).failures) ADD_FAILURE() << f;
    EXPECT_EQ(many.candidates.size(), one.candidates.size());
    const std::size_t differing = compare_top_k(many.top_k, one.top_k, 1e-4);
    EXPECT_LE(differing, std::max<std::size_t>(2, one.top_k.size() / 1000)) << "top-k entries naming other trials";
  }
}

// The fused route (cuFFT along y, the inverse along x inside the scoring kernel) against the
// reference gather and against the 2-D route (SHIFTSTACK_FUSED_SCORING=0), for padded x axes whose
// radices cover every butterfly of the fused transform: 45 (5 3 3), 56 (8 7), 81 (3 3 3 3),
// 98 (2 7 7), 100 (4 5 5), 120 (8 5 3). Also a region whose last strip of columns is partial.
TEST(GpuFourier, FusedScoringAgreesWithReferenceAndTheTwoDimensionalRoute) {
  if (!device_present()) GTEST_SKIP() << "no CUDA device";
  auto reference = make_engine("reference");
  std::set<int> padded_widths;
  for (int width : {36, 48, 74, 90, 92, 106}) {
    KitOptions o = workload("ci");
    o.exposures = 12, o.width = width, o.height = 48, o.vx_count = 5, o.vy_count = 7;
    o.velocity_displacement = 6, o.curve_amplitude = 2;
    Case c;
    c.kit = make_kit(o);
    c.stack = encode_kit(c.kit, Encoding::fp32);
    const double z_thr = bonferroni_threshold(0.05, double(width) * o.height * c.kit.bank.size());
    const OutputPolicy policy = listing_policy(z_thr);
    const Region region{3, 5, width - 7, 41};  // 41 columns y: a strip of 32 and a partial one
    c.reference = search(*reference, c.stack, c.kit.bank, policy, region);
    for (const auto& cand : c.reference.candidates)
      if (std::abs(cand.Z - z_thr) <= 1e-4) ++c.near_threshold;
    for (const std::string& name : kEngines) {
      SCOPED_TRACE(name + ", width " + std::to_string(width));
      auto engine = make_engine(name);
      const SearchResult fused = search(*engine, c.stack, c.kit.bank, policy, region);
      EXPECT_TRUE(diagnostics_of(*engine).fused_scoring);
      padded_widths.insert(diagnostics_of(*engine).geometry.nx);
      expect_agreement(name, c, fused, tolerance_for(name));
      setenv("SHIFTSTACK_FUSED_SCORING", "0", 1);
      const SearchResult two_d = search(*engine, c.stack, c.kit.bank, policy, region);
      unsetenv("SHIFTSTACK_FUSED_SCORING");
      EXPECT_FALSE(diagnostics_of(*engine).fused_scoring);
      for (const auto& f : compare(two_d.digest, fused.digest, tolerance_for(name)).failures) ADD_FAILURE() << f;
      EXPECT_EQ(fused.digest.scored, two_d.digest.scored);
      EXPECT_EQ(fused.candidates.size(), two_d.candidates.size());
    }
  }
  EXPECT_EQ(padded_widths, (std::set<int>{45, 56, 81, 98, 100, 120})) << "the kit's reach changed: pick new widths";
}

// A setting of the route switch other than 0 or 1 is refused, not read as "fused".
TEST(GpuFourier, FusedScoringSwitchRefusesOtherValues) {
  if (!device_present()) GTEST_SKIP() << "no CUDA device";
  const Case& c = case_for("tiny", Encoding::fp32, "reference");
  setenv("SHIFTSTACK_FUSED_SCORING", "yes", 1);
  auto engine = make_engine("cuda-tc");
  EXPECT_THROW(search(*engine, c.stack, c.kit.bank), Error);
  unsetenv("SHIFTSTACK_FUSED_SCORING");
}

// The row route (cuda-tc's default where it applies: transforms along x only, y shifts as row
// offsets) against the reference gather and against the planar route (SHIFTSTACK_TC_ROUTE=planes):
// exposures that are not a multiple of the 32 of a chunk, groups of four rows b cut short by the
// grid, several velocity chunks, regions offset in both axes and not a multiple of 16 rows,
// windows that hold a spread of the group's shifts, and velocity counts of a few n8 tiles, or of
// more than one block of the mma kernel's 72 velocities. A coarse vy grid, whose rows b spread
// beyond the 32 rows a window holds, takes the planar route.
TEST(GpuFourier, RowRouteAgreesWithReferenceAndThePlanarRoute) {
  if (!device_present()) GTEST_SKIP() << "no CUDA device";
  auto reference = make_engine("reference");
  struct Shape {
    int exposures, width, height, vx, vy;
    double displacement;
    Region region;
    const char* chunk_rows;  // SHIFTSTACK_FOURIER_CHUNK_ROWS, or null
    bool row_route;
  };
  const Shape shapes[] = {
      {12, 48, 40, 5, 7, 6, Region{0, 0, 48, 40}, nullptr, true},
      {45, 52, 61, 6, 9, 9, Region{3, 7, 44, 37}, "4", true},
      {33, 50, 70, 3, 13, 12, Region{5, 2, 40, 66}, nullptr, true},
      {40, 48, 48, 9, 6, 8, Region{0, 0, 48, 48}, nullptr, true},     // 2 n8 tiles
      {16, 48, 48, 75, 5, 6, Region{2, 1, 40, 41}, nullptr, true},    // a block of 72 velocities, then 3
      {16, 48, 48, 65, 5, 6, Region{1, 2, 44, 40}, nullptr, true},    // 9 n8 tiles, the last one column
      {20, 110, 110, 4, 3, 40, Region{0, 0, 110, 110}, nullptr, false},  // about 20 px between rows b
  };
  for (const Shape& shape : shapes) {
    SCOPED_TRACE("E " + std::to_string(shape.exposures) + ", " + std::to_string(shape.width) + " x " +
                 std::to_string(shape.height) + ", vy " + std::to_string(shape.vy));
    KitOptions o = workload("ci");
    o.exposures = shape.exposures, o.width = shape.width, o.height = shape.height;
    o.vx_count = shape.vx, o.vy_count = shape.vy;
    o.velocity_displacement = shape.displacement, o.curve_amplitude = 2;
    Case c;
    c.kit = make_kit(o);
    c.stack = encode_kit(c.kit, Encoding::fp32);
    const double z_thr =
        bonferroni_threshold(0.05, double(shape.region.count()) * double(c.kit.bank.size()));
    const OutputPolicy policy = listing_policy(z_thr);
    c.reference = search(*reference, c.stack, c.kit.bank, policy, shape.region);
    for (const auto& cand : c.reference.candidates)
      if (std::abs(cand.Z - z_thr) <= 1e-4) ++c.near_threshold;
    if (shape.chunk_rows) setenv("SHIFTSTACK_FOURIER_CHUNK_ROWS", shape.chunk_rows, 1);
    auto engine = make_engine("cuda-tc");
    setenv("SHIFTSTACK_TC_ROUTE", "rows", 1);
    const SearchResult rows = search(*engine, c.stack, c.kit.bank, policy, shape.region);
    EXPECT_EQ(diagnostics_of(*engine).row_route, shape.row_route);
    if (shape.chunk_rows) {
      EXPECT_GT(diagnostics_of(*engine).velocity_chunks, 1);
    }
    expect_agreement("cuda-tc", c, rows, tolerance_for("cuda-tc"));
    // Variants on request compute the same products: the row route's wgmma kernel, the chunk's
    // last group of one or two rows b with its steps split between the warps (these stacks have
    // too few exposures for the split to be chosen), and column blocks with and without a paired
    // last tile (chosen here for vx 3, 9, 65 and 75).
    const auto expect_variant_agrees = [&](const char* variable, const char* value, const std::string& label) {
      setenv(variable, value, 1);
      auto variant_engine = make_engine("cuda-tc");
      const SearchResult variant = search(*variant_engine, c.stack, c.kit.bank, policy, shape.region);
      unsetenv(variable);
      EXPECT_EQ(diagnostics_of(*variant_engine).row_route, shape.row_route);
      expect_agreement(label, c, variant, tolerance_for("cuda-tc"));
    };
    expect_variant_agrees("SHIFTSTACK_TC_KERNEL", "wgmma", "cuda-tc wgmma");
    expect_variant_agrees("SHIFTSTACK_TC_ROW_TAIL", "1", "cuda-tc split");
    expect_variant_agrees("SHIFTSTACK_TC_PAIRED_TILE", "0", "cuda-tc without a paired tile");
    expect_variant_agrees("SHIFTSTACK_TC_PAIRED_TILE", "1", "cuda-tc with a paired tile");
    setenv("SHIFTSTACK_TC_ROUTE", "planes", 1);
    const SearchResult planes = search(*engine, c.stack, c.kit.bank, policy, shape.region);
    unsetenv("SHIFTSTACK_TC_ROUTE");
    unsetenv("SHIFTSTACK_FOURIER_CHUNK_ROWS");
    EXPECT_FALSE(diagnostics_of(*engine).row_route);
    for (const auto& f : compare(planes.digest, rows.digest, tolerance_for("cuda-tc")).failures) ADD_FAILURE() << f;
    EXPECT_EQ(rows.digest.scored, planes.digest.scored);
    EXPECT_EQ(rows.digest.argmax_velocity, planes.digest.argmax_velocity);
  }
}

// Where the mma row kernel's stages and the window starts of every exposure would not fit two
// CTAs per SM (9 n8 tiles of velocities, windows 36 rows apart, 8,192 exposures), cuda-tc takes
// the planar route and agrees with the reference; the wgmma row kernel, whose stages are smaller,
// keeps the row route on the same stack.
TEST(GpuFourier, RowRouteFallsBackToPlanesWhereItsSharedMemoryDoesNotFit) {
  if (!device_present()) GTEST_SKIP() << "no CUDA device";
  KitOptions o = workload("ci");
  o.exposures = 8192, o.width = 56, o.height = 56, o.vx_count = 68, o.vy_count = 4;
  o.velocity_displacement = 6, o.curve_amplitude = 2;
  Case c;
  c.kit = make_kit(o);
  c.stack = encode_kit(c.kit, Encoding::fp32);
  const SeparableShifts shifts = integer_shifts(c.kit.bank);
  const auto [lo, hi] = std::minmax_element(shifts.y.begin(), shifts.y.end());
  const Region region{18, 18, 20, 20};  // the reference gather over 8,192 exposures stays quick
  const cuda::RowWindows windows = cuda::plan_row_windows(shifts.y, o.vy_count, o.exposures, o.exposures, 4, *lo,
                                                          *hi, region.height);
  ASSERT_EQ(windows.pitch, 36) << "the stack no longer has the wide windows this test needs";
  ASSERT_LE(windows.rows, 32);
  const double z_thr = bonferroni_threshold(0.05, double(region.count()) * double(c.kit.bank.size()));
  const OutputPolicy policy = listing_policy(z_thr);
  c.reference = search(*make_engine("reference"), c.stack, c.kit.bank, policy, region);
  for (const auto& cand : c.reference.candidates)
    if (std::abs(cand.Z - z_thr) <= 1e-4) ++c.near_threshold;
  auto engine = make_engine("cuda-tc");
  const SearchResult planes = search(*engine, c.stack, c.kit.bank, policy, region);
  EXPECT_FALSE(diagnostics_of(*engine).row_route);
  expect_agreement("cuda-tc", c, planes, tolerance_for("cuda-tc"));
  setenv("SHIFTSTACK_TC_KERNEL", "wgmma", 1);
  auto wgmma_engine = make_engine("cuda-tc");
  const SearchResult rows = search(*wgmma_engine, c.stack, c.kit.bank, policy, region);
  unsetenv("SHIFTSTACK_TC_KERNEL");
  EXPECT_TRUE(diagnostics_of(*wgmma_engine).row_route);
  expect_agreement("cuda-tc wgmma", c, rows, tolerance_for("cuda-tc"));
}

// A setting of the route switch other than rows or planes is refused.
TEST(GpuFourier, RowRouteSwitchRefusesOtherValues) {
  if (!device_present()) GTEST_SKIP() << "no CUDA device";
  const Case& c = case_for("tiny", Encoding::fp32, "reference");
  setenv("SHIFTSTACK_TC_ROUTE", "row", 1);
  auto engine = make_engine("cuda-tc");
  EXPECT_THROW(search(*engine, c.stack, c.kit.bank), Error);
  unsetenv("SHIFTSTACK_TC_ROUTE");
  setenv("SHIFTSTACK_TC_ROW_TAIL", "yes", 1);
  EXPECT_THROW(search(*engine, c.stack, c.kit.bank), Error);
  unsetenv("SHIFTSTACK_TC_ROW_TAIL");
  setenv("SHIFTSTACK_TC_PAIRED_TILE", "2", 1);
  EXPECT_THROW(search(*engine, c.stack, c.kit.bank), Error);
  unsetenv("SHIFTSTACK_TC_PAIRED_TILE");
}

// The CPU emulation reproduces the planar route's operands (the phases of y shifts included).
TEST(GpuFourier, TensorCoreMatchesCpuEmulation) {
  if (!device_present()) GTEST_SKIP() << "no CUDA device";
  const Case& c = case_for("ci", Encoding::fp32, "reference");
  auto engine = make_engine("cuda-tc");
  setenv("SHIFTSTACK_TC_ROUTE", "planes", 1);
  const SearchResult r = search(*engine, c.stack, c.kit.bank);
  unsetenv("SHIFTSTACK_TC_ROUTE");
  EXPECT_FALSE(diagnostics_of(*engine).row_route);
  const EmulatedSearch emu = emulated_tc_search(c.stack, c.kit.bank);
  // Same operands and roundings; only the FFTs (cuFFT FP32 against double) and the order of the
  // FP32 sums differ, so the two sit much closer than either sits to the exact reference.
  EXPECT_EQ(r.digest.scored, emu.digest.scored);
  EXPECT_EQ(r.digest.argmax_velocity, emu.digest.argmax_velocity);
  EXPECT_NEAR(r.digest.maxZ, emu.digest.maxZ, 2e-4);
  EXPECT_NEAR(r.digest.sumA, emu.digest.sumA, 2e-4 * std::abs(emu.digest.sumA) + 1e-6);
  std::printf("  cuda-tc   %s\n  emulated  %s\n", describe(r.digest).c_str(), describe(emu.digest).c_str());
}

// Fractional shifts on cuda-fourier: bilinear A and the exact B from the covariance channels,
// trial by trial against the reference gather (edges, masks, top-k, obs_count, a sub-region),
// on a tiny stack (compute-sanitizer) and every encoding of `ci`.
TEST(GpuFourier, FractionalShiftsMatchReference) {
  if (!device_present()) GTEST_SKIP() << "no CUDA device";
  const Case& c = case_for("tiny-fractional", Encoding::fp32, "reference");
  ASSERT_EQ(c.kit.bank.mode, ShiftMode::fractional);
  OutputPolicy policy = listing_policy(c.reference.digest.z_thr);
  policy.top_k = 4;
  auto reference = make_engine("reference");
  const SearchResult ref = search(*reference, c.stack, c.kit.bank, policy);
  auto engine = make_engine("cuda-fourier");
  // An integer search of the same stack first: the covariance planes then come with the first
  // fractional search (the stack itself is already on the device).
  MotionBank whole_pixels = c.kit.bank;
  whole_pixels.mode = ShiftMode::integer;
  const SearchResult integer = search(*engine, c.stack, whole_pixels);
  const SearchResult integer_ref = search(*reference, c.stack, whole_pixels);
  for (const auto& f : compare(integer_ref.digest, integer.digest, DigestTolerance::fp32()).failures)
    ADD_FAILURE() << "integer: " << f;
  const SearchResult r = search(*engine, c.stack, c.kit.bank, policy);
  Case view{c.kit, {}, ref, c.near_threshold};
  expect_agreement("cuda-fourier", view, r, DigestTolerance::fp32());
  EXPECT_EQ(diagnostics_of(*engine).clamped_trials, 0);
  ASSERT_EQ(r.top_k.size(), ref.top_k.size());
  std::size_t differing = 0, compared = 0;
  for (std::size_t i = 0; i < r.top_k.size(); ++i) {
    const Candidate &a = r.top_k[i], &b = ref.top_k[i];
    if (a.velocity != b.velocity) {
      ++differing;  // near-ties may swap
      continue;
    }
    if (!std::isfinite(b.Z)) continue;
    ++compared;
    EXPECT_NEAR(a.Z, b.Z, 1e-4) << "top-k entry " << i;
    EXPECT_NEAR(a.B, b.B, 1e-4 * b.B) << "top-k entry " << i;
    EXPECT_NEAR(a.A, b.A, 1e-4 * std::sqrt(b.B)) << "top-k entry " << i;
    EXPECT_EQ(a.obs_count, b.obs_count) << "top-k entry " << i;
  }
  EXPECT_GT(compared, r.top_k.size() / 2);
  EXPECT_LE(differing, std::max<std::size_t>(2, r.top_k.size() / 200));
  // Corner regions (edges on two sides; the top-left one holds a trial with no sample). Their
  // sums of A stay far from zero, where a relative tolerance on the sum means something.
  for (const Region& part : {Region{30, 26, 34, 22}, Region{0, 0, 24, 20}}) {
    const SearchResult sub = search(*engine, c.stack, c.kit.bank, OutputPolicy{}, part);
    const SearchResult sub_ref = search(*reference, c.stack, c.kit.bank, OutputPolicy{}, part);
    const DigestComparison cmp = compare(sub_ref.digest, sub.digest, DigestTolerance::fp32());
    for (const auto& f : cmp.failures) ADD_FAILURE() << "region at (" << part.x0 << ", " << part.y0 << "): " << f;
    EXPECT_EQ(sub.digest.scored, sub_ref.digest.scored);
  }

  for (Encoding encoding : all_encodings()) {
    SCOPED_TRACE(to_string(encoding));
    KitOptions o = workload("ci");
    o.shift_mode = ShiftMode::fractional;
    const KitStack kit = make_kit(o);
    const EncodedStack stack = encode_kit(kit, encoding);
    const SearchResult exact = search(*reference, stack, kit.bank);
    const SearchResult fourier = search(*engine, stack, kit.bank);
    const DigestComparison ci = compare(exact.digest, fourier.digest, DigestTolerance::fp32());
    for (const auto& f : ci.failures) ADD_FAILURE() << "ci: " << f;
    EXPECT_EQ(fourier.digest.scored, exact.digest.scored);
    std::printf("  ci %s: d maxZ %.3g, rel sumA %.3g, rel sumB %.3g; %lld trials with an untrusted FFT-route B gathered exactly\n",
                to_string(encoding).c_str(), ci.d_maxZ, ci.rel_sumA, ci.rel_sumB,
                (long long)diagnostics_of(*engine).recomputed_trials);
  }
}

// Fractional shifts on cuda-tc (FP16 operands: the reduced tolerances of SPEC 4): bilinear A
// and the exact B through the three x tables and the covariance channels, against the reference
// gather. The tiny stack (one column tile, top-k, regions) is small enough for compute-sanitizer;
// TensorCoreFractionalShifts below covers every encoding of `ci` and `dense` (nine column tiles)
// against the exact FP32 bilinear gather where cuda-fast is built.
TEST(GpuFourier, TensorCoreFractionalTinyStack) {
  if (!device_present()) GTEST_SKIP() << "no CUDA device";
  const DigestTolerance tol = tolerance_for("cuda-tc");
  auto reference = make_engine("reference");
  auto engine = make_engine("cuda-tc");
  {
    const Case& c = case_for("tiny-fractional", Encoding::fp32, "reference");
    OutputPolicy policy = listing_policy(c.reference.digest.z_thr);
    policy.top_k = 4;
    const SearchResult ref = search(*reference, c.stack, c.kit.bank, policy);
    const SearchResult r = search(*engine, c.stack, c.kit.bank, policy);
    Case view{c.kit, {}, ref, c.near_threshold};
    expect_agreement("cuda-tc", view, r, tol);
    EXPECT_EQ(diagnostics_of(*engine).clamped_trials, 0);
    ASSERT_EQ(r.top_k.size(), ref.top_k.size());
    std::size_t compared = 0;
    for (std::size_t i = 0; i < r.top_k.size(); ++i) {
      const Candidate &a = r.top_k[i], &b = ref.top_k[i];
      if (a.velocity != b.velocity || !std::isfinite(b.Z)) continue;  // near-ties may swap
      ++compared;
      EXPECT_NEAR(a.Z, b.Z, 2e-3) << "top-k entry " << i;
      EXPECT_NEAR(a.B, b.B, 2e-3 * b.B) << "top-k entry " << i;
      EXPECT_EQ(a.obs_count, b.obs_count) << "top-k entry " << i;
    }
    EXPECT_GT(compared, r.top_k.size() / 2);
    for (const Region& part : {Region{30, 26, 34, 22}, Region{0, 0, 24, 20}}) {
      const SearchResult sub = search(*engine, c.stack, c.kit.bank, OutputPolicy{}, part);
      const SearchResult sub_ref = search(*reference, c.stack, c.kit.bank, OutputPolicy{}, part);
      for (const auto& f : compare(sub_ref.digest, sub.digest, tol).failures)
        ADD_FAILURE() << "region at (" << part.x0 << ", " << part.y0 << "): " << f;
      EXPECT_EQ(sub.digest.scored, sub_ref.digest.scored);
    }
    // Only the mma.sync kernel holds the fractional products: forcing wgmma is an error.
    setenv("SHIFTSTACK_TC_KERNEL", "wgmma", 1);
    auto forced = make_engine("cuda-tc");
    EXPECT_THROW(search(*forced, c.stack, c.kit.bank), Error);
    unsetenv("SHIFTSTACK_TC_KERNEL");
  }
}

// A y span whose phase table fits beside the integer kernels' stages but not beside the
// fractional kernel's (which holds three x tables and the covariance channels per stage): the
// fractional search is refused with the reason, the integer one runs.
TEST(GpuFourier, TensorCoreRefusesAFractionalSpanTooWideForSharedMemory) {
  if (!device_present()) GTEST_SKIP() << "no CUDA device";
  const Case& c = case_for("tiny-fractional", Encoding::fp32, "reference");
  MotionBank wide = c.kit.bank;
  double largest = 0;
  for (int e = 0; e < wide.exposures(); ++e) largest = std::max(largest, std::abs(wide.dt(e)));
  // vy from -180 to +180 px over the largest |t - t_ref|: a span of about 360 rows (+ the curve).
  for (std::size_t i = 0; i < wide.vy_axis.size(); ++i)
    wide.vy_axis[i] = (-180.0 + 360.0 * double(i) / double(wide.vy_axis.size() - 1)) / largest;
  auto engine = make_engine("cuda-tc");
  SearchInput input{&c.stack, &wide, resolve({}, c.stack.width, c.stack.height), OutputPolicy{}};
  const std::string reason = engine->unsupported_reason(input);
  EXPECT_NE(reason.find("shared memory"), std::string::npos) << reason;
  EXPECT_THROW(engine->search(input), Error);
  MotionBank integer = wide;
  integer.mode = ShiftMode::integer;
  SearchInput integer_input{&c.stack, &integer, resolve({}, c.stack.width, c.stack.height), OutputPolicy{}};
  EXPECT_EQ(engine->unsupported_reason(integer_input), "");
  const SearchResult r = engine->search(integer_input);
  EXPECT_GT(r.digest.scored, 0);
}

TEST(GpuFourier, TensorCoreFractionalShifts) {
  if (!device_present()) GTEST_SKIP() << "no CUDA device";
  const DigestTolerance tol = tolerance_for("cuda-tc");
  auto engine = make_engine("cuda-tc");
  for (Encoding encoding : all_encodings()) {
    SCOPED_TRACE(to_string(encoding));
    const Case& c = case_for("ci-fractional", encoding, "reference");
    const SearchResult r = search(*engine, c.stack, c.kit.bank, listing_policy(c.reference.digest.z_thr));
    expect_agreement("cuda-tc", c, r, tol);
    EXPECT_EQ(diagnostics_of(*engine).clamped_trials, 0);
  }
  if (find_info("cuda-fast") && find_info("cuda-fast")->available()) {
    const Case& c = case_for("dense-fractional", Encoding::fp32, "cuda-fast");
    const SearchResult r = search(*engine, c.stack, c.kit.bank, listing_policy(c.reference.digest.z_thr));
    expect_agreement("cuda-tc", c, r, tol);
    EXPECT_EQ(diagnostics_of(*engine).clamped_trials, 0);
    const cuda::SpectralDiagnostics& d = diagnostics_of(*engine);
    std::printf("  dense fractional: contraction %.2f ms (%.1f TFLOP/s useful), scan %.2f ms, %lld trials gathered exactly\n",
                d.times.contraction_ms, d.contraction_tflops(), d.times.total_ms, (long long)d.recomputed_trials);
  }
}

// Every trial's FFT-route B declared untrusted (SHIFTSTACK_FOURIER_EXACT_BELOW far above any B):
// every scored trial is then gathered exactly by the recompute kernel, more of them than its
// first list holds (the scan reruns with a longer one), and the digest and the candidate list
// must still be the reference's, integer and fractional.
TEST(GpuFourier, ExactGatherOfEveryTrial) {
  if (!device_present()) GTEST_SKIP() << "no CUDA device";
  setenv("SHIFTSTACK_FOURIER_EXACT_BELOW", "1e30", 1);
  for (const char* name : {"tiny", "tiny-fractional"}) {
    SCOPED_TRACE(name);
    const Case& c = case_for(name, Encoding::fp32, "reference");
    auto engine = make_engine("cuda-fourier");
    const SearchResult r = search(*engine, c.stack, c.kit.bank, listing_policy(c.reference.digest.z_thr));
    expect_agreement("cuda-fourier", c, r, DigestTolerance::fp32());
    const cuda::SpectralDiagnostics& d = diagnostics_of(*engine);
    EXPECT_EQ(d.recomputed_trials, c.reference.digest.scored) << "every scored trial gathered exactly";
    EXPECT_GT(d.recomputed_trials, std::int64_t(1) << 16) << "the first list must overflow for this test";
    ASSERT_EQ(r.candidates.size(), c.reference.candidates.size());
    for (std::size_t i = 0; i < r.candidates.size(); ++i) {
      const Candidate &g = r.candidates[i], &x = c.reference.candidates[i];
      ASSERT_TRUE(g.velocity == x.velocity && g.x == x.x && g.y == x.y) << "candidate " << i;
      EXPECT_NEAR(g.Z, x.Z, 1e-4) << "candidate " << i;
      EXPECT_EQ(g.obs_count, x.obs_count) << "candidate " << i;
    }
    // Run to run: the same digest (the exact sums and their merge have a fixed order).
    const SearchResult again = search(*engine, c.stack, c.kit.bank, listing_policy(c.reference.digest.z_thr));
    EXPECT_EQ(again.digest.sumA, r.digest.sumA);
    EXPECT_EQ(again.digest.sumB, r.digest.sumB);
    EXPECT_EQ(again.digest.maxZ, r.digest.maxZ);
  }
  unsetenv("SHIFTSTACK_FOURIER_EXACT_BELOW");
}

TEST(GpuFourier, FractionalShiftsNeedCovariancePlanes) {
  if (!device_present()) GTEST_SKIP() << "no CUDA device";
  const Case& c = case_for("tiny-fractional", Encoding::fp32, "reference");
  EncodedStack without = c.stack;
  without.cov_right.clear(), without.cov_down.clear(), without.cov_diag.clear(), without.cov_antidiag.clear();
  without.id = 0;  // not the cached upload
  for (const char* name : {"cuda-fourier", "cuda-tc"}) {
    SCOPED_TRACE(name);
    auto engine = make_engine(name);
    EXPECT_THROW(search(*engine, without, c.kit.bank), Error);
    SearchInput input{&without, &c.kit.bank, resolve({}, without.width, without.height), OutputPolicy{}};
    EXPECT_THROW(engine->search(input), Error);  // the engine's own check, below search()'s
  }
}

TEST(GpuFourier, RefusesWhatItCannotComputeExactly) {
  if (!device_present()) GTEST_SKIP() << "no CUDA device";
  const Case& c = case_for("tiny", Encoding::fp32, "reference");
  MotionBank listed = c.kit.bank;
  listed.velocity_list = {{0.1, 0.2}, {0.3, -0.1}};
  MotionBank fractional = c.kit.bank;
  fractional.mode = ShiftMode::fractional;
  for (const std::string& name : kEngines) {
    auto engine = make_engine(name);
    for (const MotionBank* bank : {&listed, &fractional}) {
      if (bank == &fractional && name != "cuda-gemm") continue;  // computed (tests above and below)
      SearchInput input{&c.stack, bank, resolve({}, c.stack.width, c.stack.height), OutputPolicy{}};
      EXPECT_FALSE(engine->unsupported_reason(input).empty()) << name;
      EXPECT_THROW(engine->search(input), Error) << name;
    }
    OutputPolicy many;
    many.top_k = 1000;
    SearchInput input{&c.stack, &c.kit.bank, resolve({}, c.stack.width, c.stack.height), many};
    EXPECT_FALSE(engine->unsupported_reason(input).empty()) << name;
  }
}

// `dense` (1024 exposures, 256 x 256, 65 x 65): against the exact FP32 gather where it is built,
// else the FP16 paths against cuda-fourier (FP32); SHIFTSTACK_DENSE_REFERENCE names another.
TEST(GpuFourier, DenseAgreesWithFp32Gather) {
  if (!device_present()) GTEST_SKIP() << "no CUDA device";
  const bool gather = find_info("cuda-fast") && find_info("cuda-fast")->available();
  std::string reference_engine = gather ? "cuda-fast" : "cuda-fourier";
  if (const char* forced = std::getenv("SHIFTSTACK_DENSE_REFERENCE")) reference_engine = forced;
  const Case& c = case_for("dense", Encoding::fp32, reference_engine);
  std::printf("  dense reference: %s (%s)\n", reference_engine.c_str(), describe(c.reference.digest).c_str());
  for (const std::string& name : kEngines) {
    if (name == reference_engine) continue;
    SCOPED_TRACE(name);
    auto engine = make_engine(name);
    const SearchResult r = search(*engine, c.stack, c.kit.bank, listing_policy(c.reference.digest.z_thr));
    expect_agreement(name, c, r, tolerance_for(name));
    EXPECT_EQ(diagnostics_of(*engine).clamped_trials, 0);
  }
}

// Not a test: how far cuda-fourier's trials sit from the exact gather for several thresholds of
// exact recomputation (SHIFTSTACK_FOURIER_EXACT_BELOW), every trial listed, on small-PSF
// fractional cubes (where masked-edge pixels carry tiny phi) and on `ci`:
//   shiftstack_gpu_tests --gtest_also_run_disabled_tests --gtest_filter='*ExactBelowSweep*'
TEST(GpuFourier, DISABLED_ExactBelowSweep) {
  if (!device_present()) GTEST_SKIP() << "no CUDA device";
  struct Cube {
    std::string label;
    KitStack kit;
    EncodedStack stack;
    SearchResult exact;
  };
  std::vector<Cube> cubes;
  OutputPolicy all;
  all.collect_candidates = true;
  all.candidate_threshold = -std::numeric_limits<double>::infinity();
  all.max_candidates = std::int64_t(1) << 40;
  auto reference = make_engine("reference");
  for (double sigma : {0.55, 0.85})
    for (ShiftMode mode : {ShiftMode::fractional, ShiftMode::integer}) {
      KitOptions o = workload("ci");
      o.width = o.height = 64, o.exposures = 16, o.vx_count = o.vy_count = 9;
      o.inject = false, o.psf_sigma_min = o.psf_sigma_max = sigma, o.shift_mode = mode, o.seed = 1000;
      Cube c{"64x64 sigma " + std::to_string(sigma).substr(0, 4) + (mode == ShiftMode::integer ? " int " : " frac"),
             make_kit(o), {}, {}};
      c.stack = encode(compute_likelihood(c.kit.stack, mode == ShiftMode::fractional), Encoding::fp32);
      c.exact = search(*reference, c.stack, c.kit.bank, all);
      cubes.push_back(std::move(c));
    }
  for (ShiftMode mode : {ShiftMode::fractional, ShiftMode::integer}) {
    KitOptions o = workload("ci");
    o.shift_mode = mode;
    Cube c{std::string("ci") + (mode == ShiftMode::integer ? " int " : " frac"), make_kit(o), {}, {}};
    c.stack = encode_kit(c.kit, Encoding::fp32);
    c.exact = search(*reference, c.stack, c.kit.bank, all);
    cubes.push_back(std::move(c));
  }
  std::printf("\n%-22s %10s %12s %12s %12s %10s %10s\n", "cube", "below", "recomputed", "max|dB/B|", "max|dZ|",
              "B floor", "B trusted");
  for (const char* below : {"0", "1e-6", "1e-5", "1e-4", "1e-3"}) {
    setenv("SHIFTSTACK_FOURIER_EXACT_BELOW", below, 1);
    for (const Cube& c : cubes) {
      auto engine = make_engine("cuda-fourier");
      const SearchResult r = search(*engine, c.stack, c.kit.bank, all);
      ASSERT_EQ(r.candidates.size(), c.exact.candidates.size()) << c.label;
      double db = 0, dz = 0;
      for (std::size_t i = 0; i < r.candidates.size(); ++i) {
        const Candidate &g = r.candidates[i], &x = c.exact.candidates[i];
        ASSERT_TRUE(g.velocity == x.velocity && g.x == x.x && g.y == x.y);
        db = std::max(db, std::abs(double(g.B) / x.B - 1));
        dz = std::max(dz, std::abs(double(g.Z) - x.Z));
      }
      const cuda::SpectralDiagnostics& d = diagnostics_of(*engine);
      std::printf("%-22s %10s %12lld %12.3g %12.3g %10.3g %10.3g\n", c.label.c_str(), below,
                  (long long)d.recomputed_trials, db, dz, d.b_floor, d.b_trusted);
    }
  }
  unsetenv("SHIFTSTACK_FOURIER_EXACT_BELOW");
}

// Not a test: the stage split of each engine on `dense`, median of 5 scans after a warm-up.
TEST(GpuFourier, DISABLED_DenseStageTimes) {
  if (!device_present()) GTEST_SKIP() << "no CUDA device";
  const KitStack kit = make_kit(workload("dense"));
  const EncodedStack stack = encode_kit(kit, Encoding::fp32);
  const double ceiling = 812e12;  // SPEC 8: cuBLAS FP16 GEMM 8192^3 on this card
  const double samples = double(stack.width) * stack.height * double(kit.bank.size()) * stack.exposures;
  std::printf("\n%-19s %8s %8s %8s %8s %8s %8s %9s %7s %s\n", "engine", "forward", "tables", "contract", "inverse",
              "scoring", "total", "TFLOP/s", "of 812", "(ms; TFLOP/s = 16 F E V / contraction)");
  // cuda-tc twice: the mma.sync (HMMA) and the wgmma (HGMMA) contraction.
  std::vector<std::string> engine_names = {"cuda-fourier", "cuda-gemm", "cuda-tc:mma", "cuda-tc:wgmma",
                                           "cuda-tc:wgmma-split"};
  for (const char* gather : {"cuda-fast"})
    if (find_info(gather) && find_info(gather)->available()) engine_names.push_back(gather);
  int timed_runs = 5;
  if (const char* only = std::getenv("SHIFTSTACK_TIMING_ENGINE")) {  // one engine (label), one run: for a profiler
    engine_names = {only};
    timed_runs = 1;
  }
  for (const std::string& label : engine_names) {
    const std::string name = label.substr(0, label.find(':'));
    if (label.find(':') != std::string::npos) setenv("SHIFTSTACK_TC_KERNEL", label.substr(label.find(':') + 1).c_str(), 1);
    auto engine = make_engine(name);
    auto* spectral = dynamic_cast<cuda::SpectralEngine*>(engine.get());
    std::vector<cuda::SpectralStageTimes> runs;
    std::vector<double> totals;
    Digest digest;
    for (int run = 0; run <= timed_runs; ++run) {
      const SearchResult r = search(*engine, stack, kit.bank);
      if (run == 0) continue;  // warm-up
      totals.push_back(r.seconds * 1e3);
      digest = r.digest;
      if (spectral) runs.push_back(spectral->diagnostics().times);
    }
    auto median_of = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    if (!spectral) {
      std::printf("%-19s %8s %8s %8s %8s %8s %8.2f %9s %7s %.3g G samples/s; maxZ %.5f\n", label.c_str(), "", "", "",
                  "", "", median_of(totals), "", "", samples / (median_of(totals) * 1e-3) / 1e9, digest.maxZ);
      continue;
    }
    auto stage = [&](double cuda::SpectralStageTimes::*field) {
      std::vector<double> v;
      for (const auto& t : runs) v.push_back(t.*field);
      return median_of(v);
    };
    const auto& d = spectral->diagnostics();
    const double contraction = stage(&cuda::SpectralStageTimes::contraction_ms);
    const double tflops = d.useful_flops / (contraction * 1e-3) / 1e12;
    std::printf("%-19s %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f %9.1f %6.1f%% F=%lld (%dx%d padded), %.3g G samples/s; maxZ %.5f\n",
                label.c_str(), stage(&cuda::SpectralStageTimes::forward_ms),
                stage(&cuda::SpectralStageTimes::tables_ms), contraction,
                stage(&cuda::SpectralStageTimes::inverse_ms), stage(&cuda::SpectralStageTimes::scoring_ms),
                stage(&cuda::SpectralStageTimes::total_ms), tflops, 100 * tflops * 1e12 / ceiling,
                (long long)d.geometry.frequencies(), d.geometry.nx, d.geometry.ny,
                samples / (stage(&cuda::SpectralStageTimes::total_ms) * 1e-3) / 1e9, digest.maxZ);
    unsetenv("SHIFTSTACK_TC_KERNEL");
  }
}

// Not a test: cuFFT's inverse transforms at the `dense` batch (2 channels x 4225 velocities) for
// padded sizes around 280 (the y-halved 2-D c2r the route runs, its y pass alone, and one
// complex 2-D transform of both channels at once), to see what the inverse stage could gain from
// another padding rule or a split of the axes:
//   shiftstack_gpu_tests --gtest_also_run_disabled_tests --gtest_filter='*InverseTransformSizes*'
TEST(GpuFourier, DISABLED_InverseTransformSizes) {
  if (!device_present()) GTEST_SKIP() << "no CUDA device";
  const int velocities = 65 * 65, batch = 2 * velocities;
  std::printf("\n%6s %12s %12s %14s %12s  (ms, median of 5; GB/s = bytes read + written once)\n", "n",
              "c2r 2-D", "c2r y only", "c2c 2-D (1/2)", "c2r GB/s");
  for (int n : {280, 288, 294, 300, 320}) {
    const int nyh = n / 2 + 1;
    const std::size_t complex_values = std::size_t(batch) * n * nyh;
    void* data = nullptr;
    ASSERT_EQ(cudaMalloc(&data, complex_values * sizeof(cufftComplex)), cudaSuccess);
    ASSERT_EQ(cudaMemset(data, 0x3c, complex_values * sizeof(cufftComplex)), cudaSuccess);  // not zeros
    cudaEvent_t start, stop;
    cudaEventCreate(&start);
    cudaEventCreate(&stop);
    auto time_plan = [&](cufftHandle plan, bool c2c) {
      std::vector<float> ms;
      for (int run = 0; run < 6; ++run) {
        cudaEventRecord(start);
        const cufftResult status =
            c2c ? cufftExecC2C(plan, static_cast<cufftComplex*>(data), static_cast<cufftComplex*>(data), CUFFT_INVERSE)
                : cufftExecC2R(plan, static_cast<cufftComplex*>(data), static_cast<cufftReal*>(data));
        cudaEventRecord(stop);
        cudaEventSynchronize(stop);
        EXPECT_EQ(status, CUFFT_SUCCESS);
        float t = 0;
        cudaEventElapsedTime(&t, start, stop);
        if (run) ms.push_back(t);
      }
      std::sort(ms.begin(), ms.end());
      return ms[ms.size() / 2];
    };
    int dims[2] = {n, n}, real_embed[2] = {n, 2 * nyh}, complex_embed[2] = {n, nyh};
    cufftHandle c2r = 0, rows = 0, c2c = 0;
    ASSERT_EQ(cufftPlanMany(&c2r, 2, dims, complex_embed, 1, n * nyh, real_embed, 1, n * 2 * nyh, CUFFT_C2R, batch),
              CUFFT_SUCCESS);
    int row[1] = {n}, row_complex[1] = {nyh}, row_real[1] = {2 * nyh};
    ASSERT_EQ(cufftPlanMany(&rows, 1, row, row_complex, 1, nyh, row_real, 1, 2 * nyh, CUFFT_C2R, batch * n),
              CUFFT_SUCCESS);
    const double two_d = time_plan(c2r, false), y_only = time_plan(rows, false);
    double complex_2d = 0;
    if (std::size_t(velocities) * n * n <= complex_values &&
        cufftPlanMany(&c2c, 2, dims, nullptr, 1, 0, nullptr, 1, 0, CUFFT_C2C, velocities) == CUFFT_SUCCESS)
      complex_2d = time_plan(c2c, true);
    const double bytes = double(complex_values) * 8 * 2;
    std::printf("%6d %12.3f %12.3f %14.3f %12.0f\n", n, two_d, y_only, complex_2d, bytes / (two_d * 1e-3) / 1e9);
    cufftDestroy(c2r);
    cufftDestroy(rows);
    if (c2c) cufftDestroy(c2c);
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    cudaFree(data);
  }
}
