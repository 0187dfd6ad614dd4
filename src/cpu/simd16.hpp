// Sixteen-lane float vectors for the fast CPU engine. With AVX-512 (the compiler targets it) each
// operation is one instruction; otherwise plain 16-iteration loops that the compiler vectorizes
// for whatever the machine has. Only what the engine needs is here.
#pragma once
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "shiftstack/encoding.hpp"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__)
#define SHIFTSTACK_SIMD_AVX512 1
// GCC 12 reports the intrinsics' deliberately undefined pass-through operands as
// "maybe uninitialized" once inlined; the diagnostic is about the header, not this code.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif

namespace shiftstack::simd {

constexpr int kLanes = 16;
using Mask = std::uint32_t;  // bit i = lane i

#ifdef SHIFTSTACK_SIMD_AVX512

struct F16 {
  __m512 v;
};
struct D16 {  // sixteen doubles, for exact-order sums
  __m512d lo = _mm512_setzero_pd(), hi = _mm512_setzero_pd();
};

inline F16 zero() { return {_mm512_setzero_ps()}; }
inline F16 splat(float x) { return {_mm512_set1_ps(x)}; }
// (p[0], p[1]) repeated eight times: the weights of interleaved (psi, phi) pairs.
inline F16 splat_pair(const float* p) {
  double bits;
  std::memcpy(&bits, p, sizeof bits);
  return {_mm512_castpd_ps(_mm512_set1_pd(bits))};
}
inline F16 load(const float* p) { return {_mm512_loadu_ps(p)}; }
// Sixteen IEEE halves.
inline F16 load(const std::uint16_t* p) {
  return {_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)))};
}
inline void store(float* p, F16 a) { _mm512_storeu_ps(p, a.v); }
inline F16 fma(F16 a, F16 b, F16 c) { return {_mm512_fmadd_ps(a.v, b.v, c.v)}; }
inline F16 add(F16 a, F16 b) { return {_mm512_add_ps(a.v, b.v)}; }
// Splits two vectors of interleaved pairs into their even (psi/A) and odd (phi/B) lanes.
inline void deinterleave(F16 a, F16 b, F16& even, F16& odd) {
  const __m512i even_index = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd_index = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  even.v = _mm512_permutex2var_ps(a.v, even_index, b.v);
  odd.v = _mm512_permutex2var_ps(a.v, odd_index, b.v);
}
inline Mask greater(F16 a, F16 b) { return _mm512_cmp_ps_mask(a.v, b.v, _CMP_GT_OQ); }
inline Mask greater_equal(F16 a, F16 b) { return _mm512_cmp_ps_mask(a.v, b.v, _CMP_GE_OQ); }
// a / sqrt(b) in lanes of `valid` (b > 0 there), `fallback` elsewhere. rsqrt14 plus one
// Newton step gives about 1e-7 relative error: enough to filter; exact values are recomputed
// in double for every trial that passes a filter.
inline F16 ratio_sqrt(F16 a, F16 b, Mask valid, float fallback) {
  const __m512 r0 = _mm512_rsqrt14_ps(b.v);
  const __m512 half_b = _mm512_mul_ps(b.v, _mm512_set1_ps(0.5f));
  const __m512 r1 = _mm512_mul_ps(
      r0, _mm512_fnmadd_ps(_mm512_mul_ps(half_b, r0), r0, _mm512_set1_ps(1.5f)));
  return {_mm512_mask_mul_ps(_mm512_set1_ps(fallback), __mmask16(valid), a.v, r1)};
}
// Adds the lanes of `valid` to the double sums (others add zero).
inline void accumulate(D16& sum, F16 a, Mask valid) {
  const __m256 low = _mm512_maskz_extractf32x8_ps(0xff, a.v, 0), high = _mm512_maskz_extractf32x8_ps(0xff, a.v, 1);
  sum.lo = _mm512_add_pd(sum.lo, _mm512_maskz_cvtps_pd(__mmask8(valid), low));
  sum.hi = _mm512_add_pd(sum.hi, _mm512_maskz_cvtps_pd(__mmask8(valid >> 8), high));
}
inline double total(const D16& sum) {
  alignas(64) double lanes[16];
  _mm512_store_pd(lanes, sum.lo);
  _mm512_store_pd(lanes + 8, sum.hi);
  double t = 0;
  for (double x : lanes) t += x;
  return t;
}

#else  // portable fallback

struct F16 {
  float v[kLanes];
};
struct D16 {
  double v[kLanes] = {};
};

inline F16 zero() { return F16{}; }
inline F16 splat(float x) {
  F16 r;
  for (int i = 0; i < kLanes; ++i) r.v[i] = x;
  return r;
}
inline F16 splat_pair(const float* p) {
  F16 r;
  for (int i = 0; i < kLanes; ++i) r.v[i] = p[i & 1];
  return r;
}
inline F16 load(const float* p) {
  F16 r;
  std::memcpy(r.v, p, sizeof r.v);
  return r;
}
inline F16 load(const std::uint16_t* p) {
  F16 r;
  for (int i = 0; i < kLanes; ++i) r.v[i] = half_to_float(p[i]);
  return r;
}
inline void store(float* p, F16 a) { std::memcpy(p, a.v, sizeof a.v); }
inline F16 fma(F16 a, F16 b, F16 c) {
  F16 r;
  for (int i = 0; i < kLanes; ++i) r.v[i] = std::fma(a.v[i], b.v[i], c.v[i]);
  return r;
}
inline F16 add(F16 a, F16 b) {
  F16 r;
  for (int i = 0; i < kLanes; ++i) r.v[i] = a.v[i] + b.v[i];
  return r;
}
inline void deinterleave(F16 a, F16 b, F16& even, F16& odd) {
  for (int i = 0; i < kLanes / 2; ++i) {
    even.v[i] = a.v[2 * i];
    odd.v[i] = a.v[2 * i + 1];
    even.v[i + kLanes / 2] = b.v[2 * i];
    odd.v[i + kLanes / 2] = b.v[2 * i + 1];
  }
}
inline Mask greater(F16 a, F16 b) {
  Mask m = 0;
  for (int i = 0; i < kLanes; ++i) m |= Mask(a.v[i] > b.v[i]) << i;
  return m;
}
inline Mask greater_equal(F16 a, F16 b) {
  Mask m = 0;
  for (int i = 0; i < kLanes; ++i) m |= Mask(a.v[i] >= b.v[i]) << i;
  return m;
}
inline F16 ratio_sqrt(F16 a, F16 b, Mask valid, float fallback) {
  F16 r;
  for (int i = 0; i < kLanes; ++i)
    r.v[i] = (valid >> i) & 1 ? a.v[i] / std::sqrt(b.v[i]) : fallback;
  return r;
}
inline void accumulate(D16& sum, F16 a, Mask valid) {
  for (int i = 0; i < kLanes; ++i)
    if ((valid >> i) & 1) sum.v[i] += a.v[i];
}
inline double total(const D16& sum) {
  double t = 0;
  for (double x : sum.v) t += x;
  return t;
}

#endif

inline int popcount(Mask m) { return std::popcount(m); }

}  // namespace shiftstack::simd
