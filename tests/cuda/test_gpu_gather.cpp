// GPU gather engines (cuda-serial, cuda-tiled, cuda-fast) against the `reference` CPU engine:
// every engine x encoding, every cuda-fast variant, int8 exceptions, spatial tiling under a small
// memory budget, candidate-list overflow, reuse of one upload across banks, regions, fractional
// (bilinear) shifts near edges and masks, and the inputs each engine declines. Skipped where no
// CUDA device exists.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include "../test_support.hpp"
#include "cuda/common/device_stack.hpp"
#include "cuda/gather/gather_bilinear.hpp"
#include "cuda/gather/gather_fast.hpp"

using namespace shiftstack;
using namespace shiftstack::testing;

namespace {

const std::vector<std::string> gpu_gathers = {"cuda-serial", "cuda-tiled", "cuda-fast"};

bool have_device() {
  for (const auto& info : engines())
    if (info.name == "cuda-serial") return info.available();
  return false;
}

#define REQUIRE_DEVICE() \
  if (!have_device()) GTEST_SKIP() << "no CUDA device"

// A stack and bank with its reference result, computed once per key.
struct Case {
  KitStack kit;
  EncodedStack stack;
  OutputPolicy policy;
  SearchResult reference;
  std::int64_t near_threshold = 0;  // reference candidates within the fp32 count band of z_thr
};

OutputPolicy policy_for(const MotionBank& bank, const EncodedStack& stack, int top_k) {
  OutputPolicy p;
  p.collect_candidates = true;
  // Just below the digest threshold: the list then holds every counted trial and the band.
  p.candidate_threshold =
      bonferroni_threshold(p.alpha, double(stack.width) * stack.height * double(bank.size())) -
      DigestTolerance::fp32().count_band;
  p.top_k = top_k;
  return p;
}

void finish_case(Case& c) {
  auto engine = make_engine("reference");
  c.reference = search(*engine, c.stack, c.kit.bank, c.policy);
  for (const Candidate& x : c.reference.candidates)
    if (std::abs(double(x.Z) - c.reference.digest.z_thr) <= DigestTolerance::fp32().count_band)
      ++c.near_threshold;
}

// The case of another bank over `base`'s stack, with its own reference; candidates are listed
// from `candidate_threshold` when it is given, else just below the digest threshold.
Case case_with_bank(const Case& base, const MotionBank& bank, int top_k,
                    std::optional<double> candidate_threshold = std::nullopt) {
  Case c;
  c.kit = base.kit;
  c.kit.bank = bank;
  c.stack = base.stack;
  c.policy = policy_for(bank, base.stack, top_k);
  if (candidate_threshold) c.policy.candidate_threshold = *candidate_threshold;
  finish_case(c);
  return c;
}

// `ci` workload (17x17 velocities, 2 px between neighbours at the ends of the span).
const Case& ci_case(Encoding encoding) {
  static std::map<int, Case> cache;
  auto it = cache.find(int(encoding));
  if (it != cache.end()) return it->second;
  Case c;
  c.kit = make_kit(workload("ci"));
  c.stack = encode_kit(c.kit, encoding);
  c.policy = policy_for(c.kit.bank, c.stack, 4);
  finish_case(c);
  return cache.emplace(int(encoding), std::move(c)).first->second;
}

// A finely spaced grid (about 1 px between neighbouring velocities at the span's ends) on an
// image whose sides are not multiples of any block, with uneven packets and an exposure count
// that leaves a partial last chunk (27 = 3 x 8 + 3): every cuda-fast variant can run it.
KitOptions fine_options() {
  KitOptions o = workload("ci");
  o.exposures = 27;
  o.width = 100;
  o.height = 76;
  o.vx_count = 33;
  o.vy_count = 29;
  o.seed = 7;
  return o;
}

const Case& fine_case(Encoding encoding) {
  static std::map<int, Case> cache;
  auto it = cache.find(int(encoding));
  if (it != cache.end()) return it->second;
  Case c;
  c.kit = make_kit(fine_options());
  c.stack = encode_kit(c.kit, encoding);
  c.policy = policy_for(c.kit.bank, c.stack, 3);
  finish_case(c);
  return cache.emplace(int(encoding), std::move(c)).first->second;
}

// Digest within SPEC 4's fp32 tolerances (the same encoding on both sides: the GPU decodes the
// same codes exactly and sums in FP32, the reference in double).
void expect_digest(const Case& c, const SearchResult& r, const std::string& what) {
  const DigestComparison cmp = compare(c.reference.digest, r.digest, DigestTolerance::fp32(), c.near_threshold);
  for (const auto& f : cmp.failures) ADD_FAILURE() << what << ": " << f;
  EXPECT_EQ(r.digest.scored, c.reference.digest.scored) << what;
  EXPECT_EQ(r.digest.trials, c.reference.digest.trials) << what;
}

using Key = std::tuple<int, int, int>;  // velocity, y, x
Key key(const Candidate& c) { return {c.velocity, c.y, c.x}; }

// Fields of one reported trial: A and B to FP32 summation accuracy, Z within 1e-4, exact
// obs_count and velocity values.
void expect_same_trial(const Candidate& ref, const Candidate& got, const std::string& what) {
  EXPECT_EQ(got.x, ref.x) << what;
  EXPECT_EQ(got.y, ref.y) << what;
  EXPECT_EQ(got.velocity, ref.velocity) << what;
  EXPECT_EQ(got.vx, ref.vx) << what;
  EXPECT_EQ(got.vy, ref.vy) << what;
  EXPECT_EQ(got.obs_count, ref.obs_count) << what;
  const double scale = std::sqrt(std::max(double(ref.B), 1e-30));
  EXPECT_NEAR(got.A, ref.A, 1e-5 * scale + 1e-5 * std::abs(ref.A)) << what;
  EXPECT_NEAR(got.B, ref.B, 1e-5 * std::abs(ref.B)) << what;
  EXPECT_NEAR(got.Z, ref.Z, 1e-4) << what;
  EXPECT_NEAR(got.flux, ref.flux, 1e-4 * std::abs(ref.flux) + 1e-4 / scale) << what;
}

// Candidates: the same trials except those within the count band of the candidate threshold.
void expect_candidates(const Case& c, const SearchResult& r, const std::string& what) {
  const double band = DigestTolerance::fp32().count_band, thr = c.policy.candidate_threshold;
  std::map<Key, const Candidate*> got;
  for (const Candidate& x : r.candidates) got[key(x)] = &x;
  EXPECT_TRUE(std::is_sorted(r.candidates.begin(), r.candidates.end(),
                             [](const Candidate& a, const Candidate& b) { return key(a) < key(b); }))
      << what << ": candidates not sorted by (velocity, y, x)";
  std::size_t matched = 0;
  for (const Candidate& ref : c.reference.candidates) {
    auto it = got.find(key(ref));
    if (it == got.end()) {
      EXPECT_LE(std::abs(double(ref.Z) - thr), band) << what << ": missing candidate v=" << ref.velocity
                                                      << " x=" << ref.x << " y=" << ref.y << " Z=" << ref.Z;
      continue;
    }
    ++matched;
    expect_same_trial(ref, *it->second, what + " candidate");
  }
  for (const Candidate& x : r.candidates) {
    if (std::none_of(c.reference.candidates.begin(), c.reference.candidates.end(),
                     [&](const Candidate& ref) { return key(ref) == key(x); })) {
      EXPECT_LE(std::abs(double(x.Z) - thr), band) << what << ": extra candidate Z=" << x.Z;
    }
  }
  if (!c.reference.candidates.empty()) {
    EXPECT_GT(matched, 0u) << what << ": no candidate in common with the reference";
  }
}

// Top-k: per origin the same list, except where two entries' Z are within rounding of each other
// (then their order, or which one makes the cut, may differ).
void expect_top_k(const Case& c, const SearchResult& r, const std::string& what) {
  const int k = c.policy.top_k;
  ASSERT_EQ(r.top_k.size(), c.reference.top_k.size()) << what;
  std::size_t near_ties = 0;
  for (std::size_t o = 0; o * k < r.top_k.size(); ++o) {
    for (int i = 0; i < k; ++i) {
      const Candidate& ref = c.reference.top_k[o * k + i];
      const Candidate& got = r.top_k[o * k + i];
      if (ref.velocity == got.velocity) {
        if (ref.velocity < 0) {
          EXPECT_EQ(got.x, ref.x) << what;
          EXPECT_EQ(got.y, ref.y) << what;
          EXPECT_TRUE(std::isinf(got.Z) && got.Z < 0) << what;
        } else {
          expect_same_trial(ref, got, what + " top-k");
        }
        continue;
      }
      // Allowed only for a near tie with a neighbour in the reference list.
      const bool tie = (i > 0 && std::abs(ref.Z - c.reference.top_k[o * k + i - 1].Z) < 2e-5f) ||
                       (i + 1 < k && std::abs(ref.Z - c.reference.top_k[o * k + i + 1].Z) < 2e-5f) ||
                       std::abs(ref.Z - got.Z) < 2e-5f;
      EXPECT_TRUE(tie) << what << ": top-k origin " << o << " rank " << i << " names v=" << got.velocity
                       << " (Z=" << got.Z << "), reference v=" << ref.velocity << " (Z=" << ref.Z << ")";
      ++near_ties;
    }
  }
  EXPECT_LE(near_ties, r.top_k.size() / 1000 + 2) << what;
}

void expect_matches_reference(const Case& c, const SearchResult& r, const std::string& what) {
  expect_digest(c, r, what);
  expect_candidates(c, r, what);
  expect_top_k(c, r, what);
}

bool same_digest(const Digest& a, const Digest& b) {
  return a.sumA == b.sumA && a.sumB == b.sumB && a.maxZ == b.maxZ && a.count == b.count &&
         a.scored == b.scored && a.argmax_x == b.argmax_x && a.argmax_y == b.argmax_y &&
         a.argmax_velocity == b.argmax_velocity;
}

// Restores the automatic memory budget and variant choice after a test.
struct DefaultsGuard {
  ~DefaultsGuard() {
    cuda::set_memory_budget(0);
    cuda::set_fast_variant("");
  }
};

}  // namespace

TEST(GpuGather, EveryEngineAndEncodingMatchesReference) {
  REQUIRE_DEVICE();
  for (Encoding enc : all_encodings()) {
    const Case& c = ci_case(enc);
    for (const std::string& name : gpu_gathers) {
      auto engine = make_engine(name);
      const SearchResult r = search(*engine, c.stack, c.kit.bank, c.policy);
      expect_matches_reference(c, r, name + " " + to_string(enc));
      EXPECT_GT(r.seconds, 0) << name;
    }
  }
}

TEST(GpuGather, EveryFastVariantMatchesReference) {
  REQUIRE_DEVICE();
  DefaultsGuard guard;
  std::size_t ran = 0, possible = 0;
  std::map<std::string, int> runs_of_variant;
  for (Encoding enc : all_encodings()) {
    const Case& c = fine_case(enc);
    for (const auto& v : cuda::fast_variants()) {
      if (v.half_staging && enc == Encoding::fp32) continue;
      if (v.tensor_cores && enc == Encoding::fp32) continue;
      ++possible;
      cuda::set_fast_variant(v.name);
      auto engine = make_engine("cuda-fast");
      const SearchInput probe{&c.stack, &c.kit.bank, resolve({}, c.stack.width, c.stack.height), c.policy};
      const std::string reason = engine->unsupported_reason(probe);
      if (!reason.empty()) {
        // Only a pitch too narrow for this grid's drift may stop a variant.
        EXPECT_NE(reason.find("drift"), std::string::npos) << v.name << ": " << reason;
        EXPECT_THROW(search(*engine, c.stack, c.kit.bank, c.policy), Error) << v.name;
        continue;
      }
      const SearchResult r = search(*engine, c.stack, c.kit.bank, c.policy);
      EXPECT_EQ(cuda::last_fast_variant(), v.name);
      expect_matches_reference(c, r, v.name + " " + to_string(enc));
      ++ran;
      ++runs_of_variant[v.name];
    }
  }
  // Only the short-run fallback's narrow cousins may decline this grid, never most of them.
  EXPECT_GE(3 * ran, 2 * possible);
  int tensor_runs = 0;  // the narrow-pitch tensor variant may decline this grid's drift
  for (const auto& v : cuda::fast_variants())
    if (v.tensor_cores) tensor_runs += runs_of_variant[v.name];
  EXPECT_GE(tensor_runs, 1);
}

// k = 16: beside the staging of the variants four warps tall and four velocities wide, a
// block's lists (16 slots x 4 x 8 rows x 32 columns x 16 bytes = 256 KB) no longer fit in shared
// memory, so those offer into the global lists, while the narrower variants keep theirs in shared
// memory: both places of the lists against the reference.
TEST(GpuGather, EveryFastVariantKeepsLongTopKLists) {
  REQUIRE_DEVICE();
  DefaultsGuard guard;
  for (Encoding enc : {Encoding::fp32, Encoding::fp16}) {
    Case c = fine_case(enc);
    c.policy.top_k = 16;
    finish_case(c);
    for (const auto& v : cuda::fast_variants()) {
      if ((v.half_staging || v.tensor_cores) && enc == Encoding::fp32) continue;
      cuda::set_fast_variant(v.name);
      auto engine = make_engine("cuda-fast");
      const SearchInput probe{&c.stack, &c.kit.bank, resolve({}, c.stack.width, c.stack.height), c.policy};
      if (!engine->unsupported_reason(probe).empty()) continue;  // the drift case of the test above
      expect_matches_reference(c, search(*engine, c.stack, c.kit.bank, c.policy), v.name + " k = 16 " + to_string(enc));
    }
  }
}

TEST(GpuGather, TiledAndSerialOnUnevenImage) {
  REQUIRE_DEVICE();
  const Case& c = fine_case(Encoding::int8);
  for (const char* name : {"cuda-serial", "cuda-tiled"}) {
    auto engine = make_engine(name);
    expect_matches_reference(c, search(*engine, c.stack, c.kit.bank, c.policy), std::string(name) + " fine int8");
  }
}

TEST(GpuGather, Int8ExceptionsAreExact) {
  REQUIRE_DEVICE();
  DefaultsGuard guard;
  KitStack kit = make_kit(workload("ci"));
  LikelihoodStack L = compute_likelihood(kit.stack);
  // Bright residuals far beyond the int8 range (about 10.5 sigma) on and off the injected track.
  const std::size_t plane = L.plane_size();
  for (int e = 0; e < L.exposures; e += 3) {
    for (int n = 0; n < 5; ++n) {
      const int x = (17 * e + 29 * n) % L.width, y = (11 * e + 7 * n) % L.height;
      const std::size_t i = e * plane + std::size_t(y) * L.width + x;
      if (L.phi[i] > 0) L.psi[i] = (n % 2 ? -1 : 1) * 60.0f * std::sqrt(L.phi[i]);
    }
  }
  Case c;
  c.kit = kit;
  c.stack = encode(L, Encoding::int8);
  ASSERT_GT(c.stack.exceptions.size(), 50u);
  c.policy = policy_for(c.kit.bank, c.stack, 3);
  finish_case(c);
  for (const std::string& name : gpu_gathers) {
    auto engine = make_engine(name);
    expect_matches_reference(c, search(*engine, c.stack, c.kit.bank, c.policy), name + " int8 exceptions");
  }
  // Half-precision staging cannot hold the exact values: those variants decline, the
  // automatic choice takes float staging.
  for (const auto& v : cuda::fast_variants()) {
    if (!v.half_staging) continue;
    cuda::set_fast_variant(v.name);
    auto engine = make_engine("cuda-fast");
    const SearchInput probe{&c.stack, &c.kit.bank, resolve({}, c.stack.width, c.stack.height), c.policy};
    EXPECT_NE(engine->unsupported_reason(probe), "") << v.name;
  }
  cuda::set_fast_variant("");
  auto engine = make_engine("cuda-fast");
  search(*engine, c.stack, c.kit.bank, c.policy);
  EXPECT_FALSE(cuda::fast_variants().empty());
  for (const auto& v : cuda::fast_variants()) {
    if (v.name == cuda::last_fast_variant()) {
      EXPECT_FALSE(v.half_staging);
    }
  }
}

TEST(GpuGather, ForcedTilingGivesTheSameResults) {
  REQUIRE_DEVICE();
  DefaultsGuard guard;
  KitOptions o = workload("ci");
  o.width = 300;  // three tile columns of 128 at the smallest tile
  o.height = 100;
  o.exposures = 16;
  const KitStack kit = make_kit(o);
  const EncodedStack stack = encode_kit(kit, Encoding::fp16);
  OutputPolicy policy = policy_for(kit.bank, stack, 2);
  const Region region{3, 5, 290, 90};
  for (const std::string& name : gpu_gathers) {
    auto engine = make_engine(name);
    cuda::set_memory_budget(0);
    const SearchResult whole = search(*engine, stack, kit.bank, policy, region);
    const auto before = cuda::upload_stats();
    // Room for about a 128 x 40 pixel rectangle of all exposures: the search must tile.
    cuda::set_memory_budget(std::size_t(128 + 40) * (32 + 40) * stack.exposures * stack.bytes_per_pair());
    const SearchResult tiled = search(*engine, stack, kit.bank, policy, region);
    const auto after = cuda::upload_stats();
    EXPECT_EQ(after.tiled_searches, before.tiled_searches + 1) << name;
    EXPECT_GE(after.tiles - before.tiles, 6) << name;
    EXPECT_TRUE(same_digest(whole.digest, tiled.digest))
        << name << "\nwhole: " << describe(whole.digest) << "\ntiled: " << describe(tiled.digest);
    ASSERT_EQ(whole.candidates.size(), tiled.candidates.size()) << name;
    for (std::size_t i = 0; i < whole.candidates.size(); ++i) {
      EXPECT_EQ(key(whole.candidates[i]), key(tiled.candidates[i])) << name;
      EXPECT_EQ(whole.candidates[i].Z, tiled.candidates[i].Z) << name;
      EXPECT_EQ(whole.candidates[i].obs_count, tiled.candidates[i].obs_count) << name;
    }
    ASSERT_EQ(whole.top_k.size(), tiled.top_k.size()) << name;
    for (std::size_t i = 0; i < whole.top_k.size(); ++i) {
      EXPECT_EQ(key(whole.top_k[i]), key(tiled.top_k[i])) << name << " top-k " << i;
      EXPECT_EQ(whole.top_k[i].obs_count, tiled.top_k[i].obs_count) << name << " top-k " << i;
    }
  }
  // And the region result itself against the reference.
  Case c;
  c.kit = kit;
  c.stack = encode_kit(kit, Encoding::fp16);
  c.policy = policy;
  auto ref = make_engine("reference");
  c.reference = search(*ref, c.stack, kit.bank, policy, region);
  for (const Candidate& x : c.reference.candidates)
    if (std::abs(double(x.Z) - c.reference.digest.z_thr) <= DigestTolerance::fp32().count_band) ++c.near_threshold;
  cuda::set_memory_budget(std::size_t(128 + 40) * (32 + 40) * stack.exposures * stack.bytes_per_pair());
  for (const std::string& name : gpu_gathers) {
    auto engine = make_engine(name);
    expect_matches_reference(c, search(*engine, c.stack, kit.bank, policy, region), name + " tiled region");
  }
}

TEST(GpuGather, BudgetTooSmallIsAnError) {
  REQUIRE_DEVICE();
  DefaultsGuard guard;
  const Case& c = ci_case(Encoding::fp32);
  cuda::set_memory_budget(1024);
  for (const std::string& name : gpu_gathers) {
    auto engine = make_engine(name);
    EXPECT_THROW(search(*engine, c.stack, c.kit.bank, c.policy), Error) << name;
  }
}

TEST(GpuGather, CandidateOverflowGrowsAndReruns) {
  REQUIRE_DEVICE();
  const Case& c = ci_case(Encoding::fp32);
  OutputPolicy all;
  all.collect_candidates = true;
  all.candidate_threshold = -std::numeric_limits<double>::infinity();  // every scored trial
  for (const std::string& name : gpu_gathers) {
    auto engine = make_engine(name);
    const SearchResult r = search(*engine, c.stack, c.kit.bank, all);
    // More than the first buffer (2^20) holds: the list grew to the exact count.
    ASSERT_GT(r.digest.scored, 1 << 20);
    EXPECT_EQ(std::int64_t(r.candidates.size()), r.digest.scored) << name;
    std::set<Key> unique;
    double sumA = 0;
    for (const Candidate& x : r.candidates) {
      unique.insert(key(x));
      sumA += x.A;
    }
    EXPECT_EQ(unique.size(), r.candidates.size()) << name << ": duplicated candidates";
    EXPECT_NEAR(sumA, r.digest.sumA, 1e-6 * std::abs(r.digest.sumA) + 1e-3) << name;
  }
}

TEST(GpuGather, CandidatesBeyondTheLimitAreAnError) {
  REQUIRE_DEVICE();
  const Case& c = ci_case(Encoding::fp32);
  OutputPolicy p;
  p.collect_candidates = true;
  p.candidate_threshold = 0;  // about half of all trials
  p.max_candidates = 1000;
  for (const std::string& name : gpu_gathers) {
    auto engine = make_engine(name);
    try {
      search(*engine, c.stack, c.kit.bank, p);
      ADD_FAILURE() << name << ": no error for an overflowing candidate list";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("max_candidates"), std::string::npos) << e.what();
    }
  }
}

TEST(GpuGather, OneUploadServesTwoBanks) {
  REQUIRE_DEVICE();
  const Case& c = ci_case(Encoding::int8);
  // A second bank on the same stack: a narrower, shifted velocity grid.
  MotionBank other = c.kit.bank;
  other.vx_axis.resize(9);
  for (double& v : other.vy_axis) v *= 0.6;
  const Case second = case_with_bank(c, other, 2);
  for (const std::string& name : gpu_gathers) {
    auto engine = make_engine(name);
    search(*engine, c.stack, c.kit.bank, c.policy);  // uploads (or reuses) the cube
    const auto before = cuda::upload_stats();
    const SearchResult r1 = search(*engine, c.stack, c.kit.bank, c.policy);
    const SearchResult r2 = search(*engine, c.stack, other, second.policy);
    auto other_engine = make_engine(name == "cuda-fast" ? "cuda-serial" : "cuda-fast");
    search(*other_engine, c.stack, other, second.policy);
    const auto after = cuda::upload_stats();
    EXPECT_EQ(after.uploads, before.uploads) << name << ": the cube was uploaded again";
    EXPECT_EQ(after.reuses, before.reuses + 3) << name;
    expect_matches_reference(c, r1, name + " first bank");
    expect_matches_reference(second, r2, name + " second bank");
  }
}

// cuda-fast reuses its variant choice and shift tables while the bank's defining values repeat:
// a bank that differs only in its reference time or its common curve (same velocity axes, so
// the same table sizes) must be planned afresh, and each search must match its own reference.
TEST(GpuGather, FastChoiceFollowsReferenceTimeAndCurve) {
  REQUIRE_DEVICE();
  const Case& c = ci_case(Encoding::fp16);
  auto engine = make_engine("cuda-fast");
  expect_matches_reference(c, search(*engine, c.stack, c.kit.bank, c.policy), "cuda-fast first bank");
  MotionBank later = c.kit.bank;
  later.t_ref += 0.25 * (later.epochs.back() - later.epochs.front());
  MotionBank curved = c.kit.bank;
  curved.curve_x.resize(curved.epochs.size());
  curved.curve_y.resize(curved.epochs.size());
  for (std::size_t e = 0; e < curved.epochs.size(); ++e) {
    curved.curve_x[e] = 3.0 * std::sin(double(e));
    curved.curve_y[e] = -2.0 * std::cos(double(e));
  }
  for (const auto& [bank, what] : {std::pair{later, "later t_ref"}, std::pair{curved, "common curve"}}) {
    const Case changed = case_with_bank(c, bank, 2);
    expect_matches_reference(changed, search(*engine, c.stack, bank, changed.policy), std::string("cuda-fast ") + what);
  }
}

TEST(GpuGather, DeterministicRunToRun) {
  REQUIRE_DEVICE();
  const Case& c = ci_case(Encoding::fp16);
  for (const std::string& name : gpu_gathers) {
    auto engine = make_engine(name);
    const SearchResult a = search(*engine, c.stack, c.kit.bank, c.policy);
    const SearchResult b = search(*engine, c.stack, c.kit.bank, c.policy);
    EXPECT_TRUE(same_digest(a.digest, b.digest)) << name;
    ASSERT_EQ(a.candidates.size(), b.candidates.size()) << name;
    for (std::size_t i = 0; i < a.candidates.size(); ++i) EXPECT_EQ(a.candidates[i].Z, b.candidates[i].Z);
  }
}

TEST(GpuGather, SerialRunsVelocityListsOthersDecline) {
  REQUIRE_DEVICE();
  const Case& c = ci_case(Encoding::fp32);
  MotionBank list = c.kit.bank;
  // Every third grid velocity as an explicit list, in a scrambled order.
  for (std::size_t v = 0; v < c.kit.bank.size(); v += 3) list.velocity_list.push_back(c.kit.bank.velocity(v));
  std::reverse(list.velocity_list.begin(), list.velocity_list.end());
  const Case l = case_with_bank(c, list, 2);
  auto serial = make_engine("cuda-serial");
  expect_matches_reference(l, search(*serial, l.stack, list, l.policy), "cuda-serial velocity list");
  for (const char* name : {"cuda-tiled", "cuda-fast"}) {
    auto engine = make_engine(name);
    const SearchInput probe{&l.stack, &list, resolve({}, l.stack.width, l.stack.height), l.policy};
    EXPECT_NE(engine->unsupported_reason(probe), "") << name;
    EXPECT_THROW(search(*engine, l.stack, list, l.policy), Error) << name;
  }
}

// Fractional shifts: a small stack whose trajectories leave the image on every side and cross
// the kit's masked holes and bad column, with an uneven grid and image size. Every engine x
// encoding against the reference's bilinear trial: digest, candidates and top-k with A, B, Z and
// obs_count trial by trial.
KitOptions fractional_options() {
  KitOptions o = workload("ci");
  o.shift_mode = ShiftMode::fractional;
  o.exposures = 13;
  o.width = 75;
  o.height = 46;
  o.vx_count = 11;
  o.vy_count = 7;
  o.velocity_displacement = 20;  // trajectories run up to 20 px beyond the origin: off every edge
  o.seed = 5;
  o.inject = false;  // too small for the kit's injected track; noise and masks exercise everything
  return o;
}

const Case& fractional_case(Encoding encoding) {
  static std::map<int, Case> cache;
  auto it = cache.find(int(encoding));
  if (it != cache.end()) return it->second;
  Case c;
  c.kit = make_kit(fractional_options());
  c.stack = encode_kit(c.kit, encoding);
  c.policy = policy_for(c.kit.bank, c.stack, 3);
  c.policy.candidate_threshold = 3;  // a few thousand trials compared field by field
  finish_case(c);
  return cache.emplace(int(encoding), std::move(c)).first->second;
}

TEST(GpuGather, FractionalShiftsMatchReferenceNearEdgesAndMasks) {
  REQUIRE_DEVICE();
  for (Encoding enc : all_encodings()) {
    const Case& c = fractional_case(enc);
    ASSERT_FALSE(c.stack.cov_right.empty());
    // The case must exercise partial trajectories: reported trials that miss some exposures.
    int partial = 0;
    for (const Candidate& x : c.reference.top_k)
      if (x.velocity >= 0 && x.obs_count < c.stack.exposures) ++partial;
    EXPECT_GT(partial, 100) << "the fractional case no longer reaches edges or masks";
    for (const std::string& name : gpu_gathers) {
      auto engine = make_engine(name);
      const SearchInput probe{&c.stack, &c.kit.bank, resolve({}, c.stack.width, c.stack.height), c.policy};
      ASSERT_EQ(engine->unsupported_reason(probe), "") << name;
      const SearchResult r = search(*engine, c.stack, c.kit.bank, c.policy);
      expect_matches_reference(c, r, name + " fractional " + to_string(enc));
    }
  }
}

TEST(GpuGather, FractionalShiftsDifferFromIntegerOnes) {
  // Guards the test above against a gather that ignores the mode: the two statistics differ.
  REQUIRE_DEVICE();
  const Case& c = fractional_case(Encoding::fp32);
  MotionBank integer = c.kit.bank;
  integer.mode = ShiftMode::integer;
  for (const std::string& name : gpu_gathers) {
    auto engine = make_engine(name);
    const SearchResult f = search(*engine, c.stack, c.kit.bank, c.policy);
    const SearchResult i = search(*engine, c.stack, integer, c.policy);
    EXPECT_GT(std::abs(f.digest.sumB - i.digest.sumB), 1e-3 * std::abs(i.digest.sumB)) << name;
  }
}

TEST(GpuGather, FractionalShiftsUnderForcedTiling) {
  REQUIRE_DEVICE();
  DefaultsGuard guard;
  KitOptions o = fractional_options();
  o.width = 300;  // three tile columns of 128 at the smallest tile
  o.height = 100;
  o.exposures = 8;
  o.vx_count = 7;
  o.vy_count = 5;
  Case c;
  c.kit = make_kit(o);
  c.stack = encode_kit(c.kit, Encoding::int8);
  c.policy = policy_for(c.kit.bank, c.stack, 2);
  const Region region{3, 5, 290, 90};
  auto reference = make_engine("reference");
  c.reference = search(*reference, c.stack, c.kit.bank, c.policy, region);
  for (const Candidate& x : c.reference.candidates)
    if (std::abs(double(x.Z) - c.reference.digest.z_thr) <= DigestTolerance::fp32().count_band) ++c.near_threshold;
  // Room for about a 128 x 32 tile with its halo (trajectories reach 24 px) and its covariance
  // planes, not for a whole row of tiles: the search must tile.
  const std::size_t upload = c.stack.bytes_per_pair() + 4 * sizeof(float);
  for (const std::string& name : gpu_gathers) {
    // cuda-fast's bilinear kernel keeps weighted planes (20 bytes per pixel) beside the upload.
    const double copies = name == "cuda-fast" ? 1.0 + 20.0 / double(upload) : 1.0;
    const std::size_t budget = std::size_t(copies * (128 + 56) * (32 + 56) * c.stack.exposures * upload);
    auto engine = make_engine(name);
    cuda::set_memory_budget(0);
    const SearchResult whole = search(*engine, c.stack, c.kit.bank, c.policy, region);
    const auto before = cuda::upload_stats();
    cuda::set_memory_budget(budget);
    const SearchResult tiled = search(*engine, c.stack, c.kit.bank, c.policy, region);
    const auto after = cuda::upload_stats();
    EXPECT_EQ(after.tiled_searches, before.tiled_searches + 1) << name;
    EXPECT_GE(after.tiles - before.tiles, 6) << name;
    EXPECT_TRUE(same_digest(whole.digest, tiled.digest))
        << name << "\nwhole: " << describe(whole.digest) << "\ntiled: " << describe(tiled.digest);
    ASSERT_EQ(whole.candidates.size(), tiled.candidates.size()) << name;
    for (std::size_t i = 0; i < whole.candidates.size(); ++i) {
      EXPECT_EQ(key(whole.candidates[i]), key(tiled.candidates[i])) << name;
      EXPECT_EQ(whole.candidates[i].Z, tiled.candidates[i].Z) << name;
      EXPECT_EQ(whole.candidates[i].obs_count, tiled.candidates[i].obs_count) << name;
    }
    expect_matches_reference(c, tiled, name + " fractional tiled region");
  }
}

TEST(GpuGather, FractionalShiftsWithoutCovariancesAreAnError) {
  REQUIRE_DEVICE();
  const Case& c = fractional_case(Encoding::fp16);
  // No covariance planes at all (a likelihood computed without them).
  const EncodedStack bare = encode(compute_likelihood(c.kit.stack, false), Encoding::fp16);
  // One plane missing: the GPU upload must refuse it rather than drop B's antidiagonal terms.
  EncodedStack partial = c.stack;
  partial.cov_antidiag.clear();
  for (const std::string& name : gpu_gathers) {
    auto engine = make_engine(name);
    EXPECT_THROW(search(*engine, bare, c.kit.bank, c.policy), Error) << name;
    try {
      search(*engine, partial, c.kit.bank, c.policy);
      ADD_FAILURE() << name << ": no error for a stack without its antidiagonal covariances";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("cov_antidiag"), std::string::npos) << name << ": " << e.what();
    }
  }
}

TEST(GpuGather, FractionalVelocityListsRunOnSerialOnly) {
  REQUIRE_DEVICE();
  const Case& c = fractional_case(Encoding::fp32);
  MotionBank list = c.kit.bank;
  for (std::size_t v = 0; v < c.kit.bank.size(); v += 2) list.velocity_list.push_back(c.kit.bank.velocity(v));
  std::reverse(list.velocity_list.begin(), list.velocity_list.end());
  const Case l = case_with_bank(c, list, 2, 3.0);
  auto serial = make_engine("cuda-serial");
  expect_matches_reference(l, search(*serial, l.stack, list, l.policy), "cuda-serial fractional velocity list");
  for (const char* name : {"cuda-tiled", "cuda-fast"}) {
    auto engine = make_engine(name);
    const SearchInput probe{&l.stack, &list, resolve({}, l.stack.width, l.stack.height), l.policy};
    EXPECT_NE(engine->unsupported_reason(probe), "") << name;
    EXPECT_THROW(search(*engine, l.stack, list, l.policy), Error) << name;
  }
}

TEST(GpuGather, CudaFastRunsItsOwnBilinearKernelForFractionalShifts) {
  REQUIRE_DEVICE();
  DefaultsGuard guard;
  const Case& c = fractional_case(Encoding::fp16);
  auto engine = make_engine("cuda-fast");
  search(*engine, c.stack, c.kit.bank, c.policy);
  EXPECT_EQ(cuda::last_fast_variant(), cuda::fast_bilinear_variant_names().front());
}

// Every bilinear variant of cuda-fast, and cuda-tiled's kernel by name, on the fractional case.
TEST(GpuGather, EveryFastBilinearVariantMatchesReference) {
  REQUIRE_DEVICE();
  DefaultsGuard guard;
  std::vector<std::string> names = cuda::fast_bilinear_variant_names();
  ASSERT_GE(names.size(), 2u);
  names.push_back(cuda::tiled_bilinear_name());
  for (Encoding enc : all_encodings()) {
    const Case& c = fractional_case(enc);
    for (const std::string& name : names) {
      cuda::set_fast_variant(name);
      auto engine = make_engine("cuda-fast");
      const SearchResult r = search(*engine, c.stack, c.kit.bank, c.policy);
      EXPECT_EQ(cuda::last_fast_variant(), name);
      expect_matches_reference(c, r, "cuda-fast " + name + " fractional " + to_string(enc));
    }
  }
}

// A grid so coarse along vy that a run of the bilinear kernel's packet spans more rows than
// shared memory holds: the automatic choice hands it to cuda-tiled's kernel (smaller packets), a
// forced bilinear variant is an error that says why.
TEST(GpuGather, CoarseFractionalGridFallsBackToTheTiledBilinearKernel) {
  REQUIRE_DEVICE();
  DefaultsGuard guard;
  const Case& base = fractional_case(Encoding::fp32);
  Case c;
  c.kit = base.kit;
  for (double& vy : c.kit.bank.vy_axis) vy *= 60.0;  // neighbouring vy drift ~60 px apart
  c.stack = base.stack;
  c.policy = base.policy;
  finish_case(c);
  const SearchInput probe{&c.stack, &c.kit.bank, resolve({}, c.stack.width, c.stack.height), c.policy};
  EXPECT_NE(cuda::fast_bilinear_problem(probe, ""), "");
  auto engine = make_engine("cuda-fast");
  EXPECT_EQ(engine->unsupported_reason(probe), "");
  const SearchResult r = search(*engine, c.stack, c.kit.bank, c.policy);
  EXPECT_EQ(cuda::last_fast_variant(), cuda::tiled_bilinear_name());
  expect_matches_reference(c, r, "cuda-fast coarse fractional grid");
  cuda::set_fast_variant(cuda::fast_bilinear_variant_names().front());
  try {
    search(*engine, c.stack, c.kit.bank, c.policy);
    ADD_FAILURE() << "a forced bilinear variant ran a window larger than shared memory";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("shared memory"), std::string::npos) << e.what();
  }
}

// Small enough for compute-sanitizer (memcheck, racecheck): one search per engine and encoding
// on a tiny stack with an odd region, top-k and candidates on, checked against the reference.
TEST(GpuGatherSanitizer, TinyStack) {
  REQUIRE_DEVICE();
  KitOptions o = workload("ci");
  o.exposures = 6;
  o.width = 70;
  o.height = 41;
  o.vx_count = 9;
  o.vy_count = 5;
  o.inject = false;  // too small for the kit's injected track; noise alone exercises everything
  const KitStack kit = make_kit(o);
  for (Encoding enc : all_encodings()) {
    Case c;
    c.kit = kit;
    c.stack = encode_kit(kit, enc);
    c.policy = policy_for(kit.bank, c.stack, 2);
    c.policy.candidate_threshold = 3;  // noise alone: a few hundred candidates
    finish_case(c);
    ASSERT_FALSE(c.reference.candidates.empty());
    for (const std::string& name : gpu_gathers) {
      auto engine = make_engine(name);
      expect_matches_reference(c, search(*engine, c.stack, kit.bank, c.policy), name + " tiny " + to_string(enc));
    }
  }
}

// The fractional kernels under compute-sanitizer: every engine and encoding on a tiny fractional
// stack (trajectories off every edge, masks), checked against the reference.
TEST(GpuGatherSanitizer, TinyFractionalStack) {
  REQUIRE_DEVICE();
  KitOptions o = fractional_options();
  o.exposures = 5;
  o.width = 41;
  o.height = 23;
  o.vx_count = 5;
  o.vy_count = 4;
  o.velocity_displacement = 12;
  const KitStack kit = make_kit(o);
  for (Encoding enc : all_encodings()) {
    Case c;
    c.kit = kit;
    c.stack = encode_kit(kit, enc);
    c.policy = policy_for(kit.bank, c.stack, 2);
    c.policy.candidate_threshold = 2;
    finish_case(c);
    ASSERT_FALSE(c.reference.candidates.empty());
    for (const std::string& name : gpu_gathers) {
      auto engine = make_engine(name);
      expect_matches_reference(c, search(*engine, c.stack, kit.bank, c.policy),
                               name + " tiny fractional " + to_string(enc));
    }
  }
}
