// KBMOD's thinning of the threshold crossings before light-curve filtering: its in-search
// sigma-G likelihood (gpu_filter), the best k per starting pixel (results_per_pixel) and the
// near-duplicate grid (near_dup_thresh). Kept apart from clustering: they run first, as in KBMOD.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <unordered_map>

#include "shiftstack/error.hpp"
#include "shiftstack/pipeline.hpp"

namespace shiftstack {

double prefilter_likelihood(const LightCurve& curve, double low_percentile, double high_percentile) {
  std::vector<int> valid;
  for (int e = 0; e < curve.size(); ++e)
    if (curve.valid.empty() || curve.valid[std::size_t(e)]) valid.push_back(e);
  const int n = int(valid.size());
  if (n == 0) return -std::numeric_limits<double>::infinity();
  std::vector<double> flux(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    const double phi = curve.phi[std::size_t(valid[std::size_t(i)])];
    flux[std::size_t(i)] = phi != 0 ? curve.psi[std::size_t(valid[std::size_t(i)])] / phi : 0.0;
  }
  std::vector<int> order(static_cast<std::size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return flux[std::size_t(a)] < flux[std::size_t(b)]; });
  auto index_of = [&](double p) {
    p = std::clamp(p, 0.0001, 0.9999);
    return std::clamp(int(std::ceil(n * p) + 0.001) - 1, 0, n - 1);
  };
  const int lo = index_of(low_percentile / 100), hi = index_of(high_percentile / 100), mid = std::clamp(int(std::ceil(n * 0.5) + 0.001) - 1, 0, n - 1);
  const double sigma_g = sigma_g_coefficient(low_percentile, high_percentile) *
                         (flux[std::size_t(order[std::size_t(hi)])] - flux[std::size_t(order[std::size_t(lo)])]);
  const double median = flux[std::size_t(order[std::size_t(mid)])];
  const double min_value = median - 2 * sigma_g, max_value = median + 2 * sigma_g;
  int start = 0;
  while (start < mid && flux[std::size_t(order[std::size_t(start)])] < min_value) ++start;
  int end = mid + 1;
  while (end < n && flux[std::size_t(order[std::size_t(end)])] <= max_value) ++end;
  double A = 0, B = 0;
  for (int i = start; i < end; ++i) {
    const int e = valid[std::size_t(order[std::size_t(i)])];
    A += curve.psi[std::size_t(e)];
    B += curve.phi[std::size_t(e)];
  }
  return B > 0 ? A / std::sqrt(B) : -std::numeric_limits<double>::infinity();
}

namespace {

int first_epoch(const MotionBank& bank) {
  int first = 0;
  for (int e = 1; e < bank.exposures(); ++e)
    if (bank.epochs[std::size_t(e)] < bank.epochs[std::size_t(first)]) first = e;
  return first;
}

std::uint64_t pack(std::int64_t a, std::int64_t b, std::int64_t c = 0, std::int64_t d = 0) {
  auto field = [](std::int64_t v) { return std::uint64_t(v + (1 << 15)) & 0xffff; };
  return (field(a) << 48) | (field(b) << 32) | (field(c) << 16) | field(d);
}

// The best of each group (higher key; ties: earlier), returned in input order.
template <typename KeyOf>
std::vector<std::size_t> best_of_groups(std::size_t n, const std::vector<double>& key, int per_group, KeyOf group_of) {
  std::unordered_map<std::uint64_t, std::vector<std::size_t>> groups;
  for (std::size_t i = 0; i < n; ++i) groups[group_of(i)].push_back(i);
  std::vector<std::size_t> keep;
  for (auto& [g, members] : groups) {
    std::stable_sort(members.begin(), members.end(), [&](std::size_t a, std::size_t b) { return key[a] > key[b]; });
    const std::size_t count = std::min(members.size(), std::size_t(per_group));
    keep.insert(keep.end(), members.begin(), members.begin() + std::ptrdiff_t(count));
  }
  std::sort(keep.begin(), keep.end());
  return keep;
}

}  // namespace

std::vector<std::size_t> best_per_pixel(const std::vector<Candidate>& candidates, const std::vector<double>& key,
                                        const MotionBank& bank, int k) {
  require(k >= 1, "results_per_pixel must be >= 1");
  require(key.size() == candidates.size(), "best_per_pixel: one key per candidate");
  if (candidates.empty()) return {};
  const int first = first_epoch(bank);
  return best_of_groups(candidates.size(), key, k, [&](std::size_t i) {
    const Candidate& c = candidates[i];
    const PixelIndex p = sampled_pixel(bank, c.x, c.y, std::size_t(c.velocity), first);
    return pack(p.x, p.y);
  });
}

std::vector<std::size_t> near_duplicate_survivors(const std::vector<Candidate>& candidates, const std::vector<double>& key,
                                                  const MotionBank& bank, double bin_width) {
  require(std::isfinite(bin_width) && bin_width >= 1, "near_dup_thresh must be >= 1 pixel");
  require(key.size() == candidates.size(), "near_duplicate_survivors: one key per candidate");
  if (candidates.empty()) return {};
  int first = 0, last = 0;
  for (int e = 1; e < bank.exposures(); ++e) {
    if (bank.epochs[std::size_t(e)] < bank.epochs[std::size_t(first)]) first = e;
    if (bank.epochs[std::size_t(e)] > bank.epochs[std::size_t(last)]) last = e;
  }
  const double span = bank.epochs[std::size_t(last)] - bank.epochs[std::size_t(first)];
  return best_of_groups(candidates.size(), key, 1, [&](std::size_t i) {
    // KBMOD's bins: the starting pixel and that pixel moved by the velocity over the span,
    // divided by the bin width and truncated towards zero (Python's int()).
    const Candidate& c = candidates[i];
    const PixelIndex a = sampled_pixel(bank, c.x, c.y, std::size_t(c.velocity), first);
    const Velocity v = bank.velocity(std::size_t(c.velocity));
    auto bin = [&](double p) { return std::int64_t(std::trunc(p / bin_width)); };
    return pack(bin(a.x), bin(a.y), bin(a.x + span * v.vx), bin(a.y + span * v.vy));
  });
}

}  // namespace shiftstack
