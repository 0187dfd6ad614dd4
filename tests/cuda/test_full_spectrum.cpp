// The Fourier-route contractions write psihat + i phihat over the full grid from half spectra
// (cuda/spectral/full_spectrum.hpp); checked here against direct DFTs, without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <complex>
#include <random>
#include <vector>

#include "cuda/spectral/full_spectrum.hpp"

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

}  // namespace
