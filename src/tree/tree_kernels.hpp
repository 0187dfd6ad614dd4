// The tree executor's inner loops: contiguous rows of floats, written so the compiler vectorises
// them, each compiled for AVX-512, AVX2 and the baseline and picked at run time.
#pragma once
#include <cstdint>

namespace shiftstack::tree {

// out[r][i] = a[r][i] + b[r][i] for rows r < rows, i < width (strides in floats).
void add_planes(float* out, int out_stride, const float* a, int a_stride, const float* b, int b_stride, int width,
                int rows);
// out[r][i] = src[r][i], or out[r][i] += src[r][i].
void copy_plane(float* out, int out_stride, const float* src, int src_stride, int width, int rows);
void accumulate_plane(float* out, int out_stride, const float* src, int src_stride, int width, int rows);

// A test "Z > z" on (A, B) without a square root: for z >= 0 it is A > 0 and A^2 > z^2 B; for
// z < 0 it is A >= 0 or A^2 < z^2 B (B > 0 in both).
struct ZTest {
  float z_squared = 0;
  bool negative = false;
};
ZTest z_test(double z);

// One root velocity over a tile of origins: A = a0 + a1, B = b0 + b1 per origin. Adds A and B
// over scored trials (B > 0) to `out`, counts them and (when want_count) those passing
// `count_test`. Returns whether any trial passes `screen` (rare: the caller then finds them).
struct TileScore {
  double sumA = 0, sumB = 0;
  std::int64_t scored = 0, count = 0;
};
bool score_tile(const float* a0, int a0_stride, const float* a1, int a1_stride, const float* b0, int b0_stride,
                const float* b1, int b1_stride, int width, int rows, ZTest screen, ZTest count_test, bool want_count,
                TileScore& out);

// Band copies: weighted, cleaned (psi, phi) pairs as decode() would return them: (0, 0) where
// decode() reports an invalid sample.
void clean_fp32_row(const float* pairs, int n, float psi_weight, float phi_weight, float* psi, float* phi);
void clean_fp16_row(const std::uint16_t* pairs, int n, float psi_weight, float phi_weight, float* psi, float* phi);
// int8: exception codes come out as 0 (their exact values are added by the caller); returns the
// number of valid exception codes in the row.
int clean_int8_row(const std::int8_t* pairs, int n, float psi_weight, float phi_weight, float* psi, float* phi);

}  // namespace shiftstack::tree
