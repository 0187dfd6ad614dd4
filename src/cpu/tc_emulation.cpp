// CPU emulation of the Fourier / tensor-core route (SPEC 6): geometry, unit roots, the emulated
// per-frequency operator, an exact double twin, and the whole search on small stacks.
#include "shiftstack/tc_emulation.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>

#include "shiftstack/error.hpp"

namespace shiftstack {

using cd = std::complex<double>;

int fft_friendly_size(int minimum) {
  require(minimum > 0 && minimum < (1 << 28), "FFT size out of range: " + std::to_string(minimum));
  for (int n = minimum;; ++n) {
    int rest = n;
    for (int p : {2, 3, 5, 7})
      while (rest % p == 0) rest /= p;
    if (rest == 1) return n;
  }
}

int padded_fourier_size(int extent, int min_shift, int max_shift) {
  require(extent > 0, "padded_fourier_size: empty axis");
  const int reach = std::max({max_shift, -min_shift, 0});
  return fft_friendly_size(extent + reach);
}

FourierGeometry fourier_geometry(int width, int height, const SeparableShifts& shifts) {
  require(!shifts.x.empty() && !shifts.y.empty(), "fourier_geometry: empty shift tables");
  FourierGeometry g;
  g.width = width;
  g.height = height;
  auto [xlo, xhi] = std::minmax_element(shifts.x.begin(), shifts.x.end());
  auto [ylo, yhi] = std::minmax_element(shifts.y.begin(), shifts.y.end());
  g.min_sx = *xlo, g.max_sx = *xhi, g.min_sy = *ylo, g.max_sy = *yhi;
  g.nx = padded_fourier_size(width, g.min_sx, g.max_sx);
  g.ny = padded_fourier_size(height, g.min_sy, g.max_sy);
  g.nyh = g.ny / 2 + 1;
  return g;
}

cd unit_root(std::int64_t j, int n) {
  std::int64_t r = j % n;
  if (r < 0) r += n;
  const double angle = 2.0 * std::numbers::pi * double(r) / double(n);
  return {std::cos(angle), std::sin(angle)};
}

std::vector<cd> exact_frequency_product(const FrequencyProblem& p) {
  std::vector<cd> out(std::size_t(p.va) * p.vb);
  for (int b = 0; b < p.vb; ++b)
    for (int a = 0; a < p.va; ++a) {
      cd sum = 0;
      for (int e = 0; e < p.exposures; ++e)
        sum += unit_root(std::int64_t(p.mx) * p.sx[std::size_t(a) * p.exposures + e], p.nx) *
               p.spectrum[e] *
               unit_root(std::int64_t(p.my) * p.sy[std::size_t(b) * p.exposures + e], p.ny);
      out[std::size_t(b) * p.va + a] = sum;
    }
  return out;
}

namespace {

float to_half(double v) { return half_to_float(float_to_half(float(v))); }

// The A operand element: (FP32 y phase) x (FP16 spectrum), each part one FMA and one product in
// FP32, then rounded once to FP16 -- the same operations as the kernel's operand load.
std::complex<float> operand(std::complex<float> phase, std::complex<float> spectrum) {
  const float ps = phase.imag() * spectrum.imag();
  const float pc = phase.imag() * spectrum.real();
  const float re = std::fma(phase.real(), spectrum.real(), -ps);
  const float im = std::fma(phase.real(), spectrum.imag(), pc);
  return {half_to_float(float_to_half(re)), half_to_float(float_to_half(im))};
}

struct PreparedFrequency {
  double scale = 1;
  std::vector<std::complex<float>> spectrum;  // FP16 values of spectrum / scale
};

PreparedFrequency prepare_spectrum(const std::vector<cd>& spectrum) {
  PreparedFrequency out;
  double largest = 0;
  for (const cd& z : spectrum) largest = std::max(largest, std::abs(z));
  out.scale = largest > 0 ? largest : 1.0;
  out.spectrum.resize(spectrum.size());
  for (std::size_t e = 0; e < spectrum.size(); ++e)
    out.spectrum[e] = {to_half(spectrum[e].real() / out.scale), to_half(spectrum[e].imag() / out.scale)};
  return out;
}

// y phases (FP32) and x phases (FP16) of one frequency.
std::vector<std::complex<float>> y_phases(const FrequencyProblem& p) {
  std::vector<std::complex<float>> t(std::size_t(p.vb) * p.exposures);
  for (std::size_t i = 0; i < t.size(); ++i) {
    const cd r = unit_root(std::int64_t(p.my) * p.sy[i], p.ny);
    t[i] = {float(r.real()), float(r.imag())};
  }
  return t;
}
std::vector<std::complex<float>> x_phases(const FrequencyProblem& p) {
  std::vector<std::complex<float>> t(std::size_t(p.va) * p.exposures);
  for (std::size_t i = 0; i < t.size(); ++i) {
    const cd r = unit_root(std::int64_t(p.mx) * p.sx[i], p.nx);
    t[i] = {to_half(r.real()), to_half(r.imag())};
  }
  return t;
}

// The contraction with prepared operands; accumulation in FP32 like the tensor cores, the real
// output as sum(Xr Yr) + sum(-Xi Yi), the imaginary as sum(Xi Yr) + sum(Xr Yi).
void contract(const PreparedFrequency& s, const std::vector<std::complex<float>>& py,
              const std::vector<std::complex<float>>& px, int E, int va, int vb, cd* out) {
  std::vector<std::complex<float>> x(E);
  for (int b = 0; b < vb; ++b) {
    for (int e = 0; e < E; ++e) x[e] = operand(py[std::size_t(b) * E + e], s.spectrum[e]);
    for (int a = 0; a < va; ++a) {
      float re = 0, im = 0;
      const std::complex<float>* y = &px[std::size_t(a) * E];
      for (int e = 0; e < E; ++e) {
        re = std::fma(x[e].real(), y[e].real(), re);
        re = std::fma(-x[e].imag(), y[e].imag(), re);
        im = std::fma(x[e].imag(), y[e].real(), im);
        im = std::fma(x[e].real(), y[e].imag(), im);
      }
      out[std::size_t(b) * va + a] = cd(re, im) * s.scale;
    }
  }
}

void check_problem(const FrequencyProblem& p) {
  require(p.exposures > 0 && p.va > 0 && p.vb > 0 && p.nx > 0 && p.ny > 0,
          "frequency problem: empty dimension");
  require(p.sx.size() == std::size_t(p.va) * p.exposures &&
              p.sy.size() == std::size_t(p.vb) * p.exposures &&
              p.spectrum.size() == std::size_t(p.exposures),
          "frequency problem: table sizes do not match the dimensions");
}

}  // namespace

std::vector<cd> emulated_tc_frequency_product(const FrequencyProblem& p) {
  check_problem(p);
  std::vector<cd> out(std::size_t(p.va) * p.vb);
  contract(prepare_spectrum(p.spectrum), y_phases(p), x_phases(p), p.exposures, p.va, p.vb,
           out.data());
  return out;
}

double emulated_tc_error_bound(const FrequencyProblem& p) {
  const double u16 = std::ldexp(1.0, -11), u32 = std::ldexp(1.0, -24);
  double l1 = 0;
  for (const cd& z : p.spectrum) l1 += std::abs(z);
  return (3.05 * u16 + (5.0 * p.exposures + 16.0) * u32) * l1;
}

// --- a small mixed-radix FFT (factors 2, 3, 5, 7), double precision -------------------------------

namespace {

class Fft {
 public:
  explicit Fft(int n) : n_(n) {
    int rest = n;
    for (int p : {7, 5, 3, 2})
      while (rest % p == 0) {
        factors_.push_back(p);
        rest /= p;
      }
    require(rest == 1, "Fft: size " + std::to_string(n) + " has a prime factor above 7");
    roots_.resize(n);
    for (int j = 0; j < n; ++j) roots_[j] = unit_root(j, n);
    scratch_.resize(n);
  }
  // In place, on n values spaced `stride` apart. sign -1: forward (exp(-i...)), +1: inverse
  // (unnormalized).
  void run(cd* data, std::ptrdiff_t stride, int sign) {
    std::vector<cd> in(n_);
    for (int i = 0; i < n_; ++i) in[i] = data[i * stride];
    recurse(in.data(), 1, scratch_.data(), n_, 0, 1, sign);
    for (int i = 0; i < n_; ++i) data[i * stride] = scratch_[i];
  }

 private:
  cd root(std::int64_t j, int sign) const {
    const cd r = roots_[std::size_t(j % n_)];
    return sign < 0 ? std::conj(r) : r;
  }
  // Decimation in time: out[k + q m] = sum_r W_n^{r (k + q m)} FFT_m(in[r::p])[k].
  void recurse(const cd* in, std::ptrdiff_t stride, cd* out, int n, std::size_t level, int step,
               int sign) {
    if (n == 1) {
      out[0] = in[0];
      return;
    }
    const int p = factors_[level], m = n / p;
    for (int r = 0; r < p; ++r) recurse(in + r * stride, stride * p, out + r * m, m, level + 1, step * p, sign);
    cd sub[7];
    for (int k = 0; k < m; ++k) {
      for (int r = 0; r < p; ++r) sub[r] = out[r * m + k];
      for (int q = 0; q < p; ++q) {
        cd acc = 0;
        for (int r = 0; r < p; ++r) acc += sub[r] * root(std::int64_t(r) * (k + q * m) * step, sign);
        out[k + q * m] = acc;
      }
    }
  }
  int n_;
  std::vector<int> factors_;
  std::vector<cd> roots_, scratch_;
};

// 2-D transform of an nx x ny array stored [x][y] (y fastest).
void fft2(std::vector<cd>& plane, int nx, int ny, int sign) {
  Fft fy(ny), fx(nx);
  for (int x = 0; x < nx; ++x) fy.run(&plane[std::size_t(x) * ny], 1, sign);
  for (int y = 0; y < ny; ++y) fx.run(&plane[y], ny, sign);
}

}  // namespace

// --- the whole search ---------------------------------------------------------------------------

EmulatedSearch emulated_tc_search(const EncodedStack& s, const MotionBank& bank,
                                  const OutputPolicy& policy, Region region) {
  require(s.exposures > 0, "emulated_tc_search: empty stack");
  validate(bank, s.exposures);
  require(bank.is_cartesian(), "emulated_tc_search: the Fourier route needs a Cartesian velocity grid");
  require(bank.mode == ShiftMode::integer, "emulated_tc_search: integer shifts only");
  const Region r = resolve(region, s.width, s.height);
  const int E = s.exposures, W = s.width, H = s.height;
  const int va = int(bank.vx_count()), vb = int(bank.vy_count());
  const SeparableShifts shifts = integer_shifts(bank);

  EmulatedSearch out;
  const FourierGeometry g = fourier_geometry(W, H, shifts);
  out.geometry = g;
  const int nx = g.nx, ny = g.ny, nyh = g.nyh;
  const std::size_t plane = std::size_t(nx) * ny;

  // Decode each exposure into zero-padded weighted planes; note which samples carry information
  // (valid and weighted phi > 0: exactly the samples that make the reference's B positive).
  std::vector<std::uint8_t> informative(std::size_t(E) * W * H, 0);
  std::vector<std::vector<cd>> spectra(2 * std::size_t(E));  // [channel * E + e][mx * nyh + my]
  float floor_phi = std::numeric_limits<float>::infinity();
#pragma omp parallel for schedule(dynamic, 1) reduction(min : floor_phi)
  for (int e = 0; e < E; ++e) {
    std::vector<cd> psi(plane, 0.0), phi(plane, 0.0);
    for (int y = 0; y < H; ++y)
      for (int x = 0; x < W; ++x) {
        const DecodedSample d = decode(s, e, std::size_t(y) * W + x);
        if (!d.valid || !(d.phi > 0)) continue;
        informative[(std::size_t(e) * H + y) * W + x] = 1;
        psi[std::size_t(x) * ny + y] = d.psi;
        phi[std::size_t(x) * ny + y] = d.phi;
        floor_phi = std::min(floor_phi, d.phi);
      }
    fft2(psi, nx, ny, -1);
    fft2(phi, nx, ny, -1);
    for (int c = 0; c < 2; ++c) {
      const std::vector<cd>& full = c == 0 ? psi : phi;
      std::vector<cd>& half = spectra[std::size_t(c) * E + e];
      half.resize(std::size_t(nx) * nyh);
      for (int mx = 0; mx < nx; ++mx)
        for (int my = 0; my < nyh; ++my) half[std::size_t(mx) * nyh + my] = full[std::size_t(mx) * ny + my];
    }
  }

  // Per frequency, both channels: the emulated operator. velocity_spectra[c][v][mx * nyh + my].
  const std::int64_t V = std::int64_t(va) * vb;
  std::vector<std::vector<cd>> velocity_spectra(2 * std::size_t(V), std::vector<cd>(std::size_t(nx) * nyh));
#pragma omp parallel for schedule(dynamic, 1)
  for (int mx = 0; mx < nx; ++mx) {
    FrequencyProblem p;
    p.exposures = E, p.va = va, p.vb = vb, p.nx = nx, p.ny = ny, p.mx = mx;
    p.sx = shifts.x;
    p.sy = shifts.y;
    p.spectrum.resize(E);
    const std::vector<std::complex<float>> px = x_phases(p);
    std::vector<cd> product(static_cast<std::size_t>(V));
    for (int my = 0; my < nyh; ++my) {
      p.my = my;
      const std::vector<std::complex<float>> py = y_phases(p);
      for (int c = 0; c < 2; ++c) {
        for (int e = 0; e < E; ++e) p.spectrum[e] = spectra[std::size_t(c) * E + e][std::size_t(mx) * nyh + my];
        contract(prepare_spectrum(p.spectrum), py, px, E, va, vb, product.data());
        for (std::int64_t v = 0; v < V; ++v)
          velocity_spectra[std::size_t(c) * V + v][std::size_t(mx) * nyh + my] = product[v];
      }
    }
  }
  spectra.clear();

  // Inverse transforms: the half spectrum completed by Hermitian symmetry, real part, crop.
  const std::size_t region_size = std::size_t(r.count());
  std::vector<std::vector<double>> stacked(2 * std::size_t(V));  // [c][v][j * width + i]
#pragma omp parallel for schedule(dynamic, 1)
  for (std::int64_t cv = 0; cv < 2 * V; ++cv) {
    const std::vector<cd>& half = velocity_spectra[cv];
    std::vector<cd> full(plane);
    for (int mx = 0; mx < nx; ++mx)
      for (int my = 0; my < ny; ++my)
        full[std::size_t(mx) * ny + my] =
            my < nyh ? half[std::size_t(mx) * nyh + my]
                     : std::conj(half[std::size_t((nx - mx) % nx) * nyh + (ny - my)]);
    fft2(full, nx, ny, +1);
    std::vector<double>& crop = stacked[cv];
    crop.resize(region_size);
    for (int j = 0; j < r.height; ++j)
      for (int i = 0; i < r.width; ++i)
        crop[std::size_t(j) * r.width + i] =
            full[std::size_t(r.x0 + i) * ny + (r.y0 + j)].real() / double(plane);
  }

  // Score: a trial is scored when one of its samples carries information (found exactly).
  const double z_thr = bonferroni_threshold(policy.alpha, double(r.count()) * double(V));
  Digest total;
  total.z_thr = z_thr;
  std::int64_t clamped = 0;
  const double floor_b = std::isfinite(floor_phi) ? double(floor_phi) : 0.0;
  for (std::int64_t v = 0; v < V; ++v) {
    const int a = int(v % va), b = int(v / va);
    const std::int32_t* sx = &shifts.x[std::size_t(a) * E];
    const std::int32_t* sy = &shifts.y[std::size_t(b) * E];
    for (int j = 0; j < r.height; ++j)
      for (int i = 0; i < r.width; ++i) {
        const int x = r.x0 + i, y = r.y0 + j;
        bool any = false;
        for (int e = 0; e < E && !any; ++e) {
          const int px = x + sx[e], py = y + sy[e];
          any = px >= 0 && py >= 0 && px < W && py < H &&
                informative[(std::size_t(e) * H + py) * W + px];
        }
        if (!any) continue;
        const std::size_t k = std::size_t(j) * r.width + i;
        const double A = stacked[std::size_t(v)][k];
        double B = stacked[std::size_t(V + v)][k];
        if (B < floor_b) {
          B = floor_b;
          ++clamped;
        }
        total.add(A, B, A / std::sqrt(B), x, y, v);
      }
  }
  total.trials = r.count() * V;
  out.digest = total;
  out.clamped = clamped;
  return out;
}

// --- fractional shifts through the Fourier route, in double ---------------------------------------

FractionalRoutePlanes fractional_route_planes(const EncodedStack& s, const MotionBank& bank) {
  require(s.exposures > 0, "fractional_route_planes: empty stack");
  validate(bank, s.exposures);
  require(bank.is_cartesian(), "fractional_route_planes: the Fourier route needs a Cartesian velocity grid");
  const std::size_t image = s.plane_size();
  for (const auto* cov : {&s.cov_right, &s.cov_down, &s.cov_diag, &s.cov_antidiag})
    require(cov->size() == image * s.exposures, "fractional_route_planes: the stack has no covariance planes");
  const int E = s.exposures, W = s.width, H = s.height;
  const int va = int(bank.vx_count()), vb = int(bank.vy_count());
  const SeparableShifts floors = floor_shifts(bank);
  FourierGeometry g = fourier_geometry(W, H, floors);
  g.nx = padded_fourier_size(W, g.min_sx, g.max_sx + 1);  // the second corner
  g.ny = padded_fourier_size(H, g.min_sy, g.max_sy + 1);
  const int nx = g.nx, ny = g.ny;
  const std::size_t plane = std::size_t(nx) * ny;

  // Channels per exposure: psi, phi, and the covariances of counted pairs (both samples
  // informative), weighted: right, down, and diagonal + antidiagonal, at the pair's first corner.
  std::vector<std::vector<cd>> spectra(5 * std::size_t(E));  // [channel * E + e][x * ny + y]
#pragma omp parallel for schedule(dynamic, 1)
  for (int e = 0; e < E; ++e) {
    auto informative = [&](int x, int y, DecodedSample* out = nullptr) {
      if (x >= W || y >= H) return false;
      const DecodedSample d = decode(s, e, std::size_t(y) * W + x);
      if (out) *out = d;
      return d.valid && d.phi > 0;
    };
    const double weight = s.phi_weight[e];
    auto cov = [&](const std::vector<float>& c, int x, int y) {
      return weight * double(c[std::size_t(e) * image + std::size_t(y) * W + x]);
    };
    std::vector<std::vector<cd>> planes(5, std::vector<cd>(plane, 0.0));
    for (int y = 0; y < H; ++y)
      for (int x = 0; x < W; ++x) {
        DecodedSample d;
        const bool here = informative(x, y, &d), east = informative(x + 1, y), south = informative(x, y + 1);
        const std::size_t at = std::size_t(x) * ny + y;
        if (here) planes[0][at] = d.psi, planes[1][at] = d.phi;
        if (here && east) planes[2][at] = cov(s.cov_right, x, y);
        if (here && south) planes[3][at] = cov(s.cov_down, x, y);
        double diagonals = 0;
        if (here && informative(x + 1, y + 1)) diagonals += cov(s.cov_diag, x, y);
        if (east && south) diagonals += cov(s.cov_antidiag, x, y);
        planes[4][at] = diagonals;
      }
    for (int c = 0; c < 5; ++c) {
      fft2(planes[c], nx, ny, -1);
      spectra[std::size_t(c) * E + e] = std::move(planes[c]);
    }
  }

  // Per axis value, exposure and frequency: the bilinear factors of the corner pair n, n + 1.
  struct Factors {
    cd interpolate, squares, cross;
  };
  auto axis_factors = [](double shift, int whole, int m, int n) {
    const double f = shift - whole, h = 1 - f;
    const cd base = unit_root(std::int64_t(m) * whole, n), step = unit_root(m, n);
    return Factors{base * (h + f * step), base * (h * h + f * f * step), base * (2 * f * h)};
  };
  const std::int64_t V = std::int64_t(va) * vb;
  FractionalRoutePlanes out;
  out.width = W, out.height = H;
  out.A.assign(std::size_t(V) * image, 0.0);
  out.B.assign(std::size_t(V) * image, 0.0);
#pragma omp parallel for schedule(dynamic, 1)
  for (std::int64_t v = 0; v < V; ++v) {
    const int a = int(v % va), b = int(v / va);
    std::vector<cd> A(plane, 0.0), B(plane, 0.0);
    for (int e = 0; e < E; ++e) {
      const double sx = bank.vx_axis[a] * bank.dt(e) + bank.curve_at_x(e);
      const double sy = bank.vy_axis[b] * bank.dt(e) + bank.curve_at_y(e);
      const int nxe = floors.x[std::size_t(a) * E + e], nye = floors.y[std::size_t(b) * E + e];
      std::vector<Factors> fy(ny);
      for (int my = 0; my < ny; ++my) fy[my] = axis_factors(sy, nye, my, ny);
      for (int mx = 0; mx < nx; ++mx) {
        const Factors t = axis_factors(sx, nxe, mx, nx);
        for (int my = 0; my < ny; ++my) {
          const std::size_t k = std::size_t(mx) * ny + my;
          const Factors& u = fy[my];
          auto at = [&](int c) { return spectra[std::size_t(c) * E + e][k]; };
          A[k] += at(0) * u.interpolate * t.interpolate;
          B[k] += (at(1) * u.squares + at(3) * u.cross) * t.squares +
                  (at(2) * u.squares + 0.5 * at(4) * u.cross) * t.cross;
        }
      }
    }
    fft2(A, nx, ny, +1);
    fft2(B, nx, ny, +1);
    for (int y = 0; y < H; ++y)
      for (int x = 0; x < W; ++x) {
        const std::size_t k = std::size_t(x) * ny + y, o = std::size_t(v) * image + std::size_t(y) * W + x;
        out.A[o] = A[k].real() / double(plane);
        out.B[o] = B[k].real() / double(plane);
      }
  }
  return out;
}

}  // namespace shiftstack
