// cuda-serial: the auditable KBMOD-style gather. 128x2 thread blocks, one origin per thread,
// serial loops over velocities and exposures, trajectory coordinates in FP64 (rounded exactly as
// the CPU rounds them), FP32 sums, every encoding decoded per sample from device memory.
// Fractional shifts: the reference's bilinear trial per exposure (bilinear_sample.cuh: the same
// FP64 corners and weights, the covariance-exact B in double), its result added to the FP32 sums.
#include <memory>
#include <vector>

#include "cuda/gather/bilinear_sample.cuh"
#include "cuda/common/check.cuh"
#include "cuda/common/device_buffer.cuh"
#include "cuda/gather/gather_driver.cuh"
#include "cuda/gather/gather_engines.hpp"
#include "core/engine_registry.hpp"

namespace shiftstack {

namespace cuda {
namespace {

// KBMOD's block shape: 128 neighbouring origins along x (coalesced reads) by 2 rows.
constexpr int serial_block_x = 128;
constexpr int serial_block_y = 2;
constexpr int serial_warps = serial_block_x * serial_block_y / 32;

template <StorageCode S, bool Bilinear>
__global__ void __launch_bounds__(serial_block_x* serial_block_y)
    serial_gather_kernel(StackView view, ShiftSource shifts, int velocities, ScanOutputs out) {
  __shared__ LocalDigest scratch[serial_warps];
  const int block_x0 = out.tile_x0 + blockIdx.x * serial_block_x;
  const int block_y0 = out.tile_y0 + blockIdx.y * serial_block_y;
  const int x = block_x0 + threadIdx.x, y = block_y0 + threadIdx.y;
  const bool active = x < out.tile_x0 + out.tile_width && y < out.tile_y0 + out.tile_height;
  LocalDigest digest;
  if (active) {
    TopKEntry* list = out.top_k > 0 ? topk_list(out, x, y, 0) : nullptr;
    TopKBound bound;
    for (int v = 0; v < velocities; ++v) {
      const double vx = shifts.vx[v], vy = shifts.vy[v];
      float A = 0.0f, B = 0.0f;
      for (int e = 0; e < view.exposures; ++e) {
        const double dt = shifts.dt[e];
        if constexpr (Bilinear) {
          const BilinearCorners c = bilinear_corners(x, y, shift_fp64(vx, dt, shifts.curve_x[e]),
                                                     shift_fp64(vy, dt, shifts.curve_y[e]));
          const BilinearSums sums = bilinear_exposure<S>(view, e, c);
          A += __double2float_rn(sums.A);
          B += __double2float_rn(sums.B);
        } else {
          const int px = x + round_shift_fp64(vx, dt, shifts.curve_x[e]);
          const int py = y + round_shift_fp64(vy, dt, shifts.curve_y[e]);
          const RawSample r = decode_pixel<S>(view, e, px, py);
          if (r.valid) {
            // Weighted sample rounded to float first, as shiftstack::decode() hands it over.
            A += __fmul_rn(view.psi_weight[e], r.psi);
            B += __fmul_rn(view.phi_weight[e], r.phi);
          }
        }
      }
      finish_trial<true>(out, digest, A, B, x, y, v, list, &bound);
    }
  }
  const long long key = block_key(out, 0, block_x0, block_y0, serial_block_x, serial_block_y);
  write_block_digest(out, digest, key, scratch);
}

class SerialMethod final : public GatherMethod {
 public:
  GatherGeometry prepare(const SearchInput& input) override {
    velocities_ = int(input.bank->size());
    tables_.upload(*input.bank);
    return GatherGeometry{serial_block_x, serial_block_y, 1, 1};
  }

  void scan(const StackView& view, const ScanOutputs& out, cudaStream_t stream) override {
    const dim3 block(serial_block_x, serial_block_y);
    const dim3 grid((out.tile_width + serial_block_x - 1) / serial_block_x,
                    (out.tile_height + serial_block_y - 1) / serial_block_y);
    dispatch_storage(view.storage, [&]<StorageCode S>() {
      if (tables_.source().bilinear)
        serial_gather_kernel<S, true><<<grid, block, 0, stream>>>(view, tables_.source(), velocities_, out);
      else
        serial_gather_kernel<S, false><<<grid, block, 0, stream>>>(view, tables_.source(), velocities_, out);
      SHIFTSTACK_CUDA_CHECK_LAUNCH();
    });
  }

  ShiftSource shifts() const override { return tables_.source(); }

 private:
  int velocities_ = 0;
  Fp64ShiftTables tables_;
};

class SerialEngine final : public Engine {
 public:
  std::string name() const override { return "cuda-serial"; }
  std::string unsupported_reason(const SearchInput&) const override { return {}; }
  SearchResult search(const SearchInput& input) override {
    SerialMethod method;
    return run_gather(method, input, workspace_);
  }

 private:
  GatherWorkspace workspace_;
};

}  // namespace
}  // namespace cuda

void register_cuda_serial_engine() {
  EngineInfo info{"cuda-serial",
                  "GPU, KBMOD-style: 128x2 blocks, one origin per thread, FP64 coordinates, FP32 sums; "
                  "integer and fractional (bilinear) shifts",
                  true, 20, [] { return std::make_unique<cuda::SerialEngine>(); },
                  cuda_device_available};
  cuda::register_gather_engine(std::move(info));
}

}  // namespace shiftstack
