// cuda-fourier: the Fourier route in FP32 on the ordinary cores. cuFFT forward transforms of the
// padded psi and phi planes; per frequency a dense phase sum over exposures for every velocity,
//   Ahat_ab(k) = sum_e exp(i kx sx[a,e]) psihat_e(k) exp(i ky sy[b,e]),
// computed as a register-tiled complex product (rows (b, my), columns a, inner dimension E) with
// both phases taken from exact FP32 unit-root tables; then the shared inverse FFTs and scoring.
// Fractional shifts: bilinear sampling through modified axis factors, and the exact B of SPEC 2
// from the phi and covariance channels (see Layout below).
// The FP32 baseline the FP16 tensor-core route is measured against.
#include <algorithm>
#include <cstdlib>

#include "core/engine_registry.hpp"
#include "spectra.cuh"

namespace shiftstack::cuda {

namespace phase_sum {

constexpr int kRowThreads = 16;   // threadIdx.x: 16 x 4 = 64 rows (b, my) per CTA
constexpr int kRowsPerThread = 4;
constexpr int kColsPerThread = 4; // threadIdx.y: up to kMaxColThreads x 4 columns a per CTA
constexpr int kMaxColThreads = 20;
constexpr int kRows = kRowThreads * kRowsPerThread;
constexpr int kMaxCols = kMaxColThreads * kColsPerThread;

// Integer shifts: two row operands (psi, phi spectra times the y phase) share one x-phase table.
// Fractional (bilinear) shifts: per axis the phase of the corner pair, e^{i k n} ((1-f) + f e^{i k})
// for A, and for the exact B (SPEC 2) the factors of the variance terms, separable per axis:
//   phi:   ((1-f)^2 + f^2 e^{ik}) along x and y     cov right: 2f(1-f) along x, (1-g)^2 + g^2 e^{ik} along y
//   cov down: mirrored                              cov diagonals: 2f(1-f) along x, g(1-g) along y
// Summed over the channels that share an x factor, B needs two row operands, each with its own
// x table: (phi U1 + down U2) with T1 and (right U1 + diagonals U2 / 2) with T2.
template <bool Fractional>
struct Layout {
  static constexpr int kRowOperands = Fractional ? 3 : 2;  // A, then B's
  static constexpr int kTables = Fractional ? 3 : 1;       // x tables; row operand r uses min(r, kTables - 1)
  static constexpr int kChunk = Fractional ? 8 : 16;       // exposures per shared-memory stage (48 KB)
};

struct Params {
  const float2* spectra;      // [c][e][mx][my]
  const float2* root_x;       // [nx]
  const float2* root_y;       // [ny]
  const std::int32_t* sx;     // [a][E]: round(s), or floor(s) for fractional shifts
  const std::int32_t* sy;     // [b][E]
  const float* fx;            // [a][E]: s - floor(s), fractional only
  const float* fy;            // [b][E]
  int nx, ny, nyh, exposures, va;
  int b_begin, rows;          // rows = (b_end - b_begin) * nyh
  float norm;
  float2* out;                // [v][mx][my < ny]: psihat + i phihat (store_both_channels)
};

__device__ __forceinline__ int wrap(long long j, int n) {
  int r = int(j % n);
  return r < 0 ? r + n : r;
}

template <bool Fractional>
__global__ void __launch_bounds__(kRowThreads * kMaxColThreads) phase_sum_kernel(Params p) {
  using L = Layout<Fractional>;
  constexpr int kChunk = L::kChunk, R = L::kRowOperands, T = L::kTables;
  __shared__ float2 xs[R][kChunk][kRows];  // y factor * spectrum per row operand
  __shared__ float2 ys[T][kChunk][kMaxCols];  // x factor per table
  const int tx = threadIdx.x, ty = threadIdx.y, cols = blockDim.y * kColsPerThread;
  const int threads = blockDim.x * blockDim.y, tid = ty * blockDim.x + tx;
  const int row0 = blockIdx.x * kRows, a0 = blockIdx.y * cols, mx = blockIdx.z;
  const std::size_t frequencies = std::size_t(p.nx) * p.nyh;
  const std::size_t exposure_stride = frequencies, channel_in = std::size_t(p.exposures) * frequencies;

  float2 acc[2][kRowsPerThread][kColsPerThread];
#pragma unroll
  for (int c = 0; c < 2; ++c)
#pragma unroll
    for (int i = 0; i < kRowsPerThread; ++i)
#pragma unroll
      for (int j = 0; j < kColsPerThread; ++j) acc[c][i][j] = make_float2(0, 0);

  for (int e0 = 0; e0 < p.exposures; e0 += kChunk) {
    for (int i = tid; i < kChunk * kRows; i += threads) {
      const int el = i / kRows, row = i % kRows, e = e0 + el, r = row0 + row;
      float2 operand[R];
#pragma unroll
      for (int c = 0; c < R; ++c) operand[c] = make_float2(0, 0);
      if (e < p.exposures && r < p.rows) {
        const int b = p.b_begin + r / p.nyh, my = r % p.nyh;
        const std::size_t at = std::size_t(b) * p.exposures + e;
        const float2 ph = p.root_y[wrap((long long)my * p.sy[at], p.ny)];
        const std::size_t f = std::size_t(e) * exposure_stride + std::size_t(mx) * p.nyh + my;
        if constexpr (Fractional) {
          const AxisFactors u = axis_factors(ph, p.root_y[my], p.fy[at]);
          operand[0] = cmul(u.interpolate, p.spectra[f]);
          operand[1] = cfma(u.cross, p.spectra[3 * channel_in + f], cmul(u.squares, p.spectra[channel_in + f]));
          operand[2] = cfma(cscale(u.cross, 0.5f), p.spectra[4 * channel_in + f],
                            cmul(u.squares, p.spectra[2 * channel_in + f]));
        } else {
          operand[0] = cmul(ph, p.spectra[f]);
          operand[1] = cmul(ph, p.spectra[channel_in + f]);
        }
      }
#pragma unroll
      for (int c = 0; c < R; ++c) xs[c][el][row] = operand[c];
    }
    for (int i = tid; i < kChunk * cols; i += threads) {
      const int el = i / cols, col = i % cols, e = e0 + el, a = a0 + col;
      float2 table[T];
#pragma unroll
      for (int t = 0; t < T; ++t) table[t] = make_float2(0, 0);
      if (e < p.exposures && a < p.va) {
        const std::size_t at = std::size_t(a) * p.exposures + e;
        const float2 ph = p.root_x[wrap((long long)mx * p.sx[at], p.nx)];
        if constexpr (Fractional) {
          const AxisFactors t = axis_factors(ph, p.root_x[mx], p.fx[at]);
          table[0] = t.interpolate;
          table[1] = t.squares;
          table[2] = t.cross;
        } else {
          table[0] = ph;
        }
      }
#pragma unroll
      for (int t = 0; t < T; ++t) ys[t][el][col] = table[t];
    }
    __syncthreads();
#pragma unroll 4
    for (int el = 0; el < kChunk; ++el) {
      float2 x[R][kRowsPerThread], y[T][kColsPerThread];
#pragma unroll
      for (int c = 0; c < R; ++c)
#pragma unroll
        for (int i = 0; i < kRowsPerThread; ++i)
          x[c][i] = xs[c][el][tx + kRowThreads * i];  // consecutive lanes, consecutive rows: no bank conflicts
#pragma unroll
      for (int t = 0; t < T; ++t)
#pragma unroll
        for (int j = 0; j < kColsPerThread; ++j) y[t][j] = ys[t][el][ty * kColsPerThread + j];
#pragma unroll
      for (int c = 0; c < R; ++c)
#pragma unroll
        for (int i = 0; i < kRowsPerThread; ++i)
#pragma unroll
          for (int j = 0; j < kColsPerThread; ++j) {
            float2& d = acc[c < 1 ? 0 : 1][i][j];  // row operands 1 and 2 both sum into B
            const float2 w = y[c < T ? c : T - 1][j];
            d.x = fmaf(x[c][i].x, w.x, d.x);
            d.x = fmaf(-x[c][i].y, w.y, d.x);
            d.y = fmaf(x[c][i].x, w.y, d.y);
            d.y = fmaf(x[c][i].y, w.x, d.y);
          }
    }
    __syncthreads();
  }

#pragma unroll
  for (int i = 0; i < kRowsPerThread; ++i) {
    const int r = row0 + tx + kRowThreads * i;
    if (r >= p.rows) continue;
    const int b_local = r / p.nyh, my = r % p.nyh;
#pragma unroll
    for (int j = 0; j < kColsPerThread; ++j) {
      const int a = a0 + ty * kColsPerThread + j;
      if (a >= p.va) continue;
      float2* velocity = p.out + (std::size_t(b_local) * p.va + a) * p.nx * p.ny;
      store_both_channels(velocity, p.nx, p.ny, mx, my, make_float2(acc[0][i][j].x * p.norm, acc[0][i][j].y * p.norm),
                          make_float2(acc[1][i][j].x * p.norm, acc[1][i][j].y * p.norm));
    }
  }
}

}  // namespace phase_sum

namespace {

class FourierEngine final : public SpectralEngine {
 public:
  std::string name() const override { return "cuda-fourier"; }
  bool supports_fractional() const override { return true; }
  // FP32 transforms and sums: trials with B below this fraction of E times the largest weighted
  // phi are gathered exactly (measured in bench/RESULTS.md); SHIFTSTACK_FOURIER_EXACT_BELOW
  // overrides it for that measurement.
  float exact_below() const override {
    if (const char* forced = std::getenv("SHIFTSTACK_FOURIER_EXACT_BELOW")) return std::strtof(forced, nullptr);
    return kExactBelow;
  }
  static constexpr float kExactBelow = 1e-3f;

 protected:
  void prepare(SpectralState&) override {}

  void contract(SpectralState& s, int b_begin, int b_end) override {
    const FourierGeometry& g = s.geometry;
    phase_sum::Params p{};
    p.spectra = s.spectra.get();
    p.root_x = s.root_x.get();
    p.root_y = s.root_y.get();
    p.sx = s.shift_x.get();
    p.sy = s.shift_y.get();
    p.fx = s.fractional ? s.frac_x.get() : nullptr;
    p.fy = s.fractional ? s.frac_y.get() : nullptr;
    p.nx = g.nx, p.ny = g.ny, p.nyh = g.nyh, p.exposures = s.exposures, p.va = s.va;
    p.b_begin = b_begin;
    p.rows = (b_end - b_begin) * g.nyh;
    p.norm = s.inverse_norm();
    p.out = s.velocity_spectra.get();
    // Columns: as few CTAs per row block as cover va with at most kMaxCols columns each.
    const int column_blocks = (s.va + phase_sum::kMaxCols - 1) / phase_sum::kMaxCols;
    const int per_block = (s.va + column_blocks - 1) / column_blocks;
    const int col_threads = (per_block + phase_sum::kColsPerThread - 1) / phase_sum::kColsPerThread;
    const dim3 block(phase_sum::kRowThreads, col_threads);
    const dim3 grid(unsigned((p.rows + phase_sum::kRows - 1) / phase_sum::kRows), unsigned(column_blocks),
                    unsigned(g.nx));
    if (s.fractional) phase_sum::phase_sum_kernel<true><<<grid, block, 0, s.stream>>>(p);
    else phase_sum::phase_sum_kernel<false><<<grid, block, 0, s.stream>>>(p);
    SHIFTSTACK_CUDA_CHECK_LAUNCH();
  }
};

}  // namespace

void register_fourier_engine() {
  register_engine({"cuda-fourier",
                   "Fourier route in FP32: cuFFT forward transforms, dense phase sum per frequency and "
                   "velocity on the ordinary cores, inverse transforms",
                   true, 20, [] { return std::make_unique<FourierEngine>(); }, cuda_device_available, false});
}

}  // namespace shiftstack::cuda
