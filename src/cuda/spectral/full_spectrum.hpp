// How the Fourier-route contractions hand both channels to one complex inverse transform. Host
// code too, so that it is tested without a GPU (tests/cuda/test_full_spectrum.cpp).
#pragma once
#include <cstddef>

#include "cuda/common/host_device.hpp"

namespace shiftstack::cuda {

// Z = a + i b at a frequency k and at its mirror -k, from psihat a and phihat b at k (A and B real:
// Z(-k) = conj(a) + i conj(b)).
template <class Complex>
struct MirroredPair {
  Complex at_k, at_mirror;
};
template <class Complex>
SHIFTSTACK_HOST_DEVICE MirroredPair<Complex> mirrored_pair(const Complex& a, const Complex& b) {
  return {Complex{a.x - b.y, a.y + b.x}, Complex{a.x + b.y, b.x - a.y}};
}

// Writes one velocity's spectra at frequency (mx, my < ny / 2 + 1), psihat a and phihat b, as the
// full nx x ny grid of Z = a + i b ([mx][my], my fastest). A and B are real, so Z(-k) = conj(a) +
// i conj(b), and the inverse transform of Z is A + i B. Every grid value is written exactly once,
// so that no two threads race on one: the columns my = 0 and my = ny / 2 are their own mirrors in
// y, so there only mx <= nx / 2 writes, and the points that are their own mirrors keep the real
// parts (what a real inverse transform of a half spectrum uses).
template <class Complex>
SHIFTSTACK_HOST_DEVICE void store_both_channels(Complex* velocity, int nx, int ny, int mx, int my, Complex a,
                                                Complex b) {
  const int mirror_x = mx == 0 ? 0 : nx - mx;
  if (my == 0 || 2 * my == ny) {
    if (mx > mirror_x) return;
    if (mx == mirror_x) {
      velocity[std::size_t(mx) * ny + my] = Complex{a.x, b.x};
      return;
    }
  }
  const MirroredPair<Complex> z = mirrored_pair(a, b);
  velocity[std::size_t(mx) * ny + my] = z.at_k;
  velocity[std::size_t(mirror_x) * ny + (my == 0 ? 0 : ny - my)] = z.at_mirror;
}

// The row route's version, halved along x: psihat a and phihat b of row y at mx < nx / 2 + 1 go to
// [mx][y] and their mirror nx - mx, so that the inverse along x of Z = a + i b is A + i B. The
// rows mx = 0 and mx = nx / 2 are their own mirrors: written once, with the real parts.
template <class Complex>
SHIFTSTACK_HOST_DEVICE void store_both_channels_x(Complex* velocity, int nx, int pitch, int mx, int y, Complex a,
                                                  Complex b) {
  const int mirror_x = mx == 0 ? 0 : nx - mx;
  if (mx == mirror_x) {
    velocity[std::size_t(mx) * pitch + y] = Complex{a.x, b.x};
    return;
  }
  const MirroredPair<Complex> z = mirrored_pair(a, b);
  velocity[std::size_t(mx) * pitch + y] = z.at_k;
  velocity[std::size_t(mirror_x) * pitch + y] = z.at_mirror;
}

// The row route's forward split, the other way round: from Z = DFT(a + i b) of two real signals
// a and b at frequencies k and -k, their own DFTs: A(k) = (Z(k) + conj Z(-k)) / 2 and
// B(k) = (Z(k) - conj Z(-k)) / 2i. One complex transform so serves both channels.
template <class Complex>
SHIFTSTACK_HOST_DEVICE void split_two_real_channels(Complex z_k, Complex z_minus_k, Complex& a, Complex& b) {
  a = Complex{0.5f * (z_k.x + z_minus_k.x), 0.5f * (z_k.y - z_minus_k.y)};
  b = Complex{0.5f * (z_k.y + z_minus_k.y), 0.5f * (z_minus_k.x - z_k.x)};
}

}  // namespace shiftstack::cuda
