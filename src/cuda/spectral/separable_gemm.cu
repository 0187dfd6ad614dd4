// cuda-gemm: the separable route through a library call, kept to measure what materializing the
// operand costs. Per chunk of x frequencies the scaled operand
//   X[(c, b, my), e] = P_y(my sy[b,e]) * S_e(mx, my)      (By diag(psihat), FP16, same values as cuda-tc)
// is written to device memory, and one batched cuBLAS FP16 x FP16 -> FP32 product per chunk
// multiplies it by the x-phase table of each mx in real block form
//   [Xr Xi] [ Yr  Yi ]
//           [-Yi  Yr ]     (columns interleaved (a, re), (a, im)),
// then a scatter kernel applies the per-frequency scales and writes the velocity spectra.
// The materialized operand is written once and read once per frequency chunk: that traffic is
// what the fused kernel avoids.
#include <algorithm>

#include "core/engine_registry.hpp"
#include "spectra.cuh"
#include "cuda/common/warp_mma.cuh"

namespace shiftstack::cuda {

namespace gemm {

constexpr int kFrequencyChunk = 8;  // x frequencies per batched product

// X rows for frequencies mx in [mx0, mx0 + count): [mx - mx0][m < 2 m_per_channel][k < 2 E_pad],
// m = c * m_per_channel + (b - b_begin) * nyh + my; padding rows zero.
__global__ void materialize_kernel(const uint2* half_spectra, const std::int32_t* shift_y_rel,
                                   const float2* root_y, int min_sy, int ny, int nyh, int nyh_padded,
                                   int exposures_padded, int b_begin, int rows, int m_per_channel, int mx0,
                                   int count, __half2* x) {
  const int quads = exposures_padded / 4;  // 4 exposures (16 bytes of X) per thread
  const std::size_t total = std::size_t(count) * 2 * m_per_channel * quads;
  for (std::size_t idx = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += std::size_t(gridDim.x) * blockDim.x) {
    const int q = int(idx % quads);
    const int m = int(idx / quads % (2 * m_per_channel));
    const int local = int(idx / (std::size_t(quads) * 2 * m_per_channel));
    const int c = m / m_per_channel, r = m % m_per_channel;
    uint4 out = make_uint4(0, 0, 0, 0);
    if (r < rows) {
      const int b = b_begin + r / nyh, my = r % nyh, mx = mx0 + local;
      std::uint32_t value[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int e = 4 * q + i;
        const uint2 s = half_spectra[(std::size_t(mx) * nyh_padded + my) * exposures_padded + e];
        const int shift = shift_y_rel[std::size_t(b) * exposures_padded + e] + min_sy;
        int j = int((long long)my * shift % ny);
        if (j < 0) j += ny;
        value[i] = spectral_sample(root_y[j], c == 0 ? s.x : s.y);
      }
      out = make_uint4(value[0], value[1], value[2], value[3]);
    }
    reinterpret_cast<uint4*>(x)[idx] = out;
  }
}

// The block-form x-phase table: [mx][n < columns][k < 2 E_pad] FP16, n = 2a + (0 re | 1 im),
// k = 2e + (0 re | 1 im) of X.
__global__ void block_phase_kernel(const std::int32_t* sx, const __half2* root_x, int nx, int va, int columns,
                                   int exposures, int exposures_padded, __half* table) {
  const int depth = 2 * exposures_padded;
  const std::size_t total = std::size_t(nx) * columns * depth;
  for (std::size_t idx = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += std::size_t(gridDim.x) * blockDim.x) {
    const int k = int(idx % depth), n = int(idx / depth % columns), mx = int(idx / (std::size_t(depth) * columns));
    const int e = k / 2, from_imag = k % 2, a = n / 2, to_imag = n % 2;
    __half value = __float2half(0.0f);
    if (a < va && e < exposures) {
      int j = int((long long)mx * sx[std::size_t(a) * exposures + e] % nx);
      if (j < 0) j += nx;
      const __half2 y = root_x[j];
      const __half yr = __low2half(y), yi = __high2half(y);
      value = from_imag == 0 ? (to_imag == 0 ? yr : yi) : (to_imag == 0 ? __hneg(yi) : yr);
    }
    table[idx] = value;
  }
}

// Product (column-major m x columns per frequency) -> velocity spectra, with the scales; a
// thread takes both channels of one (frequency, velocity) (store_both_channels).
__global__ void scatter_kernel(const float* product, const float* scales, int nx, int ny, int nyh, int va, int rows,
                               int m_per_channel, int columns, int mx0, int count, float norm, float2* out) {
  const int m_total = 2 * m_per_channel;
  const std::size_t total = std::size_t(count) * va * m_per_channel;
  const std::size_t frequencies = std::size_t(nx) * nyh;
  for (std::size_t idx = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += std::size_t(gridDim.x) * blockDim.x) {
    const int r = int(idx % m_per_channel), a = int(idx / m_per_channel % va);
    const int local = int(idx / (std::size_t(m_per_channel) * va));
    if (r >= rows) continue;
    const int b_local = r / nyh, my = r % nyh, mx = mx0 + local;
    const float* base = product + std::size_t(local) * m_total * columns;
    const float* re = base + std::size_t(2 * a) * m_total + r;
    const float* im = base + std::size_t(2 * a + 1) * m_total + r;
    const std::size_t f = std::size_t(mx) * nyh + my;
    const float scale_psi = scales[f] * norm, scale_phi = scales[frequencies + f] * norm;
    store_both_channels(out + (std::size_t(b_local) * va + a) * nx * ny, nx, ny, mx, my,
                        make_float2(re[0] * scale_psi, im[0] * scale_psi),
                        make_float2(re[m_per_channel] * scale_phi, im[m_per_channel] * scale_phi));
  }
}

}  // namespace gemm

namespace {

unsigned grid_for(std::size_t work, int threads) {
  return unsigned(std::min<std::size_t>((work + threads - 1) / threads, 132 * 64));
}

class SeparableGemmEngine final : public SpectralEngine {
 public:
  std::string name() const override { return "cuda-gemm"; }
  ~SeparableGemmEngine() override {
    if (handle_) cublasDestroy(handle_);
  }

 protected:
  double bytes_per_row(const SpectralState& s) const override {
    const double per_frequency = 2.0 * s.geometry.nyh * (2.0 * s.exposures_padded * 2 + columns(s) * 4);
    return per_frequency * gemm::kFrequencyChunk + 64;
  }

  void prepare(SpectralState& s) override {
    if (!handle_) SHIFTSTACK_CUBLAS_CHECK(cublasCreate(&handle_));
    SHIFTSTACK_CUBLAS_CHECK(cublasSetStream(handle_, s.stream));
    pack_half_spectra(s, 1);
    const FourierGeometry& g = s.geometry;
    const int cols = columns(s), depth = 2 * s.exposures_padded;
    phases_.resize(std::size_t(g.nx) * cols * depth);
    gemm::block_phase_kernel<<<grid_for(phases_.size(), 256), 256, 0, s.stream>>>(
        s.shift_x.get(), s.root_x_half.get(), g.nx, s.va, cols, s.exposures, s.exposures_padded, phases_.get());
    SHIFTSTACK_CUDA_CHECK_LAUNCH();
  }

  void contract(SpectralState& s, int b_begin, int b_end) override {
    const FourierGeometry& g = s.geometry;
    const int rows = (b_end - b_begin) * g.nyh;
    const int m_per_channel = (rows + 7) / 8 * 8;  // row counts multiple of 8 keep cuBLAS on aligned kernels
    const int m_total = 2 * m_per_channel, cols = columns(s), depth = 2 * s.exposures_padded;
    operand_.resize(std::size_t(gemm::kFrequencyChunk) * m_total * depth);
    product_.resize(std::size_t(gemm::kFrequencyChunk) * m_total * cols);
    const float one = 1.0f, zero = 0.0f;
    for (int mx0 = 0; mx0 < g.nx; mx0 += gemm::kFrequencyChunk) {
      const int count = std::min(gemm::kFrequencyChunk, g.nx - mx0);
      gemm::materialize_kernel<<<grid_for(std::size_t(count) * m_total * (s.exposures_padded / 4), 256), 256, 0,
                                 s.stream>>>(s.half_spectra.get(), s.shift_y_rel.get(), s.root_y.get(), g.min_sy,
                                             g.ny, g.nyh, s.nyh_padded, s.exposures_padded, b_begin, rows,
                                             m_per_channel, mx0, count, reinterpret_cast<__half2*>(operand_.get()));
      SHIFTSTACK_CUDA_CHECK_LAUNCH();
      // Column-major: product (m_total x cols) = operand^T (m_total x depth) * phases (depth x cols).
      SHIFTSTACK_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
          handle_, CUBLAS_OP_T, CUBLAS_OP_N, m_total, cols, depth, &one, operand_.get(), CUDA_R_16F, depth,
          (long long)m_total * depth, phases_.get() + std::size_t(mx0) * cols * depth, CUDA_R_16F, depth,
          (long long)cols * depth, &zero, product_.get(), CUDA_R_32F, m_total, (long long)m_total * cols, count,
          CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
      gemm::scatter_kernel<<<grid_for(std::size_t(count) * s.va * m_per_channel, 256), 256, 0, s.stream>>>(
          product_.get(), s.scales.get(), g.nx, g.ny, g.nyh, s.va, rows, m_per_channel, cols, mx0, count,
          s.inverse_norm(), s.velocity_spectra.get());
      SHIFTSTACK_CUDA_CHECK_LAUNCH();
    }
  }

 private:
  static int columns(const SpectralState& s) { return (2 * s.va + 7) / 8 * 8; }
  cublasHandle_t handle_ = nullptr;
  DeviceArray<__half> phases_, operand_;
  DeviceArray<float> product_;
};

}  // namespace

void register_separable_gemm_engine() {
  register_engine({"cuda-gemm",
                   "Fourier route through batched cuBLAS: the scaled operand By diag(psihat) materialized "
                   "in FP16 per frequency chunk, FP32 accumulation",
                   true, 10, [] { return std::make_unique<SeparableGemmEngine>(); }, cuda_device_available, true});
}

}  // namespace shiftstack::cuda
