// Internal controls of cuda-fast for the packet-shape sweep (no CUDA syntax).
#pragma once
#include <string>
#include <vector>

namespace shiftstack::cuda {

struct FastVariantInfo {
  std::string name;         // e.g. "h16-v8r2-w4x4-p40"
  bool half_staging;        // shared memory holds raw half2 codes (fp16/int8 storage only)
  bool tensor_cores;        // sums on the tensor cores (mma.sync, FP32 accumulators), fp16 storage only
  bool skip_equal;          // reuse the previous velocity's samples when its shift is equal
  int vx_per_thread;        // velocities per thread (a run along vx)
  int rows_per_thread;      // origin rows per thread
  int warps_y, warps_v;     // warps along origin rows x warps along vy (packet = vx_per_thread x warps_v)
  int pitch;                // window row length: 32 origins + the largest vx drift allowed
};

const std::vector<FastVariantInfo>& fast_variants();

// Forces a variant by name for the following cuda-fast searches ("" = automatic choice). An
// unknown name or a variant that cannot run the input makes search() throw. The automatic choice
// takes the first variant that can run the input, in the built-in order, or first in the order
// given by the environment variable SHIFTSTACK_FAST_PREFER (comma-separated names).
void set_fast_variant(const std::string& name);

// The variant the last cuda-fast search ran (for the sweep's records).
std::string last_fast_variant();

}  // namespace shiftstack::cuda
