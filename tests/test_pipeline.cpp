// Post-processing: every function checked against an independent computation (a full sort,
// a brute-force O(N^2) linking, the reference engine's sums, hand-computed coadds, the kit's
// injected truth).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <random>

#include "shiftstack/encoding.hpp"
#include "shiftstack/error.hpp"
#include "shiftstack/likelihood.hpp"
#include "shiftstack/pipeline.hpp"
#include "shiftstack/search.hpp"
#include "shiftstack/synth.hpp"

namespace shiftstack {
namespace {

// numpy's default percentile from a full sort: the definition the selection must reproduce.
double sorted_percentile(std::vector<double> v, double percent) {
  std::sort(v.begin(), v.end());
  const double position = percent / 100 * double(v.size() - 1);
  const std::size_t lo = std::size_t(std::floor(position));
  const std::size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (position - double(lo)) * (v[hi] - v[lo]);
}

TEST(Percentile, MatchesAFullSort) {
  std::mt19937_64 rng(7);
  std::normal_distribution<double> normal;
  for (std::size_t n : {1u, 2u, 3u, 4u, 7u, 32u, 100u, 1001u}) {
    std::vector<double> values(n);
    for (double& v : values) v = normal(rng);
    for (double p : {0.0, 10.0, 25.0, 33.3, 50.0, 75.0, 99.0, 100.0}) {
      std::vector<double> scratch = values;
      EXPECT_DOUBLE_EQ(percentile(scratch, p), sorted_percentile(values, p)) << "n=" << n << " p=" << p;
    }
  }
}

TEST(Percentile, HandlesTiesAndRejectsEmpty) {
  std::vector<double> ties = {3, 1, 3, 3, 2, 3};
  EXPECT_DOUBLE_EQ(percentile(ties, 50), 3.0);
  std::vector<double> empty;
  EXPECT_THROW(percentile(empty, 50), Error);
}

TEST(SigmaG, CoefficientIsTheGaussianInterquartileFactor) {
  // 1 / (Phi^-1(0.75) - Phi^-1(0.25)) = 1 / (2 x 0.6744897501960817).
  EXPECT_NEAR(sigma_g_coefficient(25, 75), 1.0 / (2 * 0.6744897501960817), 1e-12);
  EXPECT_THROW(sigma_g_coefficient(75, 25), Error);
  EXPECT_THROW(sigma_g_coefficient(0, 75), Error);
}

TEST(SigmaG, ClipsAnOutlierAndKeepsTheRest) {
  std::vector<double> lh = {1.0, 1.2, 0.8, 1.1, 0.9, 1.05, 0.95, 50.0, NAN, 1.0};
  std::vector<double> scratch;
  const auto keep = sigma_g_clip(lh, SigmaGOptions{}, scratch);
  for (std::size_t e = 0; e < lh.size(); ++e) {
    if (e == 7 || e == 8) {
      EXPECT_EQ(keep[e], 0) << e;  // the outlier and the missing epoch
    } else {
      EXPECT_EQ(keep[e], 1) << e;
    }
  }
}

TEST(SigmaG, AgreesWithASortBasedImplementation) {
  std::mt19937_64 rng(11);
  std::normal_distribution<double> normal;
  std::uniform_real_distribution<double> unit;
  for (bool clip_negative : {false, true})
    for (int trial = 0; trial < 200; ++trial) {
      const int n = 3 + int(unit(rng) * 120);
      std::vector<double> lh(n);
      for (double& v : lh) v = unit(rng) < 0.1 ? NAN : (unit(rng) < 0.05 ? 20 * normal(rng) : normal(rng) + 0.5);
      SigmaGOptions o;
      o.clip_negative = clip_negative;
      std::vector<double> scratch;
      const auto keep = sigma_g_clip(lh, o, scratch);
      std::vector<double> finite;
      for (double v : lh)
        if (std::isfinite(v) && (!clip_negative || v > 0)) finite.push_back(v);
      if (finite.empty()) {
        for (auto k : keep) EXPECT_EQ(k, 0);
        continue;
      }
      const double lo = sorted_percentile(finite, 25), med = sorted_percentile(finite, 50),
                   hi = sorted_percentile(finite, 75);
      const double band = 2 * sigma_g_coefficient(25, 75) * std::max(hi - lo, 1e-5);
      for (int e = 0; e < n; ++e) {
        const bool expected = std::isfinite(lh[e]) && lh[e] > med - band && lh[e] < med + band;
        ASSERT_EQ(bool(keep[e]), expected) << "trial " << trial << " epoch " << e;
      }
    }
}

// ---- light curves against the reference engine -----------------------------------------------

KitOptions small_kit(ShiftMode mode) {
  KitOptions o = workload("ci");
  o.exposures = 12;
  o.width = 40;
  o.height = 36;
  o.vx_count = 5;
  o.vy_count = 4;
  o.velocity_displacement = 6;
  o.curve_amplitude = 1.5;
  o.shift_mode = mode;
  o.seed = 5;
  return o;
}

// Every trial above `threshold` listed by `engine` on the fp32 encoding of the maps.
SearchResult candidates_above(const LikelihoodStack& likelihood, const MotionBank& bank, const std::string& engine,
                              double threshold) {
  auto searcher = make_engine(engine);
  OutputPolicy policy;
  policy.collect_candidates = true;
  policy.candidate_threshold = threshold;
  return search(*searcher, encode(likelihood, Encoding::fp32), bank, policy);
}

void expect_curves_sum_to_engine(ShiftMode mode) {
  const KitStack kit = make_kit(small_kit(mode));
  const LikelihoodStack likelihood = compute_likelihood(kit.stack, mode == ShiftMode::fractional);
  const EncodedStack encoded = encode(likelihood, Encoding::fp32);
  auto engine = make_engine("reference");
  OutputPolicy policy;
  policy.collect_candidates = true;
  policy.candidate_threshold = -1e300;
  const SearchResult result = search(*engine, encoded, kit.bank, policy);
  ASSERT_GT(result.candidates.size(), 1000u);
  for (std::size_t i = 0; i < result.candidates.size(); i += 7) {
    const Candidate& c = result.candidates[i];
    const LightCurve curve = light_curve(likelihood, kit.bank, c.x, c.y, std::size_t(c.velocity));
    double A = 0, B = 0;
    int obs = 0;
    for (int e = 0; e < curve.size(); ++e) {
      A += curve.psi[e];
      B += curve.phi[e];
      obs += curve.valid[e];
    }
    ASSERT_NEAR(A, c.A, 1e-5 * (std::abs(c.A) + std::sqrt(c.B))) << "candidate " << i;
    ASSERT_NEAR(B, c.B, 1e-5 * c.B) << "candidate " << i;
    ASSERT_EQ(obs, c.obs_count) << "candidate " << i;
  }
}

TEST(LightCurve, SumsToTheReferenceEngineIntegerMode) { expect_curves_sum_to_engine(ShiftMode::integer); }
TEST(LightCurve, SumsToTheReferenceEngineFractionalMode) { expect_curves_sum_to_engine(ShiftMode::fractional); }

TEST(Filter, WithoutClippingTheLikelihoodIsTheSearchScore) {
  const KitStack kit = make_kit(small_kit(ShiftMode::integer));
  const LikelihoodStack likelihood = compute_likelihood(kit.stack);
  const SearchResult result = candidates_above(likelihood, kit.bank, "reference", 1.0);
  FilterOptions o;
  o.sigma_g = false;
  o.num_obs = 0;
  o.lh_level = 1.0;
  FilterStats stats;
  const auto kept = filter_candidates(result.candidates, likelihood, kit.bank, o, &stats);
  EXPECT_EQ(stats.input, std::int64_t(result.candidates.size()));
  ASSERT_EQ(kept.size(), result.candidates.size() - std::size_t(stats.below_likelihood));
  // Candidates just above 1.0 may fall just below after float rounding, nothing else.
  EXPECT_LE(stats.below_likelihood, 2);
  for (const auto& d : kept) {
    EXPECT_NEAR(d.likelihood, d.candidate.Z, 1e-4);
    EXPECT_NEAR(d.flux, d.candidate.flux, 1e-4 * std::abs(d.candidate.flux) + 1e-6);
    EXPECT_EQ(d.obs_count, d.candidate.obs_count);
  }
  // A minimum observation count above every candidate's rejects them all.
  o.num_obs = kit.stack.size();
  o.lh_level = -1e300;
  FilterStats strict;
  const auto none = filter_candidates(result.candidates, likelihood, kit.bank, o, &strict);
  for (const auto& d : none) EXPECT_EQ(d.obs_count, kit.stack.size());
  EXPECT_EQ(strict.kept + strict.too_few_observations, strict.input);
}

TEST(Filter, SuppliedLightCurvesGiveTheSameDetections) {
  const KitStack kit = make_kit(small_kit(ShiftMode::integer));
  const LikelihoodStack likelihood = compute_likelihood(kit.stack);
  const SearchResult result = candidates_above(likelihood, kit.bank, "reference", 1.0);
  ASSERT_GT(result.candidates.size(), 20u);
  FilterOptions o;
  o.lh_level = 2.0;  // some pass, some fail after clipping
  FilterStats direct_stats, supplied_stats;
  const auto direct = filter_candidates(result.candidates, likelihood, kit.bank, o, &direct_stats);
  std::vector<LightCurve> curves;
  for (const Candidate& c : result.candidates)
    curves.push_back(light_curve(likelihood, kit.bank, c.x, c.y, std::size_t(c.velocity)));
  const auto supplied = filter_candidates(result.candidates, curves, kit.stack.size(), o, &supplied_stats);
  EXPECT_GT(direct_stats.kept, 0);
  EXPECT_GT(direct_stats.below_likelihood, 0);
  EXPECT_EQ(supplied_stats.kept, direct_stats.kept);
  EXPECT_EQ(supplied_stats.below_likelihood, direct_stats.below_likelihood);
  EXPECT_EQ(supplied_stats.too_few_observations, direct_stats.too_few_observations);
  ASSERT_EQ(supplied.size(), direct.size());
  for (std::size_t i = 0; i < direct.size(); ++i) {
    EXPECT_EQ(supplied[i].candidate.x, direct[i].candidate.x);
    EXPECT_EQ(supplied[i].candidate.velocity, direct[i].candidate.velocity);
    EXPECT_EQ(supplied[i].likelihood, direct[i].likelihood);
    EXPECT_EQ(supplied[i].obs_valid, direct[i].obs_valid);
  }
  // One curve short, or a curve of the wrong length: an error, not a silent mismatch.
  curves.pop_back();
  EXPECT_THROW(filter_candidates(result.candidates, curves, kit.stack.size(), o), Error);
  curves.push_back(LightCurve{});
  EXPECT_THROW(filter_candidates(result.candidates, curves, kit.stack.size(), o), Error);
}

// ---- friends of friends against brute force ---------------------------------------------

std::vector<int> brute_force_labels(const std::vector<std::array<double, 4>>& points, int dims, double eps) {
  const int n = int(points.size());
  std::vector<int> parent(n);
  std::iota(parent.begin(), parent.end(), 0);
  std::function<int(int)> find = [&](int i) { return parent[i] == i ? i : parent[i] = find(parent[i]); };
  for (int i = 0; i < n; ++i)
    for (int j = i + 1; j < n; ++j) {
      double d2 = 0;
      for (int d = 0; d < dims; ++d) d2 += (points[i][d] - points[j][d]) * (points[i][d] - points[j][d]);
      if (d2 <= eps * eps) parent[find(i)] = find(j);
    }
  std::vector<int> labels(n), label_of(n, -1);
  int next = 0;
  for (int i = 0; i < n; ++i) {
    const int r = find(i);
    if (label_of[r] < 0) label_of[r] = next++;
    labels[i] = label_of[r];
  }
  return labels;
}

TEST(FriendsOfFriends, MatchesBruteForceLinking) {
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> coordinate(-30, 30);
  for (int dims : {2, 4})
    for (double eps : {0.7, 2.0, 5.0})
      for (int n : {0, 1, 50, 400}) {
        std::vector<std::array<double, 4>> points(n);
        for (auto& p : points)
          for (int d = 0; d < 4; ++d) p[d] = d < dims ? coordinate(rng) : 0.0;
        EXPECT_EQ(friends_of_friends(points, dims, eps), brute_force_labels(points, dims, eps))
            << "dims=" << dims << " eps=" << eps << " n=" << n;
      }
}

TEST(FriendsOfFriends, LinksChainsTransitively) {
  // 0-1-2 chain with steps below eps; 3 far away.
  const std::vector<std::array<double, 4>> points = {{0, 0, 0, 0}, {0.9, 0, 0, 0}, {1.8, 0, 0, 0}, {10, 0, 0, 0}};
  EXPECT_EQ(friends_of_friends(points, 2, 1.0), (std::vector<int>{0, 0, 0, 1}));
  EXPECT_THROW(friends_of_friends(points, 3, 1.0), Error);
  EXPECT_THROW(friends_of_friends(points, 2, 0.0), Error);
}

TEST(Clustering, KeepsTheBestMemberOfEachSource) {
  MotionBank bank;
  bank.epochs = {0, 1, 2, 3};
  bank.t_ref = 1.5;
  bank.vx_axis = {-1, 0, 1};
  bank.vy_axis = {-1, 0, 1};
  std::vector<Detection> detections;
  auto add = [&](int x, int y, int v, double lh) {
    Detection d;
    d.candidate.x = x;
    d.candidate.y = y;
    d.candidate.velocity = v;
    d.likelihood = lh;
    detections.push_back(d);
  };
  add(10, 10, 4, 9.0);  // source A and its neighbours
  add(11, 10, 4, 8.0);
  add(10, 11, 4, 8.5);
  add(40, 40, 4, 7.5);  // source B alone
  add(12, 10, 4, 12.0);  // A's best member, linked through (11, 10)
  ClusterOptions o;
  o.space = ClusterSpace::all;
  o.eps = 1.5;
  o.v_scale = -1;
  const auto out = cluster_detections(detections, bank, o);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].candidate.x, 12);
  EXPECT_EQ(out[0].cluster_size, 4);
  EXPECT_EQ(out[1].candidate.x, 40);
  EXPECT_EQ(out[1].cluster_size, 1);
  EXPECT_EQ(parse_cluster_space("start_end_position"), ClusterSpace::start_end_position);
  EXPECT_THROW(parse_cluster_space("nearest"), Error);
}

// ---- stamps against hand-computed coadds ------------------------------------------------

TEST(Stamps, CoaddsMatchHandComputedValues) {
  // Three 9x9 exposures with constant science (1, 2, 6) and variance (1, 4, 4), a static
  // trajectory at (4, 4); exposure 1 masks pixel (4, 4).
  ExposureStack stack;
  const float science[3] = {1, 2, 6}, variance[3] = {1, 4, 4};
  for (int e = 0; e < 3; ++e) {
    Exposure x;
    x.science = Image<float>(9, 9, science[e]);
    x.variance = Image<float>(9, 9, variance[e]);
    x.mask = Image<std::uint8_t>(9, 9, 0);
    x.psf = gaussian_psf(1.0);
    x.epoch = e;
    stack.exposures.push_back(x);
  }
  stack.exposures[1].mask(4, 4) = 1;
  MotionBank bank;
  bank.epochs = {0, 1, 2};
  bank.t_ref = 1;
  bank.vx_axis = {0};
  bank.vy_axis = {0};
  Candidate c;
  c.x = 4;
  c.y = 4;
  c.velocity = 0;
  const std::vector<CoaddType> types = {CoaddType::sum, CoaddType::mean, CoaddType::median, CoaddType::weighted};
  const auto stamps = coadd_stamps(stack, bank, c, {}, 5, types);  // radius 5 reaches outside
  ASSERT_EQ(stamps.size(), 4u);
  const int r = 5;
  // An ordinary pixel: all three exposures.
  EXPECT_FLOAT_EQ(stamps[0](r + 1, r), 9.0f);
  EXPECT_FLOAT_EQ(stamps[1](r + 1, r), 3.0f);
  EXPECT_FLOAT_EQ(stamps[2](r + 1, r), 2.0f);
  EXPECT_FLOAT_EQ(stamps[3](r + 1, r), float((1.0 / 1 + 2.0 / 4 + 6.0 / 4) / (1.0 + 0.25 + 0.25)));
  // The centre: exposure 1 masked.
  EXPECT_FLOAT_EQ(stamps[0](r, r), 7.0f);
  EXPECT_FLOAT_EQ(stamps[1](r, r), 3.5f);
  EXPECT_FLOAT_EQ(stamps[2](r, r), 3.5f);  // median of two values: their mean
  EXPECT_FLOAT_EQ(stamps[3](r, r), float((1.0 + 6.0 / 4) / 1.25));
  // Outside the image: no data.
  EXPECT_FLOAT_EQ(stamps[0](0, r), 0.0f);
  EXPECT_TRUE(std::isnan(stamps[1](0, r)));
  EXPECT_TRUE(std::isnan(stamps[2](0, r)));
  EXPECT_TRUE(std::isnan(stamps[3](0, r)));
  // obs_valid selects exposures: only exposure 2.
  const auto only_last = coadd_stamps(stack, bank, c, {0, 0, 1}, 1, {CoaddType::mean});
  EXPECT_FLOAT_EQ(only_last[0](1, 1), 6.0f);
  EXPECT_THROW(parse_coadd_type("max"), Error);
}

// ---- the whole chain on the kit -------------------------------------------------------------

TEST(Pipeline, InjectedSourceBecomesOneCandidate) {
  KitOptions o = workload("ci");
  o.seed = 21;
  const KitStack kit = make_kit(o);
  ASSERT_TRUE(kit.truth.injected);
  const LikelihoodStack likelihood = compute_likelihood(kit.stack);
  // 5: low enough that the source has many neighbouring crossings.
  const SearchResult result = candidates_above(likelihood, kit.bank, best_available_engine(), 5.0);
  ASSERT_GT(result.candidates.size(), 5u) << "the test needs duplicates to merge";
  FilterOptions f;
  f.lh_level = 5.0;
  const auto filtered = filter_candidates(result.candidates, likelihood, kit.bank, f);
  ClusterOptions c;  // peaks, at the filter's threshold
  c.lh_level = f.lh_level;
  const auto clusters = cluster_detections(filtered, kit.bank, c);
  // Noise alone crosses Z = 5 about M * Phi_bar(5) = 128*128*289 * 2.9e-7 = 1.4 times: allow a
  // stray but require the source to be one candidate, the best, at the truth.
  ASSERT_GE(clusters.size(), 1u);
  const Detection& best = clusters.front();
  EXPECT_LE(std::abs(best.candidate.x - kit.truth.x), 1);
  EXPECT_LE(std::abs(best.candidate.y - kit.truth.y), 1);
  const Velocity v = kit.bank.velocity(std::size_t(best.candidate.velocity));
  EXPECT_LE(std::abs(v.vx - kit.truth.vx), 1.01 * (kit.bank.vx_axis[1] - kit.bank.vx_axis[0]));
  EXPECT_LE(std::abs(v.vy - kit.truth.vy), 1.01 * (kit.bank.vy_axis[1] - kit.bank.vy_axis[0]));
  EXPECT_GT(best.cluster_size, 5);
  int near_truth = 0;
  for (const auto& d : clusters)
    near_truth += std::abs(d.candidate.x - kit.truth.x) <= 20 && std::abs(d.candidate.y - kit.truth.y) <= 20;
  EXPECT_EQ(near_truth, 1);
  EXPECT_LE(clusters.size(), 3u);
}

}  // namespace
}  // namespace shiftstack

// The search stage fetches a GPU-encoded cube to the host for every engine but those that read
// it where it lies: the CUDA gathers (through run_gather) and the tree engines. Every other engine,
// CPU or Fourier route, must say it reads the host payload, or it would search an empty copy.
TEST(EngineRegistry, OnlyTheGathersAndTheTreeEnginesReadTheDeviceCube) {
  const std::vector<std::string> readers = {"cuda-serial", "cuda-tiled",     "cuda-fast",           "cuda-tree",
                                            "cuda-tree-screen", "cuda-tree-bf16", "cuda-tree-bf16-screen"};
  int found = 0;
  for (const shiftstack::EngineInfo& e : shiftstack::engines()) {
    const bool reader = std::find(readers.begin(), readers.end(), e.name) != readers.end();
    EXPECT_EQ(e.reads_device_cube, reader) << e.name;
    found += reader;
  }
#ifdef SHIFTSTACK_HAVE_CUDA
  EXPECT_EQ(found, int(readers.size())) << "every reader is registered in a CUDA build";
#else
  EXPECT_EQ(found, 0);
#endif
}
