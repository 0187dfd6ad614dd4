// Candidate filtering as KBMOD orders it: light curve, sigma-G clipping, then the likelihood
// and observation-count thresholds recomputed over the surviving epochs.
#include <algorithm>
#include <cmath>

#include "pipeline/internal.hpp"
#include "shiftstack/error.hpp"
#include "shiftstack/pipeline.hpp"

namespace shiftstack {

namespace {

// curve_of(i) returns candidate i's light curve (or throws Error).
template <typename CurveOf>
std::vector<Detection> filter_with(const std::vector<Candidate>& candidates, int E, CurveOf&& curve_of,
                                   const FilterOptions& options, FilterStats* stats) {
  require(std::isfinite(options.lh_level), "lh_level must be finite");
  if (options.sigma_g) validate(options.sigma_g_options);
  // KBMOD: a num_obs above the number of exposures (or -1) means "every exposure".
  const int min_obs = (options.num_obs < 0 || options.num_obs > E) ? E : options.num_obs;
  const double coeff =
      options.sigma_g ? sigma_g_coefficient(options.sigma_g_options.low_percentile,
                                            options.sigma_g_options.high_percentile)
                      : 0.0;

  const std::int64_t n = std::int64_t(candidates.size());
  std::vector<Detection> slots(n);
  std::vector<std::uint8_t> verdict(n, 0);  // 0 kept, 1 likelihood, 2 observations
  std::string failure;

#pragma omp parallel
  {
    std::vector<double> scratch;
#pragma omp for schedule(dynamic, 256)
    for (std::int64_t i = 0; i < n; ++i) {
      const Candidate& c = candidates[i];
      Detection d;
      d.candidate = c;
      try {
        d.curve = curve_of(i);
      } catch (const Error& error) {
#pragma omp critical(shiftstack_filter_failure)
        if (failure.empty()) failure = error.what();
        continue;
      }
      d.obs_valid = options.sigma_g
                        ? sigma_g_clip_with(likelihood_curve(d.curve), options.sigma_g_options, coeff, scratch)
                        : d.curve.valid;
      double A = 0, B = 0;
      int count = 0;
      for (int e = 0; e < E; ++e)
        if (d.obs_valid[e]) {
          A += d.curve.psi[e];
          B += d.curve.phi[e];
          ++count;
        }
      d.obs_count = count;
      d.likelihood = B > 0 ? A / std::sqrt(B) : -INFINITY;
      d.flux = B > 0 ? A / B : 0.0;
      if (!(d.likelihood >= options.lh_level)) {
        verdict[i] = 1;
      } else if (count < min_obs) {
        verdict[i] = 2;
      } else {
        slots[i] = std::move(d);  // rejected curves are dropped at once: N x E doubles add up
      }
    }
  }
  require(failure.empty(), failure);

  std::vector<Detection> kept;
  FilterStats s;
  s.input = n;
  for (std::int64_t i = 0; i < n; ++i) {
    if (verdict[i] == 1) {
      ++s.below_likelihood;
    } else if (verdict[i] == 2) {
      ++s.too_few_observations;
    } else {
      kept.push_back(std::move(slots[i]));
    }
  }
  s.kept = std::int64_t(kept.size());
  if (stats) *stats = s;
  return kept;
}

}  // namespace

std::vector<Detection> filter_candidates(const std::vector<Candidate>& candidates,
                                         const LikelihoodStack& likelihood, const MotionBank& bank,
                                         const FilterOptions& options, FilterStats* stats) {
  auto curve_of = [&](std::int64_t i) {
    const Candidate& c = candidates[i];
    return light_curve(likelihood, bank, c.x, c.y, std::size_t(c.velocity));
  };
  return filter_with(candidates, likelihood.exposures, curve_of, options, stats);
}

std::vector<Detection> filter_candidates(const std::vector<Candidate>& candidates,
                                         std::vector<LightCurve> curves, int exposures,
                                         const FilterOptions& options, FilterStats* stats) {
  require(curves.size() == candidates.size(), "filter: " + std::to_string(curves.size()) +
                                                  " light curves for " + std::to_string(candidates.size()) +
                                                  " candidates");
  for (const LightCurve& c : curves)
    require(c.size() == exposures && int(c.phi.size()) == exposures && int(c.valid.size()) == exposures,
            "filter: a light curve does not have " + std::to_string(exposures) + " epochs");
  auto curve_of = [&](std::int64_t i) { return std::move(curves[i]); };
  return filter_with(candidates, exposures, curve_of, options, stats);
}

}  // namespace shiftstack
