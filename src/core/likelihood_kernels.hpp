// Internal: the correlation kernels behind psi and phi (SPEC 1), shared by the CPU computation
// (likelihood.cpp) and the CUDA one (cuda/likelihood_gpu.cu), so that both correlate with the
// same double-precision coefficients and the same separable factors.
#pragma once
#include <cstddef>
#include <vector>

#include "shiftstack/image.hpp"

namespace shiftstack::detail {

// A correlation kernel K over offsets d in [-rx, rx] x [-ry, ry]: out(x) = sum_d K(d) in(x + d),
// with pixels outside the image contributing nothing. When K is an outer product (a Gaussian PSF,
// and every product of shifted copies of one), the separable factors make it O(rx + ry) per pixel.
struct Kernel {
  int rx = 0, ry = 0;
  std::vector<double> values;      // (2ry+1) rows of (2rx+1)
  std::vector<double> row, column;  // K(dx, dy) = row[dx + rx] * column[dy + ry] when separable
  bool separable = false;
  double at(int dx, int dy) const { return values[std::size_t(dy + ry) * (2 * rx + 1) + dx + rx]; }
};

// psi correlates I w with the PSF, phi correlates w with the PSF squared (pointwise).
struct LikelihoodKernels {
  Kernel psf, psf_squared;
};
LikelihoodKernels likelihood_kernels(const Image<float>& psf);

}  // namespace shiftstack::detail
