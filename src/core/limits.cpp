#include "shiftstack/limits.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "shiftstack/error.hpp"
#include "shiftstack/search.hpp"

namespace shiftstack {

namespace {

std::string gigabytes(double bytes) {
  char text[48];
  std::snprintf(text, sizeof text, "%.3g GB", bytes / 1e9);
  return text;
}

std::string number(double v) {
  char text[48];
  std::snprintf(text, sizeof text, "%.6g", v);
  return text;
}

}  // namespace

std::uint64_t parse_byte_size(const std::string& text, const std::string& what) {
  std::size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    throw Error(what + " = '" + text + "' is not a size (a number of bytes, or with K, M, G or T)");
  }
  std::string suffix = text.substr(used);
  while (!suffix.empty() && suffix.back() == ' ') suffix.pop_back();
  if (!suffix.empty() && (suffix.back() == 'B' || suffix.back() == 'b')) suffix.pop_back();
  double scale = 1;
  if (suffix.size() == 1) {
    switch (std::toupper(static_cast<unsigned char>(suffix[0]))) {
      case 'K': scale = 1024.0; break;
      case 'M': scale = 1024.0 * 1024; break;
      case 'G': scale = 1024.0 * 1024 * 1024; break;
      case 'T': scale = 1024.0 * 1024 * 1024 * 1024; break;
      default: scale = 0;
    }
  } else if (!suffix.empty()) {
    scale = 0;
  }
  const double bytes = value * scale;
  if (!(scale > 0) || !(bytes >= 1) || bytes > 9e18)
    throw Error(what + " = '" + text + "' is not a size (a positive number of bytes, or with K, M, G or T)");
  return std::uint64_t(bytes);
}

std::uint64_t memory_budget_bytes() {
  if (const char* env = std::getenv("SHIFTSTACK_MEMORY_BUDGET"); env && *env)
    return parse_byte_size(env, "SHIFTSTACK_MEMORY_BUDGET");
  const double memory = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGE_SIZE));
  return std::uint64_t(0.5 * memory);
}

SearchEstimate check_search_limits(const MotionBank& bank, int width, int height, std::int64_t origins,
                                   std::size_t bytes_per_pair, int top_k, const SearchLimits& limits,
                                   const std::vector<std::string>& exposure_labels) {
  SearchEstimate out;
  const int E = bank.exposures();
  const double V = double(bank.size());
  out.trials = double(origins) * V;
  out.paired_samples = out.trials * E;
  if (!(out.trials <= limits.max_trials))
    throw Error("the search has " + number(out.trials) + " trials (" + number(V) + " velocities x " +
                number(double(origins)) + " origins), more than the limit of " + number(limits.max_trials) +
                "; reduce the velocity grid (vx_steps, vy_steps or the generator's counts) or the search region");

  // Shift extremes, in double (round_shift saturates; this names the trajectory instead).
  double min_x = 0, max_x = 0, min_y = 0, max_y = 0, worst = -1;
  int worst_e = 0;
  Velocity worst_v;
  bool first = true;
  auto visit = [&](int e, Velocity v) {
    const double sx = v.vx * bank.dt(e) + bank.curve_at_x(e), sy = v.vy * bank.dt(e) + bank.curve_at_y(e);
    const double a = std::max(std::abs(sx), std::abs(sy));
    if (!(a <= worst) || first) {  // NaN counts as the worst
      worst = std::isnan(a) ? std::numeric_limits<double>::infinity() : a;
      worst_e = e;
      worst_v = v;
    }
    if (first) {
      min_x = max_x = sx;
      min_y = max_y = sy;
      first = false;
    }
    min_x = std::min(min_x, sx), max_x = std::max(max_x, sx);
    min_y = std::min(min_y, sy), max_y = std::max(max_y, sy);
  };
  if (bank.is_cartesian()) {
    // Shifts are linear in the velocity: the axis ends give the extremes.
    const auto [vx_lo, vx_hi] = std::minmax_element(bank.vx_axis.begin(), bank.vx_axis.end());
    const auto [vy_lo, vy_hi] = std::minmax_element(bank.vy_axis.begin(), bank.vy_axis.end());
    for (int e = 0; e < E; ++e)
      for (double vx : {*vx_lo, *vx_hi})
        for (double vy : {*vy_lo, *vy_hi}) visit(e, {vx, vy});
  } else {
    for (std::size_t v = 0; v < bank.size(); ++v)
      for (int e = 0; e < E; ++e) visit(e, bank.velocity(v));
  }
  out.max_abs_shift = worst;
  auto culprit = [&] {
    char text[256];
    std::snprintf(text, sizeof text, " at epoch %.6f is %.6g days from t_ref %.6f; velocity (%.6g, %.6g) px/day",
                  bank.epochs[std::size_t(worst_e)], bank.dt(worst_e), bank.t_ref, worst_v.vx, worst_v.vy);
    const bool labelled = exposure_labels.size() == std::size_t(E);
    auto name = [&](int e) {
      return "exposure " + std::to_string(e) + (labelled ? " (" + exposure_labels[std::size_t(e)] + ")" : std::string());
    };
    std::string out = name(worst_e) + text;
    // With t_ref at mid-span a lone bad epoch and the first one are equally far from t_ref: name
    // the epoch farthest from the others' median as well, since that is the one to check.
    std::vector<double> sorted(bank.epochs.begin(), bank.epochs.end());
    if (sorted.size() >= 3) {
      std::nth_element(sorted.begin(), sorted.begin() + std::ptrdiff_t(sorted.size() / 2), sorted.end());
      const double median = sorted[sorted.size() / 2];
      int outlier = 0;
      for (int e = 1; e < E; ++e)
        if (std::abs(bank.epochs[std::size_t(e)] - median) > std::abs(bank.epochs[std::size_t(outlier)] - median))
          outlier = e;
      if (outlier != worst_e) {
        std::snprintf(text, sizeof text, " at epoch %.6f, %.6g days from the median epoch %.6f",
                      bank.epochs[std::size_t(outlier)], bank.epochs[std::size_t(outlier)] - median, median);
        out += "; the epoch farthest from the others is " + name(outlier) + text;
      }
    }
    return out;
  };
  if (!(worst <= limits.max_shift_pixels))
    throw Error("a trajectory of the bank shifts by " + number(worst) + " px (" + culprit() +
                "), beyond the limit of " + number(limits.max_shift_pixels) +
                " px: check the epochs (MJD keywords), the reference time and the velocity range");

  const double span_x = std::ceil(max_x - min_x) + 2, span_y = std::ceil(max_y - min_y) + 2;
  const double tables = V * E * 12.0;  // per trajectory and exposure: x, y and a pixel offset (int32)
  const double band = double(E) * (width + span_x) * (1 + span_y) * double(bytes_per_pair);
  const double topk = double(origins) * top_k * double(sizeof(Candidate));
  out.memory_bytes = tables + band + topk;
  const double budget = double(limits.memory_bytes ? limits.memory_bytes : memory_budget_bytes());
  if (!(out.memory_bytes <= budget)) {
    std::string why = "the search needs about " + gigabytes(out.memory_bytes) + " (shift tables " + number(V) +
                      " velocities x " + std::to_string(E) + " exposures: " + gigabytes(tables) + "; padded band of " +
                      number(span_x) + " x " + number(span_y) + " px shift span: " + gigabytes(band) +
                      (top_k > 0 ? "; top-" + std::to_string(top_k) + " output: " + gigabytes(topk) : std::string()) +
                      "), more than the memory budget of " + gigabytes(budget) +
                      " (SHIFTSTACK_MEMORY_BUDGET, or search --memory-budget)";
    if (band >= tables && band >= topk)
      why += "; the shifts span that far because " + culprit() + ": check the epochs and the velocity range";
    else if (tables >= topk)
      why += "; reduce the velocity grid";
    throw Error(why);
  }
  (void)height;
  out.summary = number(V) + " velocities x " + number(double(origins)) + " origins = " + number(out.trials) +
                " trials, " + number(out.paired_samples) + " paired samples; planned memory " +
                gigabytes(out.memory_bytes) + " of a " + gigabytes(budget) + " budget";
  return out;
}

}  // namespace shiftstack
