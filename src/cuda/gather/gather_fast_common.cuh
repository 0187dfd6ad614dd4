// Internals shared by the two translation units of cuda-fast: the kernel parameters, the variant
// table entries and plans, and the tensor-core variant's entry points (gather_fast_mma.cu).
#pragma once
#include <cuda_runtime.h>

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
};

using FastKernel = void (*)(FastParams);

struct FastVariant {
  FastVariantInfo info;
  FastKernel kernel[3];  // per StorageCode; null where the staging cannot hold that storage
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
// Writes the tile's pairs regrouped by four exposures per pixel, as half2 (psi, phi), into
// `grouped` (groups x rect.height x pitch pixels of 16 bytes), on `stream`.
void regroup_exposures(const StackView& view, uint4* grouped, int groups, cudaStream_t stream);

}  // namespace shiftstack::cuda::fast_gather
