// Velocity packets for the shared-memory gathers (cuda-tiled, cuda-fast): the Cartesian grid is
// cut into runs of neighbouring vx values times runs of neighbouring vy values. For each run and
// exposure the smallest integer shift fixes where the packet's source window starts, and the
// largest spread over exposures fixes the window size.
#pragma once
#include <algorithm>
#include <climits>
#include <cstdint>
#include <vector>

#include "cuda/common/device_buffer.cuh"
#include "cuda/gather/gather_driver.cuh"
#include "shiftstack/motion.hpp"

namespace shiftstack::cuda {

// One axis cut into groups of neighbouring values (balanced: sizes differ by at most one).
struct AxisRuns {
  int groups = 0;
  std::vector<int> start, count;
  std::vector<int> min_shift;  // [group * E + e]
  std::vector<int> span;       // per group: max over e of (max - min shift)
  int max_span = 0;
  int max_count = 0;
};

inline AxisRuns cut_axis(const std::vector<std::int32_t>& table, int values, int exposures, int run) {
  AxisRuns r;
  r.groups = (values + run - 1) / run;
  const int base = values / r.groups, extra = values % r.groups;
  int next = 0;
  for (int g = 0; g < r.groups; ++g) {
    const int n = base + (g < extra ? 1 : 0);
    r.start.push_back(next);
    r.count.push_back(n);
    r.max_count = std::max(r.max_count, n);
    int span = 0;
    for (int e = 0; e < exposures; ++e) {
      int lo = INT_MAX, hi = INT_MIN;
      for (int a = next; a < next + n; ++a) {
        lo = std::min(lo, table[std::size_t(a) * exposures + e]);
        hi = std::max(hi, table[std::size_t(a) * exposures + e]);
      }
      r.min_shift.push_back(lo);
      span = std::max(span, hi - lo);
    }
    r.span.push_back(span);
    r.max_span = std::max(r.max_span, span);
    next += n;
  }
  return r;
}

// Device copy of the tables a packet kernel reads.
struct PacketTables {
  int exposures;
  int vx_count;                 // velocity v = b * vx_count + a
  const int* shift_x;           // [a * E + e]
  const int* shift_y;           // [b * E + e]
  int x_groups, y_groups;       // packets = x_groups * y_groups, vx runs fastest
  const int* x_start;
  const int* x_count;
  const int* x_min;             // [group * E + e]
  const int* x_span;
  const int* y_start;
  const int* y_count;
  const int* y_min;
  const int* y_span;
};

// Owns the device tables for one search.
class PacketTableSet {
 public:
  void build(const MotionBank& bank, int vx_run, int vy_run) { build(bank, integer_shifts(bank), vx_run, vy_run); }
  // The same from given per-axis shifts (the bilinear gather places its windows by floor(s)).
  void build(const MotionBank& bank, const SeparableShifts& s, int vx_run, int vy_run) {
    const int E = bank.exposures();
    x_ = cut_axis(s.x, int(bank.vx_count()), E, vx_run);
    y_ = cut_axis(s.y, int(bank.vy_count()), E, vy_run);
    shift_x_.upload(s.x);
    shift_y_.upload(s.y);
    x_start_.upload(x_.start);
    x_count_.upload(x_.count);
    x_min_.upload(x_.min_shift);
    x_span_.upload(x_.span);
    y_start_.upload(y_.start);
    y_count_.upload(y_.count);
    y_min_.upload(y_.min_shift);
    y_span_.upload(y_.span);
    t_ = PacketTables{E,
                      int(bank.vx_count()),
                      shift_x_.get(),
                      shift_y_.get(),
                      x_.groups,
                      y_.groups,
                      x_start_.get(),
                      x_count_.get(),
                      x_min_.get(),
                      x_span_.get(),
                      y_start_.get(),
                      y_count_.get(),
                      y_min_.get(),
                      y_span_.get()};
  }
  const PacketTables& tables() const { return t_; }
  // The separable shift tables, for the obs_count pass of the gather driver.
  ShiftSource shift_source() const {
    ShiftSource s;
    s.exposures = t_.exposures;
    s.table_x = t_.shift_x;
    s.table_y = t_.shift_y;
    s.vx_count = t_.vx_count;
    return s;
  }
  const AxisRuns& x() const { return x_; }
  const AxisRuns& y() const { return y_; }
  int packets() const { return x_.groups * y_.groups; }

 private:
  AxisRuns x_, y_;
  DeviceArray<int> shift_x_, shift_y_, x_start_, x_count_, x_min_, x_span_, y_start_, y_count_,
      y_min_, y_span_;
  PacketTables t_{};
};

// The largest spread of integer shifts between two neighbouring velocities on an axis, over all
// exposures: how far apart the trajectories of one packet drift.
inline int neighbour_spread(const std::vector<std::int32_t>& table, int values, int exposures) {
  int spread = 0;
  for (int a = 1; a < values; ++a)
    for (int e = 0; e < exposures; ++e)
      spread = std::max(spread, std::abs(table[std::size_t(a) * exposures + e] -
                                         table[std::size_t(a - 1) * exposures + e]));
  return spread;
}

// Velocity group `group` of `groups` runs packets [first, last): consecutive, balanced.
__device__ inline void packet_range(const PacketTables& t, int group, int groups, int& first, int& last) {
  const int packets = t.x_groups * t.y_groups;
  first = int((long long)packets * group / groups);
  last = int((long long)packets * (group + 1) / groups);
}

// Where a thread of a packet kernel sits: a block owns 32 origin columns (a lane each) and
// NWY x RY origin rows, its warps are laid out NWY along rows by the rest along vy, and velocity
// group blockIdx.z runs packets [first, last).
template <int NWY, int RY>
struct PacketThread {
  int tid, lane, warp_id, warp_y, warp_v, group;
  int block_x0, block_y0, x, y0;  // the block's first origin; this thread's column and first row
  int first, last;
  __device__ PacketThread(const ScanOutputs& out, const PacketTables& t, int groups) {
    tid = threadIdx.x;
    lane = tid & 31;
    warp_id = tid >> 5;
    warp_y = warp_id % NWY;
    warp_v = warp_id / NWY;
    group = blockIdx.z;
    block_x0 = out.tile_x0 + blockIdx.x * 32;
    block_y0 = out.tile_y0 + blockIdx.y * (NWY * RY);
    x = block_x0 + lane;
    y0 = block_y0 + warp_y * RY;
    packet_range(t, group, groups, first, last);
  }
};

// Where a thread of a kernel with one origin per thread (cuda-tiled's) sits: its block of
// BX x BY origins, its origin and whether that lies in the tile, and velocity group blockIdx.z's
// packets [first, last).
template <int BX, int BY>
struct TiledThread {
  int group, block_x0, block_y0, tid, x, y, exposures, first, last;
  bool active;
  __device__ TiledThread(const ScanOutputs& out, const PacketTables& t, int groups) {
    group = blockIdx.z;
    block_x0 = out.tile_x0 + blockIdx.x * BX;
    block_y0 = out.tile_y0 + blockIdx.y * BY;
    tid = threadIdx.y * BX + threadIdx.x;
    x = block_x0 + threadIdx.x;
    y = block_y0 + threadIdx.y;
    active = x < out.tile_x0 + out.tile_width && y < out.tile_y0 + out.tile_height;
    exposures = t.exposures;
    packet_range(t, group, groups, first, last);
  }
};

// The packet kernels' exposure pipeline, double-buffered with one barrier per chunk: chunk ch + 1
// is read (load) while chunk ch is summed from buffer ch & 1 (sum), then written into the other
// buffer (store), which the previous chunk's sum stopped reading at the last barrier.
template <typename Load, typename Sum, typename Store>
__device__ inline void stream_chunks(int chunks, Load&& load, Sum&& sum, Store&& store) {
  load(0);
  store(0, 0);
  __syncthreads();
  for (int ch = 0; ch < chunks; ++ch) {
    const int buf = ch & 1;
    if (ch + 1 < chunks) load(ch + 1);
    sum(ch, buf);
    if (ch + 1 < chunks) store(ch + 1, buf ^ 1);
    __syncthreads();
  }
}

// Splits `packets` into groups of consecutive packets, each run by its own blocks, so that a
// small image still fills the card; at most max_groups (each group adds top-k lists to merge).
inline int velocity_groups(int packets, long long origin_blocks, int multiprocessors, int blocks_per_sm,
                           int max_groups) {
  const long long wanted = 2LL * multiprocessors * blocks_per_sm;  // two waves keep the tail short
  long long groups = (wanted + origin_blocks - 1) / origin_blocks;
  groups = std::max(1LL, std::min<long long>({groups, packets, max_groups}));
  return int(groups);
}

}  // namespace shiftstack::cuda
