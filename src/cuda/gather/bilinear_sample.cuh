// Bilinear sampling for fractional shifts (SPEC 2) on the GPU: the twin of the reference engine's
// bilinear_trial. The trajectory position, its floor, the corner weights and the corner rules (a
// corner counts only when its weight is non-zero and its sample is valid) are computed in FP64
// with the same operations in the same order as the CPU, without fused multiply-adds, so every
// CUDA gather and the obs_count pass pick exactly the reference's corners.
#pragma once
#include <cuda_runtime.h>

#include "cuda/common/device_stack.cuh"

namespace shiftstack::cuda {

// s = v * (t_e - t_ref) + c_e, rounded like MotionBank::shift_x on the host (no FMA).
__device__ inline double shift_fp64(double velocity, double dt, double curve) {
  return __dadd_rn(__dmul_rn(velocity, dt), curve);
}

// One axis of the sample at origin + shift: u = origin + s, base = floor(u), frac = u - base.
struct BilinearAxis {
  int base;
  double frac;
};

__device__ inline BilinearAxis bilinear_axis(int origin, double shift) {
  const double u = __dadd_rn(double(origin), shift);
  const double base = floor(u);
  return BilinearAxis{int(base), __dsub_rn(u, base)};
}

// Corners 0:(ix, iy) 1:(ix+1, iy) 2:(ix, iy+1) 3:(ix+1, iy+1) and their weights
// (1-fx)(1-fy), fx(1-fy), (1-fx)fy, fx fy.
struct BilinearCorners {
  int ix, iy;
  double w[4];
};

__device__ inline BilinearCorners bilinear_corners(int x, int y, double shift_x, double shift_y) {
  const BilinearAxis ax = bilinear_axis(x, shift_x), ay = bilinear_axis(y, shift_y);
  const double lx = __dsub_rn(1.0, ax.frac), ly = __dsub_rn(1.0, ay.frac);
  return BilinearCorners{ax.base,
                         ay.base,
                         {__dmul_rn(lx, ly), __dmul_rn(ax.frac, ly), __dmul_rn(lx, ay.frac),
                          __dmul_rn(ax.frac, ay.frac)}};
}

// Whether the exposure observes the trajectory: some corner of non-zero weight is valid.
template <StorageCode S>
__device__ inline bool bilinear_observed(const StackView& view, int e, const BilinearCorners& c) {
  for (int k = 0; k < 4; ++k)
    if (c.w[k] != 0.0 && decode_pixel<S>(view, e, c.ix + (k & 1), c.iy + (k >> 1)).valid) return true;
  return false;
}

// Unweighted covariances of pixel (x, y) of exposure e; (x, y) must lie in the view's rectangle.
__device__ inline float4 covariances_at(const StackView& view, int e, int x, int y) {
  const std::size_t index = (std::size_t(e) * view.rect.height + (y - view.rect.y0)) * std::size_t(view.pitch) +
                            std::size_t(x - view.rect.x0);
  return view.covariances[index];
}

// One exposure's bilinear contribution, in double as the reference adds it:
// A = sum_c w_c psi_c, B = sum_c w_c^2 phi_c + 2 w_i w_j Cov(i, j) over valid neighbouring pairs.
struct BilinearSums {
  double A, B;
  bool observed;
};

template <StorageCode S>
__device__ inline BilinearSums bilinear_exposure(const StackView& view, int e, const BilinearCorners& c) {
  BilinearSums sums{0.0, 0.0, false};
  const float psi_weight = view.psi_weight[e], phi_weight = view.phi_weight[e];
  bool valid[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    valid[k] = false;
    if (c.w[k] == 0.0) continue;
    const RawSample r = decode_pixel<S>(view, e, c.ix + (k & 1), c.iy + (k >> 1));
    if (!r.valid) continue;
    valid[k] = true;
    sums.observed = true;
    // Weighted samples rounded to float first, as shiftstack::decode() hands them over.
    const double psi = __fmul_rn(psi_weight, r.psi), phi = __fmul_rn(phi_weight, r.phi);
    sums.A += c.w[k] * psi;
    sums.B += c.w[k] * c.w[k] * phi;
  }
  if (!sums.observed) return sums;
  // A pair's covariance is read only when both of its samples are valid, hence inside the view;
  // so is (ix, iy), where the antidiagonal pair keeps it even when that pixel itself is invalid.
  const double weight = phi_weight;
  if ((valid[0] && (valid[1] || valid[2] || valid[3])) || (valid[1] && valid[2])) {
    const float4 here = covariances_at(view, e, c.ix, c.iy);
    if (valid[0] && valid[1]) sums.B += 2 * c.w[0] * c.w[1] * (weight * here.x);
    if (valid[0] && valid[2]) sums.B += 2 * c.w[0] * c.w[2] * (weight * here.y);
    if (valid[0] && valid[3]) sums.B += 2 * c.w[0] * c.w[3] * (weight * here.z);
    if (valid[1] && valid[2]) sums.B += 2 * c.w[1] * c.w[2] * (weight * here.w);
  }
  if (valid[2] && valid[3]) sums.B += 2 * c.w[2] * c.w[3] * (weight * covariances_at(view, e, c.ix, c.iy + 1).x);
  if (valid[1] && valid[3]) sums.B += 2 * c.w[1] * c.w[3] * (weight * covariances_at(view, e, c.ix + 1, c.iy).y);
  return sums;
}

}  // namespace shiftstack::cuda
