// In-place DFTs along x of 32 lines at once in shared memory (lines[position * 32 + lane]: lane
// = line, the input digit-reversed by AxisInverse::positions, the output in natural order), by
// mixed-radix stages of 2, 3, 4, 5, 7 and 8. The fused scoring inverts the velocity spectra with
// them; the row route's forward transform runs them on conjugated input (the forward DFT of z is
// the conjugate of the inverse DFT of conj z).
#pragma once

#include "spectra.cuh"

namespace shiftstack::cuda {

constexpr int kMaxAxisStages = 15;  // radices packed 4 bits each into a 64-bit word

struct AxisInverse {
  int n;                           // nx
  int stages;
  unsigned long long radices;      // stage s's radix in bits [4 s, 4 s + 4)
  const float2* roots;             // exp(2 pi i m / n), m < n
  const std::int32_t* positions;   // [mx]: where input row mx sits before the first stage
};

// ((a, b) rotated by a quarter turn: i z.
__device__ __forceinline__ float2 times_i(float2 z) { return make_float2(-z.y, z.x); }

// In-place inverse DFTs of 4 and 8 points (roots +i and exp(i pi / 4)).
__device__ __forceinline__ void inverse_dft4(float2& a, float2& b, float2& c, float2& d) {
  const float2 s0 = make_float2(a.x + c.x, a.y + c.y), s1 = make_float2(a.x - c.x, a.y - c.y);
  const float2 s2 = make_float2(b.x + d.x, b.y + d.y), s3 = times_i(make_float2(b.x - d.x, b.y - d.y));
  a = make_float2(s0.x + s2.x, s0.y + s2.y);
  c = make_float2(s0.x - s2.x, s0.y - s2.y);
  b = make_float2(s1.x + s3.x, s1.y + s3.y);
  d = make_float2(s1.x - s3.x, s1.y - s3.y);
}

template <int R>
__device__ __forceinline__ void inverse_dft(float2 (&v)[R], const float2 (&w)[R]) {
  if constexpr (R == 2) {
    const float2 a = v[0], b = v[1];
    v[0] = make_float2(a.x + b.x, a.y + b.y);
    v[1] = make_float2(a.x - b.x, a.y - b.y);
  } else if constexpr (R == 4) {
    inverse_dft4(v[0], v[1], v[2], v[3]);
  } else if constexpr (R == 8) {
    // Evens and odds as two 4-point transforms, then X[q] = E[q] + w^q O[q], X[q + 4] = E[q] - w^q O[q].
    float2 e0 = v[0], e1 = v[2], e2 = v[4], e3 = v[6], o0 = v[1], o1 = v[3], o2 = v[5], o3 = v[7];
    inverse_dft4(e0, e1, e2, e3);
    inverse_dft4(o0, o1, o2, o3);
    constexpr float h = 0.70710678118654752f;
    const float2 t1 = make_float2(h * (o1.x - o1.y), h * (o1.x + o1.y));    // (1 + i) / sqrt 2
    const float2 t2 = times_i(o2);
    const float2 t3 = make_float2(-h * (o3.x + o3.y), h * (o3.x - o3.y));   // (-1 + i) / sqrt 2
    v[0] = make_float2(e0.x + o0.x, e0.y + o0.y), v[4] = make_float2(e0.x - o0.x, e0.y - o0.y);
    v[1] = make_float2(e1.x + t1.x, e1.y + t1.y), v[5] = make_float2(e1.x - t1.x, e1.y - t1.y);
    v[2] = make_float2(e2.x + t2.x, e2.y + t2.y), v[6] = make_float2(e2.x - t2.x, e2.y - t2.y);
    v[3] = make_float2(e3.x + t3.x, e3.y + t3.y), v[7] = make_float2(e3.x - t3.x, e3.y - t3.y);
  } else {
    // Odd radices (3, 5, 7), with the R roots w[m] = exp(2 pi i m / R): inputs j and R - j meet
    // roots of one cosine and opposite sines, so with s_j = v_j + v_{R-j}, d_j = v_j - v_{R-j},
    // X[q] = v_0 + sum_j s_j cos(2 pi j q / R) + i sum_j d_j sin(2 pi j q / R), and X[R - q] is
    // the same with the sine sum negated: (R - 1)^2 real products instead of 2 (R - 1)^2.
    constexpr int h = (R - 1) / 2;
    float2 s[h + 1], d[h + 1];
#pragma unroll
    for (int j = 1; j <= h; ++j) {
      s[j] = make_float2(v[j].x + v[R - j].x, v[j].y + v[R - j].y);
      d[j] = make_float2(v[j].x - v[R - j].x, v[j].y - v[R - j].y);
    }
    float2 out[R];
    out[0] = v[0];
#pragma unroll
    for (int j = 1; j <= h; ++j) out[0] = make_float2(out[0].x + s[j].x, out[0].y + s[j].y);
#pragma unroll
    for (int q = 1; q <= h; ++q) {
      float2 even = v[0], odd = make_float2(0.0f, 0.0f);
#pragma unroll
      for (int j = 1; j <= h; ++j) {
        const float2 root = w[(j * q) % R];
        even = make_float2(__fmaf_rn(s[j].x, root.x, even.x), __fmaf_rn(s[j].y, root.x, even.y));
        odd = make_float2(__fmaf_rn(d[j].x, root.y, odd.x), __fmaf_rn(d[j].y, root.y, odd.y));
      }
      out[q] = make_float2(even.x - odd.y, even.y + odd.x);      // even + i odd
      out[R - q] = make_float2(even.x + odd.y, even.y - odd.x);  // even - i odd
    }
#pragma unroll
    for (int q = 0; q < R; ++q) v[q] = out[q];
  }
}

// Stage of radix R over transforms of length `span` (L_{s-1}): butterfly (g, k) reads positions
// g span R + k + j span, j < R, multiplies input j by exp(2 pi i j k / (span R)), transforms, and
// writes back to the same positions. The block's warps take the butterflies in turn.
template <int R>
__device__ void inverse_stage(float2* lines, const float2* roots, int n, int span) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const int twiddle_step = n / (span * R);
  float2 w[R];
#pragma unroll
  for (int m = 0; m < R; ++m) w[m] = roots[m * (n / R)];
  // butterfly / span without a division per butterfly (exact while butterfly < 2^32 / span).
  const unsigned inverse_span = span > 1 ? 0xffffffffu / unsigned(span) + 1 : 0;
  for (int butterfly = warp; butterfly < n / R; butterfly += warps) {
    const int g = span > 1 ? int(__umulhi(unsigned(butterfly), inverse_span)) : butterfly;
    const int k = butterfly - g * span;
    float2* first = lines + (g * span * R + k) * 32 + lane;
    float2 v[R];
#pragma unroll
    for (int j = 0; j < R; ++j) v[j] = first[j * span * 32];
    if (k != 0) {  // the same for the whole warp; k = 0 (every butterfly of the first stage) has unit twiddles
#pragma unroll
      for (int j = 1; j < R; ++j) v[j] = cmul(v[j], roots[j * k * twiddle_step]);  // j k step < n
    }
    inverse_dft<R>(v, w);
#pragma unroll
    for (int j = 0; j < R; ++j) first[j * span * 32] = v[j];
  }
}

// The block's 32 lines (digit-reversed, lines[position * 32 + lane]) inverted in place along x.
__device__ inline void inverse_along_x(const AxisInverse& fft, float2* lines, const float2* roots) {
  int span = 1;
  for (int s = 0; s < fft.stages; ++s) {
    const int radix = int((fft.radices >> (4 * s)) & 15u);
    switch (radix) {
      case 2: inverse_stage<2>(lines, roots, fft.n, span); break;
      case 3: inverse_stage<3>(lines, roots, fft.n, span); break;
      case 4: inverse_stage<4>(lines, roots, fft.n, span); break;
      case 5: inverse_stage<5>(lines, roots, fft.n, span); break;
      case 7: inverse_stage<7>(lines, roots, fft.n, span); break;
      default: inverse_stage<8>(lines, roots, fft.n, span); break;
    }
    span *= radix;
    __syncthreads();
  }
}

// The plan of the x axis, as choose_post_processing set it up.
inline AxisInverse axis_inverse(const SpectralState& s) {
  AxisInverse fft{};
  fft.n = s.geometry.nx;
  fft.stages = s.x_stages;
  fft.radices = s.x_radices;
  fft.roots = s.root_x.get();
  fft.positions = s.x_positions.get();
  return fft;
}

}  // namespace shiftstack::cuda
