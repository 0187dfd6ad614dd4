// The fast `cpu` engine against the `reference` engine, trial by trial, on the cases its layout
// treats specially: strips cut at the region's edge, a region away from the image origin, int8
// values beyond the code range (the exception path), non-Cartesian velocity lists, several thread
// counts, and the candidate limit.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "shiftstack/cpu_engine.hpp"
#include "test_support.hpp"

using namespace shiftstack;
using namespace shiftstack::testing;

namespace {

// Small enough for the reference to list every trial; 70 origins per row = one 64-origin strip
// plus a 16-origin edge strip with 6 live lanes (fractional: two 32-origin strips plus the edge).
KitOptions small_shape(ShiftMode mode, double snr = 8) {
  KitOptions o = workload("ci");
  o.exposures = 24;
  o.width = 70;
  o.height = 45;
  o.vx_count = 9;
  o.vy_count = 7;
  o.velocity_displacement = 8;  // the injection margin must fit the 45 rows
  o.shift_mode = mode;
  o.injected_snr = snr;
  return o;
}

OutputPolicy every_trial() {
  OutputPolicy p;
  p.collect_candidates = true;
  p.candidate_threshold = -std::numeric_limits<double>::infinity();
  p.top_k = 2;
  return p;
}

// Same trials, same A, B (to FP32 accumulation accuracy), same observation counts.
void expect_same_trials(const SearchResult& ref, const SearchResult& fast) {
  ASSERT_EQ(fast.candidates.size(), ref.candidates.size());
  for (std::size_t i = 0; i < ref.candidates.size(); ++i) {
    const Candidate &r = ref.candidates[i], &f = fast.candidates[i];
    ASSERT_EQ(f.velocity, r.velocity) << "trial " << i;
    ASSERT_EQ(f.x, r.x) << "trial " << i;
    ASSERT_EQ(f.y, r.y) << "trial " << i;
    const double noise = std::sqrt(double(r.B));
    EXPECT_NEAR(f.A, r.A, 1e-5 * std::max(1.0, noise) + 1e-6 * std::abs(r.A)) << "A of trial " << i;
    EXPECT_NEAR(f.B, r.B, 1e-5 * r.B) << "B of trial " << i;
    EXPECT_NEAR(f.Z, r.Z, 1e-4 * std::max(1.0f, std::abs(r.Z))) << "Z of trial " << i;
    EXPECT_EQ(f.obs_count, r.obs_count) << "obs_count of trial " << i;
  }
  // SPEC 4's |d maxZ| <= 1e-4 is absolute, written for Z near the threshold; FP32 sums carry
  // about 1e-7 relative error, so a very bright source's maxZ gets that relative margin too.
  DigestTolerance tol = DigestTolerance::fp32();
  tol.abs_maxZ = std::max(tol.abs_maxZ, 1e-6 * std::abs(ref.digest.maxZ));
  const DigestComparison cmp = compare(ref.digest, fast.digest, tol, 0);
  for (const auto& failure : cmp.failures) ADD_FAILURE() << failure;
  ASSERT_EQ(fast.top_k.size(), ref.top_k.size());
  for (std::size_t i = 0; i < ref.top_k.size(); ++i) {
    const Candidate &r = ref.top_k[i], &f = fast.top_k[i];
    if (!std::isfinite(r.Z)) {  // an unfilled slot
      EXPECT_EQ(f.velocity, -1) << "top-k entry " << i;
      continue;
    }
    // Z decides the ranking; a near-tie may swap two velocities, never change the scores.
    EXPECT_NEAR(f.Z, r.Z, 1e-4 * std::max(1.0f, std::abs(r.Z))) << "top-k entry " << i;
    if (f.velocity == r.velocity) {
      EXPECT_EQ(f.obs_count, r.obs_count) << "top-k entry " << i;
    }
  }
}

SearchResult run(const std::string& engine_name, const EncodedStack& stack, const MotionBank& bank,
                 const OutputPolicy& policy, Region region = {}) {
  auto engine = make_engine(engine_name);
  return search(*engine, stack, bank, policy, region);
}

struct Case {
  Encoding encoding;
  ShiftMode mode;
  std::string target;  // SIMD target of the cpu engine
};
void PrintTo(const Case& c, std::ostream* os) {  // names the case in test listings, not its bytes
  *os << c.target << " " << to_string(c.encoding) << (c.mode == ShiftMode::integer ? " integer" : " fractional");
}

// Every encoding and shift mode on every SIMD target this machine runs.
std::vector<Case> trial_cases() {
  std::vector<Case> out;
  for (const std::string& target : cpu_engine_targets())
    for (ShiftMode mode : {ShiftMode::integer, ShiftMode::fractional})
      for (Encoding encoding : {Encoding::fp32, Encoding::fp16, Encoding::int8})
        out.push_back({encoding, mode, target});
  return out;
}

class CpuEngineTrials : public ::testing::TestWithParam<Case> {};

// A source far brighter than the int8 code range (+-10.5 sigma per image) forces the exception
// path; the other encodings see the same bright values in their own storage.
TEST_P(CpuEngineTrials, BrightSourceEveryTrialMatchesReference) {
  const Case c = GetParam();
  const KitStack kit = make_kit(small_shape(c.mode, 3000));
  const EncodedStack stack = encode_kit(kit, c.encoding);
  if (c.encoding == Encoding::int8) {
    ASSERT_GT(stack.saturated, 0) << "no exceptions to test";
  }
  const SearchResult ref = run("reference", stack, kit.bank, every_trial());
  auto engine = make_cpu_engine(c.target);
  const SearchResult fast = search(*engine, stack, kit.bank, every_trial());
  expect_same_trials(ref, fast);
  // The bright source is found where it was put.
  EXPECT_EQ(fast.digest.argmax_velocity, kit.truth.velocity);
  EXPECT_EQ(fast.digest.argmax_x, kit.truth.x);
  EXPECT_EQ(fast.digest.argmax_y, kit.truth.y);
}

INSTANTIATE_TEST_SUITE_P(
    EncodingsAndModes, CpuEngineTrials, ::testing::ValuesIn(trial_cases()), [](const auto& p) {
      return p.param.target + "_" + to_string(p.param.encoding) +
             (p.param.mode == ShiftMode::integer ? "_integer" : "_fractional");
    });

// The binary carries the narrower targets too, so a machine with AVX-512 also checks the AVX2
// and scalar code paths (the cases above run every target listed here).
TEST(CpuEngine, RunsEveryTargetThisProcessorSupports) {
  const std::vector<std::string> targets = cpu_engine_targets();
  ASSERT_FALSE(targets.empty());
  auto has = [&](const std::string& name) { return std::find(targets.begin(), targets.end(), name) != targets.end(); };
#if defined(__x86_64__)
  EXPECT_TRUE(has("SCALAR") || has("EMU128")) << "no portable fallback target";
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    EXPECT_TRUE(has("AVX2"));
  }
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl")) {
    EXPECT_EQ(targets.front(), "AVX3");
  }
#endif
  // The default engine runs the best target; a name picks another, in any letter case.
  const char* env = std::getenv("SHIFTSTACK_CPU_TARGET");
  if (!env || !*env) {
    EXPECT_EQ(cpu_engine_target(*make_engine("cpu")), targets.front());
  }
  EXPECT_EQ(cpu_engine_target(*make_cpu_engine(targets.back())), targets.back());
  std::string lower = targets.back();
  for (char& ch : lower) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  EXPECT_EQ(cpu_engine_target(*make_cpu_engine(lower)), targets.back());
  EXPECT_EQ(cpu_engine_target(*make_engine("reference")), "");
}

TEST(CpuEngine, UnknownTargetIsAnErrorNamingTheAvailableOnes) {
  try {
    make_cpu_engine("AVX9000");
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("AVX9000"), std::string::npos) << message;
    EXPECT_NE(message.find(cpu_engine_targets().front()), std::string::npos) << message;
  }
}

TEST(CpuEngine, EnvironmentVariablePicksTheTarget) {
  const char* before = std::getenv("SHIFTSTACK_CPU_TARGET");
  const std::string saved = before ? before : "";
  const std::string narrowest = cpu_engine_targets().back();
  ASSERT_EQ(setenv("SHIFTSTACK_CPU_TARGET", narrowest.c_str(), 1), 0);
  const std::string chosen = cpu_engine_target(*make_engine("cpu"));
  ASSERT_EQ(setenv("SHIFTSTACK_CPU_TARGET", "nonesuch", 1), 0);
  EXPECT_THROW(make_engine("cpu"), Error);
  ASSERT_EQ(unsetenv("SHIFTSTACK_CPU_TARGET"), 0);
  EXPECT_EQ(chosen, narrowest);
  EXPECT_EQ(cpu_engine_target(*make_engine("cpu")), cpu_engine_targets().front());
  if (before) setenv("SHIFTSTACK_CPU_TARGET", saved.c_str(), 1);
}

TEST(CpuEngine, RegionAwayFromTheOriginMatchesReference) {
  const KitStack kit = make_kit(small_shape(ShiftMode::integer));
  const EncodedStack stack = encode_kit(kit, Encoding::fp32);
  const Region region{5, 3, 37, 20};  // 37 origins: three 16-origin edge strips, 5 live in the last
  const SearchResult ref = run("reference", stack, kit.bank, every_trial(), region);
  const SearchResult fast = run("cpu", stack, kit.bank, every_trial(), region);
  expect_same_trials(ref, fast);
  for (const Candidate& c : fast.candidates) {
    EXPECT_GE(c.x, region.x0);
    EXPECT_LT(c.x, region.x0 + region.width);
    EXPECT_GE(c.y, region.y0);
    EXPECT_LT(c.y, region.y0 + region.height);
  }
}

TEST(CpuEngine, VelocityListMatchesReference) {
  for (ShiftMode mode : {ShiftMode::integer, ShiftMode::fractional}) {
    KitStack kit = make_kit(small_shape(mode));
    // A non-Cartesian bank: an angle x speed fan, in a deliberately irregular order.
    std::vector<Velocity> list;
    for (int i = 0; i < 23; ++i) {
      const double angle = 0.7 * i, speed = 0.2 + 0.07 * ((i * 7) % 23);
      list.push_back({speed * std::cos(angle), speed * std::sin(angle)});
    }
    kit.bank.velocity_list = list;
    const EncodedStack stack = encode_kit(kit, Encoding::fp32);
    expect_same_trials(run("reference", stack, kit.bank, every_trial()),
                       run("cpu", stack, kit.bank, every_trial()));
  }
}

TEST(CpuEngine, SameDigestOnAnyThreadCount) {
  const KitStack kit = make_kit(small_shape(ShiftMode::integer));
  const EncodedStack stack = encode_kit(kit, Encoding::fp32);
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const Digest one = run("cpu", stack, kit.bank, {}).digest;
  omp_set_num_threads(3);
  const Digest three = run("cpu", stack, kit.bank, {}).digest;
  omp_set_num_threads(threads);
  EXPECT_EQ(one.sumA, three.sumA);
  EXPECT_EQ(one.sumB, three.sumB);
  EXPECT_EQ(one.maxZ, three.maxZ);
  EXPECT_EQ(one.count, three.count);
  EXPECT_EQ(one.argmax_velocity, three.argmax_velocity);
}

// One engine object keeps its padded copy between searches; a different stack, region or shift
// mode must never reuse it.
TEST(CpuEngine, ReusedEngineObjectMatchesFreshOnes) {
  const KitStack first = make_kit(small_shape(ShiftMode::integer));
  KitOptions other_options = small_shape(ShiftMode::fractional);
  other_options.seed = 99;
  const KitStack second = make_kit(other_options);
  const EncodedStack a = encode_kit(first, Encoding::fp32), b = encode_kit(second, Encoding::fp32);
  const EncodedStack a16 = encode_kit(first, Encoding::fp16), a8 = encode_kit(first, Encoding::int8);
  const Region corner{30, 10, 33, 25};
  auto reused = make_engine("cpu");
  struct Step {
    const EncodedStack* stack;
    const MotionBank* bank;
    Region region;
  };
  const Step steps[] = {{&a, &first.bank, {}},      {&a, &first.bank, corner}, {&b, &second.bank, {}},
                        {&a16, &first.bank, {}},    {&a8, &first.bank, {}},    {&a, &first.bank, {}},
                        {&b, &first.bank, corner}};
  for (const Step& step : steps) {
    const SearchResult again = search(*reused, *step.stack, *step.bank, every_trial(), step.region);
    const SearchResult fresh = run("cpu", *step.stack, *step.bank, every_trial(), step.region);
    EXPECT_EQ(again.digest.sumA, fresh.digest.sumA);
    EXPECT_EQ(again.digest.sumB, fresh.digest.sumB);
    EXPECT_EQ(again.digest.maxZ, fresh.digest.maxZ);
    EXPECT_EQ(again.digest.count, fresh.digest.count);
    EXPECT_EQ(again.candidates.size(), fresh.candidates.size());
  }
}

TEST(CpuEngine, TooManyCandidatesIsAnErrorNotATruncation) {
  const KitStack kit = make_kit(small_shape(ShiftMode::integer));
  const EncodedStack stack = encode_kit(kit, Encoding::fp32);
  OutputPolicy policy = every_trial();
  policy.max_candidates = 1000;
  try {
    run("cpu", stack, kit.bank, policy);
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("max_candidates"), std::string::npos) << e.what();
  }
}

}  // namespace
