// Likelihood maps psi/phi per exposure (SPEC section 1) and, for fractional shifts, the
// covariances between neighbouring psi samples that exact bilinear normalization needs (SPEC 2).
#pragma once
#include <cstddef>
#include <vector>

#include "shiftstack/stack.hpp"

namespace shiftstack {

// Planes are stored exposure-major, then row-major: index = (e * height + y) * width + x.
struct LikelihoodStack {
  int width = 0, height = 0, exposures = 0;
  std::vector<float> psi;   // sum_p P(p-x) I(p) w(p)
  std::vector<float> phi;   // sum_p P(p-x)^2 w(p); 0 means "no information" (fully masked footprint)
  std::vector<double> throughput;  // a_e per exposure
  std::vector<double> epochs;      // t_e per exposure, stack order

  // Present only when built with covariances (fractional mode). Each is Cov(psi(p), psi(q)) =
  // sum_r P(r-p) P(r-q) w(r) for a neighbour q of p = (x, y):
  std::vector<float> cov_right;     // q = (x+1, y)
  std::vector<float> cov_down;      // q = (x,   y+1)
  std::vector<float> cov_diag;      // q = (x+1, y+1)
  std::vector<float> cov_antidiag;  // pair (x+1, y) with (x, y+1)
  bool has_covariances() const { return !cov_right.empty(); }

  std::size_t plane_size() const { return std::size_t(width) * height; }
  std::size_t index(int e, int x, int y) const {
    return (std::size_t(e) * height + y) * width + x;
  }
};

// Validates the stack, then correlates each exposure with its PSF (masked pixels and pixels
// outside the image carry zero weight). With with_covariances, also fills the cov_* planes.
// Runs exposures in parallel.
LikelihoodStack compute_likelihood(const ExposureStack& stack, bool with_covariances = false);

}  // namespace shiftstack
