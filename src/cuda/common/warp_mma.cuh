// Warp-level PTX wrappers for sm_80+ tensor-core code: asynchronous 16-byte copies to shared
// memory, ldmatrix, and the m16n8k16 FP16 x FP16 -> FP32 matrix product.
#pragma once
#include <cuda_fp16.h>

#include <cstdint>

namespace shiftstack::cuda {

__device__ __forceinline__ std::uint32_t shared_address(const void* pointer) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(pointer));
}

// 16 bytes global -> shared, bypassing L1 (.cg): the operands are streamed once per CTA.
__device__ __forceinline__ void copy_async_16(void* shared_destination, const void* global_source) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(shared_address(shared_destination)),
               "l"(global_source));
}
// 16 bytes global -> shared; `bytes` < 16 zero-fills the rest (0: nothing is read).
__device__ __forceinline__ void copy_16_or_zero(void* shared_destination, const void* global_source, int bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared_address(shared_destination)),
               "l"(global_source), "r"(bytes)
               : "memory");
}
// 4 bytes global -> shared through L1 (.ca); `bytes` 0 writes a zero and reads nothing.
__device__ __forceinline__ void copy_4_or_zero(void* shared_destination, const void* global_source, int bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(shared_address(shared_destination)),
               "l"(global_source), "r"(bytes)
               : "memory");
}
// 8 bytes global -> shared through L1 (.ca); `bytes` 0 writes zeros and reads nothing.
__device__ __forceinline__ void copy_8_or_zero(void* shared_destination, const void* global_source, int bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(shared_address(shared_destination)),
               "l"(global_source), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void copy_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int pending>
__device__ __forceinline__ void copy_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(pending) : "memory");
}

// Four 8x8 matrices of 16-bit elements; lane l gives the row address of matrix l/8, row l%8.
__device__ __forceinline__ void load_matrix_x4(std::uint32_t& r0, std::uint32_t& r1, std::uint32_t& r2,
                                               std::uint32_t& r3, const void* row_address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(shared_address(row_address)));
}
// Two matrices; lanes 0-15 give the row addresses.
__device__ __forceinline__ void load_matrix_x2(std::uint32_t& r0, std::uint32_t& r1, const void* row_address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r0), "=r"(r1)
               : "r"(shared_address(row_address)));
}

// d += a (16x16, row major, FP16) * b (16x8, column major, FP16), FP32 accumulators.
__device__ __forceinline__ void mma_16x8x16(float (&d)[4], const std::uint32_t (&a)[4], std::uint32_t b0,
                                            std::uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ std::uint32_t half2_bits(__half2 value) {
  return *reinterpret_cast<std::uint32_t*>(&value);
}
__device__ __forceinline__ __half2 bits_half2(std::uint32_t bits) {
  return *reinterpret_cast<__half2*>(&bits);
}

// The tensor-core A operand of one spectrum sample: X = phase (FP32) x spectrum (FP16), each part
// one FP32 product and one FMA, rounded once to FP16 (the CPU emulation does the same). Returned
// as the two k-pairs of the real block form: real rows (Xr, -Xi), imaginary rows (Xi, Xr).
__device__ __forceinline__ std::uint32_t spectral_sample(float2 phase, std::uint32_t spectrum_bits) {
  const float2 s = __half22float2(bits_half2(spectrum_bits));
  const float re = __fmaf_rn(phase.x, s.x, -__fmul_rn(phase.y, s.y));
  const float im = __fmaf_rn(phase.x, s.y, __fmul_rn(phase.y, s.x));
  return half2_bits(__floats2half2_rn(re, im));  // re in the low half
}
// The two k-pairs of one FP16 complex value x (re in the low half) in the real block form.
__device__ __forceinline__ void block_pairs(std::uint32_t x, std::uint32_t& real_pair, std::uint32_t& imag_pair) {
  real_pair = x ^ 0x80000000u;            // negate the high half: (re, -im)
  imag_pair = __byte_perm(x, 0, 0x1032);  // swap halves: (im, re)
}
__device__ __forceinline__ void spectral_operand(float2 phase, std::uint32_t spectrum_bits,
                                                 std::uint32_t& real_pair, std::uint32_t& imag_pair) {
  block_pairs(spectral_sample(phase, spectrum_bits), real_pair, imag_pair);
}

// --- sm_90a warpgroup matrix products (wgmma, HGMMA in SASS) ------------------------------------

// Shared-memory matrix descriptor, no swizzle: start address, leading (K-direction) and stride
// (M/N-direction) byte offsets between 8-row x 16-byte core matrices; layout bits 62-63 = 0.
__device__ __forceinline__ std::uint64_t matrix_descriptor(const void* start, int leading_bytes, int stride_bytes) {
  std::uint64_t d = (shared_address(start) & 0x3ffffu) >> 4;
  d |= std::uint64_t((leading_bytes & 0x3ffff) >> 4) << 16;
  d |= std::uint64_t((stride_bytes & 0x3ffff) >> 4) << 32;
  return d;
}

__device__ __forceinline__ void warpgroup_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void warpgroup_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int pending>
__device__ __forceinline__ void warpgroup_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(pending) : "memory");
}
// Keeps the compiler from moving accumulator registers across an asynchronous product.
__device__ __forceinline__ void pin(float& value) { asm volatile("" : "+f"(value)::"memory"); }
// Makes this thread's generic-proxy shared-memory writes (cp.async included) visible to the
// asynchronous proxy that wgmma reads through; each writer runs it before the barrier.
__device__ __forceinline__ void fence_async_shared() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// d (64 x 72, FP32, 36 registers per thread) += a (64 x 16, FP16, registers: the m16n8k16 A layout
// per warp, warp w holding rows 16w..16w+15) * b (16 x 72, FP16, K-major in shared memory).
__device__ __forceinline__ void wgmma_64x72x16(float (&d)[36], const std::uint32_t (&a)[4], std::uint64_t b) {
  asm volatile(
      "{\n.reg .pred accumulate;\nsetp.ne.b32 accumulate, %41, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n72k16.f32.f16.f16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35}, {%36, %37, %38, %39}, %40, accumulate, 1, 1, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
                 "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
                 "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),
                 "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                 "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
                 "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
}

}  // namespace shiftstack::cuda
