#include <algorithm>
#include <cmath>
#include <vector>

#include "core/likelihood_kernels.hpp"
#include "shiftstack/error.hpp"
#include "shiftstack/likelihood.hpp"

namespace shiftstack {

namespace {

using detail::Kernel;

void detect_separable(Kernel& k) {
  const int nx = 2 * k.rx + 1, ny = 2 * k.ry + 1;
  std::vector<double> rows(ny, 0), cols(nx, 0);
  double total = 0, peak = 0;
  for (int j = 0; j < ny; ++j)
    for (int i = 0; i < nx; ++i) {
      const double v = k.values[std::size_t(j) * nx + i];
      rows[j] += v;
      cols[i] += v;
      total += v;
      peak = std::max(peak, std::abs(v));
    }
  if (total == 0 || peak == 0) return;
  for (int j = 0; j < ny; ++j)
    for (int i = 0; i < nx; ++i)
      // A separable PSF stored as float is an outer product only to float rounding (~1e-7 of
      // its peak); 1e-6 accepts that and nothing visibly different.
      if (std::abs(k.values[std::size_t(j) * nx + i] - rows[j] * cols[i] / total) > 1e-6 * peak)
        return;
  k.column = rows;
  k.row = cols;
  for (double& c : k.column) c /= total;
  k.separable = true;
}

// PSF P(d) with d = offset from the kernel centre.
Kernel psf_kernel(const Image<float>& psf) {
  Kernel k;
  k.rx = psf.width / 2;
  k.ry = psf.height / 2;
  k.values.assign(psf.pixels.begin(), psf.pixels.end());
  return k;
}

// K(d) = P(d - a) * P(d - b) over the union of both supports: Cov(psi(p + a), psi(p + b)) is the
// correlation of w with this kernel evaluated at p.
Kernel product_kernel(const Kernel& psf, int ax, int ay, int bx, int by) {
  Kernel k;
  k.rx = psf.rx + 1;
  k.ry = psf.ry + 1;
  k.values.assign(std::size_t(2 * k.rx + 1) * (2 * k.ry + 1), 0.0);
  auto P = [&](int dx, int dy) {
    return (std::abs(dx) <= psf.rx && std::abs(dy) <= psf.ry) ? psf.at(dx, dy) : 0.0;
  };
  for (int dy = -k.ry; dy <= k.ry; ++dy)
    for (int dx = -k.rx; dx <= k.rx; ++dx)
      k.values[std::size_t(dy + k.ry) * (2 * k.rx + 1) + dx + k.rx] =
          P(dx - ax, dy - ay) * P(dx - bx, dy - by);
  detect_separable(k);
  return k;
}

// `tmp` and `column_sum` are scratch buffers reused across calls (fresh pages are slow to touch).
void correlate(const std::vector<double>& in, int width, int height, const Kernel& k, float* out,
               std::vector<double>& tmp, std::vector<double>& column_sum) {
  if (k.separable) {
    // Rows first into a double buffer, then columns. Each pass adds one tap at a time over a
    // contiguous run of pixels, so the inner loops vectorize.
    tmp.assign(in.size(), 0.0);
    column_sum.resize(width);
    for (int y = 0; y < height; ++y) {
      const double* src = in.data() + std::size_t(y) * width;
      double* dst = tmp.data() + std::size_t(y) * width;
      for (int dx = -k.rx; dx <= k.rx; ++dx) {
        const double c = k.row[dx + k.rx];
        const int x_lo = std::max(0, -dx), x_hi = std::min(width, width - dx);
        for (int x = x_lo; x < x_hi; ++x) dst[x] += c * src[x + dx];
      }
    }
    for (int y = 0; y < height; ++y) {
      std::fill(column_sum.begin(), column_sum.end(), 0.0);
      for (int dy = std::max(-k.ry, -y); dy <= std::min(k.ry, height - 1 - y); ++dy) {
        const double c = k.column[dy + k.ry];
        const double* src = tmp.data() + std::size_t(y + dy) * width;
        for (int x = 0; x < width; ++x) column_sum[x] += c * src[x];
      }
      float* dst = out + std::size_t(y) * width;
      for (int x = 0; x < width; ++x) dst[x] = float(column_sum[x]);
    }
    return;
  }
  for (int y = 0; y < height; ++y)
    for (int x = 0; x < width; ++x) {
      double sum = 0;
      for (int dy = std::max(-k.ry, -y); dy <= std::min(k.ry, height - 1 - y); ++dy)
        for (int dx = std::max(-k.rx, -x); dx <= std::min(k.rx, width - 1 - x); ++dx)
          sum += k.at(dx, dy) * in[std::size_t(y + dy) * width + x + dx];
      out[std::size_t(y) * width + x] = float(sum);
    }
}

}  // namespace

detail::LikelihoodKernels detail::likelihood_kernels(const Image<float>& psf_image) {
  LikelihoodKernels k;
  k.psf = psf_kernel(psf_image);
  detect_separable(k.psf);
  k.psf_squared = k.psf;
  for (double& v : k.psf_squared.values) v *= v;
  for (double& v : k.psf_squared.row) v *= v;
  for (double& v : k.psf_squared.column) v *= v;
  return k;
}

LikelihoodStack compute_likelihood(const ExposureStack& stack, bool with_covariances) {
  validate(stack);
  LikelihoodStack out;
  out.width = stack.width();
  out.height = stack.height();
  out.exposures = stack.size();
  const std::size_t plane = out.plane_size(), total = plane * out.exposures;
  out.psi.resize(total);
  out.phi.resize(total);
  if (with_covariances) {
    out.cov_right.resize(total);
    out.cov_down.resize(total);
    out.cov_diag.resize(total);
    out.cov_antidiag.resize(total);
  }
  for (const auto& x : stack.exposures) {
    out.throughput.push_back(x.throughput);
    out.epochs.push_back(x.epoch);
  }

#pragma omp parallel
  {
  std::vector<double> weight(plane), weighted_science(plane), tmp, column_sum;
#pragma omp for schedule(dynamic, 1)
  for (int e = 0; e < out.exposures; ++e) {
    const Exposure& x = stack.exposures[e];
    // w = 1/V where unmasked; masked pixels get weight 0 and their (possibly NaN) science is unused.
    for (std::size_t p = 0; p < plane; ++p) {
      const bool masked = !x.mask.empty() && x.mask.pixels[p];
      weight[p] = masked ? 0.0 : 1.0 / double(x.variance.pixels[p]);
      weighted_science[p] = masked ? 0.0 : double(x.science.pixels[p]) * weight[p];
    }
    const detail::LikelihoodKernels kernels = detail::likelihood_kernels(x.psf);
    const Kernel& psf = kernels.psf;
    const Kernel& psf_squared = kernels.psf_squared;
    const std::size_t offset = std::size_t(e) * plane;
    correlate(weighted_science, out.width, out.height, psf, out.psi.data() + offset, tmp, column_sum);
    correlate(weight, out.width, out.height, psf_squared, out.phi.data() + offset, tmp, column_sum);
    if (with_covariances) {
      correlate(weight, out.width, out.height, product_kernel(psf, 0, 0, 1, 0),
                out.cov_right.data() + offset, tmp, column_sum);
      correlate(weight, out.width, out.height, product_kernel(psf, 0, 0, 0, 1),
                out.cov_down.data() + offset, tmp, column_sum);
      correlate(weight, out.width, out.height, product_kernel(psf, 0, 0, 1, 1),
                out.cov_diag.data() + offset, tmp, column_sum);
      correlate(weight, out.width, out.height, product_kernel(psf, 1, 0, 0, 1),
                out.cov_antidiag.data() + offset, tmp, column_sum);
    }
  }
  }
  return out;
}

}  // namespace shiftstack
