// The encoded cube on the device: a view the kernels read through, exact decoding of every
// encoding (the GPU twin of shiftstack::decode), and the cache that uploads it once.
#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "shiftstack/encoding.hpp"

namespace shiftstack::cuda {

enum class StorageCode : int { fp32 = 0, fp16 = 1, int8 = 2 };

// A rectangle of image pixels, in full-image coordinates.
struct PixelRect {
  int x0 = 0, y0 = 0, width = 0, height = 0;
  bool operator==(const PixelRect&) const = default;
  std::int64_t count() const { return std::int64_t(width) * height; }
};

// An int8 value beyond the code range, keyed for binary search: (exposure << 32) | full-image pixel.
struct DeviceException {
  unsigned long long key;
  float psi;
  float pad;
};

// What the kernels see: the pixels of `rect` for every exposure, pairs interleaved, exposure-major,
// rows padded to `pitch` pairs (a multiple of 8: every row starts 16-byte aligned):
// pair index = (e * rect.height + (y - rect.y0)) * pitch + (x - rect.x0).
// Samples outside `rect` contribute nothing; the driver makes rect cover the image part every
// trajectory reaches. fp32 and fp16 pairs that decode as invalid (phi <= 0 or NaN) are stored
// as (0, 0), so a weighted sum over raw pairs equals the sum over valid samples.
struct StackView {
  StorageCode storage = StorageCode::fp32;
  int image_width = 0, image_height = 0, exposures = 0;
  PixelRect rect;
  int pitch = 0;  // pairs per stored row
  const void* pairs = nullptr;
  const float* psi_weight = nullptr;  // per exposure (SPEC 5: scale folded into the weight)
  const float* phi_weight = nullptr;
  const DeviceException* exceptions = nullptr;  // int8 only, sorted by key
  int exception_count = 0;
  // Fractional shifts only (null otherwise): per pixel its unweighted covariances with the
  // neighbours (x+1, y), (x, y+1), (x+1, y+1) and of the pair (x+1, y)-(x, y+1), as float4
  // (right, down, diag, antidiag), at the same index and pitch as the pairs.
  const float4* covariances = nullptr;
};

// One decoded, unweighted sample; valid = false contributes to neither sum.
struct RawSample {
  float psi, phi;
  bool valid;
};

__device__ inline float find_exception(const StackView& s, int e, int x, int y) {
  const unsigned long long key =
      (static_cast<unsigned long long>(e) << 32) |
      static_cast<unsigned long long>(static_cast<unsigned>(y * s.image_width + x));
  int lo = 0, hi = s.exception_count;  // first entry with entry.key >= key
  while (lo < hi) {
    const int mid = (lo + hi) >> 1;
    if (s.exceptions[mid].key < key) lo = mid + 1;
    else hi = mid;
  }
  // The encoder writes an entry for every exception code; a missing one would be a corrupt
  // stack, which the host checks at upload (every 127 code has its entry).
  return lo < s.exception_count ? s.exceptions[lo].psi : 0.0f;
}

// Exactly shiftstack::decode() before the weights: the same validity rules per encoding.
template <StorageCode S>
__device__ inline RawSample decode_pair_at(const StackView& s, int e, int x, int y, std::size_t index) {
  RawSample r{0.0f, 0.0f, false};
  if constexpr (S == StorageCode::fp32) {
    const float2 v = static_cast<const float2*>(s.pairs)[index];
    r.psi = v.x;
    r.phi = v.y;
  } else if constexpr (S == StorageCode::fp16) {
    const __half2 v = static_cast<const __half2*>(s.pairs)[index];
    r.psi = __low2float(v);
    r.phi = __high2float(v);
  } else {
    const char2 v = static_cast<const char2*>(s.pairs)[index];
    if (v.x == int8_codes::psi_invalid) return r;
    r.phi = float(static_cast<unsigned char>(v.y));
    r.psi = v.x == int8_codes::psi_exception ? find_exception(s, e, x, y) : float(v.x);
  }
  r.valid = r.phi > 0.0f;  // also false for NaN, like the CPU decode
  return r;
}

// Sample at full-image pixel (x, y) of exposure e; outside the rectangle: invalid.
template <StorageCode S>
__device__ inline RawSample decode_pixel(const StackView& s, int e, int x, int y) {
  const int lx = x - s.rect.x0, ly = y - s.rect.y0;
  if (static_cast<unsigned>(lx) >= static_cast<unsigned>(s.rect.width) ||
      static_cast<unsigned>(ly) >= static_cast<unsigned>(s.rect.height))
    return RawSample{0.0f, 0.0f, false};
  const std::size_t index =
      (std::size_t(e) * s.rect.height + ly) * std::size_t(s.pitch) + std::size_t(lx);
  return decode_pair_at<S>(s, e, x, y, index);
}

// Calls f.template operator()<S>() with the view's storage as a compile-time constant.
template <typename F>
decltype(auto) dispatch_storage(StorageCode storage, F&& f) {
  switch (storage) {
    case StorageCode::fp32: return f.template operator()<StorageCode::fp32>();
    case StorageCode::fp16: return f.template operator()<StorageCode::fp16>();
    case StorageCode::int8: break;
  }
  return f.template operator()<StorageCode::int8>();
}

// Returns a view of `rect` of this stack on the device, uploading it only when the cache holds a
// different stack or rectangle. The view stays valid until the next acquire_stack() call.
// with_covariances (fractional shifts) also brings the rectangle's covariance planes, cached the
// same way; a stack without all four planes is an Error then.
StackView acquire_stack(const EncodedStack& stack, const PixelRect& rect, bool with_covariances = false);

// Pairs per stored row for a rectangle of this width.
inline int padded_pitch(int width) { return (width + 7) / 8 * 8; }

// Bytes the rectangle takes on the device (payload only; with_covariances adds the four fp32
// covariance planes that fractional shifts read).
std::size_t cube_bytes(const EncodedStack& stack, const PixelRect& rect, bool with_covariances = false);

// Free device memory now (for the automatic budget), counting what the cache holds as free.
std::size_t available_for_cube();

void note_tiled_search(std::int64_t tiles);

// ---- cubes encoded on the device (likelihood_gpu.cu) ------------------------------------------
// A stack encoded on the GPU has no host payload: its whole-image cube (rows padded to
// padded_pitch(width), the layout above) lives in a second cache slot, and acquire_stack()
// serves it directly for the whole image, or copies the requested rectangle out of it on the
// device. prepare_device_cube() allocates that slot for `shell` (id, encoding, sizes; payload
// empty), zero-filled, and returns the view to fill; commit_device_cube() then uploads the
// shell's weights and int8 exceptions and makes it visible to searches.
StackView prepare_device_cube(const EncodedStack& shell);
void commit_device_cube(const EncodedStack& shell);

}  // namespace shiftstack::cuda
