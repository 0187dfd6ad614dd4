// cuda-fast's tensor-core variant: the sums over exposures as m16n8k16 products with FP32
// accumulators, on tiles regrouped by four exposures per pixel (see the kernel's comment).
#include <cuda_fp16.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <string>
#include <vector>

#include "cuda/common/check.cuh"
#include "cuda/gather/gather_fast_common.cuh"
#include "cuda/common/warp_mma.cuh"
#include "shiftstack/encoding.hpp"

namespace shiftstack::cuda::fast_gather {
namespace {

// ---- Tensor-core variant: conversion-free FP32 sums of half-staged pairs ----------------------
//
// The sums over exposures run on the tensor cores as m16n8k16 products, D += A x B, with the
// staged (psi, phi) half2 pairs as A and the exposures' weights as B. Row m of A holds two trials
// of one velocity and one origin row: origin x = m (the first 8 k, "P") and x = m + 16 (the last
// 8 k, "Q"), each as four exposures x (psi, phi). So the half2 pair that one shared-memory load
// brings is exactly one A register, and no instruction converts or multiplies it. B routes each
// k to its column: (P psi, P phi, Q psi, Q phi) with the high halves of the weights in columns 0-3
// and the residual low halves in 4-7, so weight x value keeps ~22 bits (the products of two halves
// are exact in the FP32 accumulators). The weights are scaled by powers of two into half range.
// Lane (g, t) = (lane / 4, lane % 4) reads exposure t of the group of four for origins g, g+8,
// g+16, g+24 at one velocity: four loads from one address register, then one mma.
//
// Layout: the four exposures of a group are interleaved per pixel (16 bytes = 4 pairs), on the
// device (a copy made before each scan, `regroup_exposures`) and in shared memory. A lane's word
// address is then 4 (pixel) + t, so the 8 lanes of each t fall in banks = t mod 4: the loads are
// free of bank conflicts whatever the four exposures' shifts, and a window is staged with one
// 16-byte asynchronous copy per pixel (zero-filled outside the image), no registers per pixel.
// A group's window starts at the smallest shift of the packet over its four exposures.

// One stored pair as the (psi, phi) half2 the sums read: fp16 pairs as they are (invalid ones are
// stored as (0, 0)); int8 codes as halves, which hold them exactly (the exposure's steps are the
// weights), invalid codes as (0, 0). Exception codes never get here: the variant declines them.
template <StorageCode S>
__device__ inline unsigned int half_pair(const StackView& view, std::size_t index) {
  if constexpr (S == StorageCode::fp16) {
    return static_cast<const unsigned int*>(view.pairs)[index];
  } else {
    const unsigned short raw = static_cast<const unsigned short*>(view.pairs)[index];
    const signed char psi = static_cast<signed char>(raw & 0xffu);
    const unsigned char phi = static_cast<unsigned char>(raw >> 8);
    if (psi == int8_codes::psi_invalid || phi == 0) return 0u;
    return half2_bits(__floats2half2_rn(float(psi), float(phi)));
  }
}

// pairs (exposure-major, rows padded to view.pitch) -> grouped[((q * H + y) * pitch + x)] holds
// exposures 4q..4q+3 of pixel (x, y) as half2 pairs; zero past the last exposure.
template <StorageCode S>
__global__ void regroup_kernel(StackView view, uint4* grouped, int groups) {
  const std::size_t plane = std::size_t(view.rect.height) * view.pitch;
  const std::size_t total = plane * groups;
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < total;
       i += std::size_t(gridDim.x) * blockDim.x) {
    const std::size_t q = i / plane, p = i - q * plane;
    const int e = int(q) * mma_group;
    uint4 v;
    v.x = e < view.exposures ? half_pair<S>(view, std::size_t(e) * plane + p) : 0u;
    v.y = e + 1 < view.exposures ? half_pair<S>(view, std::size_t(e + 1) * plane + p) : 0u;
    v.z = e + 2 < view.exposures ? half_pair<S>(view, std::size_t(e + 2) * plane + p) : 0u;
    v.w = e + 3 < view.exposures ? half_pair<S>(view, std::size_t(e + 3) * plane + p) : 0u;
    grouped[i] = v;
  }
}

// d += a x b (m16n8k16, FP16 operands, FP32 accumulators). Not volatile: it has no side effects,
// and the scheduler may interleave it with the loads of the next tile.
__device__ __forceinline__ void mma_pairs(float (&d)[4], std::uint32_t a0, std::uint32_t a1, std::uint32_t a2,
                                          std::uint32_t a3, std::uint32_t b0, std::uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ std::uint32_t lds32(const unsigned char* at) {
  return *reinterpret_cast<const std::uint32_t*>(at);
}

// Powers of two that bring the largest weight of each channel to [2^14, 2^15): the high half then
// keeps 11 bits and the low half the next 11, far from half overflow (65504) and subnormals.
__device__ inline float2 weight_scales(const StackView& view, int E, unsigned int* scratch) {
  if (threadIdx.x < 2) scratch[threadIdx.x] = 0u;
  __syncthreads();
  float psi_max = 0.0f, phi_max = 0.0f;
  for (int e = threadIdx.x; e < E; e += blockDim.x) {
    psi_max = fmaxf(psi_max, fabsf(view.psi_weight[e]));
    phi_max = fmaxf(phi_max, fabsf(view.phi_weight[e]));
  }
  // Non-negative floats order like their bit patterns.
  atomicMax(&scratch[0], __float_as_uint(psi_max));
  atomicMax(&scratch[1], __float_as_uint(phi_max));
  __syncthreads();
  auto scale = [](unsigned int bits) {
    const float m = __uint_as_float(bits);
    if (!(m > 0.0f) || !isfinite(m)) return 1.0f;
    int exponent;
    frexpf(m, &exponent);  // m = f 2^exponent, f in [0.5, 1)
    return ldexpf(1.0f, 15 - exponent);
  };
  const float2 s = make_float2(scale(scratch[0]), scale(scratch[1]));
  __syncthreads();
  return s;
}

// The B fragment of lane (g, t) for exposure t of a group of four: weights (already scaled) routed
// to columns as described above; zero where the exposure does not exist.
__device__ inline uint2 weight_fragment(float psi_w, float phi_w, int g) {
  const __half psi_hi = __float2half_rn(psi_w), phi_hi = __float2half_rn(phi_w);
  const __half psi_lo = __float2half_rn(psi_w - __half2float(psi_hi));
  const __half phi_lo = __float2half_rn(phi_w - __half2float(phi_hi));
  const __half zero = __float2half_rn(0.0f);
  // Register 0: k = 2t (P psi), 2t+1 (P phi); register 1: k = 2t+8 (Q psi), 2t+9 (Q phi).
  const __half p_psi = g == 0 ? psi_hi : g == 4 ? psi_lo : zero;
  const __half p_phi = g == 1 ? phi_hi : g == 5 ? phi_lo : zero;
  const __half q_psi = g == 2 ? psi_hi : g == 6 ? psi_lo : zero;
  const __half q_phi = g == 3 ? phi_hi : g == 7 ? phi_lo : zero;
  return make_uint2(half2_bits(__halves2half2(p_psi, p_phi)), half2_bits(__halves2half2(q_psi, q_phi)));
}

constexpr int mma_copy_slots = 4;  // window pixels each thread copies per chunk (registers)
// Offsets per exposure row, padded so that four consecutive rows start in disjoint groups of
// 4 banks (a row stride of 0 or 16 banks would not).
constexpr int mma_offset_row(int packet) {
  return (packet + 3) / 4 * 4 % 16 == 0 ? (packet + 3) / 4 * 4 + 4 : (packet + 3) / 4 * 4;
}

template <int RV, int RY, int NWY, int NWV, int Pitch, int Stages, int MinBlocks, bool SharedLists>
__global__ void __launch_bounds__(warp_size* NWY* NWV, MinBlocks) fast_mma_kernel(FastParams P) {
  constexpr int threads = warp_size * NWY * NWV;
  constexpr int rows_per_block = NWY * RY;
  constexpr int packet = RV * NWV;
  constexpr int pixel_bytes = 16;  // four exposures' (psi, phi) half2 pairs
  constexpr int row_bytes = Pitch * pixel_bytes;
  constexpr int groups_per_chunk = max_chunk / mma_group;
  // One padded row of offsets per exposure: the four exposures a warp reads at once then start
  // 4 banks apart, so its 16-byte offset loads do not collide.
  constexpr int offset_row = mma_offset_row(packet);
  static_assert(RV % 4 == 0 && max_chunk % mma_group == 0, "offset loads, whole groups per chunk");
  static_assert(Stages >= 2, "at least double buffering");

  // Shared memory, Stages buffers of each: [windows: groups_per_chunk x window_elems pixels]
  // [offsets: max_chunk x packet] [B fragments: groups_per_chunk x 32 lanes]; then the windows'
  // origins per group of four exposures ([packet parity][x, y][Q]). Copies run Stages - 1 chunks
  // ahead of the sums, so the L2 latency hides behind several chunks; the offsets and fragments
  // come formed (chunk_tables_kernel), so staging a chunk waits on no table lookup.
  extern __shared__ __align__(16) unsigned char staged[];
  __shared__ LocalDigest scratch[NWY * NWV];
  __shared__ unsigned int scale_scratch[2];
  const StackView& view = P.view;
  const PacketTables& t = P.t;
  const ScanOutputs& out = P.out;
  const int window_bytes = P.window_elems * pixel_bytes;
  int* offsets = reinterpret_cast<int*>(staged + Stages * groups_per_chunk * window_bytes);
  uint2* fragments = reinterpret_cast<uint2*>(offsets + Stages * max_chunk * offset_row);
  int* origins = reinterpret_cast<int*>(fragments + Stages * groups_per_chunk * warp_size);

  const int tid = threadIdx.x, lane = tid & 31, warp_id = tid >> 5;
  const int g = lane >> 2, tg = lane & 3;
  const int warp_y = warp_id % NWY, warp_v = warp_id / NWY;
  const int block_x0 = out.tile_x0 + blockIdx.x * warp_size;
  const int block_y0 = out.tile_y0 + blockIdx.y * rows_per_block;
  // The origin this lane scores after the lanes' halves are combined (see the finish below).
  const int x = block_x0 + (tg & 1) * 16 + (tg >> 1) * 8 + g;
  const int y0 = block_y0 + warp_y * RY;
  const int E = t.exposures;
  const int Q = P.exposure_groups;
  const int packets = t.x_groups * t.y_groups;
  const int first = int((long long)packets * blockIdx.z / P.groups);
  const int last = int((long long)packets * (blockIdx.z + 1) / P.groups);
  const int chunks = (Q + groups_per_chunk - 1) / groups_per_chunk;
  const float2 scale = weight_scales(view, E, scale_scratch);
  const float2 unscale = make_float2(1.0f / scale.x, 1.0f / scale.y);  // powers of two: exact

  LocalDigest digest;
  TopKBound bound[RY];
  const BlockLists lists(P, staged, rows_per_block, NWV);
  if constexpr (SharedLists) lists.clear(tid, threads);  // visible after the first chunk's barrier
  const uint4* grouped = P.grouped;
  const std::size_t group_plane = std::size_t(view.rect.height) * view.pitch;
  // Packet p's window origins into buffer `parity`; once per packet, so their latency does not
  // matter, and read from shared memory by every chunk's copies.
  auto load_origins = [&](int p, int parity) {
    const int gx = p % t.x_groups, gy = p / t.x_groups;
    int* to = origins + parity * 2 * Q;
    for (int i = tid; i < 2 * Q; i += threads)
      to[i] = i < Q ? P.group_x_min[gx * Q + i] : P.group_y_min[gy * Q + i - Q];
  };
  if (first < last) load_origins(first, 0);
  __syncthreads();

  for (int p = first; p < last; ++p) {
    const int gx = p % t.x_groups, gy = p / t.x_groups;
    const int na = t.x_count[gx];
    const int a0 = t.x_start[gx];
    const int b0 = t.y_start[gy], nb = t.y_count[gy];
    const bool v_active = warp_v < nb;
    const int* group_x = origins + ((p - first) & 1) * 2 * Q;
    const int* group_y = group_x + Q;
    const int* packet_offsets = P.chunk_offsets + std::size_t(p) * chunks * max_chunk * offset_row;

    // Which window pixels this thread copies: the same for every chunk of the packet.
    const int per_group = P.window_rows * P.copy_width;
    int slot[mma_copy_slots];
#pragma unroll
    for (int s = 0; s < mma_copy_slots; ++s) {
      const int i = tid + s * threads;
      const int h = i / per_group, r = i - h * per_group;
      const int wy = r / P.copy_width, col = r - wy * P.copy_width;
      slot[s] = h < groups_per_chunk ? (h << 16) | (wy << 8) | col : -1;
    }

    // Issues the copies of one chunk's windows, then writes its offsets and B fragments.
    auto stage = [&](int ch, int buf) {
      const int q0 = ch * groups_per_chunk;
#pragma unroll
      for (int s = 0; s < mma_copy_slots; ++s) {
        const int info = slot[s];
        if (info < 0) continue;
        const int h = info >> 16, wy = (info >> 8) & 0xff, col = info & 0xff;
        const int q = q0 + h;
        unsigned char* to = staged + (buf * groups_per_chunk + h) * window_bytes + wy * row_bytes + col * pixel_bytes;
        const void* from = grouped;
        int bytes = 0;
        if (q < Q) {
          const int X = block_x0 + group_x[q] + col - view.rect.x0;
          const int Y = block_y0 + group_y[q] + wy - view.rect.y0;
          if (static_cast<unsigned>(X) < static_cast<unsigned>(view.rect.width) &&
              static_cast<unsigned>(Y) < static_cast<unsigned>(view.rect.height)) {
            from = grouped + q * group_plane + std::size_t(Y) * view.pitch + X;
            bytes = pixel_bytes;
          }
        }
        copy_16_or_zero(to, from, bytes);
      }
      // The chunk's offset rows and B fragments, 16 bytes per copy.
      constexpr int offset_copies = max_chunk * offset_row / 4;
      constexpr int fragment_copies = groups_per_chunk * warp_size / 2;
      for (int k = tid; k < offset_copies + fragment_copies; k += threads) {
        if (k < offset_copies)
          copy_16_or_zero(offsets + buf * max_chunk * offset_row + 4 * k,
                          packet_offsets + std::size_t(ch) * max_chunk * offset_row + 4 * k, 16);
        else
          copy_16_or_zero(fragments + buf * groups_per_chunk * warp_size + 2 * (k - offset_copies),
                          P.chunk_fragments + std::size_t(ch) * groups_per_chunk * warp_size + 2 * (k - offset_copies), 16);
      }
    };

    float D[RV][RY][4];
#pragma unroll
    for (int i = 0; i < RV; ++i)
#pragma unroll
      for (int j = 0; j < RY; ++j)
#pragma unroll
        for (int r = 0; r < 4; ++r) D[i][j][r] = 0.0f;

    auto accumulate = [&](int buf) {
      if (!v_active) return;  // the whole warp: mma needs every lane
#pragma unroll
      for (int h = 0; h < groups_per_chunk; ++h) {
        const int c = h * mma_group + tg;  // this lane's exposure within the chunk
        const uint2 b = fragments[(buf * groups_per_chunk + h) * warp_size + lane];
        const unsigned char* at = staged + (buf * groups_per_chunk + h) * window_bytes +
                                  (warp_y * RY * Pitch + g) * pixel_bytes;
        const int* off = offsets + (buf * max_chunk + c) * offset_row + warp_v * RV;
        int o[RV];
        load_offsets(off, o);
#pragma unroll
        for (int i = 0; i < RV; ++i) {
#pragma unroll
          for (int j = 0; j < RY; ++j) {
            const unsigned char* base = at + o[i] + j * row_bytes;
            // Origins g, g+8 (trial P of rows g, g+8) and g+16, g+24 (trial Q), 8 pixels apart.
            mma_pairs(D[i][j], lds32(base), lds32(base + 8 * pixel_bytes), lds32(base + 16 * pixel_bytes),
                      lds32(base + 24 * pixel_bytes), b.x, b.y);
          }
        }
      }
    };

    // Every iteration commits one copy group (empty past the last chunk), so waiting until at
    // most Stages - 2 groups are pending means chunk ch has landed.
    for (int s = 0; s < Stages - 1; ++s) {
      if (s < chunks) stage(s, s);
      copy_async_commit();
    }
    for (int ch = 0; ch < chunks; ++ch) {
      copy_async_wait<Stages - 2>();  // then the barrier orders the reads
      __syncthreads();  // chunk ch visible to all; everyone is done with chunk ch - 1's buffer
      const int ahead = ch + Stages - 1;
      if (ahead < chunks) stage(ahead, ahead % Stages);
      copy_async_commit();
      accumulate(ch % Stages);
    }
    // The next packet's origins go to the other buffer, which no copy of this packet reads.
    if (p + 1 < last) load_origins(p + 1, (p + 1 - first) & 1);
    __syncthreads();  // the next packet's copies overwrite buffers still being read

    if (v_active) {
      const int b = b0 + warp_v;
      const unsigned full = 0xffffffffu;
#pragma unroll
      for (int j = 0; j < RY; ++j) {
        const int y = y0 + j;
        const bool origin_in = x < out.tile_x0 + out.tile_width && y < out.tile_y0 + out.tile_height;
        const int o = lists.origin(warp_y * RY + j, x - block_x0);
        TopKEntry* list =
            !SharedLists && origin_in && out.top_k > 0 ? topk_list(out, x, y, blockIdx.z * NWV + warp_v) : nullptr;
        float floor = -INFINITY;
        if constexpr (SharedLists) floor = lists.floor_of(p - first, o);
        // Without block lists, most trials skip their Z (ZGate): kbmod fp16 17.7 -> 17.3 ms,
        // dense 90.7 -> 89.9 (H200). With them the gate cost spills and slowed the top-8 scan
        // (20.3 -> 20.8 ms device), so that kernel scores every trial.
        const ZGate gate = score_gate(out, digest, list ? list_entry_floor(bound[j]) : INFINITY);
#pragma unroll
        for (int i = 0; i < RV; ++i) {
          // Lanes t and t^2 hold the high- and low-weight halves of the same trials: add them.
          float d[4];
#pragma unroll
          for (int r = 0; r < 4; ++r) d[r] = D[i][j][r] + __shfl_xor_sync(full, D[i][j][r], 2);
          // t = 0: rows g (d0, d1) of P; t = 2: rows g+8 (d2, d3) of P; t = 1, 3: the same of Q.
          const bool upper = tg >> 1;
          const float A = (upper ? d[2] : d[0]) * unscale.x;
          const float B = (upper ? d[3] : d[1]) * unscale.y;
          if (!origin_in || i >= na) continue;
          const int v = b * t.vx_count + a0 + i;
          if (!(B > 0.0f)) continue;  // B <= 0: not scored (SPEC 1)
          if constexpr (!SharedLists) {
            tally_trial(digest, A, B);
            if (!gate.passes(A, B)) continue;
            const float Z = rank_trial(out, digest, A, B, x, y, v);
            if (list) topk_offer(list, out.top_k, topk_stride(out), bound[j], Z, v, A, B);
          } else {
            const float Z = score_trial(out, digest, A, B, x, y, v);
            lists.offer(warp_v, o, floor, bound[j], Z, v, A, B);
          }
        }
        if constexpr (SharedLists)
          if (origin_in) lists.publish(p - first, warp_v, o, bound[j]);
      }
    }
  }
  if constexpr (SharedLists) {
    __syncthreads();  // every warp's last offers are in
    lists.sort_and_store(out, blockIdx.z, block_x0, block_y0, tid, threads);
  }
  const long long key = block_key(out, blockIdx.z, block_x0, block_y0, warp_size, rows_per_block);
  write_block_digest(out, digest, key, scratch);
}

// The tables the tensor-core kernel copies per chunk (FastParams::chunk_offsets,
// chunk_fragments): every packet's byte offsets into its windows, the window origin of each group
// of four exposures subtracted and the lane's exposure within the pixel added, and every chunk's B
// fragments. Padding entries are zero.
__global__ void chunk_tables_kernel(StackView view, PacketTables t, const int* group_x_min, const int* group_y_min,
                                    int Q, int chunks, int vx_per_thread, int packet, int offset_row, int pitch,
                                    int* offsets, uint2* fragments) {
  constexpr int groups_per_chunk = max_chunk / mma_group;
  constexpr int pixel_bytes = 16;
  __shared__ unsigned int scale_scratch[2];
  const int E = t.exposures;
  const float2 scale = weight_scales(view, E, scale_scratch);  // as the scan computes it
  const long long per_packet = (long long)chunks * max_chunk * offset_row;
  const long long total = per_packet * t.x_groups * t.y_groups;
  const long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total; i += stride) {
    const int p = int(i / per_packet);
    const int r = int(i - p * per_packet);
    const int v = r % offset_row, row = r / offset_row;  // row = chunk * max_chunk + exposure of the chunk
    const int c = row % max_chunk;
    const int e = (row / max_chunk) * groups_per_chunk * mma_group + c;
    const int gx = p % t.x_groups, gy = p / t.x_groups;
    const int a = v % vx_per_thread, b = v / vx_per_thread;
    int off = 0;
    if (v < packet && e < E && a < t.x_count[gx] && b < t.y_count[gy]) {
      const int q = e / mma_group;
      off = ((t.shift_y[(t.y_start[gy] + b) * E + e] - group_y_min[gy * Q + q]) * pitch +
             (t.shift_x[(t.x_start[gx] + a) * E + e] - group_x_min[gx * Q + q])) *
                pixel_bytes +
            (c % mma_group) * 4;
    }
    offsets[i] = off;
  }
  const long long lanes = (long long)chunks * groups_per_chunk * warp_size;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < lanes; i += stride) {
    const int l = int(i % warp_size);
    const int e = int(i / warp_size) * mma_group + (l & 3);
    const float psi_w = e < E ? view.psi_weight[e] * scale.x : 0.0f;
    const float phi_w = e < E ? view.phi_weight[e] * scale.y : 0.0f;
    fragments[i] = weight_fragment(psi_w, phi_w, l >> 2);
  }
}

// Tensor-core sums: fp16 storage, and int8 storage without exception codes (its codes are
// decoded to halves when the tile is regrouped); fp32 values would not fit in half operands.
template <int RV, int RY, int NWY, int NWV, int Pitch, int Stages, int MinBlocks = 1>
FastVariant make_mma_variant() {
  FastVariant v;
  const std::string name = "mma-v" + std::to_string(RV) + "r" + std::to_string(RY) + "-w" + std::to_string(NWY) +
                           "x" + std::to_string(NWV) + "-p" + std::to_string(Pitch) + "-s" + std::to_string(Stages) +
                           (MinBlocks > 1 ? "-b" + std::to_string(MinBlocks) : "");
  v.info = FastVariantInfo{name, true, true, false, RV, RY, NWY, NWV, Pitch};
  v.kernel[0] = v.kernel_block_lists[0] = nullptr;
  v.kernel[1] = fast_mma_kernel<RV, RY, NWY, NWV, Pitch, Stages, MinBlocks, false>;
  v.kernel[2] = v.kernel[1];  // the kernel reads the regrouped half pairs whatever the storage
  v.kernel_block_lists[1] = fast_mma_kernel<RV, RY, NWY, NWV, Pitch, Stages, MinBlocks, true>;
  v.kernel_block_lists[2] = v.kernel_block_lists[1];
  v.stages = Stages;
  return v;
}

}  // namespace

std::vector<FastVariant> tensor_core_variants() {
  return {
      make_mma_variant<8, 2, 4, 4, 40, 3>(),
      make_mma_variant<8, 2, 4, 4, 64, 3>(),
      make_mma_variant<8, 2, 4, 3, 40, 3>(),
      make_mma_variant<8, 2, 4, 2, 40, 3, 2>(),
      make_mma_variant<4, 2, 4, 4, 40, 3>(),
  };
}

ChunkTableSizes chunk_table_sizes(const FastVariantInfo& i, int packets, int exposures) {
  const int Q = (exposures + mma_group - 1) / mma_group;
  const int groups_per_chunk = max_chunk / mma_group;
  const int chunks = (Q + groups_per_chunk - 1) / groups_per_chunk;
  const int offset_row = mma_offset_row(i.vx_per_thread * i.warps_v);
  return ChunkTableSizes{std::size_t(packets) * chunks * max_chunk * offset_row,
                         std::size_t(chunks) * groups_per_chunk * warp_size};
}

void form_chunk_tables(const FastParams& P, const FastVariantInfo& i, int* offsets, uint2* fragments,
                       cudaStream_t stream) {
  const int Q = P.exposure_groups;
  const int groups_per_chunk = max_chunk / mma_group;
  const int chunks = (Q + groups_per_chunk - 1) / groups_per_chunk;
  const int packet = i.vx_per_thread * i.warps_v;
  const ChunkTableSizes sizes = chunk_table_sizes(i, P.t.x_groups * P.t.y_groups, P.t.exposures);
  const int blocks = int(std::min<std::size_t>((sizes.offsets + 255) / 256, 1024));
  chunk_tables_kernel<<<blocks, 256, 0, stream>>>(P.view, P.t, P.group_x_min, P.group_y_min, Q, chunks,
                                                  i.vx_per_thread, packet, mma_offset_row(packet), i.pitch, offsets,
                                                  fragments);
  SHIFTSTACK_CUDA_CHECK_LAUNCH();
}

void regroup_exposures(const StackView& view, uint4* grouped, int groups, cudaStream_t stream) {
  const std::size_t pixels = std::size_t(groups) * view.rect.height * view.pitch;
  const int blocks = int(std::min<std::size_t>((pixels + 255) / 256, 65536));
  if (view.storage == StorageCode::int8)
    regroup_kernel<StorageCode::int8><<<blocks, 256, 0, stream>>>(view, grouped, groups);
  else
    regroup_kernel<StorageCode::fp16><<<blocks, 256, 0, stream>>>(view, grouped, groups);
  SHIFTSTACK_CUDA_CHECK_LAUNCH();
}

namespace {

std::vector<int> group_minima(const AxisRuns& runs, int exposures, int* extent) {
  const int groups = (exposures + mma_group - 1) / mma_group;
  std::vector<int> minima;
  *extent = 0;
  for (int r = 0; r < runs.groups; ++r)
    for (int q = 0; q < groups; ++q) {
      int lo = INT_MAX, hi = INT_MIN;
      for (int e = q * mma_group; e < std::min(exposures, (q + 1) * mma_group); ++e) {
        lo = std::min(lo, runs.min_shift[std::size_t(r) * exposures + e]);
        hi = std::max(hi, runs.min_shift[std::size_t(r) * exposures + e]);
      }
      minima.push_back(lo);
      *extent = std::max(*extent, hi - lo + runs.span[r]);
    }
  return minima;
}

}  // namespace

GroupWindows group_windows(const AxisRuns& x, const AxisRuns& y, int exposures) {
  GroupWindows w;
  w.x_min = group_minima(x, exposures, &w.extent_x);
  w.y_min = group_minima(y, exposures, &w.extent_y);
  return w;
}

VariantPlan plan_tensor_core_variant(const FastVariant& v, const AxisRuns& x, const AxisRuns& y, int exposures) {
  VariantPlan plan;
  plan.variant = &v;
  const FastVariantInfo& i = v.info;
  int extent_x = 0, extent_y = 0;
  group_minima(x, exposures, &extent_x);
  group_minima(y, exposures, &extent_y);
  plan.copy_width = warp_size + extent_x;
  if (plan.copy_width > i.pitch) {
    plan.problem = "neighbouring velocities drift " + std::to_string(extent_x) +
                   " px apart along x within a packet and a group of four exposures, more than the pitch allows (" +
                   std::to_string(i.pitch - warp_size) + ")";
    return plan;
  }
  plan.window_rows = i.warps_y * i.rows_per_thread + extent_y;
  plan.window_elems = plan.window_rows * i.pitch;
  const int threads = warp_size * i.warps_y * i.warps_v;
  const int groups_per_chunk = max_chunk / mma_group;
  if (groups_per_chunk * plan.window_rows * plan.copy_width > mma_copy_slots * threads) {
    plan.problem = "packet footprint too large for the block's copy slots (" + std::to_string(plan.window_rows) +
                   " rows)";
    return plan;
  }
  const int packet = i.vx_per_thread * i.warps_v;
  plan.chunk = max_chunk;
  const int origin_bytes = 2 * 2 * ((exposures + mma_group - 1) / mma_group) * 4;  // [parity][x, y][Q]
  plan.shared_bytes = v.stages * (groups_per_chunk * plan.window_elems * 16 + max_chunk * mma_offset_row(packet) * 4 +
                                  groups_per_chunk * warp_size * 8) +
                      origin_bytes;
  if (plan.shared_bytes > max_shared_memory_per_block()) {
    plan.problem = "packet footprint exceeds shared memory (" + std::to_string(plan.window_rows) + " rows)";
    return plan;
  }
  return plan;
}


}  // namespace shiftstack::cuda::fast_gather
