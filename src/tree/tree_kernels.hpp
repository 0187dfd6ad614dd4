// The tree executor's inner loops: contiguous rows of floats, written so the compiler vectorises
// them, each compiled for AVX-512, AVX2 and the baseline and picked at run time.
#pragma once
#include <cstdint>

namespace shiftstack::tree {

// One map's two channels read at one position: rows `stride` floats apart in both planes.
struct PlanePair {
  const float* a;
  const float* b;
  int stride;
};
// Both channels of a parent's map: out_a[r][i] = first.a[r][i] + second.a[r][i], and the same
// for out_b from the b planes, for rows r < rows, i < width (strides in floats).
void add_maps(float* out_a, float* out_b, int out_stride, const PlanePair& first, const PlanePair& second, int width,
              int rows);
// out[r][i] = src[r][i], or out[r][i] += src[r][i].
void copy_plane(float* out, int out_stride, const float* src, int src_stride, int width, int rows);
void accumulate_plane(float* out, int out_stride, const float* src, int src_stride, int width, int rows);

// A test "Z > z" on (A, B), B > 0, without a square root or a branch: A |A| > z |z| B (both
// sides are Z^2 and z^2 times B with their signs).
struct ZTest {
  float signed_square = 0;  // z |z|
};
ZTest z_test(double z);
inline bool passes(float A, float B, ZTest t) { return A * (A < 0 ? -A : A) > t.signed_square * B; }

// Root velocities over a tile of origins: for velocity k, A = a0 + a1 and B = b0 + b1 per origin
// (source[i].a, source[i].b), or with four sources (the root formed from its grandchildren)
// A = (a0 + a1) + (a2 + a3), the same for B (rows `source[i].stride` floats apart; a stride of 0
// repeats one row). Adds A and B over scored trials (B > 0) to `out`, counts them and (when
// want_count) those passing `count_test`; hit[k] says whether some trial of velocity k passes
// `screen` (rare: the caller then lists them).
struct TileScore {
  double sumA = 0, sumB = 0;
  std::int64_t scored = 0, count = 0;
};
struct RootSources {
  PlanePair source[4];
  // The root's A and B at row r, column i, in the kernel's arithmetic.
  float A(int sources, int r, int i) const { return sum(&PlanePair::a, sources, r, i); }
  float B(int sources, int r, int i) const { return sum(&PlanePair::b, sources, r, i); }

 private:
  float sum(const float* PlanePair::*plane, int sources, int r, int i) const {
    auto at = [&](int s) { return (source[s].*plane)[std::ptrdiff_t(r) * source[s].stride + i]; };
    return sources == 2 ? at(0) + at(1) : (at(0) + at(1)) + (at(2) + at(3));
  }
};
// sources: 2 or 4.
void score_tile(const RootSources* sources, int count, int velocities, int width, int rows, ZTest screen,
                ZTest count_test, bool want_count, TileScore& out, std::uint8_t* hit);

// Band copies: weighted, cleaned (psi, phi) pairs as decode() would return them: (0, 0) where
// decode() reports an invalid sample.
void clean_fp32_row(const float* pairs, int n, float psi_weight, float phi_weight, float* psi, float* phi);
void clean_fp16_row(const std::uint16_t* pairs, int n, float psi_weight, float phi_weight, float* psi, float* phi);
// int8: exception codes come out as 0 (their exact values are added by the caller); returns the
// number of valid exception codes in the row.
int clean_int8_row(const std::int8_t* pairs, int n, float psi_weight, float phi_weight, float* psi, float* phi);

}  // namespace shiftstack::tree
