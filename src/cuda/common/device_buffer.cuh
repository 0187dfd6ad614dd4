// A typed device allocation that grows on demand, never shrinks (searches repeat on one engine)
// and frees itself, and a page-locked host allocation for fast downloads; used by every engine.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
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

  // Sets the size to n, reallocating only to grow (contents then undefined); returns true when it
  // reallocated.
  bool resize(std::size_t n) {
    if (n <= capacity_) {
      size_ = n;
      return false;
    }
    release();
    SHIFTSTACK_CUDA_CHECK(cudaMalloc(&data_, std::max<std::size_t>(n, 1) * sizeof(T)));
    size_ = capacity_ = n;
    return true;
  }
  // Synchronous copies.
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
  // Copies ordered on a stream; download waits for it.
  void upload(const T* host, std::size_t n, cudaStream_t stream) {
    resize(n);
    if (n) SHIFTSTACK_CUDA_CHECK(cudaMemcpyAsync(data_, host, n * sizeof(T), cudaMemcpyHostToDevice, stream));
  }
  void upload(const std::vector<T>& host, cudaStream_t stream) { upload(host.data(), host.size(), stream); }
  std::vector<T> download(cudaStream_t stream) const {
    std::vector<T> host(size_);
    if (size_) {
      SHIFTSTACK_CUDA_CHECK(cudaMemcpyAsync(host.data(), data_, size_ * sizeof(T), cudaMemcpyDeviceToHost, stream));
      SHIFTSTACK_CUDA_CHECK(cudaStreamSynchronize(stream));
    }
    return host;
  }
  void release() {
    if (data_) cudaFree(data_);  // unchecked: may run during unwinding
    data_ = nullptr;
    size_ = capacity_ = 0;
  }
  T* get() const { return data_; }  // a handle's pointer, as unique_ptr::get (kernels take T*)
  std::size_t size() const { return size_; }
  std::size_t bytes() const { return size_ * sizeof(T); }

 private:
  T* data_ = nullptr;
  std::size_t size_ = 0, capacity_ = 0;
};

// A page-locked host allocation (fast, direct downloads) that grows on demand.
template <typename T>
class PinnedArray {
 public:
  PinnedArray() = default;
  PinnedArray(const PinnedArray&) = delete;
  PinnedArray& operator=(const PinnedArray&) = delete;
  ~PinnedArray() {
    if (data_) cudaFreeHost(data_);  // unchecked: may run during unwinding
  }
  void reserve(std::size_t n) {
    if (n <= capacity_) return;
    if (data_) SHIFTSTACK_CUDA_CHECK(cudaFreeHost(data_));
    data_ = nullptr;
    capacity_ = 0;
    SHIFTSTACK_CUDA_CHECK(cudaMallocHost(&data_, n * sizeof(T)));
    capacity_ = n;
  }
  T* get() const { return data_; }

 private:
  T* data_ = nullptr;
  std::size_t capacity_ = 0;
};

}  // namespace shiftstack::cuda
