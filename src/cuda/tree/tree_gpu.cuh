// The device side of `cuda-tree` (docs/tree-search.md, section "cuda-tree"): the tables one level
// of a tree plan becomes on the GPU, and the launches that run it. The plan is cpu-tree's own
// (src/tree/tree_plan.*); every map pixel is formed with the same float additions in the same
// order as the CPU executor, so tree sums are the same floats.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/device_stack.cuh"
#include "cuda/tree/tree_tables.hpp"

namespace shiftstack::cuda::tree_gpu {

// The root's reads: trial (i, r, a, b) sums source s's pixel at
// x_part[s * Va + a] + y_part[s * Vb + b] + r * stride[s] + kPixelFloats * i (A, then B); the
// sources are the root's 2 children or its 4 grandchildren (BandPlan::sources).
struct RootTables {
  const std::int64_t* x_part = nullptr;
  const std::int64_t* y_part = nullptr;
  const int* order = nullptr;  // velocities in the order the root visits them (BandPlan::root_order)
  int stride[4] = {0, 0, 0, 0};
  int Va = 0, Vb = 0;
  int sources = 2;
};

// A trial whose tree Z passed the screen.
struct Hit {
  int x, y, velocity;
  float A, B;
};

// Per block of the root pass: sums over scored trials (B > 0), their count, and those above z_thr.
struct RootPartial {
  double sumA, sumB;
  unsigned long long scored, count;
};

struct RootParams {
  int x0 = 0, y0 = 0, width = 0, height = 0;  // this band's origins (image coordinates)
  float screen = 0, count_test = 0;          // z |z| of the screen and of z_thr
  int velocities_per_block = 1;
  Hit* hits = nullptr;
  unsigned long long* hit_count = nullptr;
  unsigned long long capacity = 0;  // hits beyond it are counted, not stored
  RootPartial* partials = nullptr;
};

// Origins one root block covers: 64 x 8 (each thread two origins 32 apart, a warp per row; the
// shape measured best on the H200, docs/tree-search.md).
constexpr int kRootTileX = 64, kRootTileY = 8;

// A trial to re-score exactly, and its exact sums (the reference engine's double arithmetic).
struct Trial {
  int x, y, velocity;
};
struct ExactSums {
  double A, B;
  int obs, pad;
};

// Integer mode: shift tables x[a * E + e], y[b * E + e] = round_shift(s); fractional mode: the
// double shifts s themselves.
struct ExactTables {
  const int* ix = nullptr;
  const int* iy = nullptr;
  const double* sx = nullptr;
  const double* sy = nullptr;
  int Va = 0, exposures = 0;
  bool bilinear = false;
};

// A level buffer: maps of FP32 pairs, or of BF16 pairs (TreeOptions::bf16_maps). Offsets in
// the tables count elements (kPixelFloats per pixel) either way.
struct MapBuffer {
  void* data = nullptr;
  bool bf16 = false;
};

void launch_leaves(const StackView& view, const LeafEntry* entries, int count, int max_height,
                   const LeafSample* samples, int band_x0, int band_y0, MapBuffer out, cudaStream_t stream);
// sources: 2 (children) or 4 (grandchildren), LevelPlan::sources.
void launch_parents(const ParentEntry* entries, int count, int max_height, int sources, MapBuffer child,
                    MapBuffer out, cudaStream_t stream);
// Returns the number of partials written (one per block).
int launch_root(const RootTables& tables, MapBuffer sources, const RootParams& params, cudaStream_t stream);

// The refinement's flood on the device (tree::refine's rule): every neighbour of a seed (origin
// +-1, each velocity index +-1) inside the region and not yet scored joins the list of trials,
// once: `seen` holds one bit per trial of the region, (v * height + y - y0) * width + x - x0.
struct FloodParams {
  int x0 = 0, y0 = 0, width = 0, height = 0, Va = 0, Vb = 0;
  unsigned* seen = nullptr;
  Trial* trials = nullptr;  // every trial the flood has reached, in the order reached
  unsigned long long* trial_count = nullptr;
  unsigned long long capacity = 0;  // trials beyond it are counted, not stored (then flood again)
};
void launch_expand(const Hit* seeds, int count, const FloodParams& flood, cudaStream_t stream);
void launch_expand(const Trial* seeds, int count, const FloodParams& flood, cudaStream_t stream);
// Exact sums of trials[first, first + count) into sums[first, ...); the trials whose exact Z is
// above `floor` are appended, with their sums, to `above` at *above_count (the next round's
// seeds, and all the host needs of the refinement when any trial passes the floor).
void launch_exact_flood(const StackView& view, const ExactTables& tables, const FloodParams& flood,
                        std::int64_t first, int count, ExactSums* sums, double floor, Trial* above,
                        ExactSums* above_sums, unsigned long long* above_count, cudaStream_t stream);
// Clears the bits of trials[0, count) again, so the next search starts from an empty map.
void launch_clear_seen(const FloodParams& flood, std::int64_t count, cudaStream_t stream);

}  // namespace shiftstack::cuda::tree_gpu
