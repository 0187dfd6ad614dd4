// cuda-tiled for fractional shifts: the tiled gather with bilinear sampling and the
// covariance-exact B of SPEC 2, the statistic of the reference engine's bilinear_trial.
//
// A block owns 32x8 origins and a packet of up to 8x4 neighbouring velocities (as cuda-tiled).
// Per exposure it stages the packet's footprint in shared memory: the weighted (psi, phi) of each
// pixel with a validity mark, and the pixel's four weighted covariances. The window is placed by
// the packet's smallest floor(s) and is the runs' floor(s) span plus two pixels wider and taller:
// one for the second corner, one for a position x + s that rounds up to the next integer in FP64
// (its second corner then has weight 0 and is never used). Each thread then computes, for its
// own origin and each velocity of the packet, the FP64 position, floor and fractions exactly as
// the CPU does (bilinear_sample.cuh), so the corners and which of them have zero weight are the
// reference's; the weights themselves are rounded to float and A, B summed in FP32.
//
// cuda-fast hands fractional banks to this kernel too (it has no fractional kernel of its own).
#include <cmath>
#include <string>
#include <vector>

#include "cuda/gather/bilinear_sample.cuh"
#include "cuda/common/check.cuh"
#include "cuda/common/device_buffer.cuh"
#include "cuda/gather/gather_bilinear.hpp"
#include "cuda/gather/gather_driver.cuh"
#include "cuda/gather/velocity_packets.cuh"
#include "shiftstack/error.hpp"

namespace shiftstack::cuda {

namespace {

constexpr int bilinear_block_x = 32;  // origins along x: one warp, consecutive window reads
constexpr int bilinear_block_y = 8;   // origin rows
constexpr int bilinear_threads = bilinear_block_x * bilinear_block_y;
constexpr int bilinear_warps = bilinear_threads / 32;
constexpr int bilinear_packet_vx = 8;  // velocities per packet along vx ...
constexpr int bilinear_packet_vy = 4;  // ... and along vy: 32 (A, B) sums per thread
constexpr int bilinear_packet = bilinear_packet_vx * bilinear_packet_vy;
// Window pixels beyond the packet's floor(s) span: the second corner, and a position that rounds
// up to the next pixel (see the top of the file).
constexpr int corner_margin = 2;
// Shared memory per window pixel: the weighted (psi, phi) pair and four weighted covariances.
constexpr int window_pixel_bytes = int(sizeof(float2) + 4 * sizeof(float));
// The staged phi of an invalid sample; a valid one (weight >= 0 times phi > 0) is never negative.
constexpr float invalid_phi = -1.0f;

struct BilinearTables {
  PacketTables packets;  // runs and window corners, from floor(s) (its shift tables: the floors, unused)
  const double* vx;      // per vx index of the grid
  const double* vy;      // per vy index
  const double* dt;      // per exposure, t_e - t_ref
  const double* curve_x;
  const double* curve_y;
};

template <StorageCode S>
__global__ void __launch_bounds__(bilinear_threads)
    bilinear_tiled_kernel(StackView view, BilinearTables b, int groups, ScanOutputs out) {
  extern __shared__ float2 window[];  // [samples: n float2][right, down, diag, antidiag: n floats each]
  __shared__ LocalDigest scratch[bilinear_warps];
  const PacketTables& t = b.packets;

  const TiledThread<bilinear_block_x, bilinear_block_y> me(out, t, groups);
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
    const int pitch = bilinear_block_x + t.x_span[gx] + corner_margin;
    const int rows = bilinear_block_y + t.y_span[gy] + corner_margin;
    const int n = pitch * rows;
    float2* samples = window;
    float* cov_right = reinterpret_cast<float*>(window + n);
    float* cov_down = cov_right + n;
    float* cov_diag = cov_down + n;
    float* cov_antidiag = cov_diag + n;

    float A[bilinear_packet], B[bilinear_packet];
#pragma unroll
    for (int k = 0; k < bilinear_packet; ++k) A[k] = B[k] = 0.0f;

    for (int e = 0; e < E; ++e) {
      const int wx0 = block_x0 + t.x_min[gx * E + e];
      const int wy0 = block_y0 + t.y_min[gy * E + e];
      const float psi_w = view.psi_weight[e], phi_w = view.phi_weight[e];
      for (int i = tid; i < n; i += bilinear_threads) {
        const int wy = i / pitch, wx = i - wy * pitch;
        const int X = wx0 + wx, Y = wy0 + wy;
        const RawSample r = decode_pixel<S>(view, e, X, Y);
        // Every pixel of the view, valid or not: the antidiagonal pair (x+1, y)-(x, y+1) keeps its
        // covariance at (x, y), which may itself be masked while both samples of the pair are
        // valid. A pair of valid samples lies inside the view, and so does its (x, y).
        const bool inside = static_cast<unsigned>(X - view.rect.x0) < static_cast<unsigned>(view.rect.width) &&
                            static_cast<unsigned>(Y - view.rect.y0) < static_cast<unsigned>(view.rect.height);
        const float4 c = inside ? covariances_at(view, e, X, Y) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        samples[i] = r.valid ? make_float2(__fmul_rn(psi_w, r.psi), __fmul_rn(phi_w, r.phi))
                             : make_float2(0.0f, invalid_phi);
        cov_right[i] = __fmul_rn(phi_w, c.x);
        cov_down[i] = __fmul_rn(phi_w, c.y);
        cov_diag[i] = __fmul_rn(phi_w, c.z);
        cov_antidiag[i] = __fmul_rn(phi_w, c.w);
      }

      // This thread's lower corner and axis weights per packet velocity; bit 2i (2i+1) of a mask
      // says the lower (upper) weight is non-zero in FP64, as the reference tests w != 0.
      const double dt = b.dt[e], cx = b.curve_x[e], cy = b.curve_y[e];
      int col[bilinear_packet_vx], row[bilinear_packet_vy];
      float x_low[bilinear_packet_vx], x_high[bilinear_packet_vx];
      float y_low[bilinear_packet_vy], y_high[bilinear_packet_vy];
      unsigned x_nonzero = 0, y_nonzero = 0;
#pragma unroll
      for (int a = 0; a < bilinear_packet_vx; ++a) {
        col[a] = 0;
        x_low[a] = x_high[a] = 0.0f;
        if (a < na) {
          const BilinearAxis ax = bilinear_axis(x, shift_fp64(b.vx[a0 + a], dt, cx));
          const double low = __dsub_rn(1.0, ax.frac);
          col[a] = ax.base - wx0;
          x_low[a] = __double2float_rn(low);
          x_high[a] = __double2float_rn(ax.frac);
          x_nonzero |= ((low != 0.0 ? 1u : 0u) | (ax.frac != 0.0 ? 2u : 0u)) << (2 * a);
        }
      }
#pragma unroll
      for (int j = 0; j < bilinear_packet_vy; ++j) {
        row[j] = 0;
        y_low[j] = y_high[j] = 0.0f;
        if (j < nb) {
          const BilinearAxis ay = bilinear_axis(y, shift_fp64(b.vy[b0 + j], dt, cy));
          const double low = __dsub_rn(1.0, ay.frac);
          row[j] = ay.base - wy0;
          y_low[j] = __double2float_rn(low);
          y_high[j] = __double2float_rn(ay.frac);
          y_nonzero |= ((low != 0.0 ? 1u : 0u) | (ay.frac != 0.0 ? 2u : 0u)) << (2 * j);
        }
      }
      __syncthreads();

#pragma unroll
      for (int k = 0; k < bilinear_packet; ++k) {
        const int a = k % bilinear_packet_vx, j = k / bilinear_packet_vx;
        if (a < na && j < nb) {
          const int at = row[j] * pitch + col[a];
          const float2 s0 = samples[at], s1 = samples[at + 1];
          const float2 s2 = samples[at + pitch], s3 = samples[at + pitch + 1];
          const unsigned xm = x_nonzero >> (2 * a), ym = y_nonzero >> (2 * j);
          const bool v0 = (xm & ym & 1u) && s0.y >= 0.0f;
          const bool v1 = (xm & 2u) && (ym & 1u) && s1.y >= 0.0f;
          const bool v2 = (xm & 1u) && (ym & 2u) && s2.y >= 0.0f;
          const bool v3 = (xm & ym & 2u) && s3.y >= 0.0f;
          const float w0 = x_low[a] * y_low[j], w1 = x_high[a] * y_low[j];
          const float w2 = x_low[a] * y_high[j], w3 = x_high[a] * y_high[j];
          float sa = 0.0f, sb = 0.0f;
          if (v0) {
            sa += w0 * s0.x;
            sb += w0 * w0 * s0.y;
          }
          if (v1) {
            sa += w1 * s1.x;
            sb += w1 * w1 * s1.y;
          }
          if (v2) {
            sa += w2 * s2.x;
            sb += w2 * w2 * s2.y;
          }
          if (v3) {
            sa += w3 * s3.x;
            sb += w3 * w3 * s3.y;
          }
          // Each neighbouring pair of valid corners once, doubled (indexing as bilinear_trial).
          if (v0 && v1) sb += 2.0f * w0 * w1 * cov_right[at];
          if (v2 && v3) sb += 2.0f * w2 * w3 * cov_right[at + pitch];
          if (v0 && v2) sb += 2.0f * w0 * w2 * cov_down[at];
          if (v1 && v3) sb += 2.0f * w1 * w3 * cov_down[at + 1];
          if (v0 && v3) sb += 2.0f * w0 * w3 * cov_diag[at];
          if (v1 && v2) sb += 2.0f * w1 * w2 * cov_antidiag[at];
          A[k] += sa;
          B[k] += sb;
        }
      }
      __syncthreads();
    }
    if (active) {
#pragma unroll
      for (int k = 0; k < bilinear_packet; ++k) {
        const int a = k % bilinear_packet_vx, j = k / bilinear_packet_vx;
        if (a < na && j < nb)
          finish_trial(out, digest, A[k], B[k], x, y, (b0 + j) * t.vx_count + a0 + a, list, &bound);
      }
    }
  }
  const long long key = block_key(out, group, block_x0, block_y0, bilinear_block_x, bilinear_block_y);
  write_block_digest(out, digest, key, scratch);
}

class BilinearTiledMethod final : public GatherMethod {
 public:
  GatherGeometry prepare(const SearchInput& input) override {
    const MotionBank& bank = *input.bank;
    // Windows start at the packet's smallest floor(s); the kernel's own FP64 positions decide the corners.
    const SeparableShifts floors = floor_shifts(bank);
    // Smaller packets only when neighbouring velocities drift so far apart that the 8x4 window
    // would not fit in shared memory (1x1 always fits: 34 x 10 pixels).
    const int limit = max_shared_memory_per_block();
    const int sizes[][2] = {{8, 4}, {4, 4}, {4, 2}, {2, 2}, {2, 1}, {1, 1}};
    bool found = false;
    for (const auto& size : sizes) {
      packets_.build(bank, floors, size[0], size[1]);
      window_bytes_ = (bilinear_block_x + packets_.x().max_span + corner_margin) *
                      (bilinear_block_y + packets_.y().max_span + corner_margin) * window_pixel_bytes;
      if (window_bytes_ <= limit) {
        found = true;
        break;
      }
    }
    require(found, "cuda-tiled: one velocity's bilinear footprint does not fit in shared memory");
    vx_axis_.upload(bank.vx_axis);
    vy_axis_.upload(bank.vy_axis);
    shift_tables_.upload(bank);  // dt, curves, and per velocity for the obs_count pass
    tables_ = BilinearTables{};
    tables_.packets = packets_.tables();
    tables_.vx = vx_axis_.get();
    tables_.vy = vy_axis_.get();
    tables_.dt = shift_tables_.source().dt;
    tables_.curve_x = shift_tables_.source().curve_x;
    tables_.curve_y = shift_tables_.source().curve_y;

    int per_sm = 0;
    dispatch_storage(storage_of(input.stack->encoding), [&]<StorageCode S>() {
      SHIFTSTACK_CUDA_CHECK(cudaFuncSetAttribute(bilinear_tiled_kernel<S>,
                                                 cudaFuncAttributeMaxDynamicSharedMemorySize, window_bytes_));
      SHIFTSTACK_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, bilinear_tiled_kernel<S>,
                                                                          bilinear_threads, window_bytes_));
    });
    require(per_sm > 0, "cuda-tiled: the bilinear kernel does not fit on a multiprocessor");
    const long long origin_blocks =
        (long long)((input.region.width + bilinear_block_x - 1) / bilinear_block_x) *
        ((input.region.height + bilinear_block_y - 1) / bilinear_block_y);
    groups_ = velocity_groups(packets_.packets(), origin_blocks, multiprocessor_count(), per_sm, 64);
    return GatherGeometry{bilinear_block_x, bilinear_block_y, groups_, groups_};
  }

  void scan(const StackView& view, const ScanOutputs& out, cudaStream_t stream) override {
    require(view.covariances != nullptr, "internal: bilinear gather without covariance planes on the device");
    const dim3 block(bilinear_block_x, bilinear_block_y);
    const dim3 grid((out.tile_width + bilinear_block_x - 1) / bilinear_block_x,
                    (out.tile_height + bilinear_block_y - 1) / bilinear_block_y, groups_);
    dispatch_storage(view.storage, [&]<StorageCode S>() {
      bilinear_tiled_kernel<S><<<grid, block, window_bytes_, stream>>>(view, tables_, groups_, out);
      SHIFTSTACK_CUDA_CHECK_LAUNCH();
    });
  }

  ShiftSource shifts() const override { return shift_tables_.source(); }

 private:
  static StorageCode storage_of(Encoding e) {
    return e == Encoding::fp32 ? StorageCode::fp32 : e == Encoding::fp16 ? StorageCode::fp16 : StorageCode::int8;
  }

  PacketTableSet packets_;  // runs and window corners from floor(s)
  Fp64ShiftTables shift_tables_;
  DeviceArray<double> vx_axis_, vy_axis_;
  BilinearTables tables_{};
  int window_bytes_ = 0, groups_ = 1;
};

}  // namespace

std::string tiled_bilinear_problem(const SearchInput& input) {
  if (input.bank->mode != ShiftMode::fractional) return "the bilinear gather runs fractional shifts only";
  if (!input.bank->is_cartesian())
    return "the tiled bilinear gather stages packets of a Cartesian velocity grid (separable shift "
           "tables); use cuda-serial for velocity lists";
  return {};
}

SearchResult run_tiled_bilinear(const SearchInput& input, GatherWorkspace& workspace) {
  const std::string problem = tiled_bilinear_problem(input);
  require(problem.empty(), problem);
  BilinearTiledMethod method;
  return run_gather(method, input, workspace);
}

}  // namespace shiftstack::cuda
