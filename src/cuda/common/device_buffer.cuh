// A typed device allocation that frees itself, and a copy helper; used by the gather engines for
// their per-search tables and outputs.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <vector>

#include "cuda/common/check.cuh"

namespace shiftstack::cuda {

template <typename T>
class DeviceArray {
 public:
  DeviceArray() = default;
  explicit DeviceArray(std::size_t n) { resize(n); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  DeviceArray(DeviceArray&& o) noexcept : data_(o.data_), size_(o.size_) {
    o.data_ = nullptr;
    o.size_ = 0;
  }
  ~DeviceArray() { release(); }

  // Reallocates only to grow; contents are not kept.
  void resize(std::size_t n) {
    if (n <= capacity_) {
      size_ = n;
      return;
    }
    release();
    SHIFTSTACK_CUDA_CHECK(cudaMalloc(&data_, n * sizeof(T)));
    size_ = capacity_ = n;
  }
  void upload(const std::vector<T>& host) {
    resize(host.size());
    if (!host.empty())
      SHIFTSTACK_CUDA_CHECK(
          cudaMemcpy(data_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  std::vector<T> download(std::size_t n) const {
    std::vector<T> host(n);
    if (n > 0)
      SHIFTSTACK_CUDA_CHECK(cudaMemcpy(host.data(), data_, n * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }
  void release() {
    if (data_) cudaFree(data_);  // unchecked: may run during unwinding
    data_ = nullptr;
    size_ = capacity_ = 0;
  }
  T* get() const { return data_; }
  std::size_t size() const { return size_; }

 private:
  T* data_ = nullptr;
  std::size_t size_ = 0, capacity_ = 0;
};

}  // namespace shiftstack::cuda
