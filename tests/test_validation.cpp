// Sensitivity validation (SPEC 7), small-n versions with fixed seeds: every tolerance is derived
// from the number of pairs or cubes, or from an analytic value.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numbers>

#include "../src/validation/validation_internal.hpp"
#include "shiftstack/digest.hpp"
#include "shiftstack/error.hpp"
#include "shiftstack/likelihood.hpp"
#include "shiftstack/svg_plot.hpp"
#include "shiftstack/validation.hpp"

using namespace shiftstack;

namespace {

// A small masked, variable-seeing cube that still fits an injected trajectory.
KitOptions small_cube() {
  KitOptions o = workload("ci");
  o.name = "test";
  o.exposures = 8;
  o.width = 48, o.height = 48;
  o.vx_count = 5, o.vy_count = 5;
  o.velocity_displacement = 4;
  o.curve_amplitude = 1.3;
  return o;
}

ValidationOptions small_options(int pairs) {
  ValidationOptions o;
  o.kit = small_cube();
  o.pairs = pairs;
  o.seed = 101;
  o.bootstrap_resamples = 500;
  o.completeness_snr = {2, 8};
  o.matched_z = 3.5;
  return o;
}

// Per-pair standard deviation of d = Z_inj - Z_null from psi rounding alone: the rounding noise
// of the two cubes is independent, each with variance step^2 / 12 in units of Z.
double int8_d_noise() { return std::sqrt(2 * int8_codes::psi_step_sigmas * int8_codes::psi_step_sigmas / 12); }

}  // namespace

TEST(ValidationStatistics, PoissonAndWilsonKnownValues) {
  // P(X = 0) = e^-3 for Poisson(3); two-sided doubles the smaller tail.
  EXPECT_NEAR(poisson_two_sided_p(0, 3.0), 2 * std::exp(-3.0), 1e-12);
  // P(X >= 10 | 3) = 1 - sum_{k<10} e^-3 3^k / k!
  double below = 0, term = std::exp(-3.0);
  for (int k = 0; k < 10; ++k, term *= 3.0 / k) below += term;
  EXPECT_NEAR(poisson_two_sided_p(10, 3.0), 2 * (1 - below), 1e-12);
  EXPECT_DOUBLE_EQ(poisson_two_sided_p(3, 3.0), 1.0);
  // Wilson 95% for 0 of 10: upper bound z^2 / (n + z^2).
  const double z2 = 1.959963984540054 * 1.959963984540054;
  const Interval w = wilson_interval(0, 10);
  EXPECT_DOUBLE_EQ(w.low, 0.0);
  EXPECT_NEAR(w.high, z2 / (10 + z2), 1e-12);
  EXPECT_THROW(wilson_interval(3, 2), Error);
}

// The near-mask flags against a direct search for masked pixels around every sample.
TEST(ValidationNearMasks, FlagsMatchBruteForce) {
  KitOptions k = small_cube();
  k.width = k.height = 36;
  k.inject = false;
  k.seed = 5;
  const KitStack kit = make_kit(k);
  const double fwhm = 1.0;
  const auto flags = validation_detail::near_mask_flags(kit.stack, kit.bank, fwhm);
  const int W = k.width, H = k.height;
  std::int64_t near = 0;
  for (std::size_t v = 0; v < kit.bank.size(); ++v)
    for (int y = 0; y < H; ++y)
      for (int x = 0; x < W; ++x) {
        bool expected = false;
        for (int e = 0; e < kit.stack.size() && !expected; ++e) {
          const double r = fwhm * validation_detail::kFwhmPerSigma *
                           validation_detail::psf_sigma(kit.stack.exposures[e].psf);
          const int px = x + round_shift(kit.bank.shift_x(v, e)), py = y + round_shift(kit.bank.shift_y(v, e));
          const int reach = int(r) + 1;
          for (int dy = -reach; dy <= reach && !expected; ++dy)
            for (int dx = -reach; dx <= reach && !expected; ++dx) {
              if (dx * dx + dy * dy > r * r) continue;
              const int qx = px + dx, qy = py + dy;
              expected = qx < 0 || qy < 0 || qx >= W || qy >= H || kit.stack.exposures[e].mask(qx, qy);
            }
        }
        ASSERT_EQ(flags[(v * H + y) * W + x] != 0, expected) << "trial x=" << x << " y=" << y << " v=" << v;
        near += expected;
      }
  // Both classes occur, so the check covered both branches.
  EXPECT_GT(near, 0);
  EXPECT_LT(near, std::int64_t(kit.bank.size()) * W * H);
  // A region's flags are the same trials' flags, indexed within the region.
  const Region region{5, 9, 17, 11};
  const auto sub = validation_detail::near_mask_flags(kit.stack, kit.bank, fwhm, region);
  ASSERT_EQ(sub.size(), kit.bank.size() * region.width * region.height);
  for (std::size_t v = 0; v < kit.bank.size(); ++v)
    for (int j = 0; j < region.height; ++j)
      for (int i = 0; i < region.width; ++i)
        ASSERT_EQ(sub[(v * region.height + j) * region.width + i],
                  flags[(v * H + region.y0 + j) * W + region.x0 + i]);
}

// The PSF width estimate recovers the kit's Gaussian sigma (pixel sampling adds ~1/12 px^2).
TEST(ValidationNearMasks, PsfSigmaOfGaussian) {
  for (double sigma : {1.0, 1.65})
    EXPECT_NEAR(validation_detail::psf_sigma(gaussian_psf(sigma)), sigma, 0.01 * sigma);
}

// The baseline against itself: the same numbers on both sides, so retention is exactly 1.
TEST(Validation, ReferenceAgainstItselfIsExactlyOne) {
  const ValidationReport r = run_validation(small_options(4));
  EXPECT_TRUE(r.same_as_baseline);
  EXPECT_EQ(r.retention, 1.0);
  EXPECT_EQ(r.retention_interval.low, 1.0);
  EXPECT_EQ(r.retention_interval.high, 1.0);
  // Integer shifts with fp32 storage: Z_inj - Z_null is the noiseless source's SNR, 8 (SPEC 3).
  for (std::size_t j = 0; j < r.method.z_null_truth.size(); ++j)
    EXPECT_NEAR(r.method.z_inj_truth[j] - r.method.z_null_truth[j], 8.0, 1e-4) << "pair " << j;
  // The completeness threshold of the baseline is the stated z itself.
  EXPECT_EQ(r.method.matched_threshold, 3.5);
}

// Reduced storage on the same cubes: fp16 loses nothing measurable, int8 about 1 - eta; each
// interval covers its point estimate; tolerances follow the per-pair noise of d and n.
TEST(Validation, ReducedPrecisionRetention) {
  const int pairs = 8;
  std::vector<std::string> skipped;
  const auto reports = run_validation_set(small_options(pairs), {{"reference", Encoding::fp16},
                                                                  {"reference", Encoding::int8},
                                                                  {"cpu", Encoding::fp32}}, &skipped);
  ASSERT_EQ(reports.size(), 3u);
  EXPECT_TRUE(skipped.empty());
  for (const auto& r : reports) {
    EXPECT_LE(r.retention_interval.low, r.retention) << to_string(r.options.encoding);
    EXPECT_GE(r.retention_interval.high, r.retention) << to_string(r.options.encoding);
    EXPECT_FALSE(r.same_as_baseline);
  }
  const ValidationReport& fp16 = reports[0];
  EXPECT_NEAR(fp16.retention, 1.0, 1e-3);
  EXPECT_GE(fp16.retention_interval.high, 0.999);
  const ValidationReport& int8 = reports[1];
  const double eta = 1 / std::sqrt(1 + int8_codes::psi_step_sigmas * int8_codes::psi_step_sigmas / 12);
  // 4 standard errors of mean(d) / 8 over n pairs, plus the small variance terms.
  EXPECT_NEAR(int8.retention, eta, 4 * int8_d_noise() / 8 / std::sqrt(double(pairs)) + 1e-3);
  // The fast engine with fp32 storage computes the same statistic as the reference.
  const ValidationReport& cpu = reports[2];
  EXPECT_NEAR(cpu.retention, 1.0, 1e-5);
  EXPECT_NEAR(cpu.method.all.variance, cpu.baseline.all.variance, 1e-5);
}

// Null calibration: Var(Z) within 4 jackknife standard errors of 1, near masks and away, and
// the errors small enough for the check to mean something.
TEST(Validation, NullVarianceNearAndAwayFromMasks) {
  ValidationOptions o = small_options(24);
  o.completeness_snr = {8};
  const ValidationReport r = run_validation(o);
  for (const NullClass* c : {&r.method.near, &r.method.away}) {
    const char* name = c == &r.method.near ? "near masks" : "away from masks";
    ASSERT_GT(c->trials, 10000) << name;
    EXPECT_NEAR(c->variance, 1.0, 4 * c->variance_se) << name << " (se " << c->variance_se << ")";
    EXPECT_LT(c->variance_se, 0.03) << name;
    EXPECT_NEAR(c->mean_z, 0.0, 4 * c->mean_se) << name << " (se " << c->mean_se << ")";
  }
  EXPECT_EQ(r.method.near.trials + r.method.away.trials, r.method.all.trials);
}

// Excursion counts against Poisson(trials * Phi_bar(z)): with one velocity and a very sharp PSF
// the trials are independent, so a correct count fails the p > 1e-3 check with probability
// below 0.1% per threshold (fixed seeds: the outcome is deterministic).
TEST(Validation, ExcursionCountsArePoissonForIndependentTrials) {
  ValidationOptions o = small_options(6);
  o.kit.width = o.kit.height = 64;
  o.kit.vx_count = o.kit.vy_count = 1;
  o.kit.psf_sigma_min = o.kit.psf_sigma_max = 0.3;
  o.excursion_z = {2.0, 2.5, 3.0};
  o.completeness_snr = {8};
  const ValidationReport r = run_validation(o);
  for (const auto& x : r.method.all.excursions) {
    if (x.label == "bonferroni") continue;
    EXPECT_GT(x.expected, 10) << "z " << x.z;
    EXPECT_GT(x.poisson_p, 1e-3) << "z " << x.z << ": observed " << x.observed << ", expected " << x.expected;
    EXPECT_NEAR(x.expected, double(r.method.all.trials) * normal_upper_tail(x.z), 1e-9 * x.expected);
  }
}

TEST(Validation, NullWindowLimitsTheBank) {
  ValidationOptions o = small_options(3);
  o.null_window = 16;
  o.completeness_snr = {8};
  const ValidationReport r = run_validation(o);
  const std::int64_t per_cube = 16 * 16 * 25;
  EXPECT_EQ(r.null_trials_per_cube, per_cube);
  EXPECT_LE(r.method.all.trials, 3 * per_cube);
  EXPECT_GT(r.method.all.trials, 3 * per_cube / 2);  // most window trials have B > 0
}

TEST(Validation, BadOptionsAreErrors) {
  ValidationOptions o = small_options(1);
  EXPECT_THROW(run_validation(o), Error);  // a bootstrap needs two pairs
  o = small_options(2);
  o.engine = "no-such-engine";
  EXPECT_THROW(run_validation(o), Error);
  o = small_options(2);
  o.null_window = -1;
  EXPECT_THROW(run_validation(o), Error);
  o = small_options(2);
  o.completeness_snr = {std::nan("")};
  EXPECT_THROW(run_validation(o), Error);
}

// Reports are functions of the per-pair records alone: records of adjoining pair ranges, written
// to JSON and read back, merge into exactly the numbers of one run over all pairs.
TEST(ValidationRecords, SplitRunsMergeIntoTheWholeRun) {
  const std::vector<MethodSpec> methods = {{"cpu", Encoding::int8}, {"reference", Encoding::fp32}};
  ValidationOptions whole = small_options(5);
  whole.null_window = 20;
  const ValidationRecords all = collect_validation_records(whole, methods);
  ValidationOptions head = whole, tail = whole;
  head.pairs = 2;
  tail.first_pair = 2, tail.pairs = 3;
  const Provenance p{"test card", "abc", "2026-01-01T00:00:00Z", "test"};
  const ValidationRecords a = records_from_json(to_json(collect_validation_records(head, methods), {}, p));
  const ValidationRecords b = records_from_json(to_json(collect_validation_records(tail, methods), {}, p));
  const ValidationRecords merged = merge_validation_records({b, a});  // any order
  EXPECT_EQ(merged.options.first_pair, 0);
  EXPECT_EQ(merged.options.pairs, 5);
  const auto expected = validation_reports(all), got = validation_reports(merged);
  ASSERT_EQ(expected.size(), got.size());
  for (std::size_t m = 0; m < got.size(); ++m) {
    const std::string name = got[m].options.engine + " " + to_string(got[m].options.encoding);
    EXPECT_EQ(got[m].retention, expected[m].retention) << name;
    EXPECT_EQ(got[m].retention_interval.low, expected[m].retention_interval.low) << name;
    EXPECT_EQ(got[m].retention_interval.high, expected[m].retention_interval.high) << name;
    EXPECT_EQ(got[m].method.z_inj_truth, expected[m].method.z_inj_truth) << name;
    EXPECT_EQ(got[m].method.near.variance, expected[m].method.near.variance) << name;
    EXPECT_EQ(got[m].method.away.variance_se, expected[m].method.away.variance_se) << name;
    EXPECT_EQ(got[m].method.all.excursions.back().observed, expected[m].method.all.excursions.back().observed);
    EXPECT_EQ(got[m].method.matched_threshold, expected[m].method.matched_threshold) << name;
    ASSERT_EQ(got[m].method.completeness.size(), 2u);
    EXPECT_EQ(got[m].method.completeness[0].detected, expected[m].method.completeness[0].detected) << name;
    EXPECT_EQ(got[m].null_trials_per_cube, expected[m].null_trials_per_cube) << name;
  }
  // Overlapping or gapped ranges, and other set-ups, are refused.
  EXPECT_THROW(merge_validation_records({a, a}), Error);
  ValidationRecords gap = b;
  gap.options.first_pair = 3;
  EXPECT_THROW(merge_validation_records({a, gap}), Error);
  ValidationRecords other = b;
  other.options.kit.bad_column = false;
  EXPECT_THROW(merge_validation_records({a, other}), Error);
  EXPECT_THROW(records_from_json("{\"kind\": \"something else\"}"), Error);
}

// Searching one cube with every method at once, while the next pair is made, changes nothing.
TEST(ValidationRecords, ConcurrentEqualsSequential) {
  ValidationOptions o = small_options(3);
  o.null_window = 16;
  const std::vector<MethodSpec> methods = {{"cpu", Encoding::fp32}, {"cpu", Encoding::fp16}, {"reference", Encoding::int8}};
  o.concurrent = true;
  const ValidationRecords c = collect_validation_records(o, methods);
  o.concurrent = false;
  const ValidationRecords s = collect_validation_records(o, methods);
  ASSERT_EQ(c.observations.size(), s.observations.size());
  for (std::size_t r = 0; r < c.observations.size(); ++r)
    for (std::size_t j = 0; j < c.observations[r].size(); ++j) {
      const PairObservation &x = c.observations[r][j], &y = s.observations[r][j];
      EXPECT_EQ(x.z_null, y.z_null);
      EXPECT_EQ(x.z_inj, y.z_inj);
      EXPECT_EQ(x.all.sum2, y.all.sum2);
      EXPECT_EQ(x.near.n, y.near.n);
      EXPECT_EQ(x.level_max, y.level_max);
      EXPECT_EQ(x.high_z, y.high_z);
    }
}

// The window placed away from masks holds the most away trials of all windows (brute force over
// every position), ties going to the lowest y, then x.
TEST(ValidationNearMasks, WindowAwayFromMasksIsTheBest) {
  KitOptions k = small_cube();
  k.bad_column = false;
  k.inject = false;
  k.seed = 9;
  const KitStack kit = make_kit(k);
  const auto flags = validation_detail::near_mask_flags(kit.stack, kit.bank, 1.0);
  const int W = k.width, H = k.height, side = 12;
  const std::size_t V = kit.bank.size();
  const Region chosen = validation_detail::window_away_from_masks(flags, W, H, V, side);
  auto away_in = [&](int x0, int y0) {
    std::int64_t n = 0;
    for (std::size_t v = 0; v < V; ++v)
      for (int y = y0; y < y0 + side; ++y)
        for (int x = x0; x < x0 + side; ++x) n += flags[(v * H + y) * W + x] == 0;
    return n;
  };
  std::int64_t best = -1;
  int best_x = -1, best_y = -1;
  for (int y = 0; y + side <= H; ++y)
    for (int x = 0; x + side <= W; ++x)
      if (const std::int64_t n = away_in(x, y); n > best) best = n, best_x = x, best_y = y;
  EXPECT_EQ(chosen.x0, best_x);
  EXPECT_EQ(chosen.y0, best_y);
  EXPECT_EQ(chosen.width, side);
  EXPECT_EQ(chosen.height, side);
  EXPECT_GT(best, 0);
  // A side larger than the image is clipped to it.
  const Region whole = validation_detail::window_away_from_masks(flags, W, H, V, 10 * W);
  EXPECT_EQ(whole.count(), std::int64_t(W) * H);
}

// The sparse-mask kit with windows placed away from masks: most null trials are away from masks,
// and their Var(Z) is 1 within 4 jackknife standard errors, which n cubes make small.
TEST(Validation, NullVarianceAwayFromSparseMasks) {
  ValidationOptions o = small_options(16);
  o.kit.bad_column = false;
  o.null_window = 24;
  o.null_window_placement = NullWindowPlacement::away;
  o.completeness_snr.clear();
  const ValidationReport r = run_validation(o);
  EXPECT_GT(r.method.away.trials, r.method.near.trials);
  EXPECT_NEAR(r.method.away.variance, 1.0, 4 * r.method.away.variance_se) << "se " << r.method.away.variance_se;
  EXPECT_LT(r.method.away.variance_se, 0.25 / std::sqrt(double(o.pairs)));
  EXPECT_TRUE(r.method.completeness.empty());
  // The window is chosen from the masks: placing it at random holds fewer away trials.
  o.null_window_placement = NullWindowPlacement::random;
  EXPECT_LT(run_validation(o).method.away.trials, r.method.away.trials);
  o.null_window = 0;
  o.null_window_placement = NullWindowPlacement::away;
  EXPECT_THROW(run_validation(o), Error);  // no window to place
}

// SPEC 5's eta formulas against unit-normal draws: within 5 batch standard errors (plus the
// Sheppard approximation's own error for the coarse bright-residual step).
TEST(Quantization, MeasuredEtaMatchesFormula) {
  KitOptions k = small_cube();
  const auto rows = quantization_table(200000, 4, 7, k);
  ASSERT_EQ(rows.size(), 6u);
  EXPECT_NEAR(rows[3].predicted, std::sqrt(2 / std::numbers::pi), 1e-15);  // sign only
  EXPECT_NEAR(rows[1].predicted, 0.99971, 1e-5);                         // SPEC 5 / encoding.hpp
  for (const auto& r : rows) {
    const double slack = r.step_sigmas > 0.5 ? 2e-4 : 0.0;
    EXPECT_NEAR(r.measured, r.predicted, 5 * r.measured_se + slack + 1e-6) << r.name;
    EXPECT_LE(r.measured, 1.0 + 1e-12) << r.name;
  }
}

// Fractional shifts: the gather's exact B keeps Var(Z) at 1 near masks even for a sharp PSF; the
// naive bilinear phi does not. The engine's B equals this code's own quadratic form.
TEST(FractionalNormalization, ExactGatherCalibratedNaiveNot) {
  FractionalOptions f;
  f.kit = small_cube();
  f.kit.width = f.kit.height = 40;
  f.kit.vx_count = f.kit.vy_count = 3;
  f.psf_sigmas = {0.55};
  f.cubes = 8;
  const FractionalReport r = run_fractional_study(f);
  ASSERT_EQ(r.points.size(), 1u);
  const FractionalPoint& p = r.points[0];
  EXPECT_LT(p.max_relative_b_difference, 1e-5);
  ASSERT_GT(p.gather_near.trials, 1000);
  EXPECT_NEAR(p.gather_near.variance, 1.0, 4 * p.gather_near.se) << "se " << p.gather_near.se;
  EXPECT_LT(p.gather_near.se, 0.03);
  // Naive B overstates the variance of A (Cov <= sqrt(phi phi) for every pair of corners).
  EXPECT_LT(p.naive_near.variance, p.gather_near.variance - 4 * p.gather_near.se);
}

// The band-limited planes against a direct evaluation of their definitions with the 2-D PSF:
// A = sum_e a_e sum_p h(x + s - p) psi_e(p), B = sum_e a_e^2 sum_r w_e(r) [sum_p h(x + s - p)
// P_e(r - p)]^2, naive B = sum_e a_e^2 sum_p h(x + s - p) phi_e(p), p and r over the image.
TEST(FractionalNormalization, BandLimitedPlanesMatchDefinitions) {
  KitOptions k = small_cube();
  k.width = k.height = 20;
  k.exposures = 3;
  k.vx_count = k.vy_count = 2;
  k.velocity_displacement = 2.5;
  k.curve_amplitude = 0.7;
  k.inject = false;
  k.shift_mode = ShiftMode::fractional;
  k.psf_sigma_min = k.psf_sigma_max = 0.55;
  k.seed = 3;
  const KitStack kit = make_kit(k);
  const LikelihoodStack maps = compute_likelihood(kit.stack);
  const auto grid = validation_detail::band_limited_grid(kit.stack, kit.bank);
  EXPECT_EQ(grid.x % 2, 1);
  const std::size_t v = 3;
  const auto planes = validation_detail::band_limited_planes(kit.stack, maps, kit.bank, v, grid);
  const int W = k.width, H = k.height;
  for (const auto& [x, y] : {std::pair{0, 0}, std::pair{7, 11}, std::pair{19, 4}, std::pair{13, 19}}) {
    double A = 0, B = 0, naive = 0;
    for (int e = 0; e < k.exposures; ++e) {
      const Exposure& ex = kit.stack.exposures[e];
      const double a = maps.throughput[e];
      const double u = x + kit.bank.shift_x(v, e), w = y + kit.bank.shift_y(v, e);
      auto h = [&](int px, int py) {
        return validation_detail::dirichlet(u - px, grid.x) * validation_detail::dirichlet(w - py, grid.y);
      };
      const int R = ex.psf.width / 2;
      for (int py = 0; py < H; ++py)
        for (int px = 0; px < W; ++px) {
          A += a * h(px, py) * maps.psi[maps.index(e, px, py)];
          naive += a * a * h(px, py) * maps.phi[maps.index(e, px, py)];
        }
      for (int ry = 0; ry < H; ++ry)
        for (int rx = 0; rx < W; ++rx) {
          if (ex.mask(rx, ry)) continue;
          double g = 0;
          for (int py = std::max(0, ry - R); py <= std::min(H - 1, ry + R); ++py)
            for (int px = std::max(0, rx - R); px <= std::min(W - 1, rx + R); ++px)
              g += h(px, py) * ex.psf(rx - px + R, ry - py + R);
          B += a * a * g * g / ex.variance(rx, ry);
        }
    }
    const std::size_t i = std::size_t(y) * W + x;
    EXPECT_NEAR(planes.A[i], A, 1e-5 * std::sqrt(B)) << x << "," << y;
    EXPECT_NEAR(planes.B[i], B, 1e-5 * B) << x << "," << y;
    EXPECT_NEAR(planes.naive_B[i], naive, 1e-5 * std::abs(naive) + 1e-12) << x << "," << y;
  }
}

// The Fourier-route evaluation (spectra of psi on the band, the exact information spectrum on the
// doubled band, separable phase tables per exposure, the fold onto the grid) gives the planes of
// the direct band-limited evaluation for every velocity: A, the exact B and the naive B.
TEST(FractionalNormalization, SpectralRouteEqualsDirectBandLimited) {
  KitOptions k = small_cube();
  k.width = 18, k.height = 15;
  k.exposures = 3;
  k.vx_count = k.vy_count = 2;
  k.velocity_displacement = 2.5;
  k.curve_amplitude = 0.7;
  k.inject = false;
  k.shift_mode = ShiftMode::fractional;
  k.psf_sigma_min = 0.55, k.psf_sigma_max = 0.85;
  k.seed = 4;
  const KitStack kit = make_kit(k);
  const LikelihoodStack maps = compute_likelihood(kit.stack);
  const auto grid = validation_detail::band_limited_grid(kit.stack, kit.bank);
  const auto spectral = validation_detail::band_limited_spectral_planes(kit.stack, maps, kit.bank, grid);
  ASSERT_EQ(spectral.size(), kit.bank.size());
  double worst_a = 0, worst_b = 0, worst_naive = 0;
  for (std::size_t v = 0; v < kit.bank.size(); ++v) {
    const auto direct = validation_detail::band_limited_planes(kit.stack, maps, kit.bank, v, grid);
    for (std::size_t i = 0; i < direct.B.size(); ++i) {
      ASSERT_GT(direct.B[i], 0);
      // Double-precision transforms of a few hundred terms: agreement to ~1e-12 relative.
      worst_a = std::max(worst_a, std::abs(spectral[v].A[i] - direct.A[i]) / std::sqrt(direct.B[i]));
      worst_b = std::max(worst_b, std::abs(spectral[v].B[i] / direct.B[i] - 1));
      worst_naive = std::max(worst_naive, std::abs(spectral[v].naive_B[i] - direct.naive_B[i]) / direct.B[i]);
    }
  }
  EXPECT_LT(worst_a, 1e-9);
  EXPECT_LT(worst_b, 1e-9);
  EXPECT_LT(worst_naive, 1e-9);
  // The doubled band matters: the exact B differs from the naive one somewhere.
  const auto direct = validation_detail::band_limited_planes(kit.stack, maps, kit.bank, 0, grid);
  double largest = 0;
  for (std::size_t i = 0; i < direct.B.size(); ++i)
    largest = std::max(largest, std::abs(direct.B[i] / direct.naive_B[i] - 1));
  EXPECT_GT(largest, 1e-3);
}

// The band-limited route: exact B keeps Var(Z) at 1 near masks with a sharp PSF. The naive phi
// shift does not: at single samples on a mask edge its null variance B_exact / B_naive (exact,
// no Monte Carlo) exceeds 1, the chapter's failure mode; diluted over a stack it is small.
TEST(FractionalNormalization, BandLimitedExactCalibratedNaiveNot) {
  FractionalOptions f;
  f.kit = small_cube();
  f.kit.width = f.kit.height = 32;
  f.kit.exposures = 6;
  f.kit.vx_count = f.kit.vy_count = 3;
  f.psf_sigmas = {0.55};
  f.cubes = 8;
  f.fourier = true;
  const FractionalReport r = run_fractional_study(f);
  const FractionalPoint& p = r.points.at(0);
  ASSERT_TRUE(p.fourier_done);
  ASSERT_GT(p.fourier_near.trials, 1000);
  EXPECT_NEAR(p.fourier_near.variance, 1.0, 4 * p.fourier_near.se) << "se " << p.fourier_near.se;
  EXPECT_LT(p.fourier_near.se, 0.03);
  ASSERT_GT(p.fourier_edge_samples, 100);
  EXPECT_GT(p.fourier_edge_ratio_mean, 1.01);
  EXPECT_GT(p.fourier_edge_ratio_max, 1.5);
}

TEST(ValidationOutput, JsonAndPlots) {
  const ValidationReport r = run_validation(small_options(2));
  const Provenance prov{"test card", "abc123", "2026-01-01T00:00:00Z", "test"};
  const auto j = nlohmann::json::parse(to_json(r, {}, prov));
  EXPECT_EQ(j["retention"]["value"].get<double>(), 1.0);
  EXPECT_EQ(j["provenance"]["commit"], "abc123");
  EXPECT_EQ(j["method"]["null"]["near_masks"]["trials"].get<std::int64_t>(), r.method.near.trials);
  const auto folder = std::filesystem::temp_directory_path() / "shiftstack_validation_test";
  std::filesystem::remove_all(folder);
  const auto files = write_plots(r, prov, folder.string());
  EXPECT_EQ(files.size(), 4u);
  for (const auto& f : files) {
    std::ifstream in(f);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(text.rfind("<svg", 0), 0u) << f;
    EXPECT_NE(text.find("</svg>"), std::string::npos) << f;
    EXPECT_NE(text.find("abc123"), std::string::npos) << f;
  }
  // Summary of a saved report.
  {
    std::ofstream out(folder / "report.json");
    out << to_json(r, {}, prov);
  }
  const std::string table = summarize_reports({(folder / "report.json").string()}, folder.string());
  EXPECT_NE(table.find("reference fp32"), std::string::npos);
  EXPECT_TRUE(std::filesystem::exists(folder / "summary_retention.svg"));
  std::filesystem::remove_all(folder);
}

TEST(SvgPlot, NiceTicks) {
  const auto t = svg::nice_ticks(0.0, 1.0, 5);
  ASSERT_EQ(t.size(), 6u);
  EXPECT_DOUBLE_EQ(t[1], 0.2);
  const auto u = svg::nice_ticks(0.9971, 1.0012, 6);
  for (std::size_t i = 1; i < u.size(); ++i) EXPECT_NEAR(u[i] - u[i - 1], 0.001, 1e-12);
}
