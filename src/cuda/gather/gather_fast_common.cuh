// Internals shared by the two translation units of cuda-fast: the kernel parameters, the variant
// table entries and plans, and the tensor-core variant's entry points (gather_fast_mma.cu).
#pragma once
#include <cuda_runtime.h>

#include <cfloat>
#include <climits>
#include <cstddef>
#include <string>
#include <vector>

#include "cuda/common/device_stack.cuh"
#include "cuda/gather/gather_driver.cuh"
#include "cuda/gather/gather_fast.hpp"
#include "cuda/gather/gather_outputs.cuh"
#include "cuda/gather/velocity_packets.cuh"

namespace shiftstack::cuda::fast_gather {

constexpr int warp_size = 32;      // origins along x per block: one warp row, conflict-free reads
constexpr int prefetch_slots = 8;  // staged pixels in flight per thread per chunk (registers)
constexpr int max_chunk = 8;       // exposures staged together (one barrier per chunk)

constexpr int mma_group = 4;       // exposures per tensor-core product (k = 16 = 2 trials x 4 x 2 channels)

struct FastParams {
  StackView view;
  PacketTables t;
  ScanOutputs out;
  int groups;
  int chunk;         // exposures per stage (<= max_chunk)
  int window_rows;   // rows reserved per staged exposure (the largest over packets)
  int window_elems;  // pairs per staged exposure window (rows x pitch, padded to 64)
  // Tensor-core variant: exposures interleaved by groups of four (see below).
  const uint4* grouped = nullptr;
  int exposure_groups = 0;                                       // ceil(E / 4)
  const int* group_x_min = nullptr;                              // [x run * groups + group]
  const int* group_y_min = nullptr;                              // [y run * groups + group]
  int copy_width = 0;                                            // window pixels copied per row
  // Formed on the device before each scan (chunk_tables_kernel), so that staging a chunk is
  // asynchronous copies only and no table lookup waits in the scan's critical path:
  const int* chunk_offsets = nullptr;      // [packet][chunk][max_chunk][offset row]: byte offsets
  const uint2* chunk_fragments = nullptr;  // [chunk][group of the chunk][lane]: the weights' B fragments
  // Byte offset of the block's top-k lists in dynamic shared memory (BlockLists), or -1 when the
  // lists are offered in global memory.
  int block_lists_offset = -1;
};

// A block's top-k lists, held in shared memory for the block's lifetime and stored once into the
// global lists at its end, for cuda-fast's kernels (one list per origin and warp of velocities).
// In the kbmod shape at k = 8, 62% of a warp's offers had a lane whose trial entered its list
// (Nsight Compute), and each entry then read the list from the L2 cache.
//
// Entries [warp_v][slot][block origin = row * 32 + column]: the lanes of a warp (neighbouring
// columns) touch neighbouring entries. Beside them, each list publishes the Z of its k-th entry
// once per packet ("floors", [packet parity][warp_v][block origin]): a trial whose Z is below any
// list's floor for the same origin is worse than k entries already found for that origin, so it
// cannot reach the merged top-k and is not offered. The merged lists are the same; the partial
// lists fill less. Floors are written in a packet's epilogue and read in the next one's (the
// packet's chunk barriers lie between), alternating between two buffers so that no read meets a
// write of the same packet.
struct BlockLists {
  TopKEntry* entries = nullptr;  // null when the kernel offers into the global lists
  float* floors = nullptr;
  int k = 0, origins = 0, warps_v = 0;  // origins per block = 32 x rows

  static constexpr std::size_t bytes(int k, int warps_v, int rows) {
    const std::size_t origins = std::size_t(rows) * warp_size;
    return origins * warps_v * (std::size_t(k) * sizeof(TopKEntry) + 2 * sizeof(float));
  }
  __device__ BlockLists(const FastParams& P, unsigned char* shared, int rows, int nwv) {
    if (P.block_lists_offset < 0 || P.out.top_k == 0) return;
    k = P.out.top_k;
    origins = rows * warp_size;
    warps_v = nwv;
    entries = reinterpret_cast<TopKEntry*>(shared + P.block_lists_offset);
    floors = reinterpret_cast<float*>(entries + std::size_t(warps_v) * k * origins);
  }
  // Every slot empty, every floor -inf; the caller's next barrier makes them visible.
  __device__ void clear(int tid, int threads) const {
    const int n = warps_v * k * origins;
    for (int i = tid; i < n; i += threads) store_entry(entries + i, TopKEntry{-INFINITY, INT_MAX, 0.0f, 0.0f});
    for (int i = tid; i < 2 * warps_v * origins; i += threads) floors[i] = -INFINITY;
  }
  __device__ int origin(int row, int column) const { return row * warp_size + column; }
  // The highest floor of the origin's lists published in the previous packet (`packet` counts the
  // block's packets from 0).
  __device__ float floor_of(int packet, int o) const {
    const float* f = floors + ((packet + 1) & 1) * warps_v * origins + o;
    float best = -INFINITY;
    for (int w = 0; w < warps_v; ++w) best = fmaxf(best, f[w * origins]);
    return best;
  }
  __device__ void publish(int packet, int warp_v, int o, const TopKBound& bound) const {
    floors[((packet & 1) * warps_v + warp_v) * origins + o] = bound.velocity == INT_MAX ? -INFINITY : bound.Z;
  }
  __device__ void offer(int warp_v, int o, float floor, TopKBound& bound, float Z, int v, float A, float B) const {
    if (Z < floor) return;
    topk_offer<true>(entries + std::size_t(warp_v) * k * origins + o, k, origins, bound, Z, v, A, B);
  }
  // Sorts each of the block's lists best first (insertion sort over its k slots, in shared
  // memory) and stores it into list `group * warps_v + warp_v` of its origin in the global
  // lists, so that they need no sort pass of their own (origins outside the tile have none). One
  // thread per list: consecutive threads hold consecutive origins, so every slot's stores
  // coalesce. Call after a barrier that follows the block's last offer.
  __device__ void sort_and_store(const ScanOutputs& out, int group, int block_x0, int block_y0, int tid,
                                 int threads) const {
    for (int l = tid; l < warps_v * origins; l += threads) {
      const int wv = l / origins, o = l - wv * origins;
      const int x = block_x0 + o % warp_size, y = block_y0 + o / warp_size;
      if (x >= out.tile_x0 + out.tile_width || y >= out.tile_y0 + out.tile_height) continue;
      TopKEntry* list = entries + wv * k * origins + o;
      for (int j = 1; j < k; ++j) {
        const TopKEntry e = load_entry(list + j * origins);
        int at = j;
        for (; at > 0; --at) {
          const TopKEntry before = load_entry(list + (at - 1) * origins);
          if (!better_entry(e.Z, e.velocity, before.Z, before.velocity)) break;
          store_entry(list + at * origins, before);
        }
        store_entry(list + at * origins, e);
      }
      TopKEntry* global = topk_list(out, x, y, group * warps_v + wv);
      for (int slot = 0; slot < k; ++slot) global[slot * topk_stride(out)] = load_entry(list + slot * origins);
    }
  }
};

using FastKernel = void (*)(FastParams);

struct FastVariant {
  FastVariantInfo info;
  FastKernel kernel[3];  // per StorageCode; null where the staging cannot hold that storage
  // The same with the block's top-k lists in shared memory (BlockLists): a kernel of its own, so
  // that the other paths compile as without it (one kernel with both epilogues spilled more
  // registers, and the tensor-core scan without top-k took 19.3 ms instead of 17.7 on kbmod).
  FastKernel kernel_block_lists[3];
  int stages = 2;        // shared-memory buffers (tensor-core variants)
};

// How a variant would run an input: its chunk and shared memory, or why it cannot.
struct VariantPlan {
  const FastVariant* variant = nullptr;
  std::string problem;  // empty when it can run
  int chunk = 0, window_rows = 0, window_elems = 0, shared_bytes = 0, copy_width = 0;
};

// Tensor-core variant: a window per group of four exposures, starting at the packet's smallest
// shift over the group and wide enough for the largest (the run's span plus the group's drift).
struct GroupWindows {
  std::vector<int> x_min, y_min;  // [run * groups + group]
  int extent_x = 0, extent_y = 0;
};

// Reads N (a multiple of 4) consecutive offsets from shared memory with 16-byte loads.
template <int N>
__device__ inline void load_offsets(const int* from, int (&to)[N]) {
  static_assert(N % 4 == 0, "whole int4 loads");
#pragma unroll
  for (int i = 0; i < N; i += 4) {
    const int4 v = *reinterpret_cast<const int4*>(from + i);
    to[i] = v.x;
    to[i + 1] = v.y;
    to[i + 2] = v.z;
    to[i + 3] = v.w;
  }
}

// The tensor-core variants, in the automatic choice's order (gather_fast_mma.cu).
std::vector<FastVariant> tensor_core_variants();
// Their window geometry and shared memory for an input, or why one cannot run it.
VariantPlan plan_tensor_core_variant(const FastVariant& v, const AxisRuns& x, const AxisRuns& y, int exposures);
GroupWindows group_windows(const AxisRuns& x, const AxisRuns& y, int exposures);
// The sizes of FastParams::chunk_offsets (ints) and chunk_fragments (uint2) for a variant.
struct ChunkTableSizes {
  std::size_t offsets = 0, fragments = 0;
};
ChunkTableSizes chunk_table_sizes(const FastVariantInfo& i, int packets, int exposures);
// Forms them on `stream` from P's view (weights), tables and group windows.
void form_chunk_tables(const FastParams& P, const FastVariantInfo& i, int* offsets, uint2* fragments,
                       cudaStream_t stream);
// Writes the tile's pairs regrouped by four exposures per pixel, as half2 (psi, phi), into
// `grouped` (groups x rect.height x pitch pixels of 16 bytes), on `stream`.
void regroup_exposures(const StackView& view, uint4* grouped, int groups, cudaStream_t stream);

}  // namespace shiftstack::cuda::fast_gather
