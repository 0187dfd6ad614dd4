// The peak rates of the two tensor-core instructions cuda-tc's contraction kernels issue, with no
// memory traffic: mma.sync m16n8k16 (FP16 in, FP32 accumulation: HMMA, the default row kernel)
// and wgmma m64n72k16 with A from registers (HGMMA, the wgmma kernels). Each warp (warpgroup)
// runs independent accumulator chains as the kernels do (36 per k16 step), at 1, 2 and 4 blocks
// of 128 threads per SM. Then cuBLAS's FP16-in, FP32-accumulate GEMM at a few square sizes: the
// card's ceiling that issue targets are stated against ("half of cuBLAS on this card"), so that
// a lease on any card measures its own. The row kernel's rate is read against these
// (bench/RESULTS.md); not a test. Usage: shiftstack_tensor_ceiling [iterations]
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <string>
#include <vector>

#include "cuda/common/check.cuh"
#include "cuda/common/device_buffer.cuh"
#include "cuda/common/warp_mma.cuh"
#include "cuda/spectral/spectra.cuh"  // SHIFTSTACK_CUBLAS_CHECK
#include "shiftstack/error.hpp"

namespace {

using namespace shiftstack::cuda;

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kChains = 36;        // the row kernel's products per k16 step: 2 channels x 2 parts x 9 n8 tiles
constexpr int kWgmmaProducts = 4;  // the wgmma row kernel's products per k16 step: 2 channels x 2 parts
constexpr double kMmaFlops = 16.0 * 8 * 16 * 2;     // one m16n8k16
constexpr double kWgmmaFlops = 64.0 * 72 * 16 * 2;  // one m64n72k16

// Operands from the lane index, so that nothing is constant at compile time.
__device__ std::uint32_t lane_operand(int salt) {
  return half2_bits(__floats2half2_rn(1e-3f * float((threadIdx.x + salt) & 7), 1e-3f * float(salt & 3)));
}

__global__ void __launch_bounds__(kThreads) mma_sync_kernel(int iterations, float* sink) {
  std::uint32_t a[4] = {lane_operand(0), lane_operand(1), lane_operand(2), lane_operand(3)};
  const std::uint32_t b0 = lane_operand(4), b1 = lane_operand(5);
  float acc[kChains][4] = {};
  for (int it = 0; it < iterations; ++it) {
#pragma unroll
    for (int k = 0; k < kChains; ++k) mma_16x8x16(acc[k], a, b0, b1);
  }
  float total = 0;
#pragma unroll
  for (int k = 0; k < kChains; ++k) total += acc[k][0] + acc[k][1] + acc[k][2] + acc[k][3];
  if (total == 12345.0f) sink[threadIdx.x] = total;  // keeps the products (never true in practice)
}

// Four m64n72k16 products per step (the wgmma row kernel's two channels x two parts), A from
// registers, B one 72 x 16 tile in shared memory in the no-swizzle K-major layout.
__global__ void __launch_bounds__(kThreads) wgmma_kernel(int iterations, float* sink) {
  __shared__ __align__(128) __half tile[72 * 16];
  for (int i = threadIdx.x; i < 72 * 16; i += kThreads) tile[i] = __float2half(1e-3f * float(i & 7));
  fence_async_shared();
  __syncthreads();
  std::uint32_t a[4] = {lane_operand(0), lane_operand(1), lane_operand(2), lane_operand(3)};
  // Core matrices of 8 columns x 16 bytes: K-neighbours 128 B apart, 8-column groups 256 B apart.
  const std::uint64_t desc = matrix_descriptor(tile, 128, 256);
  float acc[kWgmmaProducts][36] = {};
  for (int it = 0; it < iterations; ++it) {
    warpgroup_fence();
#pragma unroll
    for (int k = 0; k < kWgmmaProducts; ++k) {
#pragma unroll
      for (int i = 0; i < 36; ++i) pin(acc[k][i]);
      wgmma_64x72x16(acc[k], a, desc);
    }
    warpgroup_commit();
    warpgroup_wait<1>();
  }
  warpgroup_wait<0>();
  float total = 0;
#pragma unroll
  for (int k = 0; k < kWgmmaProducts; ++k)
#pragma unroll
    for (int i = 0; i < 36; ++i) total += acc[k][i];
  if (total == 12345.0f) sink[threadIdx.x] = total;
}

// Median TFLOP/s of five timed calls of `launch`, each doing `flops`, after one warm-up call.
template <class Launch>
double median_tflops(double flops, Launch launch) {
  cudaEvent_t start, stop;
  SHIFTSTACK_CUDA_CHECK(cudaEventCreate(&start));
  SHIFTSTACK_CUDA_CHECK(cudaEventCreate(&stop));
  std::vector<double> rates;
  for (int run = 0; run <= 5; ++run) {
    SHIFTSTACK_CUDA_CHECK(cudaEventRecord(start));
    launch();
    SHIFTSTACK_CUDA_CHECK(cudaEventRecord(stop));
    SHIFTSTACK_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    SHIFTSTACK_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    if (run > 0) rates.push_back(flops / (ms * 1e-3) / 1e12);
  }
  SHIFTSTACK_CUDA_CHECK(cudaEventDestroy(start));
  SHIFTSTACK_CUDA_CHECK(cudaEventDestroy(stop));
  std::sort(rates.begin(), rates.end());
  return rates[rates.size() / 2];
}

template <class Kernel>
double tflops(Kernel kernel, int blocks, int iterations, double flops_per_block_iteration, float* sink) {
  return median_tflops(flops_per_block_iteration * blocks * iterations, [&] {
    kernel<<<blocks, kThreads>>>(iterations, sink);
    SHIFTSTACK_CUDA_CHECK_LAUNCH();
  });
}

// cublasGemmEx's rate for C (FP32) = A B with A and B n x n FP16 and FP32 accumulation, the
// precisions of cuda-tc's products.
double cublas_tflops(cublasHandle_t handle, int n) {
  const std::size_t elements = std::size_t(n) * n;
  DeviceArray<__half> a(elements), b(elements);
  DeviceArray<float> c(elements);
  // Small non-zero operands (0x1414 is about 0.001 in FP16): zeros could take a faster path.
  SHIFTSTACK_CUDA_CHECK(cudaMemset(a.get(), 0x14, a.bytes()));
  SHIFTSTACK_CUDA_CHECK(cudaMemset(b.get(), 0x14, b.bytes()));
  const float one = 1.0f, zero = 0.0f;
  return median_tflops(2.0 * double(n) * n * n, [&] {
    SHIFTSTACK_CUBLAS_CHECK(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a.get(), CUDA_R_16F, n,
                                         b.get(), CUDA_R_16F, n, &zero, c.get(), CUDA_R_32F, n, CUBLAS_COMPUTE_32F,
                                         CUBLAS_GEMM_DEFAULT));
  });
}

// The iteration count: a whole number from kWgmmaProducts (the wgmma kernel runs a quarter as
// many) to 10^8 (seconds per launch at the ceilings).
int parse_iterations(int argc, char** argv) {
  if (argc < 2) return 20000;
  shiftstack::require(argc == 2, "usage: shiftstack_tensor_ceiling [iterations]");
  const std::string text = argv[1];
  int value = 0;
  const auto [end, status] = std::from_chars(text.data(), text.data() + text.size(), value);
  shiftstack::require(status == std::errc() && end == text.data() + text.size() && value >= kWgmmaProducts &&
                          value <= 100000000,
                      "iterations must be a whole number from 4 to 100000000, not '" + text + "'");
  return value;
}

int run(int argc, char** argv) {
  const int iterations = parse_iterations(argc, argv);
  cudaDeviceProp prop{};
  SHIFTSTACK_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  float* sink = nullptr;
  SHIFTSTACK_CUDA_CHECK(cudaMalloc(&sink, kThreads * sizeof(float)));
  std::printf("%s, %d SMs; %d iterations per launch; TFLOP/s, median of 5\n", prop.name, prop.multiProcessorCount,
              iterations);
  for (int per_sm : {1, 2, 4}) {
    const int blocks = prop.multiProcessorCount * per_sm;
    const double mma = tflops(mma_sync_kernel, blocks, iterations, kWarps * kChains * kMmaFlops, sink);
    const double wgmma =
        tflops(wgmma_kernel, blocks, iterations / kWgmmaProducts, kWgmmaProducts * kWgmmaFlops, sink);
    std::printf("blocks of 128 threads per SM %d: mma.sync m16n8k16 f32 %.1f, wgmma m64n72k16 (A in registers) %.1f\n",
                per_sm, mma, wgmma);
  }
  SHIFTSTACK_CUDA_CHECK(cudaFree(sink));
  cublasHandle_t handle = nullptr;
  SHIFTSTACK_CUBLAS_CHECK(cublasCreate(&handle));
  for (int n : {4096, 8192, 16384})
    std::printf("cuBLAS GemmEx n = %d, FP16 in, FP32 accumulation and output: %.1f\n", n, cublas_tflops(handle, n));
  SHIFTSTACK_CUBLAS_CHECK(cublasDestroy(handle));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const shiftstack::Error& error) {
    std::fprintf(stderr, "shiftstack_tensor_ceiling: %s\n", error.what());
    return 1;
  }
}
