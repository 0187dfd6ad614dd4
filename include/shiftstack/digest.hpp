// The digest every search returns and every comparison uses (SPEC section 4).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace shiftstack {

// One-sided Bonferroni threshold z = Phi_bar^{-1}(alpha / trials), from Boost.Math.
double bonferroni_threshold(double alpha, double trials);
// Upper normal tail Phi_bar(z) and its inverse (Boost.Math).
double normal_upper_tail(double z);
double inverse_normal_upper_tail(double p);

struct Digest {
  double sumA = 0, sumB = 0;     // over all scored trials (B > 0)
  double maxZ = -1e300;          // best score
  std::int64_t argmax_x = -1, argmax_y = -1, argmax_velocity = -1;
  std::int64_t count = 0;        // trials with Z > z_thr
  double z_thr = 0;
  std::int64_t scored = 0;       // trials with B > 0
  std::int64_t trials = 0;       // all trials (origins x velocities)

  // Folds another partial digest in. Ties on maxZ go to the smaller (velocity, y, x) so that
  // every engine and every reduction order names the same argmax.
  void merge(const Digest& other);
  // Offers one trial to the digest.
  void add(double A, double B, double Z, std::int64_t x, std::int64_t y, std::int64_t velocity) {
    sumA += A;
    sumB += B;
    ++scored;
    if (Z > z_thr) ++count;
    if (Z > maxZ || (Z == maxZ && precedes(velocity, y, x))) {
      maxZ = Z;
      argmax_x = x;
      argmax_y = y;
      argmax_velocity = velocity;
    }
  }
  bool precedes(std::int64_t velocity, std::int64_t y, std::int64_t x) const {
    if (velocity != argmax_velocity) return velocity < argmax_velocity;
    if (y != argmax_y) return y < argmax_y;
    return x < argmax_x;
  }
};

// Tolerances of SPEC 4.
struct DigestTolerance {
  double rel_sumA, rel_sumB;  // |d sum / sum|
  double abs_maxZ;            // |d maxZ|
  double count_band;          // fp32: trials within this of the threshold may differ (1e-4)
  double count_fraction;      // reduced precision: counts within this fraction (0.005)
  static DigestTolerance fp32() { return {1e-5, 1e-5, 1e-4, 1e-4, 0.0}; }
  // SPEC 4 bounds no sums for reduced precision (quantization moves them); -1 = not checked.
  static DigestTolerance reduced() { return {-1, -1, 2e-3, 0.0, 0.005}; }
};

struct DigestComparison {
  bool agrees = true;
  std::vector<std::string> failures;  // one line per violated tolerance
  double rel_sumA = 0, rel_sumB = 0, d_maxZ = 0;
  std::int64_t d_count = 0;
};

// Compares test against reference. For fp32 tolerances, `near_threshold` is how many of the
// reference's trials lie within count_band of z_thr (counts may differ by at most that); pass -1
// when unknown, which then requires equal counts.
DigestComparison compare(const Digest& reference, const Digest& test, const DigestTolerance& tol,
                         std::int64_t near_threshold = -1);

std::string to_json(const Digest& digest);
std::string describe(const Digest& digest);  // one human-readable line

}  // namespace shiftstack
