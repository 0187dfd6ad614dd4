// Internal: storage for large working copies that their filler writes whole.
//
// std::vector zero-fills on resize, on one thread: for a 1 GB copy on 4 KB pages that is about
// 250,000 page faults taken serially, before the parallel fill writes every value again (2.1 s
// of a 3.2 s cold `dense` search of cpu-tree on a 2-core VM). This buffer leaves its contents
// uninitialised, so each page is first touched by the thread that fills it, and asks for
// transparent huge pages (2 MB-aligned, madvise), which the kernel may or may not grant.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <new>
#include <type_traits>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace shiftstack {

template <class T>
class LargeBuffer {
  static_assert(std::is_trivially_copyable_v<T> && std::is_trivially_destructible_v<T>,
                "LargeBuffer holds plain values only");

 public:
  LargeBuffer() = default;
  LargeBuffer(const LargeBuffer&) = delete;
  LargeBuffer& operator=(const LargeBuffer&) = delete;
  LargeBuffer(LargeBuffer&& o) noexcept : data_(o.data_), size_(o.size_), capacity_(o.capacity_) {
    o.data_ = nullptr;
    o.size_ = o.capacity_ = 0;
  }
  LargeBuffer& operator=(LargeBuffer&& o) noexcept {
    if (this != &o) {
      std::free(data_);
      data_ = o.data_, size_ = o.size_, capacity_ = o.capacity_;
      o.data_ = nullptr;
      o.size_ = o.capacity_ = 0;
    }
    return *this;
  }
  ~LargeBuffer() { std::free(data_); }

  // n elements, contents unspecified (earlier contents are not kept when the storage grows).
  void resize_uninitialised(std::size_t n) {
    if (n > capacity_) {
      std::free(data_);
      data_ = nullptr;
      size_ = capacity_ = 0;
      constexpr std::size_t huge = std::size_t(2) << 20;
      const std::size_t bytes = (n * sizeof(T) + huge - 1) / huge * huge;
      void* p = std::aligned_alloc(huge, bytes);
      if (!p) throw std::bad_alloc();
#if defined(__linux__)
      madvise(p, bytes, MADV_HUGEPAGE);  // advice only: ignored where huge pages are off
#endif
      data_ = static_cast<T*>(p);
      capacity_ = bytes / sizeof(T);
    }
    size_ = n;
  }

  T* data() { return data_; }
  const T* data() const { return data_; }
  std::size_t size() const { return size_; }
  T& operator[](std::size_t i) { return data_[i]; }
  const T& operator[](std::size_t i) const { return data_[i]; }

 private:
  T* data_ = nullptr;
  std::size_t size_ = 0, capacity_ = 0;
};

}  // namespace shiftstack
