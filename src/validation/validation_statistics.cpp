// The statistics behind the validation reports: PSF widths, which trials lie near masks, pooled
// null-bank variances with jackknife errors, Poisson tail probabilities, Wilson intervals.
#include <algorithm>
#include <boost/math/special_functions/gamma.hpp>  // within the Boost subset stage-deps.sh copies
#include <cmath>
#include <limits>
#include <vector>

#include "shiftstack/error.hpp"
#include "shiftstack/validation.hpp"
#include "validation/validation_internal.hpp"

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

Region window_away_from_masks(const std::vector<std::uint8_t>& flags, int W, int H, std::size_t velocities,
                              int side) {
  require(flags.size() == velocities * std::size_t(W) * H, "window_away_from_masks: flags do not match the image");
  const int w = std::min(side, W), h = std::min(side, H);
  // Summed-area table of the away-trial count per origin (over velocities).
  std::vector<std::int64_t> table(std::size_t(W + 1) * (H + 1), 0);
  auto at = [&](int x, int y) -> std::int64_t& { return table[std::size_t(y) * (W + 1) + x]; };
  const std::size_t plane = std::size_t(W) * H;
  for (int y = 0; y < H; ++y)
    for (int x = 0; x < W; ++x) {
      std::int64_t away = 0;
      for (std::size_t v = 0; v < velocities; ++v) away += flags[v * plane + std::size_t(y) * W + x] == 0;
      at(x + 1, y + 1) = away + at(x, y + 1) + at(x + 1, y) - at(x, y);
    }
  Region best{0, 0, w, h};
  std::int64_t best_count = -1;
  for (int y = 0; y + h <= H; ++y)
    for (int x = 0; x + w <= W; ++x) {
      const std::int64_t count = at(x + w, y + h) - at(x, y + h) - at(x + w, y) + at(x, y);
      if (count > best_count) best_count = count, best = {x, y, w, h};
    }
  return best;
}

}  // namespace validation_detail

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

}  // namespace shiftstack
