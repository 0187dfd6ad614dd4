#include "tree/tree_kernels.hpp"

#include <bit>
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

// Rows are formed in whole 16-float blocks (one AVX-512 vector), then, when the width is not a
// multiple of 16, one last block ending at the row's end and overlapping the one before: forming
// a pixel twice from the same inputs writes the same value. Narrower rows (edge tiles) run as
// plain loops. The whole blocks run as a loop of fixed trip count, which the compiler keeps
// tight (a loop that moved its last block back inside ran 25-35% slower on short rows).
constexpr int kBlock = 16;

namespace {
// x where the lane mask is all ones, +0 where it is zero. A bitwise and, not a float select:
// GCC 12 vectorises two selects on one condition only where AVX-512 mask registers exist, and
// left the AVX2 and baseline clones of the loops that use this scalar (the root's scoring ran
// scalar on AVX2 machines until 28bafdc).
__attribute__((always_inline)) inline float keep_if(float x, std::int32_t mask) {
  return std::bit_cast<float>(std::bit_cast<std::int32_t>(x) & mask);
}

// The blocks of a row of `width` >= kBlock: block(i, -1) for each whole block at i, then, when
// the width is not a multiple of kBlock, block(width - kBlock, first_new) for the last one, whose
// lanes l < first_new the block before already covered.
template <class Block>
__attribute__((always_inline)) inline void for_each_block(int width, Block&& block) {
  const int whole = width / kBlock * kBlock;
  for (int i = 0; i < whole; i += kBlock) block(i, -1.0f);
  if (whole != width) block(width - kBlock, float(kBlock - (width - whole)));
}

__attribute__((always_inline)) inline void add_rows(float* out, int out_stride, const float* a, int a_stride,
                                                    const float* b, int b_stride, int width, int rows) {
  for (int r = 0; r < rows; ++r) {
    float* __restrict o = out + std::ptrdiff_t(r) * out_stride;
    const float* __restrict x = a + std::ptrdiff_t(r) * a_stride;
    const float* __restrict y = b + std::ptrdiff_t(r) * b_stride;
    if (width < kBlock) {
      for (int i = 0; i < width; ++i) o[i] = x[i] + y[i];
      continue;
    }
    for_each_block(width, [&](int i, float) __attribute__((always_inline)) {
#pragma omp simd
      for (int l = 0; l < kBlock; ++l) o[i + l] = x[i + l] + y[i + l];
    });
  }
}
}  // namespace

TREE_KERNEL void add_maps(float* out_a, float* out_b, int out_stride, const PlanePair& first, const PlanePair& second,
                          int width, int rows) {
  add_rows(out_a, out_stride, first.a, first.stride, second.a, second.stride, width, rows);
  add_rows(out_b, out_stride, first.b, first.stride, second.b, second.stride, width, rows);
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
  t.signed_square = std::isinf(z) ? float(z) : float(z * std::abs(z));
  return t;
}

namespace {

// The scoring loop for N sources per channel (2, or 4 when the root is formed from its
// grandchildren); inlined into each target's clone below.
template <int N, bool want_count>
__attribute__((always_inline)) inline void score_sources(const RootSources* sources, int velocities, int width,
                                                         int rows, ZTest screen, ZTest count_test, TileScore& out,
                                                         std::uint8_t* hit_out) {
  // Lane accumulators: FP32 over one velocity (rows * width / 16 values each, about 1e-6
  // relative), then added to double lanes; reduced once per call. A last block that overlaps
  // the one before only counts its new lanes. Branch-free so that it vectorises.
  double da[kBlock] = {}, db[kBlock] = {};
  int n_scored[kBlock] = {}, n_count[kBlock] = {};
  const float sz = screen.signed_square, cz = count_test.signed_square;
  double tail_a = 0, tail_b = 0;
  std::int64_t tail_scored = 0, tail_count = 0;
  for (int k = 0; k < velocities; ++k) {
    const RootSources& src = sources[k];
    float sa[kBlock] = {}, sb[kBlock] = {};
    int hit[kBlock] = {};
    int any = 0;
    for (int r = 0; r < rows; ++r) {
      auto row_a = [&](int s) { return src.source[s].a + std::ptrdiff_t(r) * src.source[s].stride; };
      auto row_b = [&](int s) { return src.source[s].b + std::ptrdiff_t(r) * src.source[s].stride; };
      const float* __restrict x0 = row_a(0);
      const float* __restrict x1 = row_a(1);
      const float* __restrict y0 = row_b(0);
      const float* __restrict y1 = row_b(1);
      const float* __restrict x2 = N == 4 ? row_a(2) : nullptr;
      const float* __restrict x3 = N == 4 ? row_a(3) : nullptr;
      const float* __restrict y2 = N == 4 ? row_b(2) : nullptr;
      const float* __restrict y3 = N == 4 ? row_b(3) : nullptr;
      auto channel_a = [&](int i) { return N == 4 ? (x0[i] + x1[i]) + (x2[i] + x3[i]) : x0[i] + x1[i]; };
      auto channel_b = [&](int i) { return N == 4 ? (y0[i] + y1[i]) + (y2[i] + y3[i]) : y0[i] + y1[i]; };
      if (width < kBlock) {
        for (int i = 0; i < width; ++i) {
          const float A = channel_a(i), B = channel_b(i);
          if (!(B > 0)) continue;
          tail_a += A;
          tail_b += B;
          ++tail_scored;
          if (want_count) tail_count += passes(A, B, count_test);
          any |= passes(A, B, screen);
        }
        continue;
      }
      // Lanes l with float(l) < first_new were counted by the block before (the overlapping last
      // block of a row), so they only count once.
      for_each_block(width, [&](int i, float first_new) __attribute__((always_inline)) {
#pragma omp simd
        for (int l = 0; l < kBlock; ++l) {
          const float A = channel_a(i + l), B = channel_b(i + l);
          const float q = A * std::fabs(A);
          const std::int32_t valid = (B > 0 ? -1 : 0) & (float(l) >= first_new ? -1 : 0);  // lane masks
          sa[l] += keep_if(A, valid);
          sb[l] += keep_if(B, valid);
          n_scored[l] -= valid;
          if (want_count) n_count[l] -= valid & (q > cz * B ? -1 : 0);
          hit[l] |= valid & (q > sz * B ? -1 : 0);
        }
      });
    }
#pragma omp simd reduction(| : any)
    for (int l = 0; l < kBlock; ++l) {
      da[l] += sa[l];
      db[l] += sb[l];
      any |= hit[l];
    }
    hit_out[k] = any != 0;
  }
  double sumA = tail_a, sumB = tail_b;
  std::int64_t scored = tail_scored, count = want_count ? tail_count : 0;
  for (int l = 0; l < kBlock; ++l) {
    sumA += da[l];
    sumB += db[l];
    scored += n_scored[l];
    if (want_count) count += n_count[l];
  }
  out.sumA += sumA;
  out.sumB += sumB;
  out.scored += scored;
  out.count += count;
}

// One clone per (sources, want_count): the count above z_thr costs a multiply and a compare per
// trial, and the refining engine does not use it.
#define TREE_SCORE_KERNEL(name, N, want)                                                                          \
  TREE_KERNEL void name(const RootSources* sources, int velocities, int width, int rows, ZTest screen,            \
                        ZTest count_test, TileScore& out, std::uint8_t* hit) {                                    \
    score_sources<N, want>(sources, velocities, width, rows, screen, count_test, out, hit);                       \
  }
TREE_SCORE_KERNEL(score_two, 2, false)
TREE_SCORE_KERNEL(score_two_counted, 2, true)
TREE_SCORE_KERNEL(score_four, 4, false)
TREE_SCORE_KERNEL(score_four_counted, 4, true)
#undef TREE_SCORE_KERNEL

}  // namespace

void score_tile(const RootSources* sources, int count, int velocities, int width, int rows, ZTest screen,
                ZTest count_test, bool want_count, TileScore& out, std::uint8_t* hit) {
  require(count == 2 || count == 4, "tree: internal: the root sums 2 or 4 sources");
  auto* kernel = count == 2 ? (want_count ? score_two_counted : score_two)
                            : (want_count ? score_four_counted : score_four);
  kernel(sources, velocities, width, rows, screen, count_test, out, hit);
}

TREE_KERNEL void clean_fp32_row(const float* pairs, int n, float psi_weight, float phi_weight, float* psi,
                                float* phi) {
#pragma omp simd
  for (int i = 0; i < n; ++i) {
    const float p = pairs[2 * i], f = pairs[2 * i + 1];
    const std::int32_t valid = f > 0 ? -1 : 0;
    psi[i] = keep_if(psi_weight * p, valid);
    phi[i] = keep_if(phi_weight * f, valid);
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
