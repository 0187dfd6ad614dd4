// The Fourier route of SPEC 6 on the CPU: the padded geometry every Fourier engine shares, the
// unit roots its phase tables are built from, and an emulation of the tensor-core operator
// (FP16-rounded operands, FP32 sums) so that its arithmetic is tested where no GPU exists.
//
// Conventions (shared with src/cuda/spectra.cuh):
//  - planes are zero-padded to nx x ny; the transform's halved axis is y: frequencies are
//    (mx, my) with mx in [0, nx) and my in [0, ny/2 + 1), F = nx * (ny/2 + 1);
//  - psihat(k) = sum_x psi(x) exp(-i k.x), k = 2 pi (mx/nx, my/ny);
//  - Ahat_ab(k) = sum_e exp(i kx sx[a,e]) psihat_e(k) exp(i ky sy[b,e]), so that the inverse
//    transform is A_ab(x) = sum_e psi_e(x + s_ab,e): the gather convention, sample at origin + shift.
#pragma once
#include <complex>
#include <cstdint>
#include <vector>

#include "shiftstack/encoding.hpp"
#include "shiftstack/motion.hpp"
#include "shiftstack/search.hpp"

namespace shiftstack {

// Smallest n >= minimum whose prime factors are 2, 3, 5 and 7 (sizes cuFFT transforms fastest).
int fft_friendly_size(int minimum);

// Padded transform size along one axis. Circular shifts equal linear ones on the image when
// n >= extent + max(max_shift, -min_shift, 0): a sample at x + s with x in [0, extent) lands
// either inside the image or, after wrapping, in [extent, n), which holds zeros. This is tighter
// than SPEC 6's sufficient n >= extent + max - min and gives the same operator.
int padded_fourier_size(int extent, int min_shift, int max_shift);

struct FourierGeometry {
  int width = 0, height = 0;  // image
  int nx = 0, ny = 0;         // padded transform sizes
  int nyh = 0;                // ny/2 + 1: stored frequencies along the halved axis
  int min_sx = 0, max_sx = 0, min_sy = 0, max_sy = 0;  // integer shift extent of the bank
  std::int64_t frequencies() const { return std::int64_t(nx) * nyh; }
  // Useful real FLOPs of the contraction for both channels (SPEC 6): 16 F E V.
  double useful_flops(int exposures, std::int64_t velocities) const {
    return 16.0 * double(frequencies()) * exposures * double(velocities);
  }
};

// Geometry for a stack of width x height under the integer shifts of a Cartesian bank.
FourierGeometry fourier_geometry(int width, int height, const SeparableShifts& shifts);

// exp(2 pi i j / n) for any integer j, reduced mod n first, computed in double.
std::complex<double> unit_root(std::int64_t j, int n);

// Per-frequency inputs of the contraction: integer shifts (sx: va x E, sy: vb x E, exposure
// fastest), the frequency (mx, my) of an nx x ny grid, and E spectrum values.
struct FrequencyProblem {
  int exposures = 0, va = 0, vb = 0;
  int nx = 0, ny = 0, mx = 0, my = 0;
  std::vector<std::int32_t> sx, sy;
  std::vector<std::complex<double>> spectrum;
};

// Exact (double) per-frequency product: out[b * va + a] = Ahat_ab.
std::vector<std::complex<double>> exact_frequency_product(const FrequencyProblem& p);

// The tensor-core operator, emulated: the spectrum divided by its largest magnitude and rounded
// to FP16; the y phase in FP32; their product computed in FP32 and rounded once to FP16 (the A
// operand); the x phase rounded to FP16 (the B operand); products accumulated in FP32, exposure
// by exposure; the sum multiplied back by the scale. Same arithmetic as the cuda-tc kernel, but
// for the order of the FP32 additions inside the tensor cores.
std::vector<std::complex<double>> emulated_tc_frequency_product(const FrequencyProblem& p);

// Worst-case bound on |emulated - exact| for every output of a frequency:
// (3.05 u16 + (5 E + 16) u32) * sum_e |spectrum_e|, with u16 = 2^-11 and u32 = 2^-24 unit
// roundoffs: the spectrum, operand and x-phase roundings to FP16 (products of FP16 values are exact
// in FP32), FP32 accumulation of 2E terms, FP16 subnormals of tiny samples, the FP32 y phase and
// operand arithmetic; 0.05 u16 covers second-order terms.
double emulated_tc_error_bound(const FrequencyProblem& p);

// The whole Fourier route on the CPU with the emulated operator: decode, pad, forward FFT
// (double), per-frequency emulated contraction, inverse FFT (double), crop, score, digest.
// Trials with no valid sample are not scored (found exactly, by looking for one valid sample);
// B of a scored trial is clamped below at the smallest positive weighted phi of the stack, a
// proven lower bound of the exact B. Integer shifts and Cartesian banks only (Error otherwise).
// Digest only: no candidates, no top-k. Meant for small stacks (the `ci` workload).
struct EmulatedSearch {
  Digest digest;
  FourierGeometry geometry;
  std::int64_t clamped = 0;  // scored trials whose FFT-route B fell below the floor
};
EmulatedSearch emulated_tc_search(const EncodedStack& stack, const MotionBank& bank,
                                  const OutputPolicy& policy = {}, Region region = {});

// Fractional (bilinear) shifts through the Fourier route, in double: the operator cuda-fourier
// computes in FP32. Per axis the corner pair's phase e^{ikn}((1-f) + f e^{ik}) for A; B from the
// phi channel and three covariance channels (right, down, diagonal + antidiagonal, kept where both
// samples count) with the separable factors of the bilinear variance (SPEC 2). A and B for every
// velocity and origin, [v][y * width + x]; no scoring. Small stacks only (dense loops).
struct FractionalRoutePlanes {
  int width = 0, height = 0;
  std::vector<double> A, B;
};
FractionalRoutePlanes fractional_route_planes(const EncodedStack& stack, const MotionBank& bank);

}  // namespace shiftstack
