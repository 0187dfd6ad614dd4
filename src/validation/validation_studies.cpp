// Two side studies of the validation: the quantization efficiency eta of the storage encodings
// (SPEC 5) and the null variance of fractional shifts with exact and naive normalization (SPEC 2).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <complex>
#include <iostream>
#include <limits>
#include <numbers>

#include "shiftstack/digest.hpp"
#include "shiftstack/error.hpp"
#include "shiftstack/likelihood.hpp"
#include "shiftstack/search.hpp"
#include "shiftstack/validation.hpp"
#include "validation/validation_internal.hpp"

namespace shiftstack {

using namespace validation_detail;

namespace {

// ---- quantizers of a unit-variance value ---------------------------------------------------

double quantize_fp16(double x) { return half_to_float(float_to_half(float(x))); }

// The project's int8 psi codes with the noise scale exact: steps of psi_step_sigmas, values
// beyond the code range kept exactly (the exception path).
double quantize_int8_noise_scaled(double x) {
  const double step = int8_codes::psi_step_sigmas;
  const long code = std::lround(x / step);
  return std::labs(code) > int8_codes::psi_max ? x : double(code) * step;
}

// 8-bit codes whose range is set by a bright residual at 100 sigma: 127 steps up to 100 sigma.
constexpr double kBrightResidualSigmas = 100;
constexpr int kBrightCodes = 127;
double quantize_int8_bright(double x) {
  const double step = kBrightResidualSigmas / kBrightCodes;
  const long code = std::clamp<long>(std::lround(x / step), -kBrightCodes, kBrightCodes);
  return double(code) * step;
}

double quantize_sign(double x) { return x > 0 ? 1.0 : (x < 0 ? -1.0 : 0.0); }

// Rounding step of half precision at |x| (normal range; subnormals have the fixed step 2^-24).
double half_step(double x) {
  const double a = std::abs(x);
  if (a < std::ldexp(1.0, -14)) return std::ldexp(1.0, -24);
  return std::ldexp(1.0, int(std::floor(std::log2(a))) - 10);
}

// E[step(X)^2] for a unit normal X with the half-precision step, summed over binades.
double half_mean_square_step() {
  double total = std::ldexp(1.0, -48) * (1 - 2 * normal_upper_tail(std::ldexp(1.0, -14)));
  for (int k = -14; k < 16; ++k) {
    const double lo = std::ldexp(1.0, k), hi = std::ldexp(1.0, k + 1);
    const double probability = 2 * (normal_upper_tail(lo) - normal_upper_tail(hi));
    total += probability * std::ldexp(1.0, 2 * (k - 10));
  }
  return total;
}

double eta_from_step(double mean_square_step) { return 1 / std::sqrt(1 + mean_square_step / 12); }

QuantizationRow measure(const std::string& name, const std::string& formula, double step, double predicted,
                        double (*quantize)(double), std::size_t samples, int batches, std::uint64_t seed) {
  QuantizationRow row{name, formula, step, predicted, 0, 0};
  std::vector<double> etas;
  for (int b = 0; b < batches; ++b) etas.push_back(measured_eta(quantize, samples, seed + std::uint64_t(b)));
  double mean = 0;
  for (double e : etas) mean += e;
  mean /= double(etas.size());
  double ss = 0;
  for (double e : etas) ss += (e - mean) * (e - mean);
  row.measured = mean;
  row.measured_se = etas.size() > 1 ? std::sqrt(ss / double(etas.size() - 1) / double(etas.size())) : 0.0;
  return row;
}

// eta of an encoder on real likelihood maps: X = psi / sqrt(phi) per pixel (unit variance under
// the null), Q the decoded psi in the same units; the prediction uses each pixel's own step.
QuantizationRow measure_encoder(const LikelihoodStack& maps, Encoding encoding, int groups) {
  const EncodedStack encoded = encode(maps, encoding);
  const std::size_t plane = maps.plane_size();
  std::vector<double> xq(groups, 0), xx(groups, 0), qq(groups, 0);
  double step_square = 0, steps = 0;
  for (int e = 0; e < maps.exposures; ++e) {
    const int g = e % groups;
    const double a = maps.throughput[e];
    // The per-image scale of this exposure, recovered from the decode weight.
    const double unit = encoded.psi_weight[e] / a;
    for (std::size_t p = 0; p < plane; ++p) {
      const double phi = maps.phi[e * plane + p];
      if (!(phi > 0)) continue;
      const DecodedSample d = decode(encoded, e, p);
      if (!d.valid) continue;
      const double sd = std::sqrt(phi);
      const double x = maps.psi[e * plane + p] / sd, q = d.psi / a / sd;
      xq[g] += x * q, xx[g] += x * x, qq[g] += q * q;
      const double code_value = maps.psi[e * plane + p] / unit;
      const double step = encoding == Encoding::fp16 ? half_step(code_value) * unit / sd : unit / sd;
      // Values on the int8 exception path are exact: no rounding step.
      const bool exact = encoding == Encoding::int8 && std::abs(std::lround(code_value)) > int8_codes::psi_max;
      step_square += exact ? 0.0 : step * step;
      steps += 1;
    }
  }
  std::vector<double> etas;
  double sum_xq = 0, sum_xx = 0, sum_qq = 0;
  for (int g = 0; g < groups; ++g) {
    if (xx[g] > 0) etas.push_back(xq[g] / std::sqrt(xx[g] * qq[g]));
    sum_xq += xq[g], sum_xx += xx[g], sum_qq += qq[g];
  }
  double mean = 0;
  for (double e : etas) mean += e;
  mean /= double(etas.size());
  double ss = 0;
  for (double e : etas) ss += (e - mean) * (e - mean);
  QuantizationRow row;
  row.name = to_string(encoding) + " encoder on kit likelihood maps";
  row.formula = "1/sqrt(1 + mean(step_p^2)/12), step_p in units of each pixel's psi noise";
  row.step_sigmas = std::sqrt(step_square / steps);
  row.predicted = eta_from_step(step_square / steps);
  row.measured = sum_xq / std::sqrt(sum_xx * sum_qq);
  row.measured_se = etas.size() > 1 ? std::sqrt(ss / double(etas.size() - 1) / double(etas.size())) : 0.0;
  return row;
}

}  // namespace

std::vector<QuantizationRow> quantization_table(std::size_t samples, int batches, std::uint64_t seed,
                                                const KitOptions& kit) {
  require(samples >= 1000 && batches >= 2, "quantization_table: need >= 1000 samples and >= 2 batches");
  std::vector<QuantizationRow> rows;
  rows.push_back(measure("fp16 (unit-variance values)", "1/sqrt(1 + E[ulp16(X)^2]/12)",
                         std::sqrt(half_mean_square_step()), eta_from_step(half_mean_square_step()),
                         quantize_fp16, samples, batches, seed));
  const double d8 = int8_codes::psi_step_sigmas;
  rows.push_back(measure("8-bit noise-scaled (project int8: step sigma/12, exception path)",
                         "1/sqrt(1 + Delta^2/12)", d8, eta_from_step(d8 * d8), quantize_int8_noise_scaled,
                         samples, batches, seed + 1000));
  const double db = kBrightResidualSigmas / kBrightCodes;
  rows.push_back(measure("8-bit scaled to a bright residual at 100 sigma (step 100/127 sigma)",
                         "1/sqrt(1 + Delta^2/12)", db, eta_from_step(db * db), quantize_int8_bright, samples,
                         batches, seed + 2000));
  rows.push_back(measure("sign only (1 bit)", "sqrt(2/pi)", 0, std::sqrt(2 / std::numbers::pi), quantize_sign,
                         samples, batches, seed + 3000));
  KitOptions o = kit;
  o.inject = false;
  o.seed = seed;
  const LikelihoodStack maps = compute_likelihood(make_kit(o).stack);
  rows.push_back(measure_encoder(maps, Encoding::fp16, 8));
  rows.push_back(measure_encoder(maps, Encoding::int8, 8));
  return rows;
}

// ---- band-limited (Fourier-shift) route ------------------------------------------------------

namespace validation_detail {

double dirichlet(double t, int n) {
  const double denominator = std::sin(std::numbers::pi * t / n);
  // t a multiple of n: the limit is (-1)^{m (n - 1)} = 1 for odd n.
  if (std::abs(denominator) < 1e-12) return 1.0;
  return std::sin(std::numbers::pi * t) / (n * denominator);
}

BandLimitedGrid band_limited_grid(const ExposureStack& stack, const MotionBank& bank) {
  // SPEC 6: N >= W + max s - min s keeps the circular shift linear; odd N keeps the periodic
  // interpolant real (no unpaired Nyquist term). One more pixel covers the fractional part.
  double min_x = 0, max_x = 0, min_y = 0, max_y = 0;
  for (std::size_t v = 0; v < bank.size(); ++v)
    for (int e = 0; e < bank.exposures(); ++e) {
      min_x = std::min(min_x, bank.shift_x(v, e)), max_x = std::max(max_x, bank.shift_x(v, e));
      min_y = std::min(min_y, bank.shift_y(v, e)), max_y = std::max(max_y, bank.shift_y(v, e));
    }
  auto odd = [](int n) { return n % 2 ? n : n + 1; };
  return {odd(stack.width() + int(std::ceil(max_x) - std::floor(min_x)) + 1),
          odd(stack.height() + int(std::ceil(max_y) - std::floor(min_y)) + 1)};
}

namespace {

// The 1-D factors of a separable PSF (column and row sums); Error when it is not separable.
void psf_factors(const Image<float>& psf, std::vector<double>& fx, std::vector<double>& fy) {
  fx.assign(psf.width, 0.0);
  fy.assign(psf.height, 0.0);
  double total = 0;
  for (int y = 0; y < psf.height; ++y)
    for (int x = 0; x < psf.width; ++x) {
      fx[x] += psf(x, y), fy[y] += psf(x, y), total += psf(x, y);
    }
  for (double& v : fy) v /= total;
  double peak = 0;
  for (float v : psf.pixels) peak = std::max(peak, double(v));
  for (int y = 0; y < psf.height; ++y)
    for (int x = 0; x < psf.width; ++x)
      require(std::abs(psf(x, y) - fx[x] * fy[y]) <= 1e-5 * peak,
              "band-limited study: the PSF must be separable (an outer product), as the kit's Gaussians are");
}

// out[j][i] += scale * sum_{q,p} left[j][q] X[q][p] right[i][p]: X is rows x cols, left is
// out_rows x rows, right is out_cols x cols. `work` is rows x out_cols scratch.
void sandwich(const std::vector<double>& left, const std::vector<double>& X, const std::vector<double>& right,
              int rows, int cols, int out_rows, int out_cols, double scale, std::vector<double>& work,
              double* out) {
  work.assign(std::size_t(rows) * out_cols, 0.0);
  for (int q = 0; q < rows; ++q) {
    const double* x = &X[std::size_t(q) * cols];
    for (int i = 0; i < out_cols; ++i) {
      const double* r = &right[std::size_t(i) * cols];
      double sum = 0;
      for (int p = 0; p < cols; ++p) sum += x[p] * r[p];
      work[std::size_t(q) * out_cols + i] = sum;
    }
  }
  for (int j = 0; j < out_rows; ++j) {
    double* o = out + std::size_t(j) * out_cols;
    for (int q = 0; q < rows; ++q) {
      const double l = scale * left[std::size_t(j) * rows + q];
      if (l == 0) continue;
      const double* w = &work[std::size_t(q) * out_cols];
      for (int i = 0; i < out_cols; ++i) o[i] += l * w[i];
    }
  }
}

}  // namespace

BandLimitedPlanes band_limited_planes(const ExposureStack& stack, const LikelihoodStack& maps,
                                      const MotionBank& bank, std::size_t v, const BandLimitedGrid& grid) {
  const int W = stack.width(), H = stack.height();
  const std::size_t plane = std::size_t(W) * H;
  BandLimitedPlanes out;
  out.A.assign(plane, 0.0);
  out.B.assign(plane, 0.0);
  out.naive_B.assign(plane, 0.0);
  std::vector<double> hx(std::size_t(W) * W), hy(std::size_t(H) * H), mx(std::size_t(W) * W),
      my(std::size_t(H) * H), psi(plane), phi(plane), weight(plane), work, exact_e(plane), naive_e(plane);
  std::vector<double> fx, fy;
  for (int e = 0; e < stack.size(); ++e) {
    const Exposure& x = stack.exposures[e];
    const double sx = bank.shift_x(v, e), sy = bank.shift_y(v, e), a = maps.throughput[e];
    // h(origin + s - p) for origins and image pixels along each axis.
    for (int i = 0; i < W; ++i)
      for (int p = 0; p < W; ++p) hx[std::size_t(i) * W + p] = dirichlet(i + sx - p, grid.x);
    for (int j = 0; j < H; ++j)
      for (int q = 0; q < H; ++q) hy[std::size_t(j) * H + q] = dirichlet(j + sy - q, grid.y);
    // G(r; origin) = sum_p h(origin + s - p) P(r - p), p over the image (psi is zero-padded);
    // the exact variance weights w(r) by G_x^2 G_y^2.
    psf_factors(x.psf, fx, fy);
    const int rx = x.psf.width / 2, ry = x.psf.height / 2;
    for (int i = 0; i < W; ++i)
      for (int r = 0; r < W; ++r) {
        double g = 0;
        for (int p = std::max(0, r - rx); p <= std::min(W - 1, r + rx); ++p)
          g += hx[std::size_t(i) * W + p] * fx[r - p + rx];
        mx[std::size_t(i) * W + r] = g * g;
      }
    for (int j = 0; j < H; ++j)
      for (int r = 0; r < H; ++r) {
        double g = 0;
        for (int q = std::max(0, r - ry); q <= std::min(H - 1, r + ry); ++q)
          g += hy[std::size_t(j) * H + q] * fy[r - q + ry];
        my[std::size_t(j) * H + r] = g * g;
      }
    for (std::size_t p = 0; p < plane; ++p) {
      const bool masked = !x.mask.empty() && x.mask.pixels[p];
      weight[p] = masked ? 0.0 : 1.0 / double(x.variance.pixels[p]);
      psi[p] = maps.psi[e * plane + p];
      phi[p] = maps.phi[e * plane + p];
    }
    sandwich(hy, psi, hx, H, W, H, W, a, work, out.A.data());
    std::fill(exact_e.begin(), exact_e.end(), 0.0);
    std::fill(naive_e.begin(), naive_e.end(), 0.0);
    sandwich(hy, phi, hx, H, W, H, W, 1.0, work, naive_e.data());
    sandwich(my, weight, mx, H, W, H, W, 1.0, work, exact_e.data());
    for (std::size_t p = 0; p < plane; ++p) {
      out.naive_B[p] += a * a * naive_e[p];
      out.B[p] += a * a * exact_e[p];
    }
    if (x.mask.empty()) continue;
    const int dx = round_shift(sx), dy = round_shift(sy);
    for (int j = 0; j < H; ++j)
      for (int i = 0; i < W; ++i) {
        const int qx = i + dx, qy = j + dy;
        if (qx < 0 || qy < 0 || qx >= W || qy >= H || x.mask(qx, qy)) continue;
        bool edge = false;
        for (int ny = std::max(0, qy - 1); ny <= std::min(H - 1, qy + 1); ++ny)
          for (int nx = std::max(0, qx - 1); nx <= std::min(W - 1, qx + 1); ++nx) edge |= x.mask(nx, ny) != 0;
        const std::size_t p = std::size_t(j) * W + i;
        if (!edge || !(naive_e[p] > 0)) continue;
        const double ratio = exact_e[p] / naive_e[p];
        out.edge_ratio_sum += ratio;
        out.edge_ratio_max = std::max(out.edge_ratio_max, ratio);
        ++out.edge_samples;
      }
  }
  return out;
}

namespace {

using Complex = std::complex<double>;

// exp(2 pi i t / n) in double.
Complex turn(double t, int n) {
  const double angle = 2 * std::numbers::pi * t / n;
  return {std::cos(angle), std::sin(angle)};
}

// Row-major [rows][cols] complex matrix.
struct ComplexMatrix {
  int rows = 0, cols = 0;
  std::vector<Complex> v;
  ComplexMatrix(int r, int c) : rows(r), cols(c), v(std::size_t(r) * c) {}
  Complex& operator()(int r, int c) { return v[std::size_t(r) * cols + c]; }
  Complex operator()(int r, int c) const { return v[std::size_t(r) * cols + c]; }
};

// The forward spectrum of a real H x W plane (zero-padded to the n grid) on the band K:
// out(ky + My, kx + Mx) = sum_p plane(p) exp(-2 pi i k.p / n), separably.
// Table of exp(sign 2 pi i k p / n) for k in [-M, M] (rows) and p in [0, extent) (columns).
ComplexMatrix twiddles(int n, int extent, double sign) {
  const int M = (n - 1) / 2;
  ComplexMatrix t(n, extent);
  for (int k = -M; k <= M; ++k)
    for (int p = 0; p < extent; ++p) t(k + M, p) = turn(sign * k * p, n);
  return t;
}

ComplexMatrix band_spectrum(const std::vector<double>& plane, int W, int H, const BandLimitedGrid& grid) {
  const int My = (grid.y - 1) / 2;
  const ComplexMatrix ex = twiddles(grid.x, W, -1);
  ComplexMatrix rows(H, grid.x), out(grid.y, grid.x);
  for (int y = 0; y < H; ++y)
    for (int kx = 0; kx < grid.x; ++kx) {
      Complex sum = 0;
      for (int x = 0; x < W; ++x) sum += plane[std::size_t(y) * W + x] * ex(kx, x);
      rows(y, kx) = sum;
    }
  for (int ky = -My; ky <= My; ++ky)
    for (int y = 0; y < H; ++y) {
      const Complex phase = turn(-double(ky) * y, grid.y);
      for (int kx = 0; kx < grid.x; ++kx) out(ky + My, kx) += phase * rows(y, kx);
    }
  return out;
}

// The real plane sum_{k in K} spectrum(k) exp(2 pi i k.x / n) at the image's integer origins.
std::vector<double> band_inverse(const ComplexMatrix& spectrum, int W, int H, const BandLimitedGrid& grid) {
  const int My = (grid.y - 1) / 2;
  const ComplexMatrix ex = twiddles(grid.x, W, +1);
  ComplexMatrix rows(H, grid.x);
  for (int y = 0; y < H; ++y)
    for (int ky = -My; ky <= My; ++ky) {
      const Complex phase = turn(double(ky) * y, grid.y);
      for (int kx = 0; kx < grid.x; ++kx) rows(y, kx) += phase * spectrum(ky + My, kx);
    }
  std::vector<double> out(std::size_t(W) * H);
  for (int y = 0; y < H; ++y)
    for (int x = 0; x < W; ++x) {
      Complex sum = 0;
      for (int kx = 0; kx < grid.x; ++kx) sum += rows(y, kx) * ex(kx, x);
      out[std::size_t(y) * W + x] = sum.real();
    }
  return out;
}

// Spectra on the doubled band K2 of the squared, interpolated PSF factor along one axis, for
// every image pixel r: g2[r](k) with G(r; y) = sum_{p in image} h(y - p) f(r - p). G^2 is
// periodic in y (odd n) and band-limited to |k| <= n - 1, so its 2n samples at half pixels give
// the spectrum exactly: out(r, k + n - 1) = (1 / 2n) sum_m G(r; m / 2)^2 exp(-2 pi i k m / 2n).
ComplexMatrix squared_psf_spectra(const std::vector<double>& factor, int extent, int n) {
  const int R = int(factor.size()) / 2, K2 = 2 * n - 1;
  ComplexMatrix out(extent, K2);
  // exp(-2 pi i k m / 2n) for k in K2 and m in [0, 2n): the odd 2n - 1 rows of a 2n-point DFT.
  ComplexMatrix dft(K2, 2 * n);
  for (int k = -(n - 1); k <= n - 1; ++k)
    for (int m = 0; m < 2 * n; ++m) dft(k + n - 1, m) = turn(-double(k) * m, 2 * n);
  std::vector<double> g2(2 * std::size_t(n));
  for (int r = 0; r < extent; ++r) {
    for (int m = 0; m < 2 * n; ++m) {
      double g = 0;
      for (int p = std::max(0, r - R); p <= std::min(extent - 1, r + R); ++p)
        g += dirichlet(0.5 * m - p, n) * factor[r - p + R];
      g2[m] = g * g;
    }
    for (int k = -(n - 1); k <= n - 1; ++k) {
      Complex sum = 0;
      for (int m = 0; m < 2 * n; ++m) sum += g2[m] * dft(k + n - 1, m);
      out(r, k + n - 1) = sum / double(2 * n);
    }
  }
  return out;
}

}  // namespace

std::vector<BandLimitedPlanes> band_limited_spectral_planes(const ExposureStack& stack, const LikelihoodStack& maps,
                                                            const MotionBank& bank, const BandLimitedGrid& grid) {
  const int W = stack.width(), H = stack.height(), E = stack.size();
  require(grid.x % 2 == 1 && grid.y % 2 == 1 && grid.x >= W && grid.y >= H,
          "band-limited spectra: the periodic grid must be odd and cover the image");
  const std::size_t plane = std::size_t(W) * H;
  const int Nx = grid.x, Ny = grid.y, Mx = (Nx - 1) / 2, My = (Ny - 1) / 2;
  const int K2x = 2 * Nx - 1, K2y = 2 * Ny - 1;
  // Per exposure: psihat and phihat on K, the information spectrum W_e on K2.
  std::vector<ComplexMatrix> psi_hat, phi_hat, info;
  for (int e = 0; e < E; ++e) {
    const Exposure& x = stack.exposures[e];
    std::vector<double> psi(plane), phi(plane), weight(plane);
    for (std::size_t p = 0; p < plane; ++p) {
      psi[p] = maps.psi[e * plane + p];
      phi[p] = maps.phi[e * plane + p];
      weight[p] = (!x.mask.empty() && x.mask.pixels[p]) ? 0.0 : 1.0 / double(x.variance.pixels[p]);
    }
    psi_hat.push_back(band_spectrum(psi, W, H, grid));
    phi_hat.push_back(band_spectrum(phi, W, H, grid));
    std::vector<double> fx, fy;
    psf_factors(x.psf, fx, fy);
    const ComplexMatrix g2x = squared_psf_spectra(fx, W, Nx), g2y = squared_psf_spectra(fy, H, Ny);
    // W_e(k) = sum_{ry} g2y[ry](ky) sum_{rx} w(rx, ry) g2x[rx](kx).
    ComplexMatrix rows(H, K2x), spectrum(K2y, K2x);
    for (int ry = 0; ry < H; ++ry)
      for (int rx = 0; rx < W; ++rx) {
        const double w = weight[std::size_t(ry) * W + rx];
        if (w == 0) continue;
        for (int kx = 0; kx < K2x; ++kx) rows(ry, kx) += w * g2x(rx, kx);
      }
    for (int ky = 0; ky < K2y; ++ky)
      for (int ry = 0; ry < H; ++ry) {
        const Complex g = g2y(ry, ky);
        for (int kx = 0; kx < K2x; ++kx) spectrum(ky, kx) += g * rows(ry, kx);
      }
    info.push_back(std::move(spectrum));
  }

  std::vector<BandLimitedPlanes> out(bank.size());
#pragma omp parallel for schedule(dynamic, 1)
  for (std::int64_t v = 0; v < std::int64_t(bank.size()); ++v) {
    ComplexMatrix A(Ny, Nx), naive(Ny, Nx), B(Ny, Nx);
    std::vector<Complex> px(K2x), py(K2y);
    for (int e = 0; e < E; ++e) {
      const double a = maps.throughput[e], sx = bank.shift_x(std::size_t(v), e), sy = bank.shift_y(std::size_t(v), e);
      // The axis phase tables of this exposure's fractional shift, on K2 (K is its middle).
      for (int k = -(Nx - 1); k <= Nx - 1; ++k) px[k + Nx - 1] = turn(k * sx, Nx);
      for (int k = -(Ny - 1); k <= Ny - 1; ++k) py[k + Ny - 1] = turn(k * sy, Ny);
      for (int ky = -My; ky <= My; ++ky)
        for (int kx = -Mx; kx <= Mx; ++kx) {
          const Complex phase = px[kx + Nx - 1] * py[ky + Ny - 1];
          A(ky + My, kx + Mx) += a * phase * psi_hat[e](ky + My, kx + Mx);
          naive(ky + My, kx + Mx) += a * a * phase * phi_hat[e](ky + My, kx + Mx);
        }
      // Bhat on K2, folded onto K: k and k -+ n give the same phase at integer origins.
      for (int ky = -(Ny - 1); ky <= Ny - 1; ++ky) {
        const int fy = ky > My ? ky - Ny : (ky < -My ? ky + Ny : ky);
        for (int kx = -(Nx - 1); kx <= Nx - 1; ++kx) {
          const int fx = kx > Mx ? kx - Nx : (kx < -Mx ? kx + Nx : kx);
          B(fy + My, fx + Mx) += a * a * px[kx + Nx - 1] * py[ky + Ny - 1] * info[e](ky + Ny - 1, kx + Nx - 1);
        }
      }
    }
    BandLimitedPlanes& planes = out[std::size_t(v)];
    const double norm = 1.0 / (double(Nx) * Ny);  // h(t) = (1/n) sum_{k in K} exp(2 pi i k t / n) per axis
    planes.A = band_inverse(A, W, H, grid);
    planes.naive_B = band_inverse(naive, W, H, grid);
    for (std::size_t p = 0; p < plane; ++p) planes.A[p] *= norm, planes.naive_B[p] *= norm;
    planes.B = band_inverse(B, W, H, grid);
  }
  return out;
}

}  // namespace validation_detail

// ---- fractional shifts ---------------------------------------------------------------------

namespace {

// B of one trial two ways, from the fp32 planes: exact (SPEC 2, the covariance quadratic form)
// and naive (phi interpolated with the psi weights). Same validity rules as the gather: a corner
// counts when it is inside the image, has weight and phi > 0.
struct TwoB {
  double exact = 0, naive = 0;
};

TwoB bilinear_b(const EncodedStack& s, const std::vector<double>& sx, const std::vector<double>& sy, int x, int y) {
  TwoB out;
  const std::size_t plane = s.plane_size();
  for (int e = 0; e < s.exposures; ++e) {
    const double u = x + sx[e], v = y + sy[e];
    const int ix = int(std::floor(u)), iy = int(std::floor(v));
    const double fx = u - ix, fy = v - iy;
    const int cx[4] = {ix, ix + 1, ix, ix + 1}, cy[4] = {iy, iy, iy + 1, iy + 1};
    const double w[4] = {(1 - fx) * (1 - fy), fx * (1 - fy), (1 - fx) * fy, fx * fy};
    bool valid[4];
    double phi[4];
    for (int c = 0; c < 4; ++c) {
      valid[c] = false;
      if (cx[c] < 0 || cy[c] < 0 || cx[c] >= s.width || cy[c] >= s.height || w[c] == 0) continue;
      const std::size_t i = e * plane + std::size_t(cy[c]) * s.width + cx[c];
      phi[c] = s.fp32[2 * i + 1];
      valid[c] = phi[c] > 0;
    }
    const double weight = s.phi_weight[e];
    auto cov = [&](const std::vector<float>& p, int px, int py) {
      return double(p[e * plane + std::size_t(py) * s.width + px]);
    };
    double exact = 0, naive = 0;
    for (int c = 0; c < 4; ++c)
      if (valid[c]) {
        exact += w[c] * w[c] * phi[c];
        naive += w[c] * phi[c];
      }
    if (valid[0] && valid[1]) exact += 2 * w[0] * w[1] * cov(s.cov_right, ix, iy);
    if (valid[2] && valid[3]) exact += 2 * w[2] * w[3] * cov(s.cov_right, ix, iy + 1);
    if (valid[0] && valid[2]) exact += 2 * w[0] * w[2] * cov(s.cov_down, ix, iy);
    if (valid[1] && valid[3]) exact += 2 * w[1] * w[3] * cov(s.cov_down, ix + 1, iy);
    if (valid[0] && valid[3]) exact += 2 * w[0] * w[3] * cov(s.cov_diag, ix, iy);
    if (valid[1] && valid[2]) exact += 2 * w[1] * w[2] * cov(s.cov_antidiag, ix, iy);
    out.exact += weight * exact;
    out.naive += weight * naive;
  }
  return out;
}

FractionalVariance to_variance(const NullClass& c) { return {c.variance, c.variance_se, c.trials}; }

}  // namespace

FractionalReport run_fractional_study(const FractionalOptions& o) {
  require(o.cubes >= 2, "fractional study: need at least 2 cubes for an error estimate");
  require(!o.psf_sigmas.empty(), "fractional study: no PSF sigmas given");
  for (double s : o.psf_sigmas) require(s > 0 && std::isfinite(s), "fractional study: PSF sigma must be > 0");
  const auto start = std::chrono::steady_clock::now();
  FractionalReport report;
  report.options = o;
  auto engine = make_engine(o.engine);
  OutputPolicy policy;
  policy.collect_candidates = true;
  policy.candidate_threshold = -std::numeric_limits<double>::infinity();
  policy.max_candidates = std::int64_t(1) << 40;

  for (double sigma : o.psf_sigmas) {
    FractionalPoint point;
    point.psf_sigma = sigma;
    std::vector<ClassSums> gather_near, gather_away, naive_near, naive_away;
    std::vector<ClassSums> fourier_near, fourier_away, fourier_naive_near, fourier_naive_away;
    double edge_sum = 0;
    for (int c = 0; c < o.cubes; ++c) {
      KitOptions k = o.kit;
      k.inject = false;
      k.shift_mode = ShiftMode::fractional;
      k.psf_sigma_min = k.psf_sigma_max = sigma;
      k.seed = o.seed + std::uint64_t(c);
      const KitStack kit = make_kit(k);
      const EncodedStack stack = encode(compute_likelihood(kit.stack, true), Encoding::fp32);
      const SearchResult result = search(*engine, stack, kit.bank, policy);
      const std::vector<std::uint8_t> near = near_mask_flags(kit.stack, kit.bank, o.near_mask_fwhm);
      const std::int64_t V = std::int64_t(kit.bank.size());
      std::vector<std::vector<double>> sx(V, std::vector<double>(stack.exposures)), sy = sx;
      for (std::int64_t v = 0; v < V; ++v)
        for (int e = 0; e < stack.exposures; ++e) {
          sx[v][e] = kit.bank.shift_x(v, e);
          sy[v][e] = kit.bank.shift_y(v, e);
        }
      const auto& cands = result.candidates;
      std::vector<TwoB> b(cands.size());
#pragma omp parallel for schedule(static)
      for (std::size_t i = 0; i < cands.size(); ++i)
        b[i] = bilinear_b(stack, sx[cands[i].velocity], sy[cands[i].velocity], cands[i].x, cands[i].y);
      ClassSums gn, ga, nn, na;
      for (ClassSums* s : {&gn, &ga, &nn, &na}) s->above.clear();
      const std::vector<double> no_thresholds;
      for (std::size_t i = 0; i < cands.size(); ++i) {
        const Candidate& cand = cands[i];
        const bool is_near = near[(std::size_t(cand.velocity) * stack.height + cand.y) * stack.width + cand.x] != 0;
        point.max_relative_b_difference =
            std::max(point.max_relative_b_difference, std::abs(double(cand.B) / b[i].exact - 1));
        const double z_naive = b[i].naive > 0 ? double(cand.A) / std::sqrt(b[i].naive) : 0.0;
        (is_near ? gn : ga).add(cand.Z, no_thresholds);
        (is_near ? nn : na).add(z_naive, no_thresholds);
      }
      gather_near.push_back(gn), gather_away.push_back(ga), naive_near.push_back(nn), naive_away.push_back(na);
      if (o.fourier) {
        const LikelihoodStack maps = compute_likelihood(kit.stack, false);
        const BandLimitedGrid grid = band_limited_grid(kit.stack, kit.bank);
        point.fourier_grid_x = grid.x, point.fourier_grid_y = grid.y;
        std::vector<BandLimitedPlanes> planes(V);
#pragma omp parallel for schedule(dynamic, 1)
        for (std::int64_t v = 0; v < V; ++v) planes[v] = band_limited_planes(kit.stack, maps, kit.bank, v, grid);
        if (c == 0) {
          // The same statistic through the Fourier route (spectra, doubled-band information
          // spectrum, separable phase tables): how far it is from the direct evaluation.
          const auto spectral = band_limited_spectral_planes(kit.stack, maps, kit.bank, grid);
          for (std::int64_t v = 0; v < V; ++v)
            for (std::size_t p = 0; p < planes[v].B.size(); ++p) {
              const BandLimitedPlanes &d = planes[v], &f = spectral[v];
              if (!(d.B[p] > 0)) continue;
              const double difference = std::max({std::abs(f.A[p] - d.A[p]) / std::sqrt(d.B[p]),
                                                  std::abs(f.B[p] / d.B[p] - 1),
                                                  std::abs(f.naive_B[p] - d.naive_B[p]) / d.B[p]});
              point.fourier_spectral_difference = std::max(point.fourier_spectral_difference, difference);
            }
        }
        ClassSums fn, fa, fnn, fna;
        const std::size_t plane = stack.plane_size();
        for (std::int64_t v = 0; v < V; ++v)
          for (std::size_t p = 0; p < plane; ++p) {
            const bool is_near = near[std::size_t(v) * plane + p] != 0;
            const double A = planes[v].A[p], B = planes[v].B[p], Bn = planes[v].naive_B[p];
            if (B > 0) (is_near ? fn : fa).add(A / std::sqrt(B), no_thresholds);
            if (Bn > 0)
              (is_near ? fnn : fna).add(A / std::sqrt(Bn), no_thresholds);
            else if (B > 0)
              ++point.fourier_naive_unscored;
          }
        fourier_near.push_back(fn), fourier_away.push_back(fa), fourier_naive_near.push_back(fnn),
            fourier_naive_away.push_back(fna);
        for (const auto& pl : planes) {
          edge_sum += pl.edge_ratio_sum;
          point.fourier_edge_samples += pl.edge_samples;
          point.fourier_edge_ratio_max = std::max(point.fourier_edge_ratio_max, pl.edge_ratio_max);
        }
      }
      if (o.verbose)
        std::cerr << "fractional study: sigma " << sigma << " cube " << c + 1 << "/" << o.cubes << "\n";
    }
    point.gather_near = to_variance(pool_class(gather_near, {}, {}));
    point.gather_away = to_variance(pool_class(gather_away, {}, {}));
    point.naive_near = to_variance(pool_class(naive_near, {}, {}));
    point.naive_away = to_variance(pool_class(naive_away, {}, {}));
    if (o.fourier) {
      point.fourier_done = true;
      point.fourier_edge_ratio_mean = point.fourier_edge_samples ? edge_sum / double(point.fourier_edge_samples) : 0.0;
      point.fourier_near = to_variance(pool_class(fourier_near, {}, {}));
      point.fourier_away = to_variance(pool_class(fourier_away, {}, {}));
      point.fourier_naive_near = to_variance(pool_class(fourier_naive_near, {}, {}));
      point.fourier_naive_away = to_variance(pool_class(fourier_naive_away, {}, {}));
    }
    report.points.push_back(point);
  }
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

}  // namespace shiftstack
