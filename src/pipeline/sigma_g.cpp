// Robust clipping of per-exposure likelihood curves. Percentiles come from selection
// (std::nth_element, linear on average) instead of the insertion sort KBMOD's C++ filter used,
// which was quadratic in the number of exposures.
#include <algorithm>
#include <cmath>

#include <boost/math/distributions/normal.hpp>

#include "pipeline/internal.hpp"
#include "shiftstack/error.hpp"
#include "shiftstack/pipeline.hpp"

namespace shiftstack {

void validate(const SigmaGOptions& o) {
  require(std::isfinite(o.low_percentile) && std::isfinite(o.high_percentile) &&
              o.low_percentile > 0 && o.high_percentile < 100 &&
              o.low_percentile < o.high_percentile,
          "sigmaG_lims must satisfy 0 < low < high < 100, got [" + std::to_string(o.low_percentile) +
              ", " + std::to_string(o.high_percentile) + "]");
  require(std::isfinite(o.n_sigma) && o.n_sigma > 0,
          "sigma-G n_sigma must be > 0, got " + std::to_string(o.n_sigma));
}

double sigma_g_coefficient(double low, double high) {
  SigmaGOptions o;
  o.low_percentile = low;
  o.high_percentile = high;
  validate(o);
  const boost::math::normal_distribution<double> unit;
  return 1.0 / (boost::math::quantile(unit, high / 100) - boost::math::quantile(unit, low / 100));
}

double percentile(std::vector<double>& v, double percent) {
  require(!v.empty(), "percentile of an empty set");
  require(percent >= 0 && percent <= 100, "percentile must be in [0, 100]");
  const double position = percent / 100 * double(v.size() - 1);
  const std::size_t lo = std::size_t(std::floor(position));
  const double fraction = position - double(lo);
  std::nth_element(v.begin(), v.begin() + lo, v.end());
  const double lower = v[lo];
  if (fraction == 0 || lo + 1 >= v.size()) return lower;
  // After nth_element every element past lo is >= v[lo]: the next order statistic is their min.
  const double upper = *std::min_element(v.begin() + lo + 1, v.end());
  return lower + fraction * (upper - lower);
}

std::vector<std::uint8_t> sigma_g_clip(const std::vector<double>& lh, const SigmaGOptions& o,
                                       std::vector<double>& scratch) {
  return sigma_g_clip_with(lh, o, sigma_g_coefficient(o.low_percentile, o.high_percentile), scratch);
}

std::vector<std::uint8_t> sigma_g_clip_with(const std::vector<double>& lh, const SigmaGOptions& o,
                                            double coeff, std::vector<double>& scratch) {
  std::vector<std::uint8_t> keep(lh.size(), 0);
  scratch.clear();
  for (double v : lh)
    if (std::isfinite(v) && (!o.clip_negative || v > 0)) scratch.push_back(v);
  if (scratch.empty()) return keep;
  const double low = percentile(scratch, o.low_percentile);
  const double median = percentile(scratch, 50);
  const double high = percentile(scratch, o.high_percentile);
  // A floor on the spread so identical values keep a non-empty band (as KBMOD's filter).
  constexpr double min_spread = 1e-5;
  const double band = o.n_sigma * coeff * std::max(high - low, min_spread);
  for (std::size_t e = 0; e < lh.size(); ++e)
    keep[e] = std::isfinite(lh[e]) && lh[e] > median - band && lh[e] < median + band;
  return keep;
}

}  // namespace shiftstack
