// One search split over several devices (multi_device.hpp), checked on the CPU engines with
// "virtual devices" (the same device listed several times): the merged digest, candidates and
// top-k lists against one search of the whole region; the device-list syntax; the row bands.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "shiftstack/multi_device.hpp"
#include "test_support.hpp"

using namespace shiftstack;
using namespace shiftstack::testing;

namespace {

void expect_same_candidates(const std::vector<Candidate>& a, const std::vector<Candidate>& b, const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (std::size_t i = 0; i < a.size(); ++i) {
    SCOPED_TRACE(std::string(what) + " entry " + std::to_string(i));
    EXPECT_EQ(a[i].x, b[i].x);
    EXPECT_EQ(a[i].y, b[i].y);
    EXPECT_EQ(a[i].velocity, b[i].velocity);
    // Bit for bit: each trial is computed by the same code on the same inputs.
    EXPECT_EQ(a[i].A, b[i].A);
    EXPECT_EQ(a[i].B, b[i].B);
    EXPECT_EQ(a[i].Z, b[i].Z);
    EXPECT_EQ(a[i].obs_count, b[i].obs_count);
  }
}

// The split result against the whole-region search of the same engine.
void expect_same_result(const SearchResult& whole, const SearchResult& split) {
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
  // The same double sums added in another order.
  EXPECT_NEAR(s.sumA, w.sumA, 1e-12 * std::abs(w.sumA));
  EXPECT_NEAR(s.sumB, w.sumB, 1e-12 * std::abs(w.sumB));
  EXPECT_EQ(split.engine, whole.engine);
  expect_same_candidates(whole.candidates, split.candidates, "candidates");
  expect_same_candidates(whole.top_k, split.top_k, "top_k");
}

OutputPolicy listing_policy(int top_k) {
  OutputPolicy p;
  p.collect_candidates = true;
  p.candidate_threshold = 3.0;  // a few thousand trials of the ci kit
  p.top_k = top_k;
  return p;
}

void check_split(const std::string& engine_name, ShiftMode mode, Encoding encoding, Region region,
                 std::vector<int> devices, int top_k) {
  KitOptions o = small_kit(5);
  o.shift_mode = mode;
  const KitStack kit = make_kit(o);
  const EncodedStack stack = encode_kit(kit, encoding);
  const OutputPolicy policy = listing_policy(top_k);
  auto engine = make_engine(engine_name);
  const SearchResult whole = search(*engine, stack, kit.bank, policy, region);
  DeviceSplit split{devices, {}, false};
  const SearchResult parts = search_on_devices(engine_name, stack, kit.bank, policy, region, split);
  EXPECT_FALSE(split.parallel);  // CPU engines take the bands in turn
  EXPECT_EQ(split.band_seconds.size(), split_rows(resolve(region, stack.width, stack.height), int(devices.size())).size());
  ASSERT_GT(whole.candidates.size(), 10u);
  expect_same_result(whole, parts);
}

}  // namespace

TEST(DeviceList, ParsesAllCountsAndLists) {
  EXPECT_EQ(parse_device_list("all", 3), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(parse_device_list("2", 4), (std::vector<int>{0, 1}));
  EXPECT_EQ(parse_device_list("1", 0), (std::vector<int>{0}));  // one search, as without --gpus
  EXPECT_EQ(parse_device_list("0,0", 1), (std::vector<int>{0, 0}));
  EXPECT_EQ(parse_device_list("3,1", 4), (std::vector<int>{3, 1}));
  EXPECT_EQ(parse_device_list("1,", 2), (std::vector<int>{1}));
}

TEST(DeviceList, RejectsWhatNamesNoDevices) {
  EXPECT_THROW(parse_device_list("all", 0), Error);
  EXPECT_THROW(parse_device_list("3", 2), Error);
  EXPECT_THROW(parse_device_list("0", 2), Error);
  EXPECT_THROW(parse_device_list("", 2), Error);
  EXPECT_THROW(parse_device_list("two", 2), Error);
  EXPECT_THROW(parse_device_list("0,,1", 2), Error);
  EXPECT_THROW(parse_device_list("-1,0", 2), Error);
  EXPECT_THROW(parse_device_list("0,2", 2), Error);
  EXPECT_THROW(parse_device_list("1x", 2), Error);
  try {
    parse_device_list("0,7", 2);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("device 7 does not exist"), std::string::npos) << e.what();
  }
}

TEST(RowBands, CoverTheRegionInAlignedContiguousBands) {
  for (const auto& [height, parts] : std::vector<std::pair<int, int>>{{128, 2}, {128, 3}, {30, 4}, {3, 5}, {100, 1}, {17, 2}}) {
    const Region r{5, 7, 40, height};
    const std::vector<Region> bands = split_rows(r, parts);
    ASSERT_EQ(int(bands.size()), std::min(parts, height)) << height << " rows, " << parts << " parts";
    int y = r.y0, smallest = height, largest = 0;
    for (const Region& b : bands) {
      EXPECT_EQ(b.x0, r.x0);
      EXPECT_EQ(b.width, r.width);
      EXPECT_EQ(b.y0, y);
      EXPECT_GT(b.height, 0);
      if (height >= parts * 8) {
        EXPECT_EQ((b.y0 - r.y0) % 8, 0);
      }
      smallest = std::min(smallest, b.height);
      largest = std::max(largest, b.height);
      y += b.height;
    }
    EXPECT_EQ(y, r.y0 + height);
    EXPECT_LE(largest - smallest, height >= parts * 8 ? 8 : 1);
  }
}

TEST(MultiDevice, CpuEngineOnTwoVirtualDevicesEqualsOneSearch) {
  check_split("cpu", ShiftMode::integer, Encoding::fp32, {}, {0, 0}, 3);
}

TEST(MultiDevice, CpuEngineOnThreeBandsFractionalInt8SubRegion) {
  check_split("cpu", ShiftMode::fractional, Encoding::int8, Region{9, 13, 101, 77}, {0, 0, 0}, 2);
}

TEST(MultiDevice, ReferenceEngineOnTwoBands) {
  check_split("reference", ShiftMode::integer, Encoding::fp16, Region{20, 30, 48, 40}, {0, 0}, 2);
}

TEST(MultiDevice, EveryBandTestsAgainstTheWholeSearchsThreshold) {
  const KitStack kit = make_kit(small_kit(2));
  const EncodedStack stack = encode_kit(kit);
  auto engine = make_engine("cpu");
  const Region part{0, 0, 128, 64};
  OutputPolicy policy;
  const SearchResult own = search(*engine, stack, kit.bank, policy, part);
  EXPECT_EQ(own.digest.z_thr, bonferroni_threshold(0.05, 128.0 * 64 * double(kit.bank.size())));
  policy.bonferroni_trials = 128.0 * 128 * double(kit.bank.size());
  const SearchResult as_part = search(*engine, stack, kit.bank, policy, part);
  const SearchResult whole = search(*engine, stack, kit.bank, OutputPolicy{});
  EXPECT_EQ(as_part.digest.z_thr, whole.digest.z_thr);
  EXPECT_GT(as_part.digest.z_thr, own.digest.z_thr);
  EXPECT_LE(as_part.digest.count, own.digest.count);
  policy.bonferroni_trials = -1;
  EXPECT_THROW(search(*engine, stack, kit.bank, policy, part), Error);
}

TEST(MultiDevice, CandidateLimitHoldsForTheMergedList) {
  const KitStack kit = make_kit(small_kit(3));
  const EncodedStack stack = encode_kit(kit);
  const Region region{0, 0, 32, 32};
  OutputPolicy policy;
  policy.collect_candidates = true;
  policy.candidate_threshold = -std::numeric_limits<double>::infinity();
  auto engine = make_engine("cpu");
  const std::size_t all = search(*engine, stack, kit.bank, policy, region).candidates.size();
  // Each half fits the limit, the whole does not: the merge must refuse, as one search would.
  policy.max_candidates = std::int64_t(all) * 3 / 4;
  EXPECT_THROW(search(*engine, stack, kit.bank, policy, region), Error);
  DeviceSplit split{{0, 0}, {}, false};
  try {
    search_on_devices("cpu", stack, kit.bank, policy, region, split);
    ADD_FAILURE() << "the merged list exceeds max_candidates but no error was raised";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("exceeds max_candidates"), std::string::npos) << e.what();
  }
}

TEST(MultiDevice, RefusesWhatItCannotSplit) {
  const KitStack kit = make_kit(small_kit(4));
  EncodedStack stack = encode_kit(kit);
  DeviceSplit none{{}, {}, false};
  EXPECT_THROW(search_on_devices("cpu", stack, kit.bank, {}, {}, none), Error);
  DeviceSplit two{{0, 0}, {}, false};
  EXPECT_THROW(search_on_devices("no-such-engine", stack, kit.bank, {}, {}, two), Error);
  stack.fp32.clear();  // as if the cube had been encoded on a device only
  try {
    search_on_devices("cpu", stack, kit.bank, {}, {}, two);
    ADD_FAILURE() << "a stack without its host payload was split";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("host payload"), std::string::npos) << e.what();
  }
}
