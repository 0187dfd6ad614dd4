// Every registered engine x encoding x shift mode on the `ci` workload against the `reference`
// engine (the cpu engine on each SIMD target this machine runs), with SPEC 4's tolerances.
// Compiled twice: into the CPU suite for CPU engines and into the GPU suite
// (SHIFTSTACK_PARITY_GPU) for CUDA engines, which skip where no device exists.
#include <gtest/gtest.h>

#include <map>
#include <mutex>

#include "shiftstack/tree.hpp"
#include "shiftstack/cpu_engine.hpp"
#include "test_support.hpp"

using namespace shiftstack;
using namespace shiftstack::testing;

#ifndef SHIFTSTACK_PARITY_GPU
#define SHIFTSTACK_PARITY_GPU 0
#endif

namespace {

struct Case {
  std::string engine;
  Encoding encoding;
  ShiftMode mode;
};

std::string mode_name(ShiftMode m) { return m == ShiftMode::integer ? "integer" : "fractional"; }
void PrintTo(const Case& c, std::ostream* os) {  // names the case in test listings, not its bytes
  *os << c.engine << " " << to_string(c.encoding) << " " << mode_name(c.mode);
}

struct Reference {
  KitStack kit;
  EncodedStack stack;
  SearchResult result;
  std::int64_t near_threshold = 0;  // reference trials within 1e-4 of z_thr
};

// The reference run for one (encoding, mode), computed once per test binary.
const Reference& reference_for(Encoding encoding, ShiftMode mode) {
  static std::map<std::pair<int, int>, Reference> cache;
  static std::mutex lock;
  std::lock_guard guard(lock);
  auto key = std::make_pair(int(encoding), int(mode));
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  Reference ref;
  KitOptions o = workload("ci");
  o.shift_mode = mode;
  ref.kit = make_kit(o);
  ref.stack = encode_kit(ref.kit, encoding);
  auto engine = make_engine("reference");
  OutputPolicy policy;
  policy.collect_candidates = true;
  policy.candidate_threshold = bonferroni_threshold(0.05, 128.0 * 128 * 289) - 1e-4;
  policy.top_k = 3;
  ref.result = search(*engine, ref.stack, ref.kit.bank, policy);
  for (const auto& c : ref.result.candidates)
    if (std::abs(c.Z - ref.result.digest.z_thr) <= 1e-4) ++ref.near_threshold;
  return cache.emplace(key, std::move(ref)).first->second;
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (const auto& info : engines()) {
    if (info.name == "reference" || info.gpu != bool(SHIFTSTACK_PARITY_GPU)) continue;
    for (Encoding enc : all_encodings())
      for (ShiftMode mode : {ShiftMode::integer, ShiftMode::fractional})
        out.push_back({info.name, enc, mode});
  }
  return out;
}

const EngineInfo& info_for(const std::string& name) {
  for (const auto& info : engines())
    if (info.name == name) return info;
  throw Error("no engine " + name);
}

}  // namespace

namespace {
void expect_agreement(const Reference& ref, const EngineInfo& info, Engine& engine);
}  // namespace

class Parity : public ::testing::TestWithParam<Case> {};

TEST_P(Parity, AgreesWithReference) {
  const Case& c = GetParam();
  const EngineInfo& info = info_for(c.engine);
  if (!info.available()) GTEST_SKIP() << c.engine << " is not available here (no device)";
  const Reference& ref = reference_for(c.encoding, c.mode);
  // The cpu engine on every SIMD target this machine runs, against one reference run.
  const std::vector<std::string> targets = c.engine == "cpu" ? cpu_engine_targets() : std::vector<std::string>{""};
  for (const std::string& target : targets) {
    SCOPED_TRACE(target.empty() ? c.engine : c.engine + " on SIMD target " + target);
    auto engine = target.empty() ? info.make() : make_cpu_engine(target);
    ASSERT_EQ(cpu_engine_target(*engine), target);
    expect_agreement(ref, info, *engine);
  }
}

namespace {
void expect_agreement(const Reference& ref, const EngineInfo& info, Engine& engine) {
  OutputPolicy policy;
  policy.collect_candidates = true;
  policy.candidate_threshold = ref.result.digest.z_thr - 1e-4;
  policy.top_k = 3;
  SearchInput probe{&ref.stack, &ref.kit.bank, resolve({}, ref.stack.width, ref.stack.height), policy};
  const std::string reason = engine.unsupported_reason(probe);
  if (!reason.empty()) GTEST_SKIP() << "not supported: " << reason;

  if (info.digest_kind != DigestKind::exhaustive) {
    // A screen (cpu-tree's tree statistic) with or without exact re-scoring: its sums lie within
    // the bounds its positions put on them (tree_digest_bounds); re-scored, the trials above
    // z_thr, their scores, maxZ, its trial and the count are the reference's own.
    policy.top_k = 0;  // top-k needs every exact score: the tree would run the exhaustive engine
    const SearchResult r = search(engine, ref.stack, ref.kit.bank, policy);
    // The screen is an integer-shift operator: its sums are bounded against the exhaustive
    // integer rounding of the same stack (for a fractional bank, that bank in integer mode).
    MotionBank integer_bank = ref.kit.bank;
    integer_bank.mode = ShiftMode::integer;
    Digest integer_digest = ref.result.digest;
    if (ref.kit.bank.mode == ShiftMode::fractional) {
      auto exhaustive = make_engine("cpu");
      integer_digest = search(*exhaustive, ref.stack, integer_bank).digest;
    }
    const TreeDigestBounds bound = tree_digest_bounds(ref.stack, integer_bank, {});
    EXPECT_LE(std::abs(r.digest.sumA - integer_digest.sumA), bound.sumA);
    EXPECT_LE(std::abs(r.digest.sumB - integer_digest.sumB), bound.sumB);
    if (info.digest_kind == DigestKind::screen) return;
    EXPECT_EQ(r.digest.maxZ, ref.result.digest.maxZ);
    EXPECT_EQ(r.digest.argmax_x, ref.result.digest.argmax_x);
    EXPECT_EQ(r.digest.argmax_y, ref.result.digest.argmax_y);
    EXPECT_EQ(r.digest.argmax_velocity, ref.result.digest.argmax_velocity);
    EXPECT_EQ(r.digest.count, ref.result.digest.count);
    auto above = [&](const SearchResult& x) {
      std::vector<Candidate> out;
      for (const Candidate& c : x.candidates)
        if (c.Z > x.digest.z_thr) out.push_back(c);
      return out;
    };
    const std::vector<Candidate> mine = above(r), theirs = above(ref.result);
    ASSERT_EQ(mine.size(), theirs.size());
    for (std::size_t i = 0; i < mine.size(); ++i) {
      EXPECT_EQ(mine[i].velocity, theirs[i].velocity);
      EXPECT_EQ(mine[i].x, theirs[i].x);
      EXPECT_EQ(mine[i].y, theirs[i].y);
      EXPECT_EQ(mine[i].Z, theirs[i].Z);
    }
    return;
  }
  const SearchResult r = search(engine, ref.stack, ref.kit.bank, policy);
  const DigestTolerance tol =
      info.reduced_arithmetic ? DigestTolerance::reduced() : DigestTolerance::fp32();
  const DigestComparison cmp = compare(ref.result.digest, r.digest, tol, ref.near_threshold);
  for (const auto& f : cmp.failures) ADD_FAILURE() << f;
  EXPECT_TRUE(cmp.agrees) << "reference: " << describe(ref.result.digest)
                          << "\nengine:    " << describe(r.digest);
  if (info.reduced_arithmetic) return;
  // Exact operators list the same candidates (but for threshold-band trials) and the same top-k.
  EXPECT_LE(std::llabs(std::int64_t(r.candidates.size()) - std::int64_t(ref.result.candidates.size())),
            ref.near_threshold);
  if (!r.top_k.empty()) {
    ASSERT_EQ(r.top_k.size(), ref.result.top_k.size());
    std::size_t differing = 0;
    for (std::size_t i = 0; i < r.top_k.size(); ++i) {
      const Candidate &a = r.top_k[i], &b = ref.result.top_k[i];
      if (a.velocity != b.velocity) {
        ++differing;  // near-ties may swap
      } else if (std::isfinite(b.Z)) {
        EXPECT_NEAR(a.Z, b.Z, 1e-4) << "top-k entry " << i;
      }
    }
    EXPECT_LE(differing, r.top_k.size() / 1000) << "top-k entries naming other trials";
  }
}
}  // namespace

INSTANTIATE_TEST_SUITE_P(
    AllEngines, Parity, ::testing::ValuesIn(cases()), [](const auto& param) {
      std::string name = param.param.engine + "_" + to_string(param.param.encoding) + "_" +
                         mode_name(param.param.mode);
      for (char& ch : name)
        if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
      return name;
    });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Parity);

#if !SHIFTSTACK_PARITY_GPU
// Reduced storage against the fp32 reference: SPEC 4's reduced tolerances, on the same operator.
class EncodingParity : public ::testing::TestWithParam<Encoding> {};
TEST_P(EncodingParity, ReducedStorageAgreesWithFp32) {
  const Reference& f32 = reference_for(Encoding::fp32, ShiftMode::integer);
  const Reference& red = reference_for(GetParam(), ShiftMode::integer);
  const DigestComparison cmp = compare(f32.result.digest, red.result.digest, DigestTolerance::reduced());
  for (const auto& f : cmp.failures) ADD_FAILURE() << f;
}
INSTANTIATE_TEST_SUITE_P(Storage, EncodingParity, ::testing::Values(Encoding::fp16, Encoding::int8),
                         [](const auto& p) { return to_string(p.param); });
#endif
