#include "tree/tree_kernels.hpp"

#include <cmath>
#include <limits>

#include "shiftstack/encoding.hpp"
#include "shiftstack/error.hpp"

// Run-time dispatch without intrinsics: each kernel is compiled once per target below and the
// loader picks the best the CPU has (GCC/Clang function multi-versioning on x86-64).
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(SHIFTSTACK_TREE_NO_CLONES)
#define TREE_KERNEL __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define TREE_KERNEL
#endif

namespace shiftstack::tree {

// Rows are formed in whole 16-float blocks (one AVX-512 vector), the last block overlapping
// the one before when the width is not a multiple of 16: forming a pixel twice from the same
// inputs writes the same value. Narrower rows (edge tiles) run as plain loops.
constexpr int kBlock = 16;

TREE_KERNEL void add_planes(float* out, int out_stride, const float* a, int a_stride, const float* b, int b_stride,
                            int width, int rows) {
  for (int r = 0; r < rows; ++r) {
    float* __restrict o = out + std::ptrdiff_t(r) * out_stride;
    const float* __restrict x = a + std::ptrdiff_t(r) * a_stride;
    const float* __restrict y = b + std::ptrdiff_t(r) * b_stride;
    if (width < kBlock) {
      for (int i = 0; i < width; ++i) o[i] = x[i] + y[i];
      continue;
    }
    for (int i = 0;; i += kBlock) {
      if (i + kBlock > width) i = width - kBlock;
#pragma omp simd
      for (int l = 0; l < kBlock; ++l) o[i + l] = x[i + l] + y[i + l];
      if (i + kBlock == width) break;
    }
  }
}

TREE_KERNEL void copy_plane(float* out, int out_stride, const float* src, int src_stride, int width, int rows) {
  for (int r = 0; r < rows; ++r) {
    float* __restrict o = out + std::ptrdiff_t(r) * out_stride;
    const float* __restrict x = src + std::ptrdiff_t(r) * src_stride;
#pragma omp simd
    for (int i = 0; i < width; ++i) o[i] = x[i];
  }
}

TREE_KERNEL void accumulate_plane(float* out, int out_stride, const float* src, int src_stride, int width, int rows) {
  for (int r = 0; r < rows; ++r) {
    float* __restrict o = out + std::ptrdiff_t(r) * out_stride;
    const float* __restrict x = src + std::ptrdiff_t(r) * src_stride;
#pragma omp simd
    for (int i = 0; i < width; ++i) o[i] += x[i];
  }
}

ZTest z_test(double z) {
  ZTest t;
  t.negative = z < 0;
  t.z_squared = std::isinf(z) ? std::numeric_limits<float>::infinity() : float(z * z);
  return t;
}

namespace {
// "Z > z" without a square root (see ZTest), and the per-trial work of score_tile.
inline bool passes(float A, float A2, float B, float z2, bool negative) {
  return negative ? (A >= 0 || A2 < z2 * B) : (A > 0 && A2 > z2 * B);
}
}  // namespace

TREE_KERNEL bool score_tile(const float* a0, int a0_stride, const float* a1, int a1_stride, const float* b0,
                            int b0_stride, const float* b1, int b1_stride, int width, int rows, ZTest screen,
                            ZTest count_test, bool want_count, TileScore& out) {
  // Lane accumulators over the call (FP32 partial sums of rows * width / 16 values each, about
  // 1e-6 relative), added to the tile's double lanes at the end. A last block that overlaps the
  // one before only counts its new lanes.
  float sa[kBlock] = {}, sb[kBlock] = {};
  int n_scored[kBlock] = {}, n_count[kBlock] = {}, hit[kBlock] = {};
  const float s2 = screen.z_squared, c2 = count_test.z_squared;
  const bool s_neg = screen.negative, c_neg = count_test.negative;
  int any = 0;
  double tail_a = 0, tail_b = 0;
  for (int r = 0; r < rows; ++r) {
    const float* __restrict x0 = a0 + std::ptrdiff_t(r) * a0_stride;
    const float* __restrict x1 = a1 + std::ptrdiff_t(r) * a1_stride;
    const float* __restrict y0 = b0 + std::ptrdiff_t(r) * b0_stride;
    const float* __restrict y1 = b1 + std::ptrdiff_t(r) * b1_stride;
    if (width < kBlock) {
      for (int i = 0; i < width; ++i) {
        const float A = x0[i] + x1[i], B = y0[i] + y1[i];
        if (!(B > 0)) continue;
        const float A2 = A * A;
        tail_a += A;
        tail_b += B;
        ++n_scored[0];
        n_count[0] += want_count && passes(A, A2, B, c2, c_neg);
        any |= passes(A, A2, B, s2, s_neg);
      }
      continue;
    }
    for (int i = 0, done = 0;; i += kBlock) {
      if (i + kBlock > width) i = width - kBlock;
#pragma omp simd
      for (int l = 0; l < kBlock; ++l) {
        const float A = x0[i + l] + x1[i + l], B = y0[i + l] + y1[i + l];
        const bool valid = B > 0 && i + l >= done;
        const float A2 = A * A;
        sa[l] += valid ? A : 0.0f;
        sb[l] += valid ? B : 0.0f;
        n_scored[l] += valid;
        if (want_count) n_count[l] += valid && passes(A, A2, B, c2, c_neg);
        hit[l] |= valid && passes(A, A2, B, s2, s_neg);
      }
      done = i + kBlock;
      if (done == width) break;
    }
  }
  double sumA = tail_a, sumB = tail_b;
  std::int64_t scored = 0, count = 0;
  for (int l = 0; l < kBlock; ++l) {
    sumA += sa[l];
    sumB += sb[l];
    scored += n_scored[l];
    count += n_count[l];
    any |= hit[l];
  }
  out.sumA += sumA;
  out.sumB += sumB;
  out.scored += scored;
  out.count += count;
  return any != 0;
}

TREE_KERNEL void clean_fp32_row(const float* pairs, int n, float psi_weight, float phi_weight, float* psi,
                                float* phi) {
#pragma omp simd
  for (int i = 0; i < n; ++i) {
    const float p = pairs[2 * i], f = pairs[2 * i + 1];
    const bool valid = f > 0;
    psi[i] = valid ? psi_weight * p : 0.0f;
    phi[i] = valid ? phi_weight * f : 0.0f;
  }
}

namespace {
// IEEE half -> float for every bit pattern, from the encoder's own conversion.
const float* half_table() {
  static const std::vector<float> table = [] {
    std::vector<float> t(65536);
    for (std::uint32_t h = 0; h < 65536; ++h) t[h] = half_to_float(std::uint16_t(h));
    return t;
  }();
  return table.data();
}
}  // namespace

void clean_fp16_row(const std::uint16_t* pairs, int n, float psi_weight, float phi_weight, float* psi, float* phi) {
  const float* table = half_table();
  for (int i = 0; i < n; ++i) {
    const float p = table[pairs[2 * i]], f = table[pairs[2 * i + 1]];
    const bool valid = f > 0;
    psi[i] = valid ? psi_weight * p : 0.0f;
    phi[i] = valid ? phi_weight * f : 0.0f;
  }
}

TREE_KERNEL int clean_int8_row(const std::int8_t* pairs, int n, float psi_weight, float phi_weight, float* psi,
                               float* phi) {
  int exceptions = 0;
#pragma omp simd reduction(+ : exceptions)
  for (int i = 0; i < n; ++i) {
    const int code = pairs[2 * i];
    const int phi_code = std::uint8_t(pairs[2 * i + 1]);
    const bool valid = code != int8_codes::psi_invalid && phi_code != 0;
    const bool exception = valid && code == int8_codes::psi_exception;
    psi[i] = valid && !exception ? psi_weight * float(code) : 0.0f;
    phi[i] = valid ? phi_weight * float(phi_code) : 0.0f;
    exceptions += exception;
  }
  return exceptions;
}

}  // namespace shiftstack::tree
