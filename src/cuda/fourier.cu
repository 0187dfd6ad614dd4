// cuda-fourier: the Fourier route in FP32 on the ordinary cores. cuFFT forward transforms of the
// padded psi and phi planes; per frequency a dense phase sum over exposures for every velocity,
//   Ahat_ab(k) = sum_e exp(i kx sx[a,e]) psihat_e(k) exp(i ky sy[b,e]),
// computed as a register-tiled complex product (rows (b, my), columns a, inner dimension E) with
// both phases taken from exact FP32 unit-root tables; then the shared inverse FFTs and scoring.
// The FP32 baseline the FP16 tensor-core route is measured against.
#include <algorithm>

#include "engine_registry.hpp"
#include "spectra.cuh"

namespace shiftstack::cuda {

namespace phase_sum {

constexpr int kRowThreads = 16;   // threadIdx.x: 16 x 4 = 64 rows (b, my) per CTA
constexpr int kRowsPerThread = 4;
constexpr int kColsPerThread = 4; // threadIdx.y: up to kMaxColThreads x 4 columns a per CTA
constexpr int kMaxColThreads = 20;
constexpr int kRows = kRowThreads * kRowsPerThread;
constexpr int kMaxCols = kMaxColThreads * kColsPerThread;
constexpr int kChunk = 16;        // exposures per shared-memory stage

struct Params {
  const float2* spectra;      // [c][e][mx][my]
  const float2* root_x;       // [nx]
  const float2* root_y;       // [ny]
  const std::int32_t* sx;     // [a][E]
  const std::int32_t* sy;     // [b][E]
  int nx, ny, nyh, exposures, va;
  int b_begin, rows;          // rows = (b_end - b_begin) * nyh
  float norm;
  float2* out;                // [c][v][mx][my]
  std::size_t channel_stride;
};

__device__ __forceinline__ int wrap(long long j, int n) {
  int r = int(j % n);
  return r < 0 ? r + n : r;
}

__global__ void __launch_bounds__(kRowThreads * kMaxColThreads) phase_sum_kernel(Params p) {
  __shared__ float2 xs[2][kChunk][kRows];  // phase_y * spectrum per channel
  __shared__ float2 ys[kChunk][kMaxCols];  // phase_x
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
      float2 psi = make_float2(0, 0), phi = psi;
      if (e < p.exposures && r < p.rows) {
        const int b = p.b_begin + r / p.nyh, my = r % p.nyh;
        const float2 ph = p.root_y[wrap((long long)my * p.sy[std::size_t(b) * p.exposures + e], p.ny)];
        const std::size_t f = std::size_t(mx) * p.nyh + my;
        const float2 s0 = p.spectra[std::size_t(e) * exposure_stride + f];
        const float2 s1 = p.spectra[channel_in + std::size_t(e) * exposure_stride + f];
        psi = make_float2(ph.x * s0.x - ph.y * s0.y, ph.x * s0.y + ph.y * s0.x);
        phi = make_float2(ph.x * s1.x - ph.y * s1.y, ph.x * s1.y + ph.y * s1.x);
      }
      xs[0][el][row] = psi;
      xs[1][el][row] = phi;
    }
    for (int i = tid; i < kChunk * cols; i += threads) {
      const int el = i / cols, col = i % cols, e = e0 + el, a = a0 + col;
      float2 ph = make_float2(0, 0);
      if (e < p.exposures && a < p.va)
        ph = p.root_x[wrap((long long)mx * p.sx[std::size_t(a) * p.exposures + e], p.nx)];
      ys[el][col] = ph;
    }
    __syncthreads();
#pragma unroll 4
    for (int el = 0; el < kChunk; ++el) {
      float2 x[2][kRowsPerThread], y[kColsPerThread];
#pragma unroll
      for (int i = 0; i < kRowsPerThread; ++i) {
        x[0][i] = xs[0][el][tx + kRowThreads * i];  // consecutive lanes, consecutive rows: no bank conflicts
        x[1][i] = xs[1][el][tx + kRowThreads * i];
      }
#pragma unroll
      for (int j = 0; j < kColsPerThread; ++j) y[j] = ys[el][ty * kColsPerThread + j];
#pragma unroll
      for (int c = 0; c < 2; ++c)
#pragma unroll
        for (int i = 0; i < kRowsPerThread; ++i)
#pragma unroll
          for (int j = 0; j < kColsPerThread; ++j) {
            float2& d = acc[c][i][j];
            d.x = fmaf(x[c][i].x, y[j].x, d.x);
            d.x = fmaf(-x[c][i].y, y[j].y, d.x);
            d.y = fmaf(x[c][i].x, y[j].y, d.y);
            d.y = fmaf(x[c][i].y, y[j].x, d.y);
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
      const std::size_t at = (std::size_t(b_local) * p.va + a) * frequencies + std::size_t(mx) * p.nyh + my;
      p.out[at] = make_float2(acc[0][i][j].x * p.norm, acc[0][i][j].y * p.norm);
      p.out[p.channel_stride + at] = make_float2(acc[1][i][j].x * p.norm, acc[1][i][j].y * p.norm);
    }
  }
}

}  // namespace phase_sum

namespace {

class FourierEngine final : public SpectralEngine {
 public:
  std::string name() const override { return "cuda-fourier"; }

 protected:
  void prepare(SpectralState&) override {}

  void contract(SpectralState& s, int b_begin, int b_end) override {
    const FourierGeometry& g = s.geometry;
    phase_sum::Params p{};
    p.spectra = s.spectra.data();
    p.root_x = s.root_x.data();
    p.root_y = s.root_y.data();
    p.sx = s.shift_x.data();
    p.sy = s.shift_y.data();
    p.nx = g.nx, p.ny = g.ny, p.nyh = g.nyh, p.exposures = s.exposures, p.va = s.va;
    p.b_begin = b_begin;
    p.rows = (b_end - b_begin) * g.nyh;
    p.norm = s.inverse_norm();
    p.out = s.velocity_spectra.data();
    p.channel_stride = s.channel_stride(b_end - b_begin);
    // Columns: as few CTAs per row block as cover va with at most kMaxCols columns each.
    const int column_blocks = (s.va + phase_sum::kMaxCols - 1) / phase_sum::kMaxCols;
    const int per_block = (s.va + column_blocks - 1) / column_blocks;
    const int col_threads = (per_block + phase_sum::kColsPerThread - 1) / phase_sum::kColsPerThread;
    const dim3 block(phase_sum::kRowThreads, col_threads);
    const dim3 grid(unsigned((p.rows + phase_sum::kRows - 1) / phase_sum::kRows), unsigned(column_blocks),
                    unsigned(g.nx));
    phase_sum::phase_sum_kernel<<<grid, block, 0, s.stream>>>(p);
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
