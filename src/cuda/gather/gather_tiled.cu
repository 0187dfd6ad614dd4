// cuda-tiled: the chapter's tiled gather. A block owns 32x8 origins and a packet of up to 32
// neighbouring velocities (8 along vx by 4 along vy). For each exposure it stages the union of
// the packet's source pixels in shared memory, decoded and weighted once, then every thread
// updates the sums of its origin for all packet velocities from there. Integer shifts come from
// the precomputed separable tables (Cartesian banks, integer mode). Fractional shifts run the
// bilinear twin of this kernel (gather_tiled_bilinear.cu).
#include <memory>
#include <string>

#include "cuda/common/check.cuh"
#include "cuda/gather/gather_bilinear.hpp"
#include "cuda/gather/gather_driver.cuh"
#include "cuda/gather/velocity_packets.cuh"
#include "cuda/gather/gather_engines.hpp"
#include "core/engine_registry.hpp"

namespace shiftstack {

namespace cuda {
namespace {

constexpr int tiled_block_x = 32;  // origins along x: one warp, conflict-free row reads
constexpr int tiled_block_y = 8;   // origin rows
constexpr int tiled_threads = tiled_block_x * tiled_block_y;
constexpr int tiled_warps = tiled_threads / 32;
constexpr int tiled_packet_vx = 8;  // velocities per packet along vx ...
constexpr int tiled_packet_vy = 4;  // ... and along vy: 32 sums per thread
constexpr int tiled_packet = tiled_packet_vx * tiled_packet_vy;

template <StorageCode S>
__global__ void __launch_bounds__(tiled_threads)
    tiled_gather_kernel(StackView view, PacketTables t, int groups, int packet_vx, int packet_vy,
                        ScanOutputs out) {
  extern __shared__ float2 window[];  // decoded, weighted (psi, phi) of the packet's footprint
  __shared__ int offsets[tiled_packet];
  __shared__ LocalDigest scratch[tiled_warps];

  const TiledThread<tiled_block_x, tiled_block_y> me(out, t, groups);
  const int group = me.group, block_x0 = me.block_x0, block_y0 = me.block_y0, tid = me.tid;
  const int x = me.x, y = me.y, E = me.exposures, first = me.first, last = me.last;
  const bool active = me.active;

  TopKEntry* list = (active && out.top_k > 0) ? topk_list(out, x, y, group) : nullptr;
  TopKBound bound;
  LocalDigest digest;

  for (int p = first; p < last; ++p) {
    const int gx = p % t.x_groups, gy = p / t.x_groups;
    const int a0 = t.x_start[gx], na = t.x_count[gx];
    const int b0 = t.y_start[gy], nb = t.y_count[gy];
    const int pitch = tiled_block_x + t.x_span[gx];
    const int rows = tiled_block_y + t.y_span[gy];
    float A[tiled_packet], B[tiled_packet];
#pragma unroll
    for (int k = 0; k < tiled_packet; ++k) A[k] = B[k] = 0.0f;

    for (int e = 0; e < E; ++e) {
      const int wx0 = block_x0 + t.x_min[gx * E + e];
      const int wy0 = block_y0 + t.y_min[gy * E + e];
      const float psi_w = view.psi_weight[e], phi_w = view.phi_weight[e];
      for (int i = tid; i < pitch * rows; i += tiled_threads) {
        const int wy = i / pitch, wx = i - wy * pitch;
        const RawSample r = decode_pixel<S>(view, e, wx0 + wx, wy0 + wy);
        window[i] = r.valid ? make_float2(__fmul_rn(psi_w, r.psi), __fmul_rn(phi_w, r.phi))
                            : make_float2(0.0f, 0.0f);
      }
      if (tid < tiled_packet) {
        const int a = tid % tiled_packet_vx, b = tid / tiled_packet_vx;
        if (a < na && b < nb)
          offsets[tid] = (t.shift_y[(b0 + b) * E + e] - t.y_min[gy * E + e]) * pitch +
                         (t.shift_x[(a0 + a) * E + e] - t.x_min[gx * E + e]);
      }
      __syncthreads();
      const float2* mine = window + threadIdx.y * pitch + threadIdx.x;
#pragma unroll
      for (int k = 0; k < tiled_packet; ++k) {
        if (k % tiled_packet_vx < packet_vx && k / tiled_packet_vx < packet_vy &&
            k % tiled_packet_vx < na && k / tiled_packet_vx < nb) {
          const float2 v = mine[offsets[k]];
          A[k] += v.x;
          B[k] += v.y;
        }
      }
      __syncthreads();
    }
    if (active) {
#pragma unroll
      for (int k = 0; k < tiled_packet; ++k) {
        const int a = k % tiled_packet_vx, b = k / tiled_packet_vx;
        if (a < na && b < nb)
          finish_trial(out, digest, A[k], B[k], x, y, (b0 + b) * t.vx_count + a0 + a, list, &bound);
      }
    }
  }
  const long long key = block_key(out, group, block_x0, block_y0, tiled_block_x, tiled_block_y);
  write_block_digest(out, digest, key, scratch);
}

class TiledMethod final : public GatherMethod {
 public:
  GatherGeometry prepare(const SearchInput& input) override {
    const MotionBank& bank = *input.bank;
    // Smaller packets only when the bank's neighbouring velocities drift so far apart that the
    // 8x4 footprint would not fit in shared memory.
    const int limit = max_shared_memory_per_block();
    const int sizes[][2] = {{8, 4}, {4, 4}, {4, 2}, {2, 2}, {2, 1}, {1, 1}};
    bool found = false;
    for (const auto& size : sizes) {
      tables_.build(bank, size[0], size[1]);
      window_bytes_ = (tiled_block_x + tables_.x().max_span) * (tiled_block_y + tables_.y().max_span) *
                      int(sizeof(float2));
      if (window_bytes_ <= limit) {
        packet_vx_ = size[0];
        packet_vy_ = size[1];
        found = true;
        break;
      }
    }
    require(found, "cuda-tiled: one velocity's footprint does not fit in shared memory");
    const long long origin_blocks = (long long)((input.region.width + tiled_block_x - 1) / tiled_block_x) *
                                    ((input.region.height + tiled_block_y - 1) / tiled_block_y);
    groups_ = velocity_groups(tables_.packets(), origin_blocks, multiprocessor_count(), 4, 64);
    return GatherGeometry{tiled_block_x, tiled_block_y, groups_, groups_};
  }

  void scan(const StackView& view, const ScanOutputs& out, cudaStream_t stream) override {
    const dim3 block(tiled_block_x, tiled_block_y);
    const dim3 grid((out.tile_width + tiled_block_x - 1) / tiled_block_x,
                    (out.tile_height + tiled_block_y - 1) / tiled_block_y, groups_);
    dispatch_storage(view.storage, [&]<StorageCode S>() {
      SHIFTSTACK_CUDA_CHECK(cudaFuncSetAttribute(tiled_gather_kernel<S>,
                                                 cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                 window_bytes_));
      tiled_gather_kernel<S><<<grid, block, window_bytes_, stream>>>(
          view, tables_.tables(), groups_, packet_vx_, packet_vy_, out);
      SHIFTSTACK_CUDA_CHECK_LAUNCH();
    });
  }

  ShiftSource shifts() const override { return tables_.shift_source(); }

 private:
  PacketTableSet tables_;
  int window_bytes_ = 0, packet_vx_ = 8, packet_vy_ = 4, groups_ = 1;
};

class TiledEngine final : public Engine {
 public:
  std::string name() const override { return "cuda-tiled"; }
  std::string unsupported_reason(const SearchInput& input) const override {
    if (input.bank->mode == ShiftMode::fractional) return tiled_bilinear_problem(input);
    if (!input.bank->is_cartesian())
      return "cuda-tiled stages packets of a Cartesian velocity grid (separable shift tables); "
             "use cuda-serial for velocity lists";
    return {};
  }
  SearchResult search(const SearchInput& input) override {
    if (input.bank->mode == ShiftMode::fractional) return run_tiled_bilinear(input, workspace_);
    TiledMethod method;
    return run_gather(method, input, workspace_);
  }

 private:
  GatherWorkspace workspace_;
};

}  // namespace
}  // namespace cuda

void register_cuda_tiled_engine() {
  EngineInfo info{"cuda-tiled",
                  "GPU tiled gather: 32x8 origins x up to 32 velocities per block, footprint staged "
                  "and decoded once per exposure in shared memory; fractional shifts: bilinear corners "
                  "and covariances staged the same way",
                  true, 30, [] { return std::make_unique<cuda::TiledEngine>(); },
                  cuda_device_available};
  cuda::register_gather_engine(std::move(info));
}

}  // namespace shiftstack
