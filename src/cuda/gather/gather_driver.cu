// Host orchestration of the CUDA gathers and their shared post-processing kernels.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cmath>
#include <exception>
#include <limits>
#include <utility>
#include <vector>

#include "cuda/gather/bilinear_sample.cuh"
#include "cuda/common/check.cuh"
#include "cuda/common/device_buffer.cuh"
#include "cuda/common/device_stack.hpp"
#include "cuda/gather/gather_driver.cuh"
#include "shiftstack/error.hpp"

namespace shiftstack::cuda {

namespace {

// Spatial tiles keep the partial-digest grid of every engine aligned with the untiled run:
// tile corners sit at multiples of these from the region corner (the largest block footprint of
// the gathers: 128 origins wide for cuda-serial, 32 rows for cuda-fast).
constexpr int tile_align_x = 128;
constexpr int tile_align_y = 32;
// First capacity of the compact candidate list; it grows to the exact count when exceeded.
constexpr unsigned long long initial_candidate_capacity = 1ull << 20;
constexpr int threads_per_block_1d = 256;

__global__ void fill_lists_kernel(TopKEntry* lists, long long n) {
  const long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x;
  if (i < n) lists[i] = TopKEntry{-INFINITY, INT_MAX, 0.0f, 0.0f};
}

// Each (list, origin) sorted best first in place: the scan keeps its lists unsorted (topk_offer).
// One thread per list, insertion sort over k <= 64 entries; consecutive threads take consecutive
// origins, so every slot's reads and writes coalesce.
__global__ void sort_lists_kernel(TopKEntry* lists, int lists_per_origin, int k, long long origins) {
  const long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x;
  if (i >= origins * lists_per_origin) return;
  const long long list = i / origins, o = i - list * origins;
  TopKEntry* slot0 = lists + list * k * origins + o;
  for (int j = 1; j < k; ++j) {
    const TopKEntry e = slot0[j * origins];
    int at = j;
    while (at > 0) {
      const TopKEntry before = slot0[(at - 1) * origins];
      if (!better_entry(e.Z, e.velocity, before.Z, before.velocity)) break;
      slot0[at * origins] = before;
      --at;
    }
    slot0[at * origins] = e;
  }
}

// Per origin, one warp: merge its sorted partial lists ([list][slot][origin], see ScanOutputs)
// into the best k, best first (origin-major). Lane l holds the current head of lists l and l + 32;
// each round the warp picks the best head (velocities are unique, so there are no ties) and its
// lane advances. Every list entry is read at most once.
constexpr int kMergeWarps = 8;
__global__ void merge_lists_kernel(const TopKEntry* lists, int lists_per_origin, int k, long long origins,
                                   TopKEntry* merged) {
  const long long o = blockIdx.x * static_cast<long long>(kMergeWarps) + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (o >= origins) return;  // whole warps
  const TopKEntry empty{-INFINITY, INT_MAX, 0.0f, 0.0f};
  auto entry = [&](int list, int slot) {
    if (list >= lists_per_origin || slot >= k) return empty;
    return lists[(static_cast<long long>(list) * k + slot) * origins + o];
  };
  int head0 = 0, head1 = 0;
  TopKEntry first = entry(lane, 0), second = entry(lane + 32, 0);  // at most 64 lists (checked on the host)
  for (int r = 0; r < k; ++r) {
    const bool from_second = better_entry(second.Z, second.velocity, first.Z, first.velocity);
    const TopKEntry mine = from_second ? second : first;
    float best_z = mine.Z;
    int best_v = mine.velocity, best_lane = lane;
    for (int offset = 16; offset > 0; offset >>= 1) {
      const float z = __shfl_xor_sync(0xffffffffu, best_z, offset);
      const int v = __shfl_xor_sync(0xffffffffu, best_v, offset);
      const int l = __shfl_xor_sync(0xffffffffu, best_lane, offset);
      if (better_entry(z, v, best_z, best_v)) best_z = z, best_v = v, best_lane = l;
    }
    if (best_v == INT_MAX) {  // every list exhausted (warp-uniform)
      if (lane == 0) merged[o * k + r] = empty;
    } else if (lane == best_lane) {
      merged[o * k + r] = mine;
      if (from_second) second = entry(lane + 32, ++head1);
      else first = entry(lane, ++head0);
    }
  }
}

// Exposures with a valid sample along a trajectory (a candidate's obs_count); in fractional mode,
// exposures with a valid corner of non-zero weight, as the reference counts them.
template <StorageCode S>
__device__ int count_observations(const StackView& view, const ShiftSource& shifts, int x, int y,
                                  int v) {
  int n = 0;
  if (shifts.bilinear) {
    for (int e = 0; e < view.exposures; ++e) {
      const double dt = shifts.dt[e];
      const BilinearCorners c = bilinear_corners(x, y, shift_fp64(shifts.vx[v], dt, shifts.curve_x[e]),
                                                 shift_fp64(shifts.vy[v], dt, shifts.curve_y[e]));
      n += bilinear_observed<S>(view, e, c) ? 1 : 0;
    }
    return n;
  }
  for (int e = 0; e < view.exposures; ++e) {
    const int2 s = shift_of(shifts, v, e);
    n += decode_pixel<S>(view, e, x + s.x, y + s.y).valid ? 1 : 0;
  }
  return n;
}

template <StorageCode S>
__global__ void topk_observations_kernel(StackView view, ShiftSource shifts, const TopKEntry* merged,
                                         int k, long long entries, int tile_x0, int tile_y0,
                                         int tile_width, int* obs) {
  const long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x;
  if (i >= entries) return;
  const TopKEntry e = merged[i];
  if (e.velocity == INT_MAX) {
    obs[i] = 0;
    return;
  }
  const long long origin = i / k;
  const int x = tile_x0 + int(origin % tile_width), y = tile_y0 + int(origin / tile_width);
  obs[i] = count_observations<S>(view, shifts, x, y, e.velocity);
}

template <StorageCode S>
__global__ void candidate_observations_kernel(StackView view, ShiftSource shifts,
                                              const CandidateRecord* records,
                                              unsigned long long first, unsigned long long end,
                                              int* obs) {
  const unsigned long long i = first + blockIdx.x * static_cast<unsigned long long>(blockDim.x) + threadIdx.x;
  if (i >= end) return;
  const CandidateRecord c = records[i];
  obs[i] = count_observations<S>(view, shifts, c.x, c.y, c.velocity);
}

unsigned blocks_for(long long n) { return unsigned((n + threads_per_block_1d - 1) / threads_per_block_1d); }

struct Tile {
  PixelRect origins;  // full-image coordinates
  PixelRect data;     // what the tile's trajectories can reach, clipped to the image
};

PixelRect reach(const PixelRect& origins, const ShiftExtent& halo, int width, int height) {
  const int x0 = std::max(0, origins.x0 + halo.min_x);
  const int y0 = std::max(0, origins.y0 + halo.min_y);
  const int x1 = std::min(width, origins.x0 + origins.width + halo.max_x);
  const int y1 = std::min(height, origins.y0 + origins.height + halo.max_y);
  // Trajectories that leave the image everywhere still need a non-empty rectangle to address.
  if (x1 <= x0 || y1 <= y0) return {std::clamp(origins.x0, 0, width - 1), std::clamp(origins.y0, 0, height - 1), 1, 1};
  return {x0, y0, x1 - x0, y1 - y0};
}

// with_covariances: fractional shifts also keep the tile's covariance planes on the device.
std::vector<Tile> plan_tiles(const EncodedStack& stack, const Region& region, const ShiftExtent& halo,
                             double copies, bool with_covariances) {
  std::size_t budget = memory_budget();
  if (budget == 0) budget = std::size_t(0.8 * double(available_for_cube()));
  auto fits = [&](int tw, int th) {
    // An interior tile, unclipped by the image edges, is the largest of this size.
    const PixelRect probe{0, 0, std::min(stack.width, tw + halo.max_x - halo.min_x),
                          std::min(stack.height, th + halo.max_y - halo.min_y)};
    return double(cube_bytes(stack, probe, with_covariances)) * copies <= double(budget);
  };
  int tw = region.width, th = region.height;
  while (!fits(tw, th)) {
    if (th > tile_align_y) {
      th = std::max(tile_align_y, (th / 2) / tile_align_y * tile_align_y);
    } else if (tw > tile_align_x) {
      tw = std::max(tile_align_x, (tw / 2) / tile_align_x * tile_align_x);
    } else {
      throw Error("the device memory budget (" + std::to_string(budget) +
                  " bytes) cannot hold even one " + std::to_string(tile_align_x) + "x" +
                  std::to_string(tile_align_y) + " tile with its halo of " +
                  std::to_string(stack.exposures) + " exposures");
    }
  }
  std::vector<Tile> tiles;
  for (int y = 0; y < region.height; y += th)
    for (int x = 0; x < region.width; x += tw) {
      PixelRect o{region.x0 + x, region.y0 + y, std::min(tw, region.width - x), std::min(th, region.height - y)};
      tiles.push_back({o, reach(o, halo, stack.width, stack.height)});
    }
  return tiles;
}

template <typename F>
void with_storage(StorageCode s, F&& f) {
  dispatch_storage(s, std::forward<F>(f));
}

}  // namespace

int max_shared_memory_per_block() {
  int device = 0, bytes = 0;
  SHIFTSTACK_CUDA_CHECK(cudaGetDevice(&device));
  SHIFTSTACK_CUDA_CHECK(cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  return bytes;
}

int multiprocessor_count() {
  int device = 0, count = 0;
  SHIFTSTACK_CUDA_CHECK(cudaGetDevice(&device));
  SHIFTSTACK_CUDA_CHECK(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device));
  return count;
}

namespace {

// Spin-wait hint for a thread polling a flag another thread sets within a millisecond.
inline void pause_briefly() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Waits for the tile's top-k lists, downloads them and writes one Candidate per entry into
// `top_k`. The host's threads are woken when the scan kernel ends (the lists then need the
// merge and obs_count passes and the copy, under a millisecond), and they poll until the lists
// are on the host: threads woken only when the lists arrive came up late on a busy host, and the
// assembly then took 3.5-4 ms instead of 0.5 (kbmod top-8 on the H200's host). Entries are
// independent; a row's are consecutive in the lists and in the result, so none needs a division.
// Returns when the stream had finished and when the lists were on the host.
struct TopKArrival {
  std::chrono::steady_clock::time_point scanned, downloaded;
};
TopKArrival download_and_assemble_top_k(cudaStream_t stream, cudaEvent_t scan_kernel_done,
                                        GatherWorkspace& workspace, const DeviceArray<TopKEntry>& merged,
                                        const DeviceArray<int>& topk_obs, const PixelRect& origins,
                                        const Region& region, int k,
                                        const std::vector<std::pair<float, float>>& velocity_floats,
                                        std::vector<Candidate>& top_k) {
  using Clock = std::chrono::steady_clock;
  const std::size_t entries = std::size_t(origins.count()) * k;
  const std::size_t row_entries = std::size_t(origins.width) * k;
  const TopKEntry* best = workspace.host_merged.get();
  const int* obs = workspace.host_topk_obs.get();
  SHIFTSTACK_CUDA_CHECK(cudaEventSynchronize(scan_kernel_done));
  enum : int { waiting, arrived, failed };
  std::atomic<int> lists{waiting};
  std::exception_ptr failure;
  TopKArrival arrival;
#pragma omp parallel if (entries > 65536)
  {
#pragma omp master
    {
      try {
        SHIFTSTACK_CUDA_CHECK(cudaStreamSynchronize(stream));
        arrival.scanned = Clock::now();
        SHIFTSTACK_CUDA_CHECK(cudaMemcpy(workspace.host_merged.get(), merged.get(), entries * sizeof(TopKEntry),
                                         cudaMemcpyDeviceToHost));
        SHIFTSTACK_CUDA_CHECK(cudaMemcpy(workspace.host_topk_obs.get(), topk_obs.get(), entries * sizeof(int),
                                         cudaMemcpyDeviceToHost));
        arrival.downloaded = Clock::now();
        lists.store(arrived, std::memory_order_release);
      } catch (...) {
        failure = std::current_exception();
        lists.store(failed, std::memory_order_release);
      }
    }
    while (lists.load(std::memory_order_acquire) == waiting) pause_briefly();
    // Every thread sees the same final state, so all or none reach the loop.
    if (lists.load(std::memory_order_relaxed) == arrived) {
#pragma omp for schedule(static)
      for (int row = 0; row < origins.height; ++row) {
        const int y = origins.y0 + row;
        const TopKEntry* e = best + std::size_t(row) * row_entries;
        const int* e_obs = obs + std::size_t(row) * row_entries;
        Candidate* c = top_k.data() + (std::size_t(y - region.y0) * region.width + (origins.x0 - region.x0)) * k;
        for (int column = 0; column < origins.width; ++column) {
          const int x = origins.x0 + column;
          for (int slot = 0; slot < k; ++slot, ++e, ++e_obs, ++c) {
            if (e->velocity == INT_MAX) {
              *c = Candidate{x, y, -1, 0, 0, 0, 0, -std::numeric_limits<float>::infinity(), 0, 0};
              continue;
            }
            const std::pair<float, float>& v = velocity_floats[std::size_t(e->velocity)];
            *c = Candidate{x, y, e->velocity, v.first, v.second, e->A, e->B, e->Z,
                           float(double(e->A) / double(e->B)), *e_obs};
          }
        }
      }
    }
  }
  if (failure) std::rethrow_exception(failure);
  return arrival;
}

}  // namespace

SearchResult run_gather(GatherMethod& method, const SearchInput& input, GatherWorkspace& workspace) {
  const EncodedStack& stack = *input.stack;
  const MotionBank& bank = *input.bank;
  const Region region = input.region;
  const OutputPolicy& policy = input.policy;
  const int k = policy.top_k;
  require(k >= 0, "top_k must be >= 0");
  // Host wall clock of the search's parts (SearchResult::stages_ms), so that the host's share of
  // a top-k search shows beside the device time.
  using Clock = std::chrono::steady_clock;
  const Clock::time_point entered = Clock::now();
  auto ms_since = [](Clock::time_point from) {
    return std::chrono::duration<double, std::milli>(Clock::now() - from).count();
  };
  double choose_ms = 0, prepare_ms = 0, scan_wall_ms = 0, download_ms = 0, assemble_ms = 0;

  const GatherGeometry geometry = method.prepare(input);
  choose_ms = ms_since(entered);
  require(geometry.lists_per_origin <= 64, "internal: too many top-k lists per origin");
  require(tile_align_x % geometry.block_width == 0 && tile_align_y % geometry.block_height == 0,
          "internal: gather block does not divide the tile alignment");
  // Fractional banks: shift_extent() reaches the +1 corners, and the covariances come along.
  const bool bilinear = bank.mode == ShiftMode::fractional;
  const std::vector<Tile> tiles = plan_tiles(stack, region, shift_extent(bank), method.stack_copies(), bilinear);
  if (tiles.size() > 1) note_tiled_search(std::int64_t(tiles.size()));

  ScanOutputs out{};
  out.z_thr = digest_threshold(input);
  out.region_x0 = region.x0;
  out.region_y0 = region.y0;
  out.blocks_x = (region.width + geometry.block_width - 1) / geometry.block_width;
  out.blocks_y = (region.height + geometry.block_height - 1) / geometry.block_height;
  const std::size_t partial_count = std::size_t(geometry.groups) * out.blocks_x * out.blocks_y;
  DeviceArray<PartialDigest>& partials = workspace.partials;
  partials.resize(partial_count);
  out.partials = partials.get();

  out.collect = policy.collect_candidates;
  out.candidate_threshold = policy.candidate_threshold;
  DeviceArray<unsigned long long>& candidate_count = workspace.candidate_count;
  candidate_count.resize(1);
  out.candidate_count = candidate_count.get();
  unsigned long long capacity = std::min<unsigned long long>(
      initial_candidate_capacity, static_cast<unsigned long long>(policy.max_candidates));
  DeviceArray<CandidateRecord>& candidates = workspace.candidates;
  DeviceArray<int>& candidate_obs = workspace.candidate_obs;

  std::size_t largest_tile = 0;
  for (const Tile& t : tiles) largest_tile = std::max<std::size_t>(largest_tile, t.origins.count());
  out.top_k = k;
  out.lists_per_origin = geometry.lists_per_origin;
  DeviceArray<TopKEntry>& lists = workspace.lists;
  DeviceArray<TopKEntry>& merged = workspace.merged;
  DeviceArray<int>& topk_obs = workspace.topk_obs;
  // The bank's velocities as the result stores them, looked up by index when the lists are
  // assembled.
  std::vector<std::pair<float, float>> velocity_floats;
  if (k > 0) {
    velocity_floats.resize(bank.size());
    for (std::size_t v = 0; v < bank.size(); ++v) {
      const Velocity vel = bank.velocity(v);
      velocity_floats[v] = {float(vel.vx), float(vel.vy)};
    }
    lists.resize(largest_tile * geometry.lists_per_origin * std::size_t(k));
    merged.resize(largest_tile * std::size_t(k));
    topk_obs.resize(largest_tile * std::size_t(k));
    workspace.host_merged.reserve(largest_tile * std::size_t(k));
    workspace.host_topk_obs.reserve(largest_tile * std::size_t(k));
  }
  out.lists = lists.get();

  const ShiftSource shifts = method.shifts();
  require(shifts.bilinear == bilinear, "internal: the gather's obs_count shifts do not match the bank's shift mode");
  cudaStream_t stream = 0;
  // Device time of a tile: start -> scanned (the scan and the top-k passes) plus resumed -> stop
  // (obs_count of the new candidates, launched once the host has read their count), so that the
  // host's work in between is not counted.
  cudaEvent_t start, scanned, resumed, stop, scan_kernel_done;
  SHIFTSTACK_CUDA_CHECK(cudaEventCreateWithFlags(&scan_kernel_done, cudaEventDisableTiming));
  SHIFTSTACK_CUDA_CHECK(cudaEventCreate(&start));
  SHIFTSTACK_CUDA_CHECK(cudaEventCreate(&scanned));
  SHIFTSTACK_CUDA_CHECK(cudaEventCreate(&resumed));
  SHIFTSTACK_CUDA_CHECK(cudaEventCreate(&stop));
  struct EventGuard {
    cudaEvent_t events[5];
    ~EventGuard() {
      for (cudaEvent_t e : events) cudaEventDestroy(e);
    }
  } event_guard{{start, scanned, resumed, stop, scan_kernel_done}};
  workspace.host_candidate_count.reserve(1);
  unsigned long long* host_count = workspace.host_candidate_count.get();

  SearchResult result;
  std::vector<CandidateRecord> host_candidates;
  std::vector<int> host_candidate_obs;
  double seconds = 0;

  prepare_ms = ms_since(entered) - choose_ms;
  for (;;) {  // reruns only when the candidate list outgrew its buffer
    scan_wall_ms = download_ms = assemble_ms = 0;
    candidates.resize(capacity);
    candidate_obs.resize(capacity);
    out.candidates = candidates.get();
    out.candidate_capacity = capacity;
    SHIFTSTACK_CUDA_CHECK(cudaMemset(candidate_count.get(), 0, sizeof(unsigned long long)));
    unsigned long long found = 0;
    seconds = 0;
    for (const Tile& tile : tiles) {
      if (policy.stop_requested()) throw Cancelled("CUDA gather: search stopped on request");
      const StackView view = acquire_stack(stack, tile.data, bilinear);
      out.tile_x0 = tile.origins.x0;
      out.tile_y0 = tile.origins.y0;
      out.tile_width = tile.origins.width;
      out.tile_height = tile.origins.height;
      const long long tile_origins = tile.origins.count();
      const Clock::time_point launched = Clock::now();
      SHIFTSTACK_CUDA_CHECK(cudaEventRecord(start, stream));
      if (k > 0) {
        const long long n = tile_origins * geometry.lists_per_origin * k;
        fill_lists_kernel<<<blocks_for(n), threads_per_block_1d, 0, stream>>>(lists.get(), n);
        SHIFTSTACK_CUDA_CHECK_LAUNCH();
      }
      method.scan(view, out, stream);
      SHIFTSTACK_CUDA_CHECK(cudaEventRecord(scan_kernel_done, stream));
      if (k > 0) {
        if (!geometry.lists_sorted) {
          sort_lists_kernel<<<blocks_for(tile_origins * geometry.lists_per_origin), threads_per_block_1d, 0, stream>>>(
              lists.get(), geometry.lists_per_origin, k, tile_origins);
          SHIFTSTACK_CUDA_CHECK_LAUNCH();
        }
        merge_lists_kernel<<<unsigned((tile_origins + kMergeWarps - 1) / kMergeWarps), 32 * kMergeWarps, 0, stream>>>(
            lists.get(), geometry.lists_per_origin, k, tile_origins, merged.get());
        SHIFTSTACK_CUDA_CHECK_LAUNCH();
        const long long entries = tile_origins * k;
        with_storage(view.storage, [&]<StorageCode S>() {
          topk_observations_kernel<S><<<blocks_for(entries), threads_per_block_1d, 0, stream>>>(
              view, shifts, merged.get(), k, entries, tile.origins.x0, tile.origins.y0,
              tile.origins.width, topk_obs.get());
          SHIFTSTACK_CUDA_CHECK_LAUNCH();
        });
      }
      SHIFTSTACK_CUDA_CHECK(cudaEventRecord(scanned, stream));
      // Into page-locked memory: a copy into pageable memory would hold the host until the scan
      // is done.
      SHIFTSTACK_CUDA_CHECK(cudaMemcpyAsync(host_count, candidate_count.get(), sizeof *host_count,
                                            cudaMemcpyDeviceToHost, stream));
      // The host's top-k list (tens of MB for a CCD at k = 8) is allocated and first touched
      // while the device scans, not after.
      if (k > 0 && result.top_k.empty()) result.top_k.resize(std::size_t(region.count()) * k);
      if (k > 0) {
        const TopKArrival arrival = download_and_assemble_top_k(stream, scan_kernel_done, workspace, merged, topk_obs,
                                                                tile.origins, region, k, velocity_floats, result.top_k);
        auto ms_between = [](Clock::time_point a, Clock::time_point b) {
          return std::chrono::duration<double, std::milli>(b - a).count();
        };
        scan_wall_ms += ms_between(launched, arrival.scanned);
        download_ms += ms_between(arrival.scanned, arrival.downloaded);
        assemble_ms += ms_since(arrival.downloaded);
      } else {
        SHIFTSTACK_CUDA_CHECK(cudaStreamSynchronize(stream));
        scan_wall_ms += ms_since(launched);
      }
      const unsigned long long now = *host_count;
      SHIFTSTACK_CUDA_CHECK(cudaEventRecord(resumed, stream));
      if (now > found && now <= capacity) {
        with_storage(view.storage, [&]<StorageCode S>() {
          candidate_observations_kernel<S><<<blocks_for((long long)(now - found)), threads_per_block_1d, 0, stream>>>(
              view, shifts, candidates.get(), found, now, candidate_obs.get());
          SHIFTSTACK_CUDA_CHECK_LAUNCH();
        });
      }
      found = now;
      SHIFTSTACK_CUDA_CHECK(cudaEventRecord(stop, stream));
      SHIFTSTACK_CUDA_CHECK(cudaEventSynchronize(stop));
      float scan_ms = 0, rest_ms = 0;
      SHIFTSTACK_CUDA_CHECK(cudaEventElapsedTime(&scan_ms, start, scanned));
      SHIFTSTACK_CUDA_CHECK(cudaEventElapsedTime(&rest_ms, resumed, stop));
      seconds += 1e-3 * (scan_ms + rest_ms);
    }
    if (found <= capacity) {
      host_candidates = candidates.download(found);
      host_candidate_obs = candidate_obs.download(found);
      break;
    }
    require(found <= static_cast<unsigned long long>(policy.max_candidates),
            "candidate list of " + std::to_string(found) + " trials exceeds max_candidates (" +
                std::to_string(policy.max_candidates) + "): raise the candidate threshold or the limit");
    capacity = found;  // the exact size: the rerun fills it without overflow
  }

  // Digest: partials merged in key order, the same order whatever the tiling.
  const std::vector<PartialDigest> host_partials = partials.download(partial_count);
  Digest digest;
  digest.z_thr = out.z_thr;
  for (const PartialDigest& p : host_partials) {
    Digest d;
    d.sumA = p.sumA;
    d.sumB = p.sumB;
    d.count = p.count;
    d.scored = p.scored;
    if (p.velocity >= 0) {
      d.maxZ = p.maxZ;
      d.argmax_x = p.x;
      d.argmax_y = p.y;
      d.argmax_velocity = p.velocity;
    }
    digest.merge(d);
  }
  result.digest = digest;

  result.candidates.reserve(host_candidates.size());
  for (std::size_t i = 0; i < host_candidates.size(); ++i) {
    const CandidateRecord& r = host_candidates[i];
    const Velocity vel = bank.velocity(std::size_t(r.velocity));
    result.candidates.push_back(Candidate{r.x, r.y, r.velocity, float(vel.vx), float(vel.vy), r.A, r.B,
                                          r.Z, float(double(r.A) / double(r.B)), host_candidate_obs[i]});
  }
  std::sort(result.candidates.begin(), result.candidates.end(), [](const Candidate& a, const Candidate& b) {
    if (a.velocity != b.velocity) return a.velocity < b.velocity;
    if (a.y != b.y) return a.y < b.y;
    return a.x < b.x;
  });
  result.seconds = seconds;
  result.stages_ms = {{"choose", choose_ms},
                      {"prepare", prepare_ms},
                      {"device", 1e3 * seconds},
                      {"scan_wall", scan_wall_ms},
                      {"topk_download", download_ms},
                      {"topk_assemble", assemble_ms},
                      {"total", ms_since(entered)}};
  return result;
}

void register_gather_engine(EngineInfo info) {
  info.reads_device_cube = true;
  register_engine(std::move(info));
}

}  // namespace shiftstack::cuda
