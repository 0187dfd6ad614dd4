// The host side shared by the CUDA gathers: spatial tiles within the memory budget, output
// buffers, the top-k merge, obs_count for the reported trials, candidate overflow handling (grow
// and rerun, or Error beyond max_candidates) and the assembly of the SearchResult.
#pragma once
#include <cuda_runtime.h>

#include <cmath>
#include <string>

#include "cuda/common/device_buffer.cuh"
#include "cuda/common/device_stack.cuh"
#include "cuda/gather/gather_outputs.cuh"
#include "shiftstack/search.hpp"

namespace shiftstack::cuda {

// Integer shifts of trajectory (velocity v, exposure e), either from separable tables
// (x[a * E + e], y[b * E + e], v = b * vx_count + a) or, for the FP64 serial engine, computed
// in double exactly as the CPU does: round(v * (t_e - t_ref) + c_e). Fractional banks always
// take the FP64 form with `bilinear` set: the obs_count pass then samples the four corners.
struct ShiftSource {
  int exposures = 0;
  const int* table_x = nullptr;
  const int* table_y = nullptr;
  int vx_count = 0;
  const double* dt = nullptr;      // per exposure, t_e - t_ref
  const double* curve_x = nullptr; // per exposure
  const double* curve_y = nullptr;
  const double* vx = nullptr;      // per velocity
  const double* vy = nullptr;
  bool bilinear = false;           // fractional mode (bilinear_sample.cuh)
};

// The FP64 form of ShiftSource on the device: t_e - t_ref and the curve per exposure, vx and vy
// per velocity (any bank: grids and lists).
class Fp64ShiftTables {
 public:
  void upload(const MotionBank& bank) {
    const int E = bank.exposures();
    std::vector<double> dt(E), cx(E), cy(E), vx(bank.size()), vy(bank.size());
    for (int e = 0; e < E; ++e) {
      dt[e] = bank.dt(e);
      cx[e] = bank.curve_at_x(e);
      cy[e] = bank.curve_at_y(e);
    }
    for (std::size_t v = 0; v < bank.size(); ++v) {
      const Velocity vel = bank.velocity(v);
      vx[v] = vel.vx;
      vy[v] = vel.vy;
    }
    dt_.upload(dt);
    cx_.upload(cx);
    cy_.upload(cy);
    vx_.upload(vx);
    vy_.upload(vy);
    source_ = ShiftSource{};
    source_.exposures = E;
    source_.dt = dt_.get();
    source_.curve_x = cx_.get();
    source_.curve_y = cy_.get();
    source_.vx = vx_.get();
    source_.vy = vy_.get();
    source_.bilinear = bank.mode == ShiftMode::fractional;
  }
  const ShiftSource& source() const { return source_; }

 private:
  DeviceArray<double> dt_, cx_, cy_, vx_, vy_;
  ShiftSource source_;
};

// floor(vel * dt + curve + 0.5) without fused multiply-add, so the rounding matches the host.
__device__ inline int round_shift_fp64(double velocity, double dt, double curve) {
  const double s = __dadd_rn(__dmul_rn(velocity, dt), curve);
  return int(floor(__dadd_rn(s, 0.5)));
}

__device__ inline int2 shift_of(const ShiftSource& s, int v, int e) {
  if (s.table_x) {
    const int a = v % s.vx_count, b = v / s.vx_count;
    return make_int2(s.table_x[a * s.exposures + e], s.table_y[b * s.exposures + e]);
  }
  return make_int2(round_shift_fp64(s.vx[v], s.dt[e], s.curve_x[e]),
                   round_shift_fp64(s.vy[v], s.dt[e], s.curve_y[e]));
}

// How an engine cuts the work: origins per block (the partial-digest granule), velocity groups
// (independent blocks over the same origins) and top-k lists per origin.
struct GatherGeometry {
  int block_width = 32, block_height = 8;
  int groups = 1;
  int lists_per_origin = 1;
  bool lists_sorted = false;  // the scan leaves its top-k lists sorted best first (no sort pass)
};

class GatherMethod {
 public:
  virtual ~GatherMethod() = default;
  // Once per search, before any tile: upload bank tables, choose the geometry.
  virtual GatherGeometry prepare(const SearchInput& input) = 0;
  // Launches the scan of the tile described by `out` (all trials of its origins, every group).
  virtual void scan(const StackView& view, const ScanOutputs& out, cudaStream_t stream) = 0;
  // Shifts for the obs_count pass (device pointers owned by the method).
  virtual ShiftSource shifts() const = 0;
  // Device copies of a tile the method holds during its scans (tiles are sized for all of them).
  virtual double stack_copies() const { return 1.0; }
};

// What a gather engine keeps from one search to the next (grown, never shrunk): the output
// buffers, above all the top-k lists (origins x lists x k entries), which cost a large device
// allocation and free per search, and page-locked copies of the merged lists for the download.
struct GatherWorkspace {
  DeviceArray<PartialDigest> partials;
  DeviceArray<unsigned long long> candidate_count;
  DeviceArray<CandidateRecord> candidates;
  DeviceArray<int> candidate_obs;
  DeviceArray<TopKEntry> lists, merged;
  DeviceArray<int> topk_obs;
  PinnedArray<TopKEntry> host_merged;
  PinnedArray<int> host_topk_obs;
  PinnedArray<unsigned long long> host_candidate_count;  // so that its download does not block the host
};

// Runs a whole search with the method; result.seconds is device time of the scans (kernels,
// top-k merge and obs_count passes; uploads excluded).
SearchResult run_gather(GatherMethod& method, const SearchInput& input, GatherWorkspace& workspace);

// Registers an engine that searches through run_gather: it takes its cube from acquire_stack(),
// so it reads a stack encoded on the device where it lies (EngineInfo::reads_device_cube).
void register_gather_engine(EngineInfo info);

// Maximum dynamic shared memory per block on the current device (bytes).
int max_shared_memory_per_block();
int multiprocessor_count();

}  // namespace shiftstack::cuda
