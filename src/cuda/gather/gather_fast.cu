// cuda-fast: the fair gather, as fast as the card allows on integer shifts of a Cartesian bank.
//
// A block owns 32 x TY origins and loops over packets of RV x NWV neighbouring velocities (RV
// along vx per thread, one vy per warp group). Per packet it streams the exposures in chunks of
// up to 8: the union of the packet's source pixels for each exposure of a chunk (a window of
// `pitch` x rows pairs) is loaded into registers while the previous chunk is being summed, then
// decoded once into shared memory (double-buffered, one barrier per chunk). Each thread keeps
// RV x RY (origin, velocity) sums in registers and reads its samples from the window at
// per-exposure byte offsets precomputed from the integer shift tables (integer addressing, no
// FP64), applying the exposure's weights with one FFMA per channel. Scoring, the digest, the
// compact candidate list and the top-k lists are fused into the end of each packet: every trial
// is scored, and only partial digests, candidates and top-k entries leave the chip.
//
// fp32 pairs take no registers on the way: they are copied asynchronously, as stored, into the
// buffer the last barrier freed.
//
// Staging formats: float staging holds (psi, phi) as floats (8 shared-memory bytes per sample);
// half staging holds the raw fp16 pair or the int8 codes, which half precision represents
// exactly (4 bytes per sample). An int8 stack with exception codes takes float staging, where the
// exact value is looked up. `s` (skip) variants reuse the previous velocity's samples when its
// shift is identical at that exposure (frequent for finely spaced grids).
//
// Fractional (bilinear) shifts run cuda-fast's bilinear kernel (gather_fast_bilinear.cu); its
// variants are forced or preferred by name like these, and cuda-tiled's kernel ("tiled-bilinear")
// takes a bank none of them fits, or when named.
#include <algorithm>
#include <climits>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include "cuda/common/check.cuh"
#include "cuda/common/warp_mma.cuh"
#include "cuda/gather/gather_bilinear.hpp"
#include "cuda/gather/gather_driver.cuh"
#include "cuda/gather/gather_fast.hpp"
#include "cuda/gather/gather_fast_common.cuh"
#include "cuda/gather/velocity_packets.cuh"
#include "cuda/gather/gather_engines.hpp"
#include "core/engine_registry.hpp"

namespace shiftstack {

namespace cuda {
using namespace fast_gather;
namespace {

template <StorageCode S>
struct RawPair;
template <>
struct RawPair<StorageCode::fp32> {
  using type = float2;
};
template <>
struct RawPair<StorageCode::fp16> {
  using type = unsigned int;  // __half2 bits
};
template <>
struct RawPair<StorageCode::int8> {
  using type = unsigned short;  // char2 bits: psi code in the low byte
};

// A pixel outside the device rectangle: decodes as "no data" in every encoding.
template <StorageCode S>
__device__ inline typename RawPair<S>::type no_data() {
  if constexpr (S == StorageCode::fp32) return make_float2(0.0f, 0.0f);
  else if constexpr (S == StorageCode::fp16) return 0u;  // phi = +0
  else return static_cast<unsigned short>(0x0080u);      // psi code -128, phi code 0
}

// One staged pixel, unweighted: the raw fp16 pair or the int8 codes in half precision (exact),
// or decoded floats. Invalid samples become (0, 0), so every sum adds weight x value blindly.
template <StorageCode S, bool Half>
__device__ inline std::conditional_t<Half, unsigned int, float2> stage_from_raw(
    const StackView& view, typename RawPair<S>::type raw, int e, int X, int Y) {
  if constexpr (Half) {
    if constexpr (S == StorageCode::fp16) {
      const __half2 h = *reinterpret_cast<const __half2*>(&raw);
      return __high2float(h) > 0.0f ? raw : 0u;
    } else if constexpr (S == StorageCode::int8) {
      // Codes -126..126 and 0..255 are exact in half precision; exceptions never reach here.
      const signed char psi = static_cast<signed char>(raw & 0xffu);
      const unsigned char phi = static_cast<unsigned char>(raw >> 8);
      if (psi == int8_codes::psi_invalid || phi == 0) return 0u;
      const __half2 h = __floats2half2_rn(float(psi), float(phi));
      return *reinterpret_cast<const unsigned int*>(&h);
    } else {
      return 0u;  // fp32 storage never takes half staging (no kernel is instantiated)
    }
  } else {
    float psi, phi;
    if constexpr (S == StorageCode::fp32) {
      psi = raw.x;
      phi = raw.y;
    } else if constexpr (S == StorageCode::fp16) {
      const __half2 h = *reinterpret_cast<const __half2*>(&raw);
      psi = __low2float(h);
      phi = __high2float(h);
    } else {
      const signed char code = static_cast<signed char>(raw & 0xffu);
      if (code == int8_codes::psi_invalid) return make_float2(0.0f, 0.0f);
      phi = float(static_cast<unsigned char>(raw >> 8));
      psi = code == int8_codes::psi_exception ? find_exception(view, e, X, Y) : float(code);
    }
    if (!(phi > 0.0f)) return make_float2(0.0f, 0.0f);
    return make_float2(psi, phi);
  }
}

// Sums one staged exposure into the thread's registers. N = velocities of the packet on this
// thread's run (compile-time, so the register arrays stay registers). `window` points at the
// thread's own origin in the exposure's window; offsets[i] (bytes) moves it along velocity i.
template <bool Half, int RV, int RY, int Pitch, bool Skip, int N>
__device__ inline void accumulate_exposure(const unsigned char* window, const int* offsets,
                                           const float2* weights, float (&A)[RV][RY],
                                           float (&B)[RV][RY]) {
  using Stage = std::conditional_t<Half, unsigned int, float2>;
  constexpr int row_bytes = Pitch * int(sizeof(Stage));
  int off[RV];
  if constexpr (RV % 4 == 0) {
    load_offsets(offsets, off);
  } else {
#pragma unroll
    for (int i = 0; i < RV; ++i) off[i] = offsets[i];
  }
  const float2 w = *weights;
  float sx[RY], sy[RY];
#pragma unroll
  for (int i = 0; i < N; ++i) {
    const bool reload = !Skip || i == 0 || off[i] != off[i - 1];
    if (reload) {
#pragma unroll
      for (int j = 0; j < RY; ++j) {
        const unsigned char* at = window + off[i] + j * row_bytes;
        float2 f;
        if constexpr (Half) f = __half22float2(*reinterpret_cast<const __half2*>(at));
        else f = *reinterpret_cast<const float2*>(at);
        sx[j] = f.x;
        sy[j] = f.y;
      }
    }
#pragma unroll
    for (int j = 0; j < RY; ++j) {
      A[i][j] = fmaf(w.x, sx[j], A[i][j]);
      B[i][j] = fmaf(w.y, sy[j], B[i][j]);
    }
  }
}

// Sums the exposures of one staged chunk (window, offsets and weights advance per exposure).
template <bool Half, int RV, int RY, int Pitch, bool Skip, int N, int Packet>
__device__ inline void accumulate_chunk(const unsigned char* window, int window_bytes, const int* offsets,
                                        const float2* weights, int count, float (&A)[RV][RY],
                                        float (&B)[RV][RY]) {
  for (int c = 0; c < count; ++c)
    accumulate_exposure<Half, RV, RY, Pitch, Skip, N>(window + c * window_bytes, offsets + c * Packet,
                                                      weights + c, A, B);
}

template <StorageCode S, bool Half, int RV, int RY, int NWY, int NWV, int Pitch, bool Skip, int MinBlocks,
          bool SharedLists>
__global__ void __launch_bounds__(warp_size* NWY* NWV, MinBlocks) fast_gather_kernel(FastParams P) {
  using Stage = std::conditional_t<Half, unsigned int, float2>;
  using Raw = typename RawPair<S>::type;
  constexpr int threads = warp_size * NWY * NWV;
  constexpr int rows_per_block = NWY * RY;
  constexpr int packet = RV * NWV;
  constexpr int stage_bytes = int(sizeof(Stage));
  static_assert(Pitch % 4 == 0 && Pitch >= warp_size && Pitch < 256, "window pitch");
  // fp32 pairs are staged as stored (the view keeps invalid pairs as (0, 0), as stage_from_raw
  // would make them): asynchronous copies straight into shared memory, no registers per pixel.
  constexpr bool async_copy = S == StorageCode::fp32 && !Half;

  // Shared memory: [staged windows: 2 buffers x chunk exposures] [offsets] [weights].
  extern __shared__ __align__(16) unsigned char staged[];
  __shared__ LocalDigest scratch[NWY * NWV];
  const StackView& view = P.view;
  const PacketTables& t = P.t;
  const ScanOutputs& out = P.out;
  const int window_bytes = P.window_elems * stage_bytes;
  int* offsets = reinterpret_cast<int*>(staged + 2 * P.chunk * window_bytes);
  float2* weights = reinterpret_cast<float2*>(offsets + 2 * max_chunk * packet);

  const PacketThread<NWY, RY> me(out, t, P.groups);
  const int tid = me.tid, lane = me.lane, warp_y = me.warp_y, warp_v = me.warp_v, group = me.group;
  const int block_x0 = me.block_x0, block_y0 = me.block_y0, x = me.x, y0 = me.y0;
  const int first = me.first, last = me.last;
  const int E = t.exposures;
  const int chunks = (E + P.chunk - 1) / P.chunk;

  LocalDigest digest;
  TopKBound bound[RY];
  const BlockLists lists(P, staged, rows_per_block, NWV);
  if constexpr (SharedLists) lists.clear(tid, threads);  // visible after the first chunk's barrier

  for (int p = first; p < last; ++p) {
    const int gx = p % t.x_groups, gy = p / t.x_groups;
    const int a0 = t.x_start[gx], na = t.x_count[gx];
    const int b0 = t.y_start[gy], nb = t.y_count[gy];
    const int rows = rows_per_block + t.y_span[gy];
    const bool v_active = warp_v < nb;
    const int* x_min = t.x_min + gx * E;
    const int* y_min = t.y_min + gy * E;

    // Per-exposure byte offsets of each packet velocity from the thread's origin, and weights:
    // read from the tables with the chunk's pixels (their latency hides behind the sums), written
    // with them. Thread q holds entry q of the chunk's offsets, threads below the chunk a weight.
    static_assert(max_chunk * packet <= threads, "one offset per thread");
    int next_offset = 0;
    float2 next_weight = make_float2(0.0f, 0.0f);
    auto read_offsets = [&](int ch) {
      const int e0 = ch * P.chunk;
      if (tid < P.chunk * packet) {
        const int c = tid / packet, k = tid - c * packet;
        const int e = e0 + c;
        const int a = k % RV, b = k / RV;
        next_offset = 0;
        if (e < E && a < na && b < nb)
          next_offset = ((t.shift_y[(b0 + b) * E + e] - y_min[e]) * Pitch + (t.shift_x[(a0 + a) * E + e] - x_min[e])) *
                        stage_bytes;
      }
      if (tid < P.chunk) {
        const int e = e0 + tid;
        next_weight = e < E ? make_float2(view.psi_weight[e], view.phi_weight[e]) : make_float2(0.0f, 0.0f);
      }
    };
    auto write_offsets = [&](int buf) {
      if (tid < P.chunk * packet) {
        const int c = tid / packet, k = tid - c * packet;
        offsets[(buf * max_chunk + c) * packet + k] = next_offset;
      }
      if (tid < P.chunk) weights[buf * max_chunk + tid] = next_weight;
    };

    // Which window pixel each prefetch slot stages: the same for every chunk of the packet.
    int slot[prefetch_slots];
    Raw raw[prefetch_slots];
#pragma unroll
    for (int s = 0; s < prefetch_slots; ++s) {
      const int i = tid + s * threads;
      const int row = i / Pitch, col = i - row * Pitch;
      const int c = row / rows, wy = row - c * rows;
      slot[s] = c < P.chunk ? (c << 16) | (wy << 8) | col : -1;
    }
    auto load_chunk = [&](int ch) {
      read_offsets(ch);
      const int e0 = ch * P.chunk;
      if constexpr (async_copy) {
        // Straight into the chunk's buffer (ch & 1), which the last barrier freed.
        unsigned char* buffer = staged + std::size_t((ch & 1) * P.chunk) * window_bytes;
#pragma unroll
        for (int s = 0; s < prefetch_slots; ++s) {
          const int info = slot[s];
          if (info < 0) continue;
          const int c = info >> 16, wy = (info >> 8) & 0xff, col = info & 0xff;
          const int e = e0 + c;
          if (e >= E) continue;
          const int X = block_x0 + x_min[e] + col - view.rect.x0;
          const int Y = block_y0 + y_min[e] + wy - view.rect.y0;
          const bool inside = static_cast<unsigned>(X) < static_cast<unsigned>(view.rect.width) &&
                              static_cast<unsigned>(Y) < static_cast<unsigned>(view.rect.height);
          const Raw* from = static_cast<const Raw*>(view.pairs);
          if (inside) from += (std::size_t(e) * view.rect.height + Y) * view.pitch + X;
          copy_8_or_zero(buffer + c * window_bytes + (wy * Pitch + col) * stage_bytes, from, inside ? 8 : 0);
        }
      } else {
#pragma unroll
        for (int s = 0; s < prefetch_slots; ++s) {
          raw[s] = no_data<S>();
          const int info = slot[s];
          if (info < 0) continue;
          const int e = e0 + (info >> 16);
          if (e >= E) continue;
          const int X = block_x0 + x_min[e] + (info & 0xff) - view.rect.x0;
          const int Y = block_y0 + y_min[e] + ((info >> 8) & 0xff) - view.rect.y0;
          if (static_cast<unsigned>(X) < static_cast<unsigned>(view.rect.width) &&
              static_cast<unsigned>(Y) < static_cast<unsigned>(view.rect.height))
            raw[s] = static_cast<const Raw*>(view.pairs)[(std::size_t(e) * view.rect.height + Y) * view.pitch + X];
        }
      }
    };
    auto store_chunk = [&](int ch, int buf) {
      if constexpr (async_copy) {
        copy_async_commit();
        copy_async_wait<0>();  // the barrier that follows makes the copies visible to the block
      } else {
        const int e0 = ch * P.chunk;
#pragma unroll
        for (int s = 0; s < prefetch_slots; ++s) {
          const int info = slot[s];
          if (info < 0) continue;
          const int c = info >> 16, wy = (info >> 8) & 0xff, col = info & 0xff;
          const int e = e0 + c;
          if (e >= E) continue;
          reinterpret_cast<Stage*>(staged + (buf * P.chunk + c) * window_bytes)[wy * Pitch + col] =
              stage_from_raw<S, Half>(view, raw[s], e, block_x0 + x_min[e] + col, block_y0 + y_min[e] + wy);
        }
      }
      write_offsets(buf);
    };

    float A[RV][RY], B[RV][RY];
#pragma unroll
    for (int i = 0; i < RV; ++i)
#pragma unroll
      for (int j = 0; j < RY; ++j) A[i][j] = B[i][j] = 0.0f;

    auto accumulate = [&](int ch, int buf) {
      if (!v_active) return;
      const int count = min(P.chunk, E - ch * P.chunk);
      const unsigned char* window =
          staged + std::size_t(buf * P.chunk) * window_bytes + (warp_y * RY * Pitch + lane) * stage_bytes;
      const int* off = offsets + buf * max_chunk * packet + warp_v * RV;
      const float2* w = weights + buf * max_chunk;
      if (na == RV) {
        accumulate_chunk<Half, RV, RY, Pitch, Skip, RV, packet>(window, window_bytes, off, w, count, A, B);
      } else if (na == RV - 1) {
        accumulate_chunk<Half, RV, RY, Pitch, Skip, (RV > 1 ? RV - 1 : 1), packet>(window, window_bytes, off, w,
                                                                                  count, A, B);
      } else {
        // Short runs (small grids cut unevenly): every slot, the extra ones discarded.
        accumulate_chunk<Half, RV, RY, Pitch, false, RV, packet>(window, window_bytes, off, w, count, A, B);
      }
    };

    stream_chunks(chunks, load_chunk, accumulate, store_chunk);

    if (v_active) {
      const int b = b0 + warp_v;
#pragma unroll
      for (int j = 0; j < RY; ++j) {
        const int y = y0 + j;
        const bool origin_in = x < out.tile_x0 + out.tile_width && y < out.tile_y0 + out.tile_height;
        if (!origin_in) continue;
        if constexpr (!SharedLists) {
          TopKEntry* list = out.top_k > 0 ? topk_list(out, x, y, group * NWV + warp_v) : nullptr;
#pragma unroll
          for (int i = 0; i < RV; ++i)
            if (i < na)
              finish_trial(out, digest, A[i][j], B[i][j], x, y, b * t.vx_count + a0 + i, list, &bound[j]);
        } else {
          const int o = lists.origin(warp_y * RY + j, lane);
          const float floor = lists.floor_of(p - first, o);
#pragma unroll
          for (int i = 0; i < RV; ++i) {
            if (i >= na || !(B[i][j] > 0.0f)) continue;  // B <= 0: not scored (SPEC 1)
            const int v = b * t.vx_count + a0 + i;
            const float Z = score_trial(out, digest, A[i][j], B[i][j], x, y, v);
            lists.offer(warp_v, o, floor, bound[j], Z, v, A[i][j], B[i][j]);
          }
          lists.publish(p - first, warp_v, o, bound[j]);
        }
      }
    }
  }
  if constexpr (SharedLists) {
    __syncthreads();  // every warp's last offers are in
    lists.sort_and_store(out, group, block_x0, block_y0, tid, threads);
  }
  const long long key = block_key(out, group, block_x0, block_y0, warp_size, rows_per_block);
  write_block_digest(out, digest, key, scratch);
}

template <bool Half, int RV, int RY, int NWY, int NWV, int Pitch, bool Skip, int MinBlocks = 1>
FastVariant make_variant() {
  FastVariant v;
  std::string name = std::string(Half ? "h16" : "f32") + (Skip ? "s" : "") + "-v" + std::to_string(RV) + "r" +
                     std::to_string(RY) + "-w" + std::to_string(NWY) + "x" + std::to_string(NWV) + "-p" +
                     std::to_string(Pitch) + (MinBlocks > 1 ? "-b" + std::to_string(MinBlocks) : "");
  v.info = FastVariantInfo{name, Half, false, Skip, RV, RY, NWY, NWV, Pitch};
  auto set = [&v]<bool SharedLists>(FastKernel(&kernels)[3]) {
    if constexpr (Half) {
      kernels[0] = nullptr;
    } else {
      kernels[0] = fast_gather_kernel<StorageCode::fp32, Half, RV, RY, NWY, NWV, Pitch, Skip, MinBlocks, SharedLists>;
    }
    kernels[1] = fast_gather_kernel<StorageCode::fp16, Half, RV, RY, NWY, NWV, Pitch, Skip, MinBlocks, SharedLists>;
    kernels[2] = fast_gather_kernel<StorageCode::int8, Half, RV, RY, NWY, NWV, Pitch, Skip, MinBlocks, SharedLists>;
  };
  set.template operator()<false>(v.kernel);
  set.template operator()<true>(v.kernel_block_lists);
  return v;
}

// The measured variants (bench/RESULTS.md, GPU gathers), in the order the automatic choice tries
// them: the tensor-core variants (fp16, int8 storage; the wide pitch for grids that drift more), then
// the fastest on `dense` for half staging (int8 storage) and for float staging (fp32), then the
// others of the sweep, then a short-run, wide-pitch fallback for coarse grids whose neighbouring
// velocities drift apart by more than the narrow pitch allows. Names: mma = tensor-core sums,
// h16 = half staging, f32 = float staging; s = reuse on equal shifts (f32), sN = N shared-memory
// buffers (mma); vR rY = velocities x origin rows per thread (per lane group for mma); wA x B =
// warps along rows x along vy; pN = window pitch; b2 = two blocks per SM.
const std::vector<FastVariant>& variants() {
  static const std::vector<FastVariant> list = [] {
    std::vector<FastVariant> all = tensor_core_variants();
    for (FastVariant v : {
      make_variant<true, 8, 2, 4, 4, 40, false>(),
      make_variant<false, 8, 2, 4, 4, 40, true>(),
      make_variant<false, 8, 2, 4, 4, 40, false>(),
      make_variant<true, 8, 2, 4, 2, 40, false, 2>(),
      make_variant<false, 8, 2, 4, 2, 40, false, 2>(),
      make_variant<false, 2, 2, 4, 4, 64, false>(),
         })
      all.push_back(v);
    return all;
  }();
  return list;
}

std::mutex& variant_lock() {
  static std::mutex m;
  return m;
}
std::string& forced_variant() {
  static std::string name;
  return name;
}
std::string& last_variant() {
  static std::string name;
  return name;
}

int storage_index(Encoding e) { return e == Encoding::fp32 ? 0 : e == Encoding::fp16 ? 1 : 2; }

VariantPlan plan_variant(const FastVariant& v, const EncodedStack& stack, const AxisRuns& x,
                         const AxisRuns& y, int exposures) {
  VariantPlan plan;
  plan.variant = &v;
  const FastVariantInfo& i = v.info;
  if (!v.kernel[storage_index(stack.encoding)]) {
    plan.problem = i.tensor_cores ? "the tensor-core variant reads fp16 and int8 storage only"
                                  : "half-precision staging holds fp16 and int8 storage only";
    return plan;
  }
  if (i.half_staging && stack.encoding == Encoding::int8 && !stack.exceptions.empty()) {
    plan.problem = "int8 exceptions need float staging for their exact values";
    return plan;
  }
  if (i.tensor_cores) return plan_tensor_core_variant(v, x, y, exposures);
  if (warp_size + x.max_span > i.pitch) {
    plan.problem = "neighbouring velocities drift " + std::to_string(x.max_span) +
                   " px apart along x within a packet, more than the pitch allows (" +
                   std::to_string(i.pitch - warp_size) + ")";
    return plan;
  }
  plan.window_rows = i.warps_y * i.rows_per_thread + y.max_span;
  if (plan.window_rows > 255) {
    plan.problem = "packet footprint too tall (" + std::to_string(plan.window_rows) + " rows)";
    return plan;
  }
  const int threads = warp_size * i.warps_y * i.warps_v;
  // Windows padded to 64 pairs keep every exposure's window 16-byte aligned.
  plan.window_elems = (plan.window_rows * i.pitch + 63) / 64 * 64;
  const int stage_bytes = i.half_staging ? 4 : 8;
  const int packet = i.vx_per_thread * i.warps_v;
  const int fixed = 2 * max_chunk * packet * 4 + 2 * max_chunk * int(sizeof(float2));
  const int per_exposure = 2 * plan.window_elems * stage_bytes;
  plan.chunk = std::min({max_chunk, (max_shared_memory_per_block() - fixed) / per_exposure,
                         prefetch_slots * threads / (plan.window_rows * i.pitch)});
  if (plan.chunk < 1) {
    plan.problem = "packet footprint exceeds shared memory or the block's prefetch registers";
    return plan;
  }
  plan.shared_bytes = fixed + plan.chunk * per_exposure;
  return plan;
}

// Whether a name is one of the fractional kernels' (a bilinear variant or cuda-tiled's kernel).
bool fractional_kernel_name(const std::string& name) {
  if (name == tiled_bilinear_name()) return true;
  const std::vector<std::string> names = fast_bilinear_variant_names();
  return std::find(names.begin(), names.end(), name) != names.end();
}

// The names in the environment variable SHIFTSTACK_FAST_PREFER (comma-separated, in order; an
// empty entry stays an empty name).
std::vector<std::string> preferred_names() {
  std::vector<std::string> names;
  if (const char* prefer = std::getenv("SHIFTSTACK_FAST_PREFER")) {
    const std::string list = prefer;
    std::size_t start = 0;
    while (start <= list.size()) {
      const std::size_t end = std::min(list.find(',', start), list.size());
      names.push_back(list.substr(start, end - start));
      start = end + 1;
    }
  }
  return names;
}

// The fractional kernel forced or preferred by name, "" for the automatic choice.
std::string fractional_choice() {
  std::string forced;
  {
    std::lock_guard guard(variant_lock());
    forced = forced_variant();
  }
  if (fractional_kernel_name(forced)) return forced;
  for (const std::string& name : preferred_names())
    if (fractional_kernel_name(name)) return name;
  return {};
}

// The order in which the automatic choice tries variants: those named in the environment
// variable SHIFTSTACK_FAST_PREFER (comma-separated) first, then the built-in order. Names of
// the fractional kernels are skipped here (fractional_choice() reads them).
std::vector<const FastVariant*> preference_order() {
  std::vector<const FastVariant*> order;
  for (const std::string& name : preferred_names()) {
    bool known = name.empty() || fractional_kernel_name(name);
    for (const FastVariant& v : variants())
      if (v.info.name == name) {
        order.push_back(&v);
        known = true;
      }
    require(known, "SHIFTSTACK_FAST_PREFER names an unknown cuda-fast variant '" + name + "'");
  }
  for (const FastVariant& v : variants())
    if (std::find(order.begin(), order.end(), &v) == order.end()) order.push_back(&v);
  return order;
}

// Picks the forced variant or the first one in preference order that can run the input.
VariantPlan choose_variant(const SearchInput& input, PacketTableSet* tables) {
  std::string forced;
  {
    std::lock_guard guard(variant_lock());
    forced = forced_variant();
  }
  const SeparableShifts s = integer_shifts(*input.bank);
  const int E = input.bank->exposures();
  std::string problems;
  bool named = false;
  for (const FastVariant* v : preference_order()) {
    if (!forced.empty() && v->info.name != forced) continue;
    named = true;
    const AxisRuns x = cut_axis(s.x, int(input.bank->vx_count()), E, v->info.vx_per_thread);
    const AxisRuns y = cut_axis(s.y, int(input.bank->vy_count()), E, v->info.warps_v);
    VariantPlan plan = plan_variant(*v, *input.stack, x, y, E);
    if (plan.problem.empty()) {
      if (tables) tables->build(*input.bank, v->info.vx_per_thread, v->info.warps_v);
      return plan;
    }
    problems += (problems.empty() ? "" : "; ") + v->info.name + ": " + plan.problem;
  }
  VariantPlan none;
  none.problem = named ? problems : "no cuda-fast variant named '" + forced + "'";
  return none;
}

// What the automatic choice of a variant, and the tables it builds, depend on: a search that
// repeats them (the same bank and image shape, as over the CCDs of a survey, or a benchmark's
// runs) reuses the last choice and its device tables instead of planning and uploading again.
struct ChoiceKey {
  int device = -1;
  // The shifts follow from the bank alone: comparing it costs far less than computing the shift
  // tables (two per search: unsupported_reason and prepare).
  MotionBank bank;
  Encoding encoding = Encoding::fp32;
  bool exceptions = false;
  std::string forced;
  std::vector<std::string> preferred;

  static ChoiceKey of(const SearchInput& input) {
    ChoiceKey key;
    SHIFTSTACK_CUDA_CHECK(cudaGetDevice(&key.device));
    key.bank = *input.bank;
    key.encoding = input.stack->encoding;
    key.exceptions = !input.stack->exceptions.empty();
    {
      std::lock_guard guard(variant_lock());
      key.forced = forced_variant();
    }
    key.preferred = preferred_names();
    return key;
  }
  bool operator==(const ChoiceKey& o) const {
    return device == o.device && bank == o.bank && encoding == o.encoding && exceptions == o.exceptions && forced == o.forced && preferred == o.preferred;
  }
};

class FastMethod final : public GatherMethod {
 public:
  GatherGeometry prepare(const SearchInput& input) override {
    ChoiceKey key = ChoiceKey::of(input);
    if (!chosen_ || !(key == chosen_for_)) {
      chosen_ = false;
      launch_top_k_ = -1;
      plan_ = choose_variant(input, &tables_);
      require(plan_.problem.empty(), "cuda-fast cannot run this input: " + plan_.problem);
      if (plan_.variant->info.tensor_cores) {
        const GroupWindows w = group_windows(tables_.x(), tables_.y(), input.bank->exposures());
        group_x_min_.upload(w.x_min);
        group_y_min_.upload(w.y_min);
        const ChunkTableSizes sizes = chunk_table_sizes(plan_.variant->info, tables_.packets(), input.bank->exposures());
        chunk_offsets_.resize(sizes.offsets);
        chunk_fragments_.resize(sizes.fragments);
      }
      chosen_for_ = std::move(key);
      chosen_ = true;
    }
    const FastVariantInfo& i = plan_.variant->info;
    if (input.policy.top_k != launch_top_k_) {  // the encoding is in the key
      launch_top_k_ = -1;  // until choose_launch has answered
      choose_launch(input);
      launch_top_k_ = input.policy.top_k;
    }
    const long long origin_blocks = (long long)((input.region.width + warp_size - 1) / warp_size) *
                                    ((input.region.height + rows_ - 1) / rows_);
    groups_ = velocity_groups(tables_.packets(), origin_blocks, multiprocessor_count(), per_sm_, 64 / i.warps_v);
    {
      std::lock_guard guard(variant_lock());
      last_variant() = i.name;
    }
    // Lists kept in shared memory are sorted as the block stores them (BlockLists::sort_and_store).
    return GatherGeometry{warp_size, rows_, groups_, groups_ * i.warps_v, block_lists_offset_ >= 0};
  }

  void scan(const StackView& view, const ScanOutputs& out, cudaStream_t stream) override {
    FastParams params{view, tables_.tables(), out, groups_, plan_.chunk, plan_.window_rows, plan_.window_elems};
    params.block_lists_offset = block_lists_offset_;
    if (plan_.variant->info.tensor_cores) {
      // The exposure-grouped copy of this tile, made on the stream before the scan (a pass over
      // the tile at memory bandwidth; it is counted in the scan's time).
      params.exposure_groups = (view.exposures + mma_group - 1) / mma_group;
      grouped_.resize(std::size_t(params.exposure_groups) * view.rect.height * view.pitch);
      regroup_exposures(view, grouped_.get(), params.exposure_groups, stream);
      params.grouped = grouped_.get();
      params.group_x_min = group_x_min_.get();
      params.group_y_min = group_y_min_.get();
      params.copy_width = plan_.copy_width;
      form_chunk_tables(params, plan_.variant->info, chunk_offsets_.get(), chunk_fragments_.get(), stream);
      params.chunk_offsets = chunk_offsets_.get();
      params.chunk_fragments = chunk_fragments_.get();
    }
    const dim3 grid((out.tile_width + warp_size - 1) / warp_size, (out.tile_height + rows_ - 1) / rows_,
                    groups_);
    SHIFTSTACK_CUDA_CHECK(cudaFuncSetAttribute(kernel_, cudaFuncAttributeMaxDynamicSharedMemorySize, shared_bytes_));
    kernel_<<<grid, threads_, shared_bytes_, stream>>>(params);
    SHIFTSTACK_CUDA_CHECK_LAUNCH();
  }

  // The tensor-core variant keeps an exposure-grouped copy of each tile beside the upload, in half
  // pairs (twice the bytes of int8 pairs).
  double stack_copies() const override {
    if (!plan_.variant || !plan_.variant->info.tensor_cores) return 1.0;
    return encoding_ == Encoding::int8 ? 3.0 : 2.0;
  }

  ShiftSource shifts() const override { return tables_.shift_source(); }

 private:
  PacketTableSet tables_;
  bool chosen_ = false;  // plan_ and the device tables hold the choice for chosen_for_
  ChoiceKey chosen_for_;
  DeviceArray<int> group_x_min_, group_y_min_;
  DeviceArray<int> chunk_offsets_;
  DeviceArray<uint2> chunk_fragments_;
  DeviceArray<uint4> grouped_;
  VariantPlan plan_;
  Encoding encoding_ = Encoding::fp32;
  // The kernel, block shape and shared memory for the chosen variant, the encoding and top-k
  // (occupancy queries: kept while these repeat, as the choice is).
  void choose_launch(const SearchInput& input) {
    const FastVariantInfo& i = plan_.variant->info;
    kernel_ = plan_.variant->kernel[storage_index(input.stack->encoding)];
    encoding_ = input.stack->encoding;
    threads_ = warp_size * i.warps_y * i.warps_v;
    rows_ = i.warps_y * i.rows_per_thread;
    shared_bytes_ = plan_.shared_bytes;
    int per_sm = blocks_per_multiprocessor(kernel_, shared_bytes_);
    require(per_sm > 0, "cuda-fast: variant " + i.name + " does not fit on a multiprocessor");
    block_lists_offset_ = -1;
    if (input.policy.top_k > 0) {
      // The block's lists in shared memory, where they fit without costing resident blocks.
      FastKernel with_lists_kernel = plan_.variant->kernel_block_lists[storage_index(input.stack->encoding)];
      const int offset = (plan_.shared_bytes + 15) / 16 * 16;
      const std::size_t with_lists = offset + BlockLists::bytes(input.policy.top_k, i.warps_v, rows_);
      cudaFuncAttributes attributes{};
      SHIFTSTACK_CUDA_CHECK(cudaFuncGetAttributes(&attributes, with_lists_kernel));
      if (with_lists + attributes.sharedSizeBytes <= std::size_t(max_shared_memory_per_block()) &&
          blocks_per_multiprocessor(with_lists_kernel, int(with_lists)) >= per_sm) {
        kernel_ = with_lists_kernel;
        block_lists_offset_ = offset;
        shared_bytes_ = int(with_lists);
      }
    }
    per_sm_ = per_sm;
  }
  // Resident blocks of `kernel` per multiprocessor with `shared` dynamic bytes.
  int blocks_per_multiprocessor(FastKernel kernel, int shared) const {
    SHIFTSTACK_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, shared));
    int per_sm = 0;
    SHIFTSTACK_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads_, shared));
    return per_sm;
  }

  FastKernel kernel_ = nullptr;
  int launch_top_k_ = -1;  // the top-k whose launch kernel_ .. per_sm_ hold; -1: none
  int per_sm_ = 0;  // resident blocks of the variant's kernel without lists
  int threads_ = 0, rows_ = 0, groups_ = 1;
  int shared_bytes_ = 0, block_lists_offset_ = -1;  // dynamic shared memory; BlockLists' place in it
};

class FastEngine final : public Engine {
 public:
  std::string name() const override { return "cuda-fast"; }
  std::string unsupported_reason(const SearchInput& input) const override {
    if (input.bank->mode == ShiftMode::fractional) {
      // cuda-tiled's kernel takes what cuda-fast's own cannot, so the two share their limits.
      const std::string problem = tiled_bilinear_problem(input);
      return problem.empty() ? problem : "cuda-fast's bilinear kernels: " + problem;
    }
    if (!input.bank->is_cartesian())
      return "cuda-fast relies on separable shift tables of a Cartesian velocity grid; use "
             "cuda-serial for velocity lists";
    ChoiceKey key = ChoiceKey::of(input);
    std::lock_guard guard(reason_lock_);
    if (!reason_known_ || !(key == reason_for_)) {
      const VariantPlan plan = choose_variant(input, nullptr);
      reason_ = plan.problem.empty() ? std::string()
                                     : "no cuda-fast variant fits this bank (" + plan.problem + "); use cuda-tiled";
      reason_for_ = std::move(key);
      reason_known_ = true;
    }
    return reason_;
  }
  SearchResult search(const SearchInput& input) override {
    if (input.bank->mode == ShiftMode::fractional) {
      const std::string choice = fractional_choice();
      std::string ran = tiled_bilinear_name();
      SearchResult result = choice == tiled_bilinear_name() ? run_tiled_bilinear(input, workspace_)
                                                            : run_fast_bilinear(input, workspace_, choice, &ran);
      std::lock_guard guard(variant_lock());
      last_variant() = ran;
      return result;
    }
    return run_gather(method_, input, workspace_);
  }

 private:
  // Kept from one search to the next, as the workspace: its device tables and the exposure-grouped
  // copy then grow once instead of being allocated and freed by every search.
  FastMethod method_;
  GatherWorkspace workspace_;
  // The last answer of unsupported_reason for integer shifts, and the inputs it answered.
  mutable std::mutex reason_lock_;
  mutable bool reason_known_ = false;
  mutable ChoiceKey reason_for_;
  mutable std::string reason_;
};

}  // namespace

const std::vector<FastVariantInfo>& fast_variants() {
  static const std::vector<FastVariantInfo> infos = [] {
    std::vector<FastVariantInfo> list;
    for (const FastVariant& v : variants()) list.push_back(v.info);
    return list;
  }();
  return infos;
}

void set_fast_variant(const std::string& name) {
  std::lock_guard guard(variant_lock());
  forced_variant() = name;
}

std::string last_fast_variant() {
  std::lock_guard guard(variant_lock());
  return last_variant();
}

}  // namespace cuda

void register_cuda_fast_engine() {
  EngineInfo info{"cuda-fast",
                  "GPU fair gather: velocity packets staged once per exposure chunk in shared memory, "
                  "sums in registers, integer offsets, fused scoring, candidates and top-k; fractional "
                  "shifts: separable bilinear interpolation with shared weights and the exact B",
                  true, 40, [] { return std::make_unique<cuda::FastEngine>(); }, cuda_device_available};
  cuda::register_gather_engine(std::move(info));
}

}  // namespace shiftstack
