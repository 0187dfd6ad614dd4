// Paired null/injection validation of one method against the FP32 exact gather (SPEC 7).
#include <algorithm>
#include <boost/math/special_functions/gamma.hpp>  // within the Boost subset stage-deps.sh copies
#include <chrono>
#include <cmath>
#include <iostream>
#include <limits>
#include <memory>
#include <random>

#include "shiftstack/digest.hpp"
#include "shiftstack/error.hpp"
#include "shiftstack/likelihood.hpp"
#include "shiftstack/search.hpp"
#include "shiftstack/validation.hpp"
#include "validation_internal.hpp"

namespace shiftstack {

namespace validation_detail {

double psf_sigma(const Image<float>& psf) {
  double total = 0, mx = 0, my = 0;
  for (int y = 0; y < psf.height; ++y)
    for (int x = 0; x < psf.width; ++x) {
      total += psf(x, y);
      mx += psf(x, y) * x;
      my += psf(x, y) * y;
    }
  require(total > 0, "PSF with non-positive sum");
  mx /= total, my /= total;
  double second = 0;
  for (int y = 0; y < psf.height; ++y)
    for (int x = 0; x < psf.width; ++x) second += psf(x, y) * ((x - mx) * (x - mx) + (y - my) * (y - my));
  return std::sqrt(second / total / 2);
}

std::vector<std::uint8_t> near_mask_flags(const ExposureStack& stack, const MotionBank& bank,
                                          double near_mask_fwhm, Region region) {
  const int W = stack.width(), H = stack.height(), E = stack.size();
  const bool fractional = bank.mode == ShiftMode::fractional;
  // Half a pixel diagonal: the nearest pixel stands in for a continuous position.
  const double widen = fractional ? std::sqrt(0.5) : 0.0;
  std::vector<std::vector<std::uint8_t>> near(E, std::vector<std::uint8_t>(std::size_t(W) * H, 0));

#pragma omp parallel for schedule(dynamic, 1)
  for (int e = 0; e < E; ++e) {
    const Exposure& x = stack.exposures[e];
    const double radius = near_mask_fwhm * kFwhmPerSigma * psf_sigma(x.psf) + widen;
    const int reach = int(std::floor(radius));
    std::vector<std::pair<int, int>> disk;
    for (int dy = -reach; dy <= reach; ++dy)
      for (int dx = -reach; dx <= reach; ++dx)
        if (dx * dx + dy * dy <= radius * radius) disk.emplace_back(dx, dy);
    auto& map = near[e];
    // The image edge: the nearest outside pixel is at distance min(x+1, W-x, y+1, H-y).
    for (int y = 0; y < H; ++y)
      for (int xx = 0; xx < W; ++xx) {
        const int edge = std::min({xx + 1, W - xx, y + 1, H - y});
        if (edge <= radius) map[std::size_t(y) * W + xx] = 1;
      }
    if (x.mask.empty()) continue;
    for (int y = 0; y < H; ++y)
      for (int xx = 0; xx < W; ++xx) {
        if (!x.mask(xx, y)) continue;
        for (const auto& [dx, dy] : disk) {
          const int qx = xx + dx, qy = y + dy;
          if (qx >= 0 && qy >= 0 && qx < W && qy < H) map[std::size_t(qy) * W + qx] = 1;
        }
      }
  }

  const Region r = resolve(region, W, H);
  const std::int64_t V = std::int64_t(bank.size());
  const std::size_t per_velocity = std::size_t(r.width) * r.height;
  std::vector<std::uint8_t> flags(std::size_t(V) * per_velocity, 0);
#pragma omp parallel for schedule(dynamic, 1)
  for (std::int64_t v = 0; v < V; ++v) {
    std::uint8_t* out = flags.data() + std::size_t(v) * per_velocity;
    for (int e = 0; e < E; ++e) {
      const int dx = round_shift(bank.shift_x(v, e)), dy = round_shift(bank.shift_y(v, e));
      const std::uint8_t* map = near[e].data();
      for (int j = 0; j < r.height; ++j) {
        std::uint8_t* row = out + std::size_t(j) * r.width;
        const int py = r.y0 + j + dy;
        if (py < 0 || py >= H) {
          std::fill(row, row + r.width, std::uint8_t(1));
          continue;
        }
        const std::uint8_t* source = map + std::size_t(py) * W;
        for (int i = 0; i < r.width; ++i) {
          const int px = r.x0 + i + dx;
          row[i] |= (px < 0 || px >= W) ? std::uint8_t(1) : source[px];
        }
      }
    }
  }
  return flags;
}

double pooled_variance(double n, double sum, double sum2) {
  if (n < 2) return std::numeric_limits<double>::quiet_NaN();
  return (sum2 - sum * sum / n) / (n - 1);
}

namespace {
// Jackknife standard error of an estimator given its delete-one-cube values.
double jackknife_se(const std::vector<double>& leave_one_out) {
  const std::size_t n = leave_one_out.size();
  if (n < 2) return std::numeric_limits<double>::quiet_NaN();
  double mean = 0;
  for (double v : leave_one_out) mean += v;
  mean /= double(n);
  double ss = 0;
  for (double v : leave_one_out) ss += (v - mean) * (v - mean);
  return std::sqrt(double(n - 1) / double(n) * ss);
}
}  // namespace

NullClass pool_class(const std::vector<ClassSums>& cubes, const std::vector<double>& thresholds,
                     const std::vector<std::string>& labels) {
  NullClass out;
  ClassSums total;
  total.above.assign(thresholds.size(), 0);
  for (const auto& c : cubes) {
    total.n += c.n, total.sum += c.sum, total.sum2 += c.sum2;
    for (std::size_t i = 0; i < thresholds.size(); ++i) total.above[i] += c.above[i];
  }
  out.trials = std::int64_t(total.n);
  out.mean_z = total.n > 0 ? total.sum / total.n : std::numeric_limits<double>::quiet_NaN();
  out.variance = pooled_variance(total.n, total.sum, total.sum2);
  std::vector<double> loo;
  for (const auto& c : cubes)
    loo.push_back(pooled_variance(total.n - c.n, total.sum - c.sum, total.sum2 - c.sum2));
  out.variance_se = jackknife_se(loo);
  std::vector<double> loo_mean;
  for (const auto& c : cubes)
    loo_mean.push_back(total.n - c.n > 0 ? (total.sum - c.sum) / (total.n - c.n) : 0.0);
  out.mean_se = jackknife_se(loo_mean);
  for (std::size_t i = 0; i < thresholds.size(); ++i) {
    Excursion x;
    x.z = thresholds[i];
    x.label = labels[i];
    x.observed = std::int64_t(total.above[i]);
    x.expected = total.n * normal_upper_tail(thresholds[i]);
    x.poisson_p = poisson_two_sided_p(x.observed, x.expected);
    std::vector<double> rate;
    for (const auto& c : cubes)
      rate.push_back(total.n - c.n > 0 ? (total.above[i] - c.above[i]) / (total.n - c.n) : 0.0);
    x.count_se = jackknife_se(rate) * total.n;
    out.excursions.push_back(x);
  }
  return out;
}

}  // namespace validation_detail

using namespace validation_detail;

double poisson_two_sided_p(std::int64_t observed, double expected) {
  require(observed >= 0 && expected >= 0, "poisson_two_sided_p: negative count or expectation");
  if (expected == 0) return observed == 0 ? 1.0 : 0.0;
  // Poisson tails through the regularized incomplete gamma function:
  // P(X <= k) = Q(k + 1, lambda), P(X >= k) = P(k, lambda) for k >= 1.
  const double k = double(observed);
  const double lower = boost::math::gamma_q(k + 1, expected);
  const double upper = k == 0 ? 1.0 : boost::math::gamma_p(k, expected);
  return std::min(1.0, 2 * std::min(lower, upper));
}

Interval wilson_interval(int successes, int trials) {
  require(trials > 0 && successes >= 0 && successes <= trials, "wilson_interval: bad counts");
  const double z = 1.959963984540054;  // two-sided 95% normal quantile
  const double n = trials, p = successes / n;
  const double centre = (p + z * z / (2 * n)) / (1 + z * z / n);
  const double half = z * std::sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n);
  return {std::max(0.0, centre - half), std::min(1.0, centre + half)};
}

void validate(const ValidationOptions& o) {
  require(o.pairs >= 2, "validate: need at least 2 pairs for a bootstrap interval, got " + std::to_string(o.pairs));
  require(o.bootstrap_resamples >= 100, "validate: bootstrap_resamples must be >= 100");
  require(o.alpha > 0 && o.alpha < 1, "validate: alpha must be in (0, 1)");
  require(std::isfinite(o.near_mask_fwhm) && o.near_mask_fwhm >= 0, "validate: near_mask_fwhm must be >= 0");
  require(o.neighbourhood >= 0, "validate: neighbourhood must be >= 0");
  require(o.null_window >= 0, "validate: null_window must be >= 0 (0 = whole image)");
  require(std::isfinite(o.matched_z), "validate: matched_z must be finite");
  for (double z : o.excursion_z) require(std::isfinite(z), "validate: excursion thresholds must be finite");
  for (double s : o.completeness_snr)
    require(std::isfinite(s) && s >= 0, "validate: completeness SNRs must be finite and >= 0");
  require(o.kit.injected_snr > 0, "validate: the injected SNR must be > 0");
  require(o.kit.noise, "validate: the kit's noise must be on (a null bank without noise is degenerate)");
}

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// One method's accumulated observations over the pairs.
struct MethodRun {
  std::string engine_name;
  Encoding encoding;
  std::unique_ptr<Engine> engine;
  std::vector<ClassSums> near, away, all;
  std::vector<float> high_z;            // pooled null Z above the completeness floor
  std::vector<double> z_null, z_inj;    // per pair, at the truth
  std::vector<std::vector<double>> level_max;  // [level][pair]: neighbourhood max Z
  double seconds = 0;
};

OutputPolicy all_trials_policy(double alpha) {
  OutputPolicy policy;
  policy.alpha = alpha;
  policy.collect_candidates = true;
  policy.candidate_threshold = -std::numeric_limits<double>::infinity();
  policy.max_candidates = std::int64_t(1) << 40;  // the whole bank is wanted: no cap
  return policy;
}

struct Neighbourhood {
  Region region;
  int truth_ix = 0, truth_iy = 0, reach = 1;
  std::size_t vx_count = 1;
  bool contains_velocity(std::int64_t v) const {
    const int ix = int(v % std::int64_t(vx_count)), iy = int(v / std::int64_t(vx_count));
    return std::abs(ix - truth_ix) <= reach && std::abs(iy - truth_iy) <= reach;
  }
};

struct TruthScores {
  double z_truth = std::numeric_limits<double>::quiet_NaN();
  double neighbourhood_max = -std::numeric_limits<double>::infinity();
};

TruthScores truth_scores(const SearchResult& result, const Truth& truth, const Neighbourhood& nb) {
  TruthScores s;
  for (const auto& c : result.candidates) {
    if (std::abs(c.x - truth.x) > nb.reach || std::abs(c.y - truth.y) > nb.reach) continue;
    if (!nb.contains_velocity(c.velocity)) continue;
    s.neighbourhood_max = std::max(s.neighbourhood_max, double(c.Z));
    if (c.x == truth.x && c.y == truth.y && c.velocity == truth.velocity) s.z_truth = c.Z;
  }
  return s;
}

// The method's threshold with the baseline's false-alarm count on its own null bank: any value
// in [z_(F+1), z_(F)) of its sorted null Z gives exactly F trials above; take the one nearest
// the baseline's threshold, so the baseline keeps matched_z itself.
double matched_threshold(std::vector<float> high, std::int64_t false_alarms, double matched_z, double floor) {
  std::sort(high.begin(), high.end(), std::greater<float>());
  const double lower = std::size_t(false_alarms) < high.size() ? double(high[false_alarms]) : floor;
  const double upper = false_alarms == 0 ? std::numeric_limits<double>::infinity()
                                         : std::nextafter(double(high[false_alarms - 1]), -1e300);
  return std::clamp(matched_z, lower, std::max(lower, upper));
}

MethodResult summarize(const MethodRun& run, const std::vector<double>& thresholds,
                       const std::vector<std::string>& labels) {
  MethodResult r;
  r.engine = run.engine_name;
  r.encoding = run.encoding;
  r.z_null_truth = run.z_null;
  r.z_inj_truth = run.z_inj;
  r.near = pool_class(run.near, thresholds, labels);
  r.away = pool_class(run.away, thresholds, labels);
  r.all = pool_class(run.all, thresholds, labels);
  r.near_fraction = r.all.trials > 0 ? double(r.near.trials) / double(r.all.trials) : 0.0;
  double d = 0;
  for (std::size_t j = 0; j < run.z_null.size(); ++j) d += run.z_inj[j] - run.z_null[j];
  r.mean_d = d / double(run.z_null.size());
  r.sd_null = std::sqrt(r.all.variance);
  r.effective_snr = r.mean_d / r.sd_null;
  r.seconds = run.seconds;
  return r;
}

}  // namespace


std::vector<ValidationReport> run_validation_set(const ValidationOptions& o, const std::vector<MethodSpec>& methods,
                                                 std::vector<std::string>* skipped) {
  validate(o);
  require(!methods.empty(), "validate: no methods given");
  const auto start = Clock::now();
  const bool fractional = o.kit.shift_mode == ShiftMode::fractional;

  // Run 0 is the baseline; a method identical to it reuses it.
  std::vector<MethodRun> runs;
  auto add_run = [&](const std::string& engine, Encoding encoding) {
    for (std::size_t i = 0; i < runs.size(); ++i)
      if (runs[i].engine_name == engine && runs[i].encoding == encoding) return i;
    runs.push_back({engine, encoding, make_engine(engine), {}, {}, {}, {}, {}, {}, {}, 0});
    runs.back().level_max.assign(o.completeness_snr.size(), {});
    return runs.size() - 1;
  };
  add_run(o.baseline_engine, Encoding::fp32);
  std::vector<std::size_t> method_run;  // per accepted method
  std::vector<MethodSpec> accepted;

  std::vector<double> thresholds;
  std::vector<std::string> labels;
  const double completeness_floor = o.matched_z - 1.0;  // null Z kept for threshold matching
  std::int64_t trials_per_cube = 0;
  double bonferroni = 0;
  std::int64_t null_origins = 0;

  for (int j = 0; j < o.pairs; ++j) {
    const auto pair_start = Clock::now();
    KitOptions kit_options = o.kit;
    kit_options.seed = o.seed + std::uint64_t(j);
    kit_options.inject = false;
    const KitStack null_kit = make_kit(kit_options);
    kit_options.inject = true;
    const KitStack inj_kit = make_kit(kit_options);
    const Truth& truth = inj_kit.truth;
    require(truth.injected, "validate: the kit did not inject a source");
    require(null_kit.bank.is_cartesian(), "validate: the detection neighbourhood needs a Cartesian bank");
    const LikelihoodStack null_maps = compute_likelihood(null_kit.stack, fractional);
    const LikelihoodStack inj_maps = compute_likelihood(inj_kit.stack, fractional);
    const int W = null_maps.width, H = null_maps.height;

    // The null bank's origins in this cube.
    Region null_region{0, 0, W, H};
    if (o.null_window > 0) {
      std::mt19937_64 rng(o.seed * 0x9e3779b97f4a7c15ull + std::uint64_t(j));
      const int w = std::min(o.null_window, W), h = std::min(o.null_window, H);
      null_region = {std::uniform_int_distribution<int>(0, W - w)(rng), std::uniform_int_distribution<int>(0, H - h)(rng),
                     w, h};
    }
    const std::vector<std::uint8_t> near =
        near_mask_flags(null_kit.stack, null_kit.bank, o.near_mask_fwhm, null_region);

    if (j == 0) {
      trials_per_cube = std::int64_t(W) * H * std::int64_t(null_kit.bank.size());
      bonferroni = bonferroni_threshold(o.alpha, double(trials_per_cube));
      for (double z : o.excursion_z) {
        thresholds.push_back(z);
        char buf[32];
        std::snprintf(buf, sizeof buf, "%g", z);
        labels.push_back(buf);
      }
      thresholds.push_back(bonferroni);
      labels.push_back("bonferroni");
    }
    null_origins += null_region.count();

    Neighbourhood nb;
    nb.reach = o.neighbourhood;
    nb.vx_count = null_kit.bank.vx_count();
    nb.truth_ix = int(truth.velocity % std::int64_t(nb.vx_count));
    nb.truth_iy = int(truth.velocity / std::int64_t(nb.vx_count));
    const int x0 = std::max(0, truth.x - nb.reach), y0 = std::max(0, truth.y - nb.reach);
    nb.region = {x0, y0, std::min(W - 1, truth.x + nb.reach) - x0 + 1, std::min(H - 1, truth.y + nb.reach) - y0 + 1};

    // Completeness cubes: psi is linear in the image, so the same noise plus the source at SNR s
    // is psi_null + (s / s_inj) (psi_inj - psi_null); phi (and covariances) do not depend on it.
    const double injected = truth.snr;
    std::vector<LikelihoodStack> level_maps;
    for (double s : o.completeness_snr) {
      LikelihoodStack maps = null_maps;
      const double k = s / injected;
      for (std::size_t i = 0; i < maps.psi.size(); ++i)
        maps.psi[i] = float(double(null_maps.psi[i]) + k * (double(inj_maps.psi[i]) - double(null_maps.psi[i])));
      level_maps.push_back(std::move(maps));
    }

    // Encodings, once per pair and encoding, shared by every engine (device caches key on the id).
    struct Encoded {
      EncodedStack null_cube, inj_cube;
      std::vector<EncodedStack> levels;
    };
    std::vector<std::pair<Encoding, std::unique_ptr<Encoded>>> encoded;
    auto encoded_for = [&](Encoding e) -> const Encoded& {
      for (auto& [enc, data] : encoded)
        if (enc == e) return *data;
      auto data = std::make_unique<Encoded>();
      data->null_cube = encode(null_maps, e);
      data->inj_cube = encode(inj_maps, e);
      for (const auto& maps : level_maps) data->levels.push_back(encode(maps, e));
      encoded.emplace_back(e, std::move(data));
      return *encoded.back().second;
    };

    if (j == 0) {
      // Methods the engine cannot compute are left out up front (with the engine's reason).
      for (const auto& m : methods) {
        auto engine = make_engine(m.engine);
        const OutputPolicy policy = all_trials_policy(o.alpha);
        const EncodedStack& cube = encoded_for(m.encoding).null_cube;
        std::string reason = engine->unsupported_reason(SearchInput{&cube, &null_kit.bank, null_region, policy});
        if (reason.empty()) reason = engine->unsupported_reason(SearchInput{&cube, &null_kit.bank, nb.region, policy});
        if (!reason.empty()) {
          if (skipped) skipped->push_back(m.engine + " " + to_string(m.encoding) + ": " + reason);
          continue;
        }
        accepted.push_back(m);
        method_run.push_back(add_run(m.engine, m.encoding));
      }
      require(!accepted.empty(), "validate: no method can compute this input");
    }

    const OutputPolicy policy = all_trials_policy(o.alpha);
    for (auto& run : runs) {
      const auto t0 = Clock::now();
      const Encoded& cubes = encoded_for(run.encoding);
      const SearchResult null_result = search(*run.engine, cubes.null_cube, null_kit.bank, policy, null_region);
      ClassSums near_sums, away_sums, all_sums;
      for (ClassSums* s : {&near_sums, &away_sums, &all_sums}) s->above.assign(thresholds.size(), 0);
      for (const auto& c : null_result.candidates) {
        const double z = c.Z;
        const bool is_near =
            near[(std::size_t(c.velocity) * null_region.height + (c.y - null_region.y0)) * null_region.width +
                 (c.x - null_region.x0)] != 0;
        (is_near ? near_sums : away_sums).add(z, thresholds);
        all_sums.add(z, thresholds);
        if (z > completeness_floor) run.high_z.push_back(c.Z);
      }
      run.near.push_back(near_sums);
      run.away.push_back(away_sums);
      run.all.push_back(all_sums);

      // Z at the injected trajectory in both cubes, from the same small search around the truth.
      const TruthScores null_truth = truth_scores(search(*run.engine, cubes.null_cube, null_kit.bank, policy, nb.region), truth, nb);
      const TruthScores inj_truth = truth_scores(search(*run.engine, cubes.inj_cube, inj_kit.bank, policy, nb.region), truth, nb);
      require(std::isfinite(null_truth.z_truth) && std::isfinite(inj_truth.z_truth),
              "validate: engine '" + run.engine_name + "' did not score the injected trajectory in pair " +
                  std::to_string(j));
      run.z_null.push_back(null_truth.z_truth);
      run.z_inj.push_back(inj_truth.z_truth);
      for (std::size_t l = 0; l < cubes.levels.size(); ++l) {
        const SearchResult r = search(*run.engine, cubes.levels[l], inj_kit.bank, policy, nb.region);
        run.level_max[l].push_back(truth_scores(r, truth, nb).neighbourhood_max);
      }
      run.seconds += since(t0);
    }
    if (o.verbose) {
      std::cerr << "validate: pair " << j + 1 << "/" << o.pairs << " (" << since(pair_start) << " s):";
      for (const auto& run : runs)
        std::cerr << "  " << run.engine_name << " " << to_string(run.encoding) << " Z_null " << run.z_null.back()
                  << " Z_inj " << run.z_inj.back();
      std::cerr << "\n";
    }
  }

  // Completeness threshold: every method gets the baseline's count of null trials above matched_z.
  std::int64_t false_alarms = 0;
  for (float z : runs[0].high_z) false_alarms += z > o.matched_z;
  std::vector<MethodResult> results;
  for (const auto& run : runs) {
    MethodResult r = summarize(run, thresholds, labels);
    r.matched_false_alarms = false_alarms;
    r.matched_threshold = matched_threshold(run.high_z, false_alarms, o.matched_z, completeness_floor);
    for (std::size_t l = 0; l < o.completeness_snr.size(); ++l) {
      CompletenessPoint p;
      p.snr = o.completeness_snr[l];
      p.injected = int(run.level_max[l].size());
      for (double z : run.level_max[l]) p.detected += z > r.matched_threshold;
      p.fraction = double(p.detected) / p.injected;
      p.interval = wilson_interval(p.detected, p.injected);
      r.completeness.push_back(p);
    }
    results.push_back(std::move(r));
  }

  // Retention with a paired bootstrap over pairs: each resample takes whole pairs (the injection
  // difference and that cube's null bank) for the method and the baseline at once.
  auto effective = [&](const MethodRun& run, const std::vector<int>& sample) {
    double d = 0, n = 0, s = 0, s2 = 0;
    for (int j : sample) {
      d += run.z_inj[j] - run.z_null[j];
      n += run.all[j].n, s += run.all[j].sum, s2 += run.all[j].sum2;
    }
    return d / double(sample.size()) / std::sqrt(pooled_variance(n, s, s2));
  };
  std::vector<ValidationReport> reports;
  for (std::size_t m = 0; m < accepted.size(); ++m) {
    const std::size_t r = method_run[m];
    ValidationReport report;
    report.options = o;
    report.options.engine = accepted[m].engine;
    report.options.encoding = accepted[m].encoding;
    report.trials_per_cube = trials_per_cube;
    report.null_trials_per_cube = o.pairs > 0 ? null_origins / o.pairs * std::int64_t(o.kit.vx_count) * o.kit.vy_count : 0;
    report.bonferroni_z = bonferroni;
    report.method = results[r];
    report.baseline = results[0];
    report.same_as_baseline = r == 0;
    report.retention = report.method.effective_snr / report.baseline.effective_snr;
    std::mt19937_64 rng(o.bootstrap_seed);
    std::uniform_int_distribution<int> pick(0, o.pairs - 1);
    std::vector<double> ratios;
    std::vector<int> sample(o.pairs);
    for (int b = 0; b < o.bootstrap_resamples; ++b) {
      for (int& j : sample) j = pick(rng);
      ratios.push_back(effective(runs[r], sample) / effective(runs[0], sample));
    }
    std::sort(ratios.begin(), ratios.end());
    auto quantile = [&](double q) {
      const double at = q * double(ratios.size() - 1);
      const std::size_t i = std::size_t(std::floor(at));
      const double f = at - double(i);
      return i + 1 < ratios.size() ? ratios[i] * (1 - f) + ratios[i + 1] * f : ratios[i];
    };
    report.retention_interval = {quantile(0.025), quantile(0.975)};
    report.seconds = since(start);
    reports.push_back(std::move(report));
  }
  return reports;
}

ValidationReport run_validation(const ValidationOptions& o) {
  std::vector<std::string> skipped;
  auto reports = run_validation_set(o, {{o.engine, o.encoding}}, &skipped);
  // A single method the engine cannot compute is an error, with the engine's reason.
  require(skipped.empty(), "validate: engine cannot compute this input: " +
                               (skipped.empty() ? std::string() : skipped.front()));
  return std::move(reports.front());
}

}  // namespace shiftstack
