// The Fourier-route contractions write psihat + i phihat over the full grid from half spectra, and
// the row route splits one complex transform into two real channels
// (cuda/spectral/full_spectrum.hpp); checked here against direct DFTs, without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <complex>
#include <random>
#include <vector>

#include "cuda/spectral/full_spectrum.hpp"
#include "cuda/spectral/row_windows.hpp"

namespace {

std::vector<int> writes;  // per grid value, counted by Counted's assignment
const struct Counted* grid_base = nullptr;

struct Counted {
  double x, y;
  Counted& operator=(const Counted& other) {
    x = other.x, y = other.y;
    ++writes[std::size_t(this - grid_base)];
    return *this;
  }
};

using cd = std::complex<double>;

// Forward DFT of a real nx x ny plane [x][y] at (kx, ky).
cd dft(const std::vector<double>& plane, int nx, int ny, int kx, int ky) {
  cd sum = 0;
  for (int x = 0; x < nx; ++x)
    for (int y = 0; y < ny; ++y)
      sum += plane[std::size_t(x) * ny + y] * std::polar(1.0, -2 * M_PI * (double(kx) * x / nx + double(ky) * y / ny));
  return sum;
}

TEST(FullSpectrum, HalfSpectraOfTwoChannelsBecomeOneFullGridWrittenOnce) {
  std::mt19937 rng(7);
  std::normal_distribution<double> normal;
  for (auto [nx, ny] : {std::pair{6, 8}, {5, 7}, {6, 7}, {5, 8}, {1, 4}, {4, 1}, {2, 2}}) {
    SCOPED_TRACE(std::to_string(nx) + " x " + std::to_string(ny));
    std::vector<double> psi(std::size_t(nx) * ny), phi(psi.size());
    for (std::size_t i = 0; i < psi.size(); ++i) psi[i] = normal(rng), phi[i] = normal(rng);
    std::vector<Counted> grid(psi.size(), Counted{NAN, NAN});
    writes.assign(grid.size(), 0);
    grid_base = grid.data();
    for (int mx = 0; mx < nx; ++mx)
      for (int my = 0; my < ny / 2 + 1; ++my) {
        const cd a = dft(psi, nx, ny, mx, my), b = dft(phi, nx, ny, mx, my);
        shiftstack::cuda::store_both_channels(grid.data(), nx, ny, mx, my, Counted{a.real(), a.imag()},
                                              Counted{b.real(), b.imag()});
      }
    for (int kx = 0; kx < nx; ++kx)
      for (int ky = 0; ky < ny; ++ky) {
        const std::size_t at = std::size_t(kx) * ny + ky;
        EXPECT_EQ(writes[at], 1) << "at (" << kx << ", " << ky << ")";
        const cd z = dft(psi, nx, ny, kx, ky) + cd(0, 1) * dft(phi, nx, ny, kx, ky);
        EXPECT_NEAR(grid[at].x, z.real(), 1e-9 * nx * ny) << "at (" << kx << ", " << ky << ")";
        EXPECT_NEAR(grid[at].y, z.imag(), 1e-9 * nx * ny) << "at (" << kx << ", " << ky << ")";
      }
  }
}

// A computed half spectrum is Hermitian on the columns my = 0, ny / 2 only to rounding: the points
// that are their own mirrors take the real parts only, as a real inverse transform would.
TEST(FullSpectrum, SelfMirroredPointsKeepTheRealParts) {
  const int nx = 4, ny = 6;
  std::vector<Counted> grid(std::size_t(nx) * ny, Counted{NAN, NAN});
  writes.assign(grid.size(), 0);
  grid_base = grid.data();
  for (auto [mx, my] : {std::pair{0, 0}, {2, 0}, {0, 3}, {2, 3}}) {
    shiftstack::cuda::store_both_channels(grid.data(), nx, ny, mx, my, Counted{1.5, 0.25}, Counted{-2.0, 0.5});
    const Counted& z = grid[std::size_t(mx) * ny + my];
    EXPECT_EQ(z.x, 1.5);
    EXPECT_EQ(z.y, -2.0);
  }
  // (3, 0) mirrors (1, 0): only mx <= nx / 2 writes on that column.
  shiftstack::cuda::store_both_channels(grid.data(), nx, ny, 3, 0, Counted{1, 1}, Counted{1, 1});
  EXPECT_EQ(writes[3 * ny], 0);
}

// The row route: half spectra along x only (rows y kept), one full grid [mx][y] of psihat + i phihat.
TEST(FullSpectrum, RowRouteHalfSpectraAlongXBecomeOneFullGridWrittenOnce) {
  std::mt19937 rng(11);
  std::normal_distribution<double> normal;
  for (auto [nx, rows] : {std::pair{6, 3}, {5, 4}, {1, 2}, {2, 1}, {9, 2}}) {
    SCOPED_TRACE(std::to_string(nx) + " x " + std::to_string(rows));
    const int pitch = rows + 2;  // rows of the output plane beyond the region stay untouched
    std::vector<double> psi(std::size_t(nx) * rows), phi(psi.size());
    for (std::size_t i = 0; i < psi.size(); ++i) psi[i] = normal(rng), phi[i] = normal(rng);
    // DFT along x of row y: [x][y] planes with a single column per row (ny = 1 in dft()).
    auto along_x = [&](const std::vector<double>& plane, int y, int k) {
      std::vector<double> line(nx);
      for (int x = 0; x < nx; ++x) line[x] = plane[std::size_t(x) * rows + y];
      return dft(line, nx, 1, k, 0);
    };
    std::vector<Counted> grid(std::size_t(nx) * pitch, Counted{NAN, NAN});
    writes.assign(grid.size(), 0);
    grid_base = grid.data();
    for (int mx = 0; mx < nx / 2 + 1; ++mx)
      for (int y = 0; y < rows; ++y) {
        const cd a = along_x(psi, y, mx), b = along_x(phi, y, mx);
        shiftstack::cuda::store_both_channels_x(grid.data(), nx, pitch, mx, y, Counted{a.real(), a.imag()},
                                                Counted{b.real(), b.imag()});
      }
    for (int kx = 0; kx < nx; ++kx)
      for (int y = 0; y < pitch; ++y) {
        const std::size_t at = std::size_t(kx) * pitch + y;
        if (y >= rows) {
          EXPECT_EQ(writes[at], 0) << "at (" << kx << ", " << y << ")";
          continue;
        }
        EXPECT_EQ(writes[at], 1) << "at (" << kx << ", " << y << ")";
        const cd z = along_x(psi, y, kx) + cd(0, 1) * along_x(phi, y, kx);
        EXPECT_NEAR(grid[at].x, z.real(), 1e-9 * nx) << "at (" << kx << ", " << y << ")";
        EXPECT_NEAR(grid[at].y, z.imag(), 1e-9 * nx) << "at (" << kx << ", " << y << ")";
      }
  }
}

// The row route's forward kernel transforms a + i b once and splits the result: each half must be
// the DFT of its own real signal, at every frequency of the half spectrum and for odd and even
// lengths (k = 0 and k = n / 2 are their own mirrors).
TEST(FullSpectrum, OneComplexTransformSplitsIntoTheTwoRealChannels) {
  struct Pair {
    double x, y;
  };
  std::mt19937 rng(13);
  std::normal_distribution<double> normal;
  for (int n : {1, 2, 5, 8, 9, 280}) {
    SCOPED_TRACE("n " + std::to_string(n));
    std::vector<double> a(n), b(n);
    for (int x = 0; x < n; ++x) a[x] = normal(rng), b[x] = normal(rng);
    auto z = [&](int k) {  // DFT of a + i b at k
      cd sum = 0;
      for (int x = 0; x < n; ++x) sum += cd(a[x], b[x]) * std::polar(1.0, -2 * M_PI * double(k) * x / n);
      return Pair{sum.real(), sum.imag()};
    };
    for (int k = 0; k < n / 2 + 1; ++k) {
      Pair psi{}, phi{};
      shiftstack::cuda::split_two_real_channels(z(k), z((n - k) % n), psi, phi);
      const cd want_a = dft(a, n, 1, k, 0), want_b = dft(b, n, 1, k, 0);
      EXPECT_NEAR(psi.x, want_a.real(), 1e-9 * n) << "k " << k;
      EXPECT_NEAR(psi.y, want_a.imag(), 1e-9 * n) << "k " << k;
      EXPECT_NEAR(phi.x, want_b.real(), 1e-9 * n) << "k " << k;
      EXPECT_NEAR(phi.y, want_b.imag(), 1e-9 * n) << "k " << k;
    }
  }
}

// The row route end to end in double precision, on the host: spectra along x of the rows the
// windows name, products over the gathered rows, the x-halved store, the inverse along x. The
// result must be the direct shift-and-add (samples outside the image count zero) at every origin
// of a region offset in both axes, for groups of four rows b cut short by the grid and exposures
// padded past a multiple of 32.
TEST(RowWindows, RowRouteReproducesTheDirectShiftAndAdd) {
  std::mt19937 rng(5);
  std::normal_distribution<double> normal;
  std::uniform_int_distribution<int> shift(-5, 5);
  const int E = 7, E_pad = 32, width = 11, height = 19, va = 3, vb = 6, group_rows = 4;
  const int rx0 = 2, ry0 = 3, rw = 8, rh = 14;
  std::vector<std::int32_t> sx(std::size_t(va) * E), sy(std::size_t(vb) * E);
  for (auto& v : sx) v = shift(rng);
  for (auto& v : sy) v = shift(rng);
  const auto [lo_x, hi_x] = std::minmax_element(sx.begin(), sx.end());
  const auto [lo_y, hi_y] = std::minmax_element(sy.begin(), sy.end());
  const int min_sy = *lo_y, max_sy = *hi_y;
  const int nx = width + (*hi_x - *lo_x), nxh = nx / 2 + 1;
  std::vector<double> psi(std::size_t(E) * height * width), phi(psi.size());
  for (std::size_t i = 0; i < psi.size(); ++i) psi[i] = normal(rng), phi[i] = std::abs(normal(rng));
  auto pixel = [&](const std::vector<double>& plane, int e, int x, int y) {
    return x < 0 || y < 0 || x >= width || y >= height ? 0.0 : plane[(std::size_t(e) * height + y) * width + x];
  };

  const shiftstack::cuda::RowWindows w =
      shiftstack::cuda::plan_row_windows(sy, vb, E, E_pad, group_rows, min_sy, max_sy, rh);
  EXPECT_EQ(w.rows % 2, 0);
  EXPECT_EQ(w.pitch % 8, 4);
  EXPECT_GE(w.pitch, w.rows);
  // Spectra along x of rows j: image row ry0 + min_sy + j, mx < nxh.
  auto row_spectrum = [&](const std::vector<double>& plane, int e, int j, int mx) {
    cd sum = 0;
    for (int x = 0; x < nx; ++x) sum += pixel(plane, e, x, ry0 + min_sy + j) * std::polar(1.0, -2 * M_PI * double(mx) * x / nx);
    return sum;
  };
  for (int b = 0; b < vb; ++b) {
    const int group = b / group_rows;
    for (int a = 0; a < va; ++a) {
      std::vector<Counted> grid(std::size_t(nx) * height, Counted{NAN, NAN});
      writes.assign(grid.size(), 0);
      grid_base = grid.data();
      for (int tile_first = 0; tile_first < rh; tile_first += 16)
        for (int r = 0; r < 16 && tile_first + r < rh; ++r)
          for (int mx = 0; mx < nxh; ++mx) {
            cd sum_psi = 0, sum_phi = 0;
            for (int e = 0; e < E; ++e) {
              const int start = w.start[std::size_t(group) * E_pad + e];
              const int offset = w.offset[std::size_t(b) * E_pad + e];
              ASSERT_EQ(start % 2, 0);
              ASSERT_LE(offset + 16, w.rows) << "a row b reads past its group's window";
              const int j = tile_first + start + offset + r;
              ASSERT_LT(tile_first + start + w.rows, w.span + 1) << "a window runs past the rows";
              const cd phase = std::polar(1.0, 2 * M_PI * double(mx) * sx[std::size_t(a) * E + e] / nx);
              sum_psi += row_spectrum(psi, e, j, mx) * phase;
              sum_phi += row_spectrum(phi, e, j, mx) * phase;
            }
            shiftstack::cuda::store_both_channels_x(grid.data(), nx, height, mx, ry0 + tile_first + r,
                                                    Counted{sum_psi.real(), sum_psi.imag()},
                                                    Counted{sum_phi.real(), sum_phi.imag()});
          }
      for (int y = ry0; y < ry0 + rh; ++y)
        for (int x = rx0; x < rx0 + rw; ++x) {
          cd z = 0;  // inverse along x, normalized
          for (int k = 0; k < nx; ++k) {
            ASSERT_EQ(writes[std::size_t(k) * height + y], 1);
            const Counted& g = grid[std::size_t(k) * height + y];
            z += cd(g.x, g.y) * std::polar(1.0, 2 * M_PI * double(k) * x / nx);
          }
          z /= nx;
          double A = 0, B = 0;
          for (int e = 0; e < E; ++e) {
            A += pixel(psi, e, x + sx[std::size_t(a) * E + e], y + sy[std::size_t(b) * E + e]);
            B += pixel(phi, e, x + sx[std::size_t(a) * E + e], y + sy[std::size_t(b) * E + e]);
          }
          EXPECT_NEAR(z.real(), A, 1e-9) << "A at b " << b << ", a " << a << ", (" << x << ", " << y << ")";
          EXPECT_NEAR(z.imag(), B, 1e-9) << "B at b " << b << ", a " << a << ", (" << x << ", " << y << ")";
        }
    }
  }
}

}  // namespace
