// Kernels of `cuda-tree`: leaves from the encoded cube, parents as batched shift-and-add, the root
// streamed (scored and screened as it is formed, never stored) and the exact re-scoring of
// screened trials. Float additions are written with __fadd_rn / __fmul_rn and the double sums
// with __dadd_rn / __dmul_rn, so that nothing is contracted into a fused multiply-add: the tree
// sums are cpu-tree's floats and the exact sums the reference engine's doubles, bit for bit.
#include <cuda_bf16.h>

#include <algorithm>

#include "cuda/common/check.cuh"
#include "cuda/tree/tree_gpu.cuh"

namespace shiftstack::cuda::tree_gpu {

namespace {

constexpr int kRowsPerBlock = 8;  // a warp per map row

int grid_rows(int max_height) {
  const int blocks = (max_height + kRowsPerBlock - 1) / kRowsPerBlock;
  return blocks < 1 ? 1 : (blocks > 65535 ? 65535 : blocks);
}

// A map pixel's (A, B): FP32 pairs (cpu-tree's floats), or BF16 pairs (half the bytes; the sums
// are formed in FP32 and rounded to BF16 when stored).
__device__ inline float2 load_pair(const float* p) { return __ldg(reinterpret_cast<const float2*>(p)); }
__device__ inline float2 load_pair(const __nv_bfloat16* p) {
  return __bfloat1622float2(__ldg(reinterpret_cast<const __nv_bfloat162*>(p)));
}
__device__ inline void store_pair(float* p, float2 v) { *reinterpret_cast<float2*>(p) = v; }
__device__ inline void store_pair(__nv_bfloat16* p, float2 v) {
  *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(v.x, v.y);
}

// A sample as cpu-tree's band copy holds it: weighted, 0 where decode() reports none.
template <StorageCode S>
__device__ inline float2 cleaned(const StackView& view, int e, int x, int y) {
  const RawSample d = decode_pixel<S>(view, e, x, y);
  if (!d.valid) return make_float2(0.0f, 0.0f);
  return make_float2(__fmul_rn(view.psi_weight[e], d.psi), __fmul_rn(view.phi_weight[e], d.phi));
}

template <StorageCode S, typename M>
__global__ void __launch_bounds__(256) leaf_kernel(StackView view, const LeafEntry* entries,
                                                   const LeafSample* samples, int band_x0, int band_y0, M* out) {
  const LeafEntry entry = entries[blockIdx.x];
  for (int r = blockIdx.y * kRowsPerBlock + threadIdx.y; r < entry.height; r += gridDim.y * kRowsPerBlock)
    for (int i = threadIdx.x; i < entry.width; i += 32) {
      // Exposures in plan order, the first copied, the rest added (cpu-tree's leaf).
      const LeafSample first = samples[entry.first];
      float2 sum = cleaned<S>(view, first.exposure, band_x0 + first.dx + i, band_y0 + first.dy + r);
      for (int k = 1; k < entry.count; ++k) {
        const LeafSample s = samples[entry.first + k];
        const float2 v = cleaned<S>(view, s.exposure, band_x0 + s.dx + i, band_y0 + s.dy + r);
        sum.x = __fadd_rn(sum.x, v.x);
        sum.y = __fadd_rn(sum.y, v.y);
      }
      store_pair(out + entry.out + kPixelFloats * (std::int64_t(r) * entry.width + i), sum);
    }
}

// A parent pixel from its sources: child 0 + child 1, or (g0 + g1) + (g2 + g3) from the four
// grandchildren (the children's floats, added in the same order).
template <int Sources>
__device__ inline float2 sum_sources(const float2 (&q)[Sources]) {
  if constexpr (Sources == 2) {
    return make_float2(__fadd_rn(q[0].x, q[1].x), __fadd_rn(q[0].y, q[1].y));
  } else {
    return make_float2(__fadd_rn(__fadd_rn(q[0].x, q[1].x), __fadd_rn(q[2].x, q[3].x)),
                       __fadd_rn(__fadd_rn(q[0].y, q[1].y), __fadd_rn(q[2].y, q[3].y)));
  }
}

// Each warp forms Rows rows of a slab (rows 8 apart) and Cols pixels 32 apart in each, so a
// thread keeps Sources x Rows x Cols loads in flight, the pixels of a row at fixed offsets from
// one address, and a block's start-up (reading its entry) is paid per slab.
template <int Sources, int Rows, int Cols, typename M>
__global__ void __launch_bounds__(256) parent_kernel(const ParentEntry* entries, const M* __restrict__ child,
                                                     M* __restrict__ out) {
  const ParentEntry e = entries[blockIdx.x];
  constexpr int slab = kRowsPerBlock * Rows;
  for (int r0 = blockIdx.y * slab + threadIdx.y; r0 < e.height; r0 += gridDim.y * slab) {
    for (int i0 = threadIdx.x; i0 < e.width; i0 += 32 * Cols) {
      float2 sum[Rows][Cols];
#pragma unroll
      for (int k = 0; k < Rows; ++k) {
        const int r = r0 + k * kRowsPerBlock;
        if (r >= e.height) break;
        const M* row[Sources];
#pragma unroll
        for (int s = 0; s < Sources; ++s) row[s] = child + e.src[s] + std::int64_t(r) * e.stride[s] + kPixelFloats * i0;
#pragma unroll
        for (int c = 0; c < Cols; ++c) {
          if (i0 + 32 * c >= e.width) break;
          float2 q[Sources];
#pragma unroll
          for (int s = 0; s < Sources; ++s) q[s] = load_pair(row[s] + kPixelFloats * 32 * c);
          sum[k][c] = sum_sources<Sources>(q);
        }
      }
#pragma unroll
      for (int k = 0; k < Rows; ++k) {
        const int r = r0 + k * kRowsPerBlock;
        if (r >= e.height) break;
        M* row = out + e.out + kPixelFloats * (std::int64_t(r) * e.width + i0);
#pragma unroll
        for (int c = 0; c < Cols; ++c) {
          if (i0 + 32 * c >= e.width) break;
          store_pair(row + kPixelFloats * 32 * c, sum[k][c]);
        }
      }
    }
  }
}

template <typename T>
__device__ inline T warp_sum(T v) {
  for (int d = 16; d > 0; d >>= 1) v += __shfl_down_sync(0xffffffffu, v, d);
  return v;
}

constexpr int kRootChunk = 256;  // velocities whose map starts a root block stages at once

// Block (32, 8), each thread Rows x Cols trials per velocity: origins x0 + blockIdx.x * 32 Cols +
// tx + 32 c, rows y0 + blockIdx.y * 8 Rows + ty + 8 k; the velocities order[blockIdx.z * vpb, +vpb).
// Two sources: A = a0 + a1 as cpu-tree's root forms it from its children; four: A = (g0 + g1) +
// (g2 + g3), the children's floats formed on the fly. A thread's columns lie at fixed offsets
// from one address per source and row: one 64-bit address per (source, row), not per trial.
template <int Sources, int Rows, int Cols, typename M>
__global__ void __launch_bounds__(256) root_kernel(RootTables t, const M* __restrict__ maps, RootParams p) {
  const int i0 = blockIdx.x * 32 * Cols + threadIdx.x;
  const int r0 = blockIdx.y * kRowsPerBlock * Rows + threadIdx.y;
  const int velocities = t.Va * t.Vb;
  const int v_first = blockIdx.z * p.velocities_per_block;
  const int v_last = min(v_first + p.velocities_per_block, velocities);
  bool inside[Rows][Cols];
  bool any = false;
#pragma unroll
  for (int k = 0; k < Rows; ++k)
#pragma unroll
    for (int c = 0; c < Cols; ++c) {
      inside[k][c] = r0 + kRowsPerBlock * k < p.height && i0 + 32 * c < p.width;
      any |= inside[k][c];
    }
  std::int64_t row_offset[Sources];  // this thread's first trial, relative to a map's start
#pragma unroll
  for (int s = 0; s < Sources; ++s) row_offset[s] = std::int64_t(r0) * t.stride[s] + kPixelFloats * i0;
  double sum_a = 0, sum_b = 0;
  // At most velocities_per_block x Rows x Cols trials per thread (the host keeps it below 2^32).
  unsigned scored = 0, counted = 0;
  // The sources' map starts of a chunk of velocities, staged once per block: the loop below
  // then waits on the maps alone, not on a table read before each velocity.
  __shared__ std::int64_t start[Sources][kRootChunk];
  __shared__ int velocity[kRootChunk];
  const int thread = threadIdx.y * 32 + threadIdx.x;
  for (int base = v_first; base < v_last; base += kRootChunk) {
    const int chunk = min(kRootChunk, v_last - base);
    __syncthreads();
    if (thread < chunk) {
      const int v = t.order[base + thread];
      const int a = v % t.Va, b = v / t.Va;
      velocity[thread] = v;
#pragma unroll
      for (int s = 0; s < Sources; ++s) start[s][thread] = t.x_part[s * t.Va + a] + t.y_part[s * t.Vb + b];
    }
    __syncthreads();
    if (!any) continue;
    for (int j = 0; j < chunk; ++j) {
      float As[Rows][Cols], Bs[Rows][Cols];
#pragma unroll
      for (int k = 0; k < Rows; ++k) {  // every trial's loads first, then the tests
        const M* src[Sources];
#pragma unroll
        for (int s = 0; s < Sources; ++s)
          src[s] = maps + start[s][j] + row_offset[s] + std::int64_t(kRowsPerBlock * k) * t.stride[s];
#pragma unroll
        for (int c = 0; c < Cols; ++c) {
          As[k][c] = 0.0f, Bs[k][c] = 0.0f;
          if (!inside[k][c]) continue;
          float2 q[Sources];
#pragma unroll
          for (int s = 0; s < Sources; ++s) q[s] = load_pair(src[s] + kPixelFloats * 32 * c);
          const float2 sum = sum_sources<Sources>(q);
          As[k][c] = sum.x;
          Bs[k][c] = sum.y;
        }
      }
#pragma unroll
      for (int k = 0; k < Rows; ++k)
#pragma unroll
        for (int c = 0; c < Cols; ++c) {
          const float A = As[k][c], B = Bs[k][c];
          if (!inside[k][c] || !(B > 0.0f)) continue;
          sum_a += A;
          sum_b += B;
          ++scored;
          // Z > z as A |A| > z |z| B, no square root (cpu-tree's test, the same float products).
          // The screen is at most z_thr (the host checks), so a trial past z_thr is past it.
          const float q = __fmul_rn(A, fabsf(A));
          if (q > __fmul_rn(p.screen, B)) {
            counted += q > __fmul_rn(p.count_test, B);
            const unsigned long long slot = atomicAdd(p.hit_count, 1ull);
            if (slot < p.capacity)
              p.hits[slot] = Hit{p.x0 + i0 + 32 * c, p.y0 + r0 + kRowsPerBlock * k, velocity[j], A, B};
          }
        }
    }
  }
  sum_a = warp_sum(sum_a);
  sum_b = warp_sum(sum_b);
  const unsigned long long scored_all = warp_sum<unsigned long long>(scored);
  const unsigned long long counted_all = warp_sum<unsigned long long>(counted);
  __shared__ RootPartial warp_partial[8];
  if (threadIdx.x == 0) warp_partial[threadIdx.y] = RootPartial{sum_a, sum_b, scored_all, counted_all};
  __syncthreads();
  if (threadIdx.x == 0 && threadIdx.y == 0) {
    RootPartial total{0, 0, 0, 0};
    for (int w = 0; w < 8; ++w) {  // fixed order: the digest does not depend on scheduling
      total.sumA += warp_partial[w].sumA;
      total.sumB += warp_partial[w].sumB;
      total.scored += warp_partial[w].scored;
      total.count += warp_partial[w].count;
    }
    p.partials[(std::int64_t(blockIdx.z) * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x] = total;
  }
}

// exact_bilinear_trial(): bilinear A over the valid corners, B its exact variance.
template <StorageCode S>
__device__ inline ExactSums exact_bilinear_sums(const StackView& view, const ExactTables& t, const Trial trial) {
  const int a = trial.velocity % t.Va, b = trial.velocity / t.Va;
  const double* sx = t.sx + std::int64_t(a) * t.exposures;
  const double* sy = t.sy + std::int64_t(b) * t.exposures;
  const int W = view.image_width, H = view.image_height;
  double A = 0, B = 0;
  int obs = 0;
  for (int e = 0; e < t.exposures; ++e) {
    const double u = __dadd_rn(double(trial.x), sx[e]), v = __dadd_rn(double(trial.y), sy[e]);
    const int ix = int(floor(u)), iy = int(floor(v));
    const double fx = __dsub_rn(u, double(ix)), fy = __dsub_rn(v, double(iy));
    const double gx = __dsub_rn(1.0, fx), gy = __dsub_rn(1.0, fy);
    const double w[4] = {__dmul_rn(gx, gy), __dmul_rn(fx, gy), __dmul_rn(gx, fy), __dmul_rn(fx, fy)};
    const int cx[4] = {ix, ix + 1, ix, ix + 1}, cy[4] = {iy, iy, iy + 1, iy + 1};
    bool valid[4];
    double psi[4], phi[4];
    bool any = false;
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      valid[c] = false;
      psi[c] = phi[c] = 0;
      if (cx[c] < 0 || cy[c] < 0 || cx[c] >= W || cy[c] >= H || w[c] == 0) continue;
      const RawSample d = decode_pixel<S>(view, e, cx[c], cy[c]);
      valid[c] = d.valid;
      if (d.valid) {
        psi[c] = double(__fmul_rn(view.psi_weight[e], d.psi));
        phi[c] = double(__fmul_rn(view.phi_weight[e], d.phi));
      }
      any |= d.valid;
    }
    if (!any) continue;
    ++obs;
    const double weight = double(view.phi_weight[e]);
    auto cov = [&](int px, int py) -> float4 {
      const std::size_t index =
          (std::size_t(e) * view.rect.height + (py - view.rect.y0)) * std::size_t(view.pitch) + (px - view.rect.x0);
      return view.covariances[index];
    };
#pragma unroll
    for (int c = 0; c < 4; ++c)
      if (valid[c]) {
        A = __dadd_rn(A, __dmul_rn(w[c], psi[c]));
        B = __dadd_rn(B, __dmul_rn(__dmul_rn(w[c], w[c]), phi[c]));
      }
    // Each neighbouring pair once, doubled: 2 w_i w_j (weight * cov), in exact_trial.cpp's order.
    auto pair = [&](double wi, double wj, float c) {
      B = __dadd_rn(B, __dmul_rn(__dmul_rn(__dmul_rn(2.0, wi), wj), __dmul_rn(weight, double(c))));
    };
    if (valid[0] && valid[1]) pair(w[0], w[1], cov(ix, iy).x);
    if (valid[2] && valid[3]) pair(w[2], w[3], cov(ix, iy + 1).x);
    if (valid[0] && valid[2]) pair(w[0], w[2], cov(ix, iy).y);
    if (valid[1] && valid[3]) pair(w[1], w[3], cov(ix + 1, iy).y);
    if (valid[0] && valid[3]) pair(w[0], w[3], cov(ix, iy).z);
    if (valid[1] && valid[2]) pair(w[1], w[2], cov(ix, iy).w);
  }
  return ExactSums{A, B, obs, 0};
}

__device__ inline unsigned long long flood_key(const FloodParams& f, int x, int y, int v) {
  return (static_cast<unsigned long long>(v) * unsigned(f.height) + unsigned(y - f.y0)) * unsigned(f.width) +
         unsigned(x - f.x0);
}

// One thread per (seed, neighbour): 81 neighbours, the seed itself among them.
template <typename Seed>
__global__ void expand_kernel(const Seed* seeds, int count, FloodParams f) {
  const long long k = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (k >= static_cast<long long>(count) * 81) return;
  const Seed s = seeds[k / 81];
  const int n = int(k % 81);
  const int a = s.velocity % f.Va + n % 3 - 1, b = s.velocity / f.Va + (n / 3) % 3 - 1;
  const int x = s.x + (n / 9) % 3 - 1, y = s.y + n / 27 - 1;
  if (a < 0 || b < 0 || a >= f.Va || b >= f.Vb) return;
  if (x < f.x0 || y < f.y0 || x >= f.x0 + f.width || y >= f.y0 + f.height) return;
  const int v = b * f.Va + a;
  const unsigned long long key = flood_key(f, x, y, v);
  const unsigned bit = 1u << (key & 31u);
  if (atomicOr(f.seen + (key >> 5), bit) & bit) return;  // reached before
  const unsigned long long slot = atomicAdd(f.trial_count, 1ull);
  if (slot < f.capacity) f.trials[slot] = Trial{x, y, v};
}

// Fractional shifts: one thread per trial (the bilinear terms of an exposure are up to 14, too
// many to pass between lanes as the integer kernel below does).
template <StorageCode S>
__global__ void exact_flood_bilinear_kernel(StackView view, ExactTables t, FloodParams f, long long first, int count,
                                   ExactSums* sums, double floor, Trial* above, ExactSums* above_sums,
                                   unsigned long long* above_count) {
  const int k = blockIdx.x * blockDim.x + threadIdx.x;
  if (k >= count) return;
  const Trial trial = f.trials[first + k];
  const ExactSums e = exact_bilinear_sums<S>(view, t, trial);
  sums[first + k] = e;
  // The host's test, A / sqrt(B) > floor, with the same correctly rounded operations.
  if (e.B > 0 && __ddiv_rn(e.A, __dsqrt_rn(e.B)) > floor) {
    const unsigned long long slot = atomicAdd(above_count, 1ull);
    above[slot] = trial;
    above_sums[slot] = e;
  }
}

// Integer shifts, kExactLanes lanes per trial: each lane decodes every kExactLanes-th exposure
// (kExactSets of them per step, loads in flight), then the group adds the terms in exposure
// order, every lane of the group forming the same double sums. The sums are
// exact_integer_trial()'s, bit for bit; the decoding work is spread over the lanes.
constexpr int kExactLanes = 4, kExactSets = 2;

template <StorageCode S>
__global__ void exact_flood_grouped_kernel(StackView view, ExactTables t, FloodParams f, long long first, int count,
                                           ExactSums* sums, double floor, Trial* above, ExactSums* above_sums,
                                           unsigned long long* above_count) {
  const long long k = (static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x) / kExactLanes;
  const int lane = threadIdx.x & 31, slot = lane & (kExactLanes - 1), leader = lane & ~(kExactLanes - 1);
  const bool live = k < count;
  Trial trial{0, 0, 0};
  if (live) trial = f.trials[first + k];
  const int a = trial.velocity % t.Va, b = trial.velocity / t.Va;
  const int* sx = t.ix + std::int64_t(a) * t.exposures;
  const int* sy = t.iy + std::int64_t(b) * t.exposures;
  double A = 0, B = 0;
  int obs = 0;
  for (int e0 = 0; e0 < t.exposures; e0 += kExactLanes * kExactSets) {  // the same trip count in every lane
    float term_a[kExactSets], term_b[kExactSets];
    unsigned valid[kExactSets];
#pragma unroll
    for (int set = 0; set < kExactSets; ++set) {
      const int e = e0 + set * kExactLanes + slot;
      bool ok = false;
      term_a[set] = term_b[set] = 0.0f;
      if (live && e < t.exposures) {
        const int px = trial.x + __ldg(sx + e), py = trial.y + __ldg(sy + e);
        if (px >= 0 && py >= 0 && px < view.image_width && py < view.image_height) {
          const RawSample d = decode_pixel<S>(view, e, px, py);
          ok = d.valid;
          if (ok) {
            term_a[set] = __fmul_rn(view.psi_weight[e], d.psi);
            term_b[set] = __fmul_rn(view.phi_weight[e], d.phi);
          }
        }
      }
      valid[set] = __ballot_sync(0xffffffffu, ok);
    }
#pragma unroll
    for (int set = 0; set < kExactSets; ++set)
#pragma unroll
      for (int j = 0; j < kExactLanes; ++j) {
        const float ta = __shfl_sync(0xffffffffu, term_a[set], leader + j);
        const float tb = __shfl_sync(0xffffffffu, term_b[set], leader + j);
        if ((valid[set] >> (leader + j)) & 1u) {
          A = __dadd_rn(A, double(ta));
          B = __dadd_rn(B, double(tb));
          ++obs;
        }
      }
  }
  if (!live || slot != 0) return;
  const ExactSums e{A, B, obs, 0};
  sums[first + k] = e;
  if (B > 0 && __ddiv_rn(A, __dsqrt_rn(B)) > floor) {
    const unsigned long long slot = atomicAdd(above_count, 1ull);
    above[slot] = trial;
    above_sums[slot] = e;
  }
}

__global__ void clear_seen_kernel(FloodParams f, long long count) {
  const long long k = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (k >= count) return;
  const Trial s = f.trials[k];
  const unsigned long long key = flood_key(f, s.x, s.y, s.velocity);
  atomicAnd(f.seen + (key >> 5), ~(1u << (key & 31u)));
}

int blocks_for(long long threads, int per_block) { return int((threads + per_block - 1) / per_block); }

}  // namespace

void launch_leaves(const StackView& view, const LeafEntry* entries, int count, int max_height,
                   const LeafSample* samples, int band_x0, int band_y0, MapBuffer out, cudaStream_t stream) {
  if (count == 0) return;
  const dim3 grid(count, grid_rows(max_height)), block(32, kRowsPerBlock);
  dispatch_storage(view.storage, [&]<StorageCode S>() {
    if (out.bf16)
      leaf_kernel<S><<<grid, block, 0, stream>>>(view, entries, samples, band_x0, band_y0,
                                                 static_cast<__nv_bfloat16*>(out.data));
    else
      leaf_kernel<S><<<grid, block, 0, stream>>>(view, entries, samples, band_x0, band_y0,
                                                 static_cast<float*>(out.data));
  });
  SHIFTSTACK_CUDA_CHECK_LAUNCH();
}

// Pixels per thread, rows x columns, measured on the H200 (docs/tree-search.md, "What made the
// difference"): parents 2 x 2; the root's from its origin tile (1 x 2).
constexpr int kParentRows = 2, kParentCols = 2;
constexpr int kRootRows = kRootTileY / kRowsPerBlock, kRootCols = kRootTileX / 32;
static_assert(kRootRows * kRowsPerBlock == kRootTileY && kRootCols * 32 == kRootTileX, "a root tile of whole rows");

namespace {
template <int Sources, typename M>
void launch_parents_as(const ParentEntry* entries, int count, int max_height, const M* child, M* out,
                       cudaStream_t stream) {
  constexpr int slab = kRowsPerBlock * kParentRows;
  const int slabs = std::min(65535, std::max(1, (max_height + slab - 1) / slab));
  parent_kernel<Sources, kParentRows, kParentCols>
      <<<dim3(count, slabs), dim3(32, kRowsPerBlock), 0, stream>>>(entries, child, out);
}
}  // namespace

void launch_parents(const ParentEntry* entries, int count, int max_height, int sources, MapBuffer child,
                    MapBuffer out, cudaStream_t stream) {
  if (count == 0) return;
  auto run = [&]<typename M>() {
    const M* c = static_cast<const M*>(child.data);
    M* o = static_cast<M*>(out.data);
    if (sources == 4)
      launch_parents_as<4>(entries, count, max_height, c, o, stream);
    else
      launch_parents_as<2>(entries, count, max_height, c, o, stream);
  };
  if (out.bf16)
    run.template operator()<__nv_bfloat16>();
  else
    run.template operator()<float>();
  SHIFTSTACK_CUDA_CHECK_LAUNCH();
}

int launch_root(const RootTables& tables, MapBuffer sources, const RootParams& params, cudaStream_t stream) {
  const int velocities = tables.Va * tables.Vb;
  const dim3 grid((params.width + kRootTileX - 1) / kRootTileX, (params.height + kRootTileY - 1) / kRootTileY,
                  (velocities + params.velocities_per_block - 1) / params.velocities_per_block);
  auto run = [&]<int Sources>() {
    if (sources.bf16)
      root_kernel<Sources, kRootRows, kRootCols><<<grid, dim3(32, kRowsPerBlock), 0, stream>>>(
          tables, static_cast<const __nv_bfloat16*>(sources.data), params);
    else
      root_kernel<Sources, kRootRows, kRootCols><<<grid, dim3(32, kRowsPerBlock), 0, stream>>>(
          tables, static_cast<const float*>(sources.data), params);
  };
  if (tables.sources == 4)
    run.template operator()<4>();
  else
    run.template operator()<2>();
  SHIFTSTACK_CUDA_CHECK_LAUNCH();
  return int(grid.x * grid.y * grid.z);
}

void launch_expand(const Hit* seeds, int count, const FloodParams& flood, cudaStream_t stream) {
  if (count == 0) return;
  expand_kernel<<<blocks_for(81LL * count, 256), 256, 0, stream>>>(seeds, count, flood);
  SHIFTSTACK_CUDA_CHECK_LAUNCH();
}

void launch_expand(const Trial* seeds, int count, const FloodParams& flood, cudaStream_t stream) {
  if (count == 0) return;
  expand_kernel<<<blocks_for(81LL * count, 256), 256, 0, stream>>>(seeds, count, flood);
  SHIFTSTACK_CUDA_CHECK_LAUNCH();
}

void launch_exact_flood(const StackView& view, const ExactTables& tables, const FloodParams& flood,
                        std::int64_t first, int count, ExactSums* sums, double floor, Trial* above,
                        ExactSums* above_sums, unsigned long long* above_count, cudaStream_t stream) {
  if (count == 0) return;
  dispatch_storage(view.storage, [&]<StorageCode S>() {
    if (tables.bilinear)
      exact_flood_bilinear_kernel<S><<<blocks_for(count, 128), 128, 0, stream>>>(view, tables, flood, first, count, sums,
                                                                          floor, above, above_sums, above_count);
    else
      exact_flood_grouped_kernel<S><<<blocks_for(std::int64_t(kExactLanes) * count, 128), 128, 0, stream>>>(
          view, tables, flood, first, count, sums, floor, above, above_sums, above_count);
  });
  SHIFTSTACK_CUDA_CHECK_LAUNCH();
}

void launch_clear_seen(const FloodParams& flood, std::int64_t count, cudaStream_t stream) {
  if (count == 0) return;
  clear_seen_kernel<<<blocks_for(count, 256), 256, 0, stream>>>(flood, count);
  SHIFTSTACK_CUDA_CHECK_LAUNCH();
}

}  // namespace shiftstack::cuda::tree_gpu
