// cuda-tree against cpu-tree: the same plan, the same float additions in the same order, so every
// trial's tree sums are the same floats; the same screen, the same exact re-scoring (the
// reference engine's double arithmetic), so the refined results are cpu-tree's own. The parity
// suite (tests/test_parity.cpp, GPU build) compares cuda-tree with the reference engine as well.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

#include "../test_support.hpp"
#include "cuda/common/device_stack.hpp"
#include "cuda/tree/cuda_tree.hpp"
#include "shiftstack/tree.hpp"
#include "tree/tree_plan.hpp"

using namespace shiftstack;
using namespace shiftstack::testing;

namespace {

bool have_device() {
  for (const auto& info : engines())
    if (info.name == "cuda-tree") return info.available();
  return false;
}

#define REQUIRE_DEVICE() \
  if (!have_device()) GTEST_SKIP() << "no CUDA device"

bool same_float(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// Every candidate the same trial with the same sums, bit for bit.
void expect_same_candidates(const SearchResult& gpu, const SearchResult& cpu, const std::string& what) {
  ASSERT_EQ(gpu.candidates.size(), cpu.candidates.size()) << what;
  std::size_t differing = 0;
  for (std::size_t i = 0; i < gpu.candidates.size(); ++i) {
    const Candidate &g = gpu.candidates[i], &c = cpu.candidates[i];
    const bool same = g.x == c.x && g.y == c.y && g.velocity == c.velocity && same_float(g.A, c.A) &&
                      same_float(g.B, c.B) && g.obs_count == c.obs_count;
    if (!same && differing++ < 5)
      ADD_FAILURE() << what << ": candidate " << i << " gpu (" << g.x << "," << g.y << ",v" << g.velocity << ") A "
                    << g.A << " B " << g.B << " obs " << g.obs_count << "; cpu (" << c.x << "," << c.y << ",v"
                    << c.velocity << ") A " << c.A << " B " << c.B << " obs " << c.obs_count;
  }
  EXPECT_EQ(differing, 0u) << what;
}

// Digest sums: the same trials (scored, count exact); sumA and sumB differ only by the order of
// the reductions (cpu-tree sums FP32 lanes per velocity, about 1e-6 relative; the GPU sums in
// double per block). Null A scales as sqrt(B) per trial, so sum |A| ~ sqrt(scored * sumB).
void expect_same_digest_sums(const Digest& g, const Digest& c, const std::string& what) {
  EXPECT_EQ(g.scored, c.scored) << what;
  EXPECT_NEAR(g.sumB, c.sumB, 1e-5 * std::abs(c.sumB)) << what;
  EXPECT_NEAR(g.sumA, c.sumA, 1e-5 * std::sqrt(double(c.scored) * std::abs(c.sumB))) << what;
}

SearchResult run(Engine& engine, const EncodedStack& stack, const MotionBank& bank, double threshold) {
  OutputPolicy policy;
  policy.collect_candidates = true;
  policy.candidate_threshold = threshold;
  return search(engine, stack, bank, policy);
}

}  // namespace

// Every trial of `ci` (screen at minus infinity lists them all): cuda-tree-screen's A and B are
// cpu-tree-screen's floats, for every encoding, with the root fused (the default: level 1 never
// formed) and not, and with fused levels (the default: one level in two below never formed) and
// not.
TEST(CudaTree, EveryTrialIsCpuTreesFloats) {
  REQUIRE_DEVICE();
  const KitStack kit = make_kit(workload("ci"));
  for (Encoding enc : all_encodings())
    for (int fusion = 0; fusion < 4; ++fusion) {
      const int fuse = fusion & 1 ? 0 : -1, fuse_levels = fusion & 2 ? 0 : -1;
      const std::string what = "ci " + to_string(enc) + (fuse ? " root fused" : " root from level 1") +
                               (fuse_levels ? ", levels fused" : ", every level formed");
      const EncodedStack stack = encode_kit(kit, enc);
      TreeOptions o;
      o.refine = false;
      o.fuse_root = fuse;
      o.fuse_levels = fuse_levels;
      cuda::CudaTreeEngine gpu(o, "cuda-tree-screen");
      auto cpu = make_engine("cpu-tree-screen");
      const double all = -std::numeric_limits<double>::infinity();
      const SearchResult g = run(gpu, stack, kit.bank, all), c = run(*cpu, stack, kit.bank, all);
      EXPECT_EQ(gpu.last_stats().fused_root, fuse != 0) << what;
      const int unformed = gpu.last_stats().depth - gpu.last_stats().formed_levels;
      EXPECT_EQ(unformed, (fuse != 0) + (fuse_levels != 0)) << what << ": ci's plan fuses one level below the root";
      ASSERT_GT(g.candidates.size(), std::size_t(128 * 128 * 200)) << "most trials are scored";
      expect_same_candidates(g, c, what);
      expect_same_digest_sums(g.digest, c.digest, what);
      EXPECT_EQ(g.digest.maxZ, c.digest.maxZ) << what;
      EXPECT_EQ(g.digest.count, c.digest.count) << what;
    }
}

// BF16 level maps: each stored map pixel is the FP32 sum rounded once to BF16 (8 significant
// bits, relative error at most 2^-9). B sums positive terms, so after `depth` stored levels its
// relative error is at most about depth * 2^-9 (bounded here by (1 + 2^-9)^depth - 1, and 1%
// more for the FP32 additions). A's error is bounded relative to the sum of |terms|, not to A;
// its effect on Z is checked statistically: the RMS change of Z over every trial at most 0.01
// (the analysis in docs/tree-search.md gives about 0.003). The refined results are exact
// re-scorings, so they equal cuda-tree's.
TEST(CudaTree, Bf16MapsMoveTheTreeZByTheRoundingOnly) {
  REQUIRE_DEVICE();
  const KitStack kit = make_kit(workload("ci"));
  for (Encoding enc : all_encodings()) {
    const std::string what = "ci " + to_string(enc);
    const EncodedStack stack = encode_kit(kit, enc);
    auto half = make_engine("cuda-tree-bf16-screen");
    auto full = make_engine("cuda-tree-screen");
    const double all = -std::numeric_limits<double>::infinity();
    const SearchResult h = run(*half, stack, kit.bank, all), f = run(*full, stack, kit.bank, all);
    const int depth = tree::make_plan(kit.bank, {}).depth;
    const double b_bound = 1.01 * (std::pow(1.0 + std::ldexp(1.0, -9), depth) - 1.0);
    // The same trials are scored (B > 0 survives the rounding); compare them one by one.
    ASSERT_EQ(h.candidates.size(), f.candidates.size()) << what;
    double sum_dz2 = 0, max_db = 0;
    for (std::size_t i = 0; i < h.candidates.size(); ++i) {
      const Candidate &a = h.candidates[i], &b = f.candidates[i];
      ASSERT_TRUE(a.x == b.x && a.y == b.y && a.velocity == b.velocity) << what << " " << i;
      max_db = std::max(max_db, std::abs(double(a.B) - double(b.B)) / double(b.B));
      const double dz = a.A / std::sqrt(double(a.B)) - b.A / std::sqrt(double(b.B));
      sum_dz2 += dz * dz;
    }
    const double rms_dz = std::sqrt(sum_dz2 / double(h.candidates.size()));
    EXPECT_LE(max_db, b_bound) << what;
    EXPECT_LE(rms_dz, 0.01) << what;
    EXPECT_GT(rms_dz, 0.0) << what << ": the BF16 maps were not used";
    RecordProperty("rms_dz_" + to_string(enc), std::to_string(rms_dz));
    std::printf("  %s: BF16 maps: max |dB|/B %.3g (bound %.3g), RMS dZ %.4g over %zu trials\n", what.c_str(), max_db,
                b_bound, rms_dz, h.candidates.size());

    cuda::CudaTreeEngine exact;
    auto refined = make_engine("cuda-tree-bf16");
    const SearchResult r = run(*refined, stack, kit.bank, 4.0), e = run(exact, stack, kit.bank, 4.0);
    expect_same_candidates(r, e, what + " refined");
    EXPECT_EQ(r.digest.maxZ, e.digest.maxZ) << what;
    EXPECT_EQ(r.digest.count, e.digest.count) << what;
  }
}

// Refined: the same screened trials and the same exact re-scoring, so the digest's exact part and
// every candidate (exact A, B, obs_count) equal cpu-tree's, integer and fractional shifts.
TEST(CudaTree, RefinedResultsAreCpuTrees) {
  REQUIRE_DEVICE();
  for (ShiftMode mode : {ShiftMode::integer, ShiftMode::fractional}) {
    KitOptions o = workload("ci");
    o.shift_mode = mode;
    const KitStack kit = make_kit(o);
    for (Encoding enc : all_encodings()) {
      const std::string what = "ci " + to_string(enc) + (mode == ShiftMode::integer ? " integer" : " fractional");
      const EncodedStack stack = encode_kit(kit, enc);
      cuda::CudaTreeEngine gpu;
      auto cpu = make_engine("cpu-tree");
      const SearchResult g = run(gpu, stack, kit.bank, 4.0), c = run(*cpu, stack, kit.bank, 4.0);
      EXPECT_FALSE(gpu.last_stats().fell_back) << what;
      EXPECT_GT(gpu.last_stats().refined, 0) << what;
      EXPECT_TRUE(gpu.last_stats().cube_resident) << what;
      expect_same_candidates(g, c, what);
      expect_same_digest_sums(g.digest, c.digest, what);
      EXPECT_EQ(g.digest.maxZ, c.digest.maxZ) << what;
      EXPECT_EQ(g.digest.argmax_x, c.digest.argmax_x) << what;
      EXPECT_EQ(g.digest.argmax_y, c.digest.argmax_y) << what;
      EXPECT_EQ(g.digest.argmax_velocity, c.digest.argmax_velocity) << what;
      EXPECT_EQ(g.digest.count, c.digest.count) << what;
    }
  }
}

// Bands of origin rows (forced: 4 bands, the last shorter) and a cube beyond the memory budget
// (each band's window uploaded, refinement on the host) give the same trials and results.
TEST(CudaTree, BandsAndWindowsGiveTheSameResults) {
  REQUIRE_DEVICE();
  const KitStack kit = make_kit(workload("ci"));
  const EncodedStack stack = encode_kit(kit, Encoding::fp16);
  cuda::CudaTreeEngine whole;
  const SearchResult w = run(whole, stack, kit.bank, 4.0);
  ASSERT_EQ(whole.last_stats().bands, 1);
  TreeOptions o;
  o.tile_height = 40;
  cuda::CudaTreeEngine banded(o);
  const SearchResult b = run(banded, stack, kit.bank, 4.0);
  EXPECT_EQ(banded.last_stats().bands, 4);
  expect_same_candidates(b, w, "4 bands");
  expect_same_digest_sums(b.digest, w.digest, "4 bands");
  EXPECT_EQ(b.digest.maxZ, w.digest.maxZ);
  EXPECT_EQ(b.digest.count, w.digest.count);

  // The whole cube does not fit this budget.
  cuda::set_memory_budget(std::size_t(stack.width) * stack.height * stack.exposures * stack.bytes_per_pair() / 2);
  cuda::CudaTreeEngine windows(o);
  SearchResult x;
  try {
    x = run(windows, stack, kit.bank, 4.0);
  } catch (...) {
    cuda::set_memory_budget(0);
    throw;
  }
  cuda::set_memory_budget(0);
  cuda::release_device_cache();
  EXPECT_FALSE(windows.last_stats().cube_resident);
  expect_same_candidates(x, w, "band windows, host refinement");
  EXPECT_EQ(x.digest.maxZ, w.digest.maxZ);
  EXPECT_EQ(x.digest.count, w.digest.count);
}

// What the tree cannot represent runs the exhaustive cuda-fast engine, and says so.
TEST(CudaTree, FallsBackToCudaFastAndSaysSo) {
  REQUIRE_DEVICE();
  const KitStack kit = make_kit(workload("ci"));
  const EncodedStack stack = encode_kit(kit);
  cuda::CudaTreeEngine engine;
  OutputPolicy policy;
  policy.top_k = 2;
  const SearchResult r = search(engine, stack, kit.bank, policy);
  EXPECT_TRUE(engine.last_stats().fell_back);
  EXPECT_NE(r.note.find("cuda-fast"), std::string::npos) << r.note;
  EXPECT_EQ(r.top_k.size(), std::size_t(128 * 128 * 2));
}

// Repeated searches give the same digest (block partials summed in a fixed order).
TEST(CudaTree, DeterministicRunToRun) {
  REQUIRE_DEVICE();
  const KitStack kit = make_kit(workload("ci"));
  const EncodedStack stack = encode_kit(kit);
  cuda::CudaTreeEngine engine;
  const SearchResult a = run(engine, stack, kit.bank, 5.0), b = run(engine, stack, kit.bank, 5.0);
  EXPECT_EQ(a.digest.sumA, b.digest.sumA);
  EXPECT_EQ(a.digest.sumB, b.digest.sumB);
  EXPECT_EQ(a.digest.maxZ, b.digest.maxZ);
  EXPECT_EQ(a.candidates.size(), b.candidates.size());
}

// Small enough for compute-sanitizer: an odd-sized stack, every encoding, both shift modes,
// refined, two bands, against cpu-tree.
TEST(CudaTreeSanitizer, SmallStack) {
  REQUIRE_DEVICE();
  for (ShiftMode mode : {ShiftMode::integer, ShiftMode::fractional}) {
    KitOptions o = workload("ci");
    o.width = 61;
    o.height = 37;
    o.exposures = 24;
    o.vx_count = 9;
    o.vy_count = 7;
    o.shift_mode = mode;
    o.inject = false;
    const KitStack kit = make_kit(o);
    for (Encoding enc : all_encodings()) {
      const std::string what = "small " + to_string(enc) + (mode == ShiftMode::integer ? " integer" : " fractional");
      const EncodedStack stack = encode_kit(kit, enc);
      TreeOptions opt;
      opt.fallback_fraction = 1;  // margins dominate so small an image: run the tree all the same
      TreeEngine cpu(opt);
      opt.tile_height = 20;
      cuda::CudaTreeEngine gpu(opt);
      const SearchResult g = run(gpu, stack, kit.bank, 3.0), c = run(cpu, stack, kit.bank, 3.0);
      EXPECT_TRUE(gpu.last_stats().fused_root) << what;
      // The other kernels: the root read from level 1, and BF16 maps.
      opt.fuse_root = 0;
      cuda::CudaTreeEngine unfused(opt);
      expect_same_candidates(run(unfused, stack, kit.bank, 3.0), c, what + ", root from level 1");
      opt.fuse_root = -1;
      opt.bf16_maps = true;
      cuda::CudaTreeEngine half(opt);
      const SearchResult h = run(half, stack, kit.bank, 3.0);
      EXPECT_EQ(h.digest.count, c.digest.count) << what << ", BF16 maps";
      ASSERT_FALSE(cpu.last_stats().fell_back) << what << ": " << cpu.last_stats().fallback_reason;
      ASSERT_FALSE(gpu.last_stats().fell_back) << what << ": " << gpu.last_stats().fallback_reason;
      EXPECT_EQ(gpu.last_stats().bands, 2) << what;
      expect_same_candidates(g, c, what);
      EXPECT_EQ(g.digest.maxZ, c.digest.maxZ) << what;
      EXPECT_EQ(g.digest.count, c.digest.count) << what;
    }
  }
}
