// What every CUDA gather does with a finished trial (A, B): score it, fold it into the block's
// partial digest, append it to the compact candidate list when above threshold, and offer it to
// the thread's top-k list for its origin. Shared by cuda-serial, cuda-tiled and cuda-fast.
#pragma once
#include <cuda_runtime.h>

#include <cfloat>
#include <climits>
#include <cstdint>
#include <type_traits>

#include "cuda/common/z_gate.hpp"

namespace shiftstack::cuda {

// A block's share of the digest; the host merges them in a fixed order (block key order), so the
// digest is the same run after run and with or without spatial tiling.
struct PartialDigest {
  double sumA, sumB;
  long long count, scored;
  float maxZ;
  int velocity, x, y;  // argmax; velocity = -1 when nothing was scored
};

// One entry of a top-k list (the origin is implied by the list). Lists are unsorted during the
// scan and sorted best first before the merge;
// an empty slot has velocity = INT_MAX and Z = -inf.
struct TopKEntry {
  float Z;
  int velocity;
  float A, B;
};

// A compact candidate: every trial with Z above the candidate threshold.
struct CandidateRecord {
  int x, y, velocity;
  float A, B, Z;
};

// Where the kernels write. Origins are full-image pixels; the current spatial tile is
// [tile_x0, tile_x0 + tile_width) x [tile_y0, tile_y0 + tile_height).
struct ScanOutputs {
  double z_thr;                   // digest threshold
  PartialDigest* partials;        // indexed by block key (see block_key())
  int region_x0, region_y0;       // the search region's corner
  int blocks_x, blocks_y;         // block grid over the whole region (per velocity group)
  int tile_x0, tile_y0, tile_width, tile_height;

  bool collect;                   // compact candidate list on?
  double candidate_threshold;
  CandidateRecord* candidates;
  unsigned long long* candidate_count;  // may exceed capacity: the host then grows and reruns
  unsigned long long candidate_capacity;

  int top_k;                      // 0 = off
  int lists_per_origin;           // thread-private partial lists, merged afterwards
  // [list][slot < top_k][tile origin], tile origin = row-major in the tile: the lanes of a warp
  // (neighbouring origins) touch neighbouring entries of one slot, so list updates coalesce.
  TopKEntry* lists;
};

// Entries between consecutive slots of one list.
__device__ inline long long topk_stride(const ScanOutputs& out) {
  return static_cast<long long>(out.tile_width) * out.tile_height;
}

__device__ inline bool better_entry(float za, int va, float zb, int vb) {
  return za > zb || (za == zb && va < vb);
}

// Index of the block's partial digest: (group, block row, block column) over the whole region,
// so that a spatial tile writes exactly the slots the untiled run would.
__device__ inline long long block_key(const ScanOutputs& out, int group, int origin_block_x0,
                                      int origin_block_y0, int block_width, int block_height) {
  const int bx = (origin_block_x0 - out.region_x0) / block_width;
  const int by = (origin_block_y0 - out.region_y0) / block_height;
  return (static_cast<long long>(group) * out.blocks_y + by) * out.blocks_x + bx;
}

// Slot 0 of one of the origin's lists; slot i sits i * topk_stride(out) entries further.
__device__ inline TopKEntry* topk_list(const ScanOutputs& out, int x, int y, int list) {
  const long long origin =
      static_cast<long long>(y - out.tile_y0) * out.tile_width + (x - out.tile_x0);
  return out.lists + static_cast<long long>(list) * out.top_k * topk_stride(out) + origin;
}

// The k-th entry of a thread's list, kept in registers so most offers cost one comparison.
struct TopKBound {
  float Z = -FLT_MAX;
  int velocity = INT_MAX;
};

// One entry as a single 16-byte access (a list slot is 16-byte aligned wherever it lives).
__device__ inline TopKEntry load_entry(const TopKEntry* at) {
  const float4 f = *reinterpret_cast<const float4*>(at);
  return TopKEntry{f.x, __float_as_int(f.y), f.z, f.w};
}
__device__ inline void store_entry(TopKEntry* at, const TopKEntry& e) {
  *reinterpret_cast<float4*>(at) = make_float4(e.Z, __int_as_float(e.velocity), e.A, e.B);
}

// Offers (Z, v) to a list of k entries (slots `stride` apart), kept unsorted while the scan runs
// (sort_lists_kernel orders them before the merge, or cuda-fast's blocks as they store their
// shared-memory lists): an entry that beats the bound replaces the
// list's worst, found with the second worst in one pass of independent loads, and the new bound is
// the worse of that second worst and the new entry. (Sorted insertion walked the list with one
// dependent load per step. A version that kept the new bound in registers took cuda-tiled's
// kernel from 128 to 160 registers and its scans 1.9x slower: the bound is still read back.)
// InShared: a list in shared memory (cuda-fast's BlockLists), read and written as whole 16-byte
// entries with 32-bit slot offsets; the global lists keep the accesses the other gathers were
// tuned with.
template <bool InShared = false>
__device__ inline void topk_offer(TopKEntry* list, int k, long long stride, TopKBound& bound, float Z, int v,
                                  float A, float B) {
  if (!better_entry(Z, v, bound.Z, bound.velocity)) return;
  using Index = std::conditional_t<InShared, int, long long>;
  const Index step = Index(stride);
  int worst = 0;
  TopKEntry w;
  if constexpr (InShared) w = load_entry(list);
  else w = list[0];
  TopKEntry second{INFINITY, -1, 0.0f, 0.0f};  // better than any entry: none yet
#pragma unroll 4
  for (int i = 1; i < k; ++i) {
    TopKEntry e;
    if constexpr (InShared) e = load_entry(list + i * step);
    else e = list[i * step];
    if (better_entry(w.Z, w.velocity, e.Z, e.velocity)) {
      second = w;
      w = e;
      worst = i;
    } else if (better_entry(second.Z, second.velocity, e.Z, e.velocity)) {
      second = e;
    }
  }
  if constexpr (InShared) store_entry(list + worst * step, TopKEntry{Z, v, A, B});
  else list[worst * step] = TopKEntry{Z, v, A, B};
  const TopKEntry last = k > 1 && better_entry(Z, v, second.Z, second.velocity) ? second : TopKEntry{Z, v, A, B};
  bound.Z = last.velocity == INT_MAX ? -FLT_MAX : last.Z;
  bound.velocity = last.velocity;
}

// Inserts (Z, v) into a sorted list of k entries (slots `stride` apart) if it beats the last one.
// (A version that kept the new bound in registers instead of reading slot k - 1 back took
// cuda-fast's kbmod top-8 scan from 23.9 to 21.5 ms on the H200, but cuda-tiled's kernel from 128
// to 160 registers and its scans 1.9x slower, cuda-serial's 1.5x: not kept.)
__device__ inline void topk_offer_sorted(TopKEntry* list, int k, long long stride, TopKBound& bound, float Z, int v,
                                         float A, float B) {
  if (!better_entry(Z, v, bound.Z, bound.velocity)) return;
  int i = k - 1;
  while (i > 0) {
    const TopKEntry previous = list[(i - 1) * stride];
    if (!better_entry(Z, v, previous.Z, previous.velocity)) break;
    list[i * stride] = previous;
    --i;
  }
  list[i * stride] = TopKEntry{Z, v, A, B};
  const TopKEntry last = list[(k - 1) * stride];
  bound.Z = last.velocity == INT_MAX ? -FLT_MAX : last.Z;
  bound.velocity = last.velocity;
}

// Per-thread digest accumulation (fixed order within the thread).
struct LocalDigest {
  double sumA = 0, sumB = 0;
  long long count = 0, scored = 0;
  float maxZ = -FLT_MAX;
  int velocity = -1, x = 0, y = 0;

  __device__ void offer_max(float Z, int v, int ox, int oy) {
    // Ties go to the smaller (velocity, y, x), as Digest::merge does.
    const bool better =
        velocity < 0 || Z > maxZ ||
        (Z == maxZ && (v < velocity || (v == velocity && (oy < y || (oy == y && ox < x)))));
    if (better) {
      maxZ = Z;
      velocity = v;
      x = ox;
      y = oy;
    }
  }
  __device__ void merge(const LocalDigest& o) {
    sumA += o.sumA;
    sumB += o.sumB;
    count += o.count;
    scored += o.scored;
    if (o.velocity >= 0) offer_max(o.maxZ, o.velocity, o.x, o.y);
  }
};

// A scored trial's (B > 0) share of the digest's sums and counters.
__device__ inline void tally_trial(LocalDigest& digest, float A, float B) {
  digest.sumA += A;
  digest.sumB += B;
  ++digest.scored;
}

// A scored trial's Z against the threshold, the digest's maximum and the candidate threshold
// (into the compact candidate list); returns Z.
__device__ inline float rank_trial(const ScanOutputs& out, LocalDigest& digest, float A, float B, int x, int y,
                                   int v) {
  const float Z = A / sqrtf(B);
  if (double(Z) > out.z_thr) ++digest.count;
  digest.offer_max(Z, v, x, y);
  if (out.collect && double(Z) > out.candidate_threshold) {
    const unsigned long long slot = atomicAdd(out.candidate_count, 1ull);
    if (slot < out.candidate_capacity) out.candidates[slot] = CandidateRecord{x, y, v, A, B, Z};
  }
  return Z;
}

// Scores a finished trial with B > 0 into the digest and the compact candidate list; returns Z.
// (Trials with B <= 0 have no Z and are not scored, SPEC 1: callers test B first.)
__device__ inline float score_trial(const ScanOutputs& out, LocalDigest& digest, float A, float B, int x, int y,
                                    int v) {
  tally_trial(digest, A, B);
  return rank_trial(out, digest, A, B, x, y, v);
}

// The Z a trial must reach to enter a top-k list with bound `b`: -inf while the list has room.
__device__ inline float list_entry_floor(const TopKBound& b) { return b.velocity == INT_MAX ? -INFINITY : b.Z; }

// The gate of a gather's scored trials (ZGate): the floor is the smallest of the threshold, the
// candidate threshold, the digest's maximum so far and `list_floor`, the Z that enters the
// origin's list (+inf without lists); no gate before the digest has a maximum.
__device__ inline ZGate score_gate(const ScanOutputs& out, const LocalDigest& digest, float list_floor) {
  if (digest.velocity < 0) return ZGate{};
  double floor = fmin(out.z_thr, double(fminf(digest.maxZ, list_floor)));
  if (out.collect) floor = fmin(floor, out.candidate_threshold);
  return ZGate(floor);
}

// Scores one finished trial and offers it to the origin's list in global memory (none when
// `list` is null). SortedLists: the insertion that keeps lists sorted, for cuda-serial: with
// topk_offer inlined its exposure loop compiled differently and its kbmod scan without top-k ran
// 1.5x slower (fp32, H200), while cuda-tiled and cuda-fast were unchanged.
template <bool SortedLists = false>
__device__ inline void finish_trial(const ScanOutputs& out, LocalDigest& digest, float A, float B,
                                    int x, int y, int v, TopKEntry* list, TopKBound* bound) {
  if (!(B > 0.0f)) return;
  const float Z = score_trial(out, digest, A, B, x, y, v);
  if (list) {
    if constexpr (SortedLists) topk_offer_sorted(list, out.top_k, topk_stride(out), *bound, Z, v, A, B);
    else topk_offer(list, out.top_k, topk_stride(out), *bound, Z, v, A, B);
  }
}

// Block-wide reduction of the threads' digests in a fixed order; thread 0 writes the partial.
// `scratch` holds one LocalDigest per warp. Every thread of the block must call it.
__device__ inline void write_block_digest(const ScanOutputs& out, LocalDigest d, long long key,
                                          LocalDigest* scratch) {
  const unsigned full = 0xffffffffu;
  for (int offset = 16; offset > 0; offset >>= 1) {
    LocalDigest o;
    o.sumA = __shfl_down_sync(full, d.sumA, offset);
    o.sumB = __shfl_down_sync(full, d.sumB, offset);
    o.count = __shfl_down_sync(full, d.count, offset);
    o.scored = __shfl_down_sync(full, d.scored, offset);
    o.maxZ = __shfl_down_sync(full, d.maxZ, offset);
    o.velocity = __shfl_down_sync(full, d.velocity, offset);
    o.x = __shfl_down_sync(full, d.x, offset);
    o.y = __shfl_down_sync(full, d.y, offset);
    d.merge(o);
  }
  const int thread = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  const int warps = (blockDim.x * blockDim.y * blockDim.z + 31) / 32;
  if ((thread & 31) == 0) scratch[thread >> 5] = d;
  __syncthreads();
  if (thread == 0) {
    LocalDigest total = scratch[0];
    for (int w = 1; w < warps; ++w) total.merge(scratch[w]);
    out.partials[key] = PartialDigest{total.sumA, total.sumB, total.count, total.scored,
                                      total.maxZ, total.velocity, total.x, total.y};
  }
}

}  // namespace shiftstack::cuda
