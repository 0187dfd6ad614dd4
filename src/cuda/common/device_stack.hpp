// Host-side controls of the CUDA engines' device data (no CUDA syntax: tests and tools include
// it). The encoded cube is uploaded once and reused by every CUDA gather engine across scans and
// banks; a cube that does not fit the memory budget is searched in spatial tiles with a halo.
#pragma once
#include <cstddef>
#include <cstdint>

namespace shiftstack::cuda {

// Bytes of device memory the cached cube may take. 0 (the default) = automatic: 80% of the
// memory the device reports free (plus what the cache already holds). The environment variable
// SHIFTSTACK_CUDA_MEMORY_BUDGET (bytes) sets it at first use.
void set_memory_budget(std::size_t bytes);
std::size_t memory_budget();

struct UploadStats {
  std::int64_t uploads = 0;        // host -> device copies of a cube (or of one tile of it)
  std::int64_t bytes = 0;          // bytes those copies moved
  std::int64_t reuses = 0;         // scans (or tiles) served from the cached copy
  std::int64_t tiled_searches = 0; // searches that needed more than one spatial tile
  std::int64_t tiles = 0;          // tiles processed in those searches
};
UploadStats upload_stats();

// Frees the cached cube (the next search uploads again).
void release_device_cache();

// CUDA devices visible to this process (0 when none, or no driver).
int device_count();

// Binds the calling thread to `device` for searches that share the card with `sharing` - 1 other
// threads (a device listed several times in a multi-device search): until the scope ends the
// thread has a cube cache of its own, and its automatic memory budget is 1/sharing of the card's
// free memory (an explicit budget is divided the same way). What the thread uploaded is freed,
// and the thread's previous device made current again, when the scope ends. One scope per
// thread at a time; the shared cache serves threads outside one.
class DeviceWorkerScope {
 public:
  DeviceWorkerScope(int device, int sharing);
  ~DeviceWorkerScope();
  DeviceWorkerScope(const DeviceWorkerScope&) = delete;
  DeviceWorkerScope& operator=(const DeviceWorkerScope&) = delete;

 private:
  void* state_ = nullptr;
  int previous_device_ = 0;
};

// Threads sharing the calling thread's device (1 outside a DeviceWorkerScope): engines that size
// their buffers from the free memory divide it by this.
int device_sharing();

}  // namespace shiftstack::cuda
