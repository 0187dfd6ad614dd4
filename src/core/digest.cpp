#include <boost/math/distributions/normal.hpp>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "shiftstack/digest.hpp"
#include "shiftstack/error.hpp"

namespace shiftstack {

double normal_upper_tail(double z) {
  return boost::math::cdf(boost::math::complement(boost::math::normal_distribution<double>(), z));
}

double inverse_normal_upper_tail(double p) {
  require(p > 0 && p < 1, "normal tail probability must be in (0, 1), got " + std::to_string(p));
  return boost::math::quantile(
      boost::math::complement(boost::math::normal_distribution<double>(), p));
}

double bonferroni_threshold(double alpha, double trials) {
  require(alpha > 0 && alpha < 1, "alpha must be in (0, 1), got " + std::to_string(alpha));
  require(trials >= 1, "Bonferroni threshold needs at least one trial");
  return inverse_normal_upper_tail(alpha / trials);
}

void Digest::merge(const Digest& other) {
  sumA += other.sumA;
  sumB += other.sumB;
  count += other.count;
  scored += other.scored;
  if (other.argmax_velocity >= 0 &&
      (argmax_velocity < 0 || other.maxZ > maxZ ||
       (other.maxZ == maxZ && precedes(other.argmax_velocity, other.argmax_y, other.argmax_x)))) {
    maxZ = other.maxZ;
    argmax_x = other.argmax_x;
    argmax_y = other.argmax_y;
    argmax_velocity = other.argmax_velocity;
  }
}

namespace {
double relative(double reference, double test) {
  const double scale = std::abs(reference);
  return scale > 0 ? std::abs(test - reference) / scale : std::abs(test - reference);
}
}  // namespace

DigestComparison compare(const Digest& ref, const Digest& test, const DigestTolerance& tol,
                         std::int64_t near_threshold) {
  DigestComparison out;
  out.rel_sumA = relative(ref.sumA, test.sumA);
  out.rel_sumB = relative(ref.sumB, test.sumB);
  out.d_maxZ = test.maxZ - ref.maxZ;
  out.d_count = test.count - ref.count;
  auto fail = [&](const std::string& what) {
    out.agrees = false;
    out.failures.push_back(what);
  };
  char line[256];
  if (tol.rel_sumA >= 0 && !(out.rel_sumA <= tol.rel_sumA)) {
    std::snprintf(line, sizeof line, "sumA differs by %.3g relative (tolerance %.3g)", out.rel_sumA,
                  tol.rel_sumA);
    fail(line);
  }
  if (tol.rel_sumB >= 0 && !(out.rel_sumB <= tol.rel_sumB)) {
    std::snprintf(line, sizeof line, "sumB differs by %.3g relative (tolerance %.3g)", out.rel_sumB,
                  tol.rel_sumB);
    fail(line);
  }
  if (!(std::abs(out.d_maxZ) <= tol.abs_maxZ)) {
    std::snprintf(line, sizeof line, "maxZ %.6f vs %.6f (tolerance %.3g)", test.maxZ, ref.maxZ,
                  tol.abs_maxZ);
    fail(line);
  }
  if (test.argmax_x != ref.argmax_x || test.argmax_y != ref.argmax_y ||
      test.argmax_velocity != ref.argmax_velocity) {
    std::snprintf(line, sizeof line, "argmax (x=%lld, y=%lld, v=%lld) vs (x=%lld, y=%lld, v=%lld)",
                  (long long)test.argmax_x, (long long)test.argmax_y,
                  (long long)test.argmax_velocity, (long long)ref.argmax_x,
                  (long long)ref.argmax_y, (long long)ref.argmax_velocity);
    fail(line);
  }
  // Reduced-precision codes may round a tiny phi to "no information"; fp32 paths must match.
  if (tol.count_fraction == 0 && test.scored != ref.scored) {
    std::snprintf(line, sizeof line, "scored trials %lld vs %lld", (long long)test.scored,
                  (long long)ref.scored);
    fail(line);
  }
  const std::int64_t allowed =
      tol.count_fraction > 0
          ? std::int64_t(std::floor(tol.count_fraction * double(ref.count)))
          : std::max<std::int64_t>(near_threshold, 0);
  if (std::llabs(out.d_count) > allowed) {
    std::snprintf(line, sizeof line, "count %lld vs %lld (allowed difference %lld)",
                  (long long)test.count, (long long)ref.count, (long long)allowed);
    fail(line);
  }
  return out;
}

std::string to_json(const Digest& d) {
  nlohmann::json j = {{"sumA", d.sumA},
                      {"sumB", d.sumB},
                      {"maxZ", d.maxZ},
                      {"argmax", {{"x", d.argmax_x}, {"y", d.argmax_y}, {"velocity", d.argmax_velocity}}},
                      {"count", d.count},
                      {"z_thr", d.z_thr},
                      {"scored", d.scored},
                      {"trials", d.trials}};
  return j.dump();
}

std::string describe(const Digest& d) {
  char line[320];
  std::snprintf(line, sizeof line,
                "sumA=%.9g sumB=%.9g maxZ=%.5f at (x=%lld, y=%lld, v=%lld) count(Z>%.4f)=%lld "
                "scored=%lld/%lld",
                d.sumA, d.sumB, d.maxZ, (long long)d.argmax_x, (long long)d.argmax_y,
                (long long)d.argmax_velocity, d.z_thr, (long long)d.count, (long long)d.scored,
                (long long)d.trials);
  return line;
}

}  // namespace shiftstack
