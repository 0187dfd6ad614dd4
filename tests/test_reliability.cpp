// Reliability: shift-range, bank-size and memory checks before any engine runs, and
// the saturating rounding that keeps bad shifts defined. Each of these ran into undefined
// behaviour, std::bad_alloc or a multi-gigabyte allocation before the checks existed.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <limits>

#include "shiftstack/limits.hpp"
#include "test_support.hpp"

using namespace shiftstack;
using namespace shiftstack::testing;

namespace {

KitStack small_kit() {
  KitOptions o = workload("ci");
  o.exposures = 4, o.width = 32, o.height = 32, o.vx_count = 3, o.vy_count = 3;
  o.velocity_displacement = 3, o.curve_amplitude = 1;
  return make_kit(o);
}

std::string search_error(const KitStack& kit, const MotionBank& bank, const OutputPolicy& policy = {},
                         const std::string& engine_name = "reference") {
  const EncodedStack stack = encode_kit(kit);
  auto engine = make_engine(engine_name);
  try {
    search(*engine, stack, bank, policy);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST(Reliability, RoundShiftSaturatesInsteadOfOverflowing) {
  EXPECT_EQ(round_shift(2.5), 3);
  EXPECT_EQ(round_shift(-2.5), -2);  // floor(s + 0.5)
  EXPECT_EQ(round_shift(-0.4), 0);
  EXPECT_EQ(round_shift(1e12), 1 << 30);
  EXPECT_EQ(round_shift(-1e300), -(1 << 30));
  EXPECT_EQ(round_shift(std::numeric_limits<double>::infinity()), 1 << 30);
  EXPECT_EQ(round_shift(std::numeric_limits<double>::quiet_NaN()), 1 << 30);
}

TEST(Reliability, OneBadEpochIsRefusedNamingIt) {
  // One exposure's epoch jumps from ~MJD 60000 to 65536 (a bad header): its trajectories leave
  // the image by thousands of pixels. The reference engine used to run and exit 0.
  const KitStack kit = small_kit();
  MotionBank bank = kit.bank;
  bank.epochs[2] = 65536;
  OutputPolicy policy;
  policy.limits.memory_bytes = std::uint64_t(256) << 20;
  const std::string why = search_error(kit, bank, policy);
  EXPECT_TRUE(contains(why, "memory budget")) << why;
  EXPECT_TRUE(contains(why, "exposure 2 at epoch 65536")) << why;
  EXPECT_TRUE(contains(why, "check the epochs")) << why;
  // Same for the fast engine (whose band layout overflowed int arithmetic).
  EXPECT_TRUE(contains(search_error(kit, bank, policy, "cpu"), "exposure 2 at epoch 65536"));
}

TEST(Reliability, AbsurdShiftsAreRefusedBeforeAnyEngine) {
  const KitStack kit = small_kit();
  MotionBank curve = kit.bank;
  curve.curve_x.assign(std::size_t(curve.exposures()), 0.0);
  curve.curve_y.assign(std::size_t(curve.exposures()), 0.0);
  curve.curve_x[1] = 1e12;  // CURVE_X = 1e12 in one header
  for (const char* engine : {"reference", "cpu"}) {
    const std::string why = search_error(kit, curve, {}, engine);
    EXPECT_TRUE(contains(why, "beyond the limit")) << engine << ": " << why;
    EXPECT_TRUE(contains(why, "exposure 1")) << why;
  }
  MotionBank fast = kit.bank;
  fast.vx_axis = {-1e12, 0, 1e12};  // velocities of 1e12 px/day
  EXPECT_TRUE(contains(search_error(kit, fast), "beyond the limit"));
}

TEST(Reliability, HugeBanksAreRefusedByTrialsAndMemory) {
  const KitStack kit = small_kit();
  // 1e6 x 1e6 velocities: 1e15 trials (ended in std::bad_alloc).
  MotionBank huge = kit.bank;
  huge.vx_axis.assign(1000000, 0.0);
  huge.vy_axis.assign(1000000, 0.0);
  const std::string trials = search_error(kit, huge);
  EXPECT_TRUE(contains(trials, "trials")) << trials;
  EXPECT_TRUE(contains(trials, "more than the limit")) << trials;
  // 1e4 x 1e4: within the trial limit, but its shift tables alone are 1e8 x 4 x 12 bytes.
  MotionBank big = kit.bank;
  big.vx_axis.assign(10000, 0.0);
  big.vy_axis.assign(10000, 0.0);
  OutputPolicy policy;
  policy.limits.memory_bytes = std::uint64_t(1) << 30;
  const std::string memory = search_error(kit, big, policy);
  EXPECT_TRUE(contains(memory, "shift tables")) << memory;
  EXPECT_TRUE(contains(memory, "reduce the velocity grid")) << memory;
  // A smaller configurable trial limit applies too.
  OutputPolicy strict;
  strict.limits.max_trials = 1000;
  EXPECT_TRUE(contains(search_error(kit, kit.bank, strict), "more than the limit of 1000"));
}

TEST(Reliability, AnOrdinarySearchGetsAnEstimate) {
  const KitStack kit = small_kit();
  const SearchEstimate e = check_search_limits(kit.bank, 32, 32, 32 * 32, 8, 0);
  EXPECT_DOUBLE_EQ(e.trials, 32.0 * 32 * 9);
  EXPECT_DOUBLE_EQ(e.paired_samples, 32.0 * 32 * 9 * 4);
  EXPECT_GT(e.memory_bytes, 0);
  EXPECT_LE(e.max_abs_shift, 5);
  EXPECT_TRUE(contains(e.summary, "trials")) << e.summary;
  // And search() still runs it.
  EXPECT_EQ(search_error(kit, kit.bank), "");
}

TEST(Reliability, MemoryBudgetSizes) {
  EXPECT_EQ(parse_byte_size("8G", "x"), std::uint64_t(8) << 30);
  EXPECT_EQ(parse_byte_size("512M", "x"), std::uint64_t(512) << 20);
  EXPECT_EQ(parse_byte_size("1.5K", "x"), 1536u);
  EXPECT_EQ(parse_byte_size("4096", "x"), 4096u);
  for (const char* bad : {"", "G", "-1G", "8X", "0", "nan", "1e30T"}) EXPECT_THROW(parse_byte_size(bad, "x"), Error) << bad;
  ::setenv("SHIFTSTACK_MEMORY_BUDGET", "3G", 1);
  EXPECT_EQ(memory_budget_bytes(), std::uint64_t(3) << 30);
  ::setenv("SHIFTSTACK_MEMORY_BUDGET", "lots", 1);
  EXPECT_THROW(memory_budget_bytes(), Error);
  ::unsetenv("SHIFTSTACK_MEMORY_BUDGET");
  EXPECT_GT(memory_budget_bytes(), 0u);
}
