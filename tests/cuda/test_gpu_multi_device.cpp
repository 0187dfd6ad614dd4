// One search split over several devices on the GPU engines: "virtual devices" (device 0 listed
// twice, two threads sharing the card, each with its own cube cache and half its memory) and,
// where two cards are visible, devices 0 and 1. The gathers' merged results must equal one
// search bit for bit (sums to double rounding); the Fourier route's to SPEC 4's tolerances.
// Skipped where no CUDA device exists.
#include <gtest/gtest.h>

#include <cmath>

#include "../test_support.hpp"
#include "cuda/common/device_stack.hpp"
#include "shiftstack/multi_device.hpp"

using namespace shiftstack;
using namespace shiftstack::testing;

namespace {

bool have_device() { return visible_device_count() > 0; }

#define REQUIRE_DEVICE() \
  if (!have_device()) GTEST_SKIP() << "no CUDA device"

OutputPolicy listing_policy() {
  OutputPolicy p;
  p.collect_candidates = true;
  p.candidate_threshold = 3.0;
  p.top_k = 2;
  return p;
}

void expect_identical(const SearchResult& whole, const SearchResult& split) {
  const Digest& w = whole.digest;
  const Digest& s = split.digest;
  EXPECT_EQ(s.z_thr, w.z_thr);
  EXPECT_EQ(s.trials, w.trials);
  EXPECT_EQ(s.scored, w.scored);
  EXPECT_EQ(s.count, w.count);
  EXPECT_EQ(s.maxZ, w.maxZ);
  EXPECT_EQ(s.argmax_x, w.argmax_x);
  EXPECT_EQ(s.argmax_y, w.argmax_y);
  EXPECT_EQ(s.argmax_velocity, w.argmax_velocity);
  EXPECT_NEAR(s.sumA, w.sumA, 1e-12 * std::abs(w.sumA));
  EXPECT_NEAR(s.sumB, w.sumB, 1e-12 * std::abs(w.sumB));
  auto same_lists = [](const std::vector<Candidate>& a, const std::vector<Candidate>& b, const char* what) {
    ASSERT_EQ(a.size(), b.size()) << what;
    std::size_t differ = 0;
    for (std::size_t i = 0; i < a.size(); ++i)
      differ += a[i].x != b[i].x || a[i].y != b[i].y || a[i].velocity != b[i].velocity || a[i].A != b[i].A ||
                a[i].B != b[i].B || a[i].Z != b[i].Z || a[i].obs_count != b[i].obs_count;
    EXPECT_EQ(differ, 0u) << what << ": of " << a.size() << " entries";
  };
  same_lists(whole.candidates, split.candidates, "candidates");
  same_lists(whole.top_k, split.top_k, "top_k");
}

struct Split {
  SearchResult whole, parts;
  bool parallel = false;
};

Split run_split(const std::string& engine_name, Encoding encoding, const std::vector<int>& devices, Region region = {}) {
  const KitStack kit = make_kit(small_kit(6));
  const EncodedStack stack = encode_kit(kit, encoding);
  const OutputPolicy policy = listing_policy();
  Split s;
  {
    auto engine = make_engine(engine_name);
    s.whole = search(*engine, stack, kit.bank, policy, region);
  }
  DeviceSplit split{devices, {}, false};
  s.parts = search_on_devices(engine_name, stack, kit.bank, policy, region, split);
  s.parallel = split.parallel;
  return s;
}

}  // namespace

TEST(GpuMultiDevice, GathersOnTwoVirtualDevicesEqualOneSearch) {
  REQUIRE_DEVICE();
  for (const std::string engine : {"cuda-serial", "cuda-tiled", "cuda-fast"})
    for (Encoding encoding : {Encoding::fp32, Encoding::fp16}) {
      SCOPED_TRACE(engine + " " + to_string(encoding));
      const Split s = run_split(engine, encoding, {0, 0});
      EXPECT_TRUE(s.parallel);
      ASSERT_GT(s.whole.candidates.size(), 10u);
      expect_identical(s.whole, s.parts);
    }
}

TEST(GpuMultiDevice, BandsUnderASmallMemoryBudgetAndThreeBandsOfASubRegion) {
  REQUIRE_DEVICE();
  // Each of the two workers plans with half the budget: one 128 x 32 tile with its halo fits,
  // a 64-row band with its halo does not, so the bands are searched in spatial tiles.
  const std::size_t before = cuda::memory_budget();
  const std::size_t tile = std::size_t(128 + 40) * (32 + 40) * 32 * 2;  // ci: 32 exposures, int8 pairs
  cuda::set_memory_budget(2 * tile);
  const Split tiled = run_split("cuda-tiled", Encoding::int8, {0, 0});
  cuda::set_memory_budget(before);
  expect_identical(tiled.whole, tiled.parts);
  const Split three = run_split("cuda-fast", Encoding::fp16, {0, 0, 0}, Region{7, 5, 113, 117});
  expect_identical(three.whole, three.parts);
}

TEST(GpuMultiDevice, FourierRouteAgreesWithinTheDigestTolerance) {
  REQUIRE_DEVICE();
  const Split s = run_split("cuda-fourier", Encoding::fp32, {0, 0});
  // Its transforms are padded to each band, so sums differ in float rounding; SPEC 4 bounds that.
  std::int64_t near = 0;  // trials whose count may flip: within the fp32 band of z_thr
  for (const Candidate& x : s.whole.candidates)
    near += std::abs(double(x.Z) - s.whole.digest.z_thr) <= DigestTolerance::fp32().count_band;
  const DigestComparison c = compare(s.whole.digest, s.parts.digest, DigestTolerance::fp32(), near);
  EXPECT_TRUE(c.agrees) << (c.failures.empty() ? "" : c.failures.front());
}

TEST(GpuMultiDevice, TwoCardsWhereTwoAreVisible) {
  if (visible_device_count() < 2) GTEST_SKIP() << "fewer than two CUDA devices";
  for (const std::string engine : {"cuda-serial", "cuda-fast"}) {
    SCOPED_TRACE(engine);
    const Split s = run_split(engine, Encoding::fp32, {0, 1});
    EXPECT_TRUE(s.parallel);
    expect_identical(s.whole, s.parts);
  }
}

TEST(GpuMultiDevice, WorkerScopesRefuseDevicesThatDoNotExist) {
  REQUIRE_DEVICE();
  EXPECT_THROW(cuda::DeviceWorkerScope(visible_device_count(), 1), Error);
  EXPECT_THROW(cuda::DeviceWorkerScope(0, 0), Error);
  EXPECT_EQ(cuda::device_sharing(), 1);
  {
    cuda::DeviceWorkerScope scope(0, 2);
    EXPECT_EQ(cuda::device_sharing(), 2);
  }
  EXPECT_EQ(cuda::device_sharing(), 1);
}
