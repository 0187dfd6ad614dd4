// The cached upload of the encoded cube: one stack (or one tile of it) lives on the device at a
// time and every CUDA gather engine reads it; a later search of the same stack and rectangle,
// with any bank, reuses it.
#include <algorithm>
#include <cstring>
#include <cstdlib>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "cuda/common/check.cuh"
#include "cuda/common/device_stack.cuh"
#include "cuda/common/device_stack.hpp"
#include "shiftstack/error.hpp"

namespace shiftstack::cuda {

namespace {

// Owns one device allocation.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { reset(); }
  void* allocate(std::size_t bytes) {
    reset();
    if (bytes > 0) SHIFTSTACK_CUDA_CHECK(cudaMalloc(&data_, bytes));
    bytes_ = bytes;
    return data_;
  }
  void reset() {
    if (data_) cudaFree(data_);  // no check: also runs during unwinding and at exit
    data_ = nullptr;
    bytes_ = 0;
  }
  void* get() const { return data_; }
  std::size_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

struct CachedCube {
  std::uint64_t stack_id = 0;
  PixelRect rect;
  DeviceBuffer pairs, psi_weight, phi_weight, exceptions;
  StackView view;
  bool valid = false;
  std::size_t bytes() const {
    return pairs.bytes() + psi_weight.bytes() + phi_weight.bytes() + exceptions.bytes();
  }
};

// The covariance planes of one rectangle of one stack (fractional shifts only), kept beside the
// cube so that integer searches never allocate or upload them.
struct CachedCovariances {
  std::uint64_t stack_id = 0;
  PixelRect rect;
  DeviceBuffer data;  // float4 (right, down, diag, antidiag) per pixel, the cube's layout
  bool valid = false;
  void reset() {
    data.reset();
    valid = false;
  }
};

struct State {
  std::mutex lock;
  CachedCube cube;
  CachedCube built;  // whole-image cube encoded on the device (no host payload behind it)
  CachedCovariances covariances;
  UploadStats stats;
  std::size_t budget = 0;
  bool budget_read = false;
  int sharing = 1;  // threads planning with this card's free memory at once
};

State& shared_state() {
  static State* s = new State;  // never destroyed: device frees at exit are the driver's job
  return *s;
}

// A DeviceWorkerScope's own state, else the process-wide one.
thread_local State* worker_state = nullptr;

State& state() { return worker_state ? *worker_state : shared_state(); }

std::size_t budget_from_environment() {
  const char* text = std::getenv("SHIFTSTACK_CUDA_MEMORY_BUDGET");
  if (!text || !*text) return 0;
  char* end = nullptr;
  const unsigned long long value = std::strtoull(text, &end, 10);
  require(end && *end == '\0' && value > 0,
          std::string("SHIFTSTACK_CUDA_MEMORY_BUDGET must be a positive number of bytes, got '") +
              text + "'");
  return std::size_t(value);
}

// Every int8 exception code must have its exact value, and every listed value its code: the CPU
// decode throws on a missing entry, so the GPU refuses such a stack instead of reading zero.
void check_exceptions(const EncodedStack& s) {
  const std::size_t plane = s.plane_size();
  std::size_t codes = 0;
  for (std::size_t i = 0; i < s.int8.size(); i += 2)
    if (s.int8[i] == int8_codes::psi_exception) ++codes;
  require(codes == s.exceptions.size(),
          "int8 stack has " + std::to_string(codes) + " exception codes but " +
              std::to_string(s.exceptions.size()) + " exception entries");
  for (std::size_t i = 0; i < s.exceptions.size(); ++i) {
    const EncodingException& x = s.exceptions[i];
    require(int(x.exposure) < s.exposures && x.pixel < plane &&
                s.int8[2 * (std::size_t(x.exposure) * plane + x.pixel)] == int8_codes::psi_exception,
            "int8 exception entry " + std::to_string(i) + " does not match an exception code");
    if (i > 0) {
      const EncodingException& p = s.exceptions[i - 1];
      require(p.exposure < x.exposure || (p.exposure == x.exposure && p.pixel < x.pixel),
              "int8 exception entries are not sorted by (exposure, pixel)");
    }
  }
}

const void* payload(const EncodedStack& s) {
  switch (s.encoding) {
    case Encoding::fp32: return s.fp32.data();
    case Encoding::fp16: return s.fp16.data();
    case Encoding::int8: return s.int8.data();
  }
  return nullptr;
}

std::size_t payload_elements(const EncodedStack& s) {
  switch (s.encoding) {
    case Encoding::fp32: return s.fp32.size();
    case Encoding::fp16: return s.fp16.size();
    case Encoding::int8: return s.int8.size();
  }
  return 0;
}

// fp32/fp16 pairs whose phi is not > 0 contribute nothing; they are stored as (0, 0), so even a
// kernel that summed raw pairs without a validity test would add nothing for them. int8 keeps its
// codes (the invalid code is exact).
void clean_invalid_pairs(Encoding encoding, char* pairs, std::size_t count) {
  if (encoding == Encoding::fp32) {
    float* p = reinterpret_cast<float*>(pairs);
    for (std::size_t i = 0; i < count; ++i)
      if (!(p[2 * i + 1] > 0.0f)) p[2 * i] = p[2 * i + 1] = 0.0f;
  } else if (encoding == Encoding::fp16) {
    std::uint16_t* p = reinterpret_cast<std::uint16_t*>(pairs);
    for (std::size_t i = 0; i < count; ++i)
      if (!(half_to_float(p[2 * i + 1]) > 0.0f)) p[2 * i] = p[2 * i + 1] = 0;
  }
}

StorageCode storage_code(Encoding e) {
  switch (e) {
    case Encoding::fp32: return StorageCode::fp32;
    case Encoding::fp16: return StorageCode::fp16;
    case Encoding::int8: return StorageCode::int8;
  }
  return StorageCode::fp32;
}

}  // namespace

void set_memory_budget(std::size_t bytes) {
  State& s = state();
  std::lock_guard guard(s.lock);
  s.budget = bytes;
  s.budget_read = true;
}

std::size_t memory_budget() {
  State& s = state();
  std::lock_guard guard(s.lock);
  if (!s.budget_read) {
    s.budget = budget_from_environment();
    s.budget_read = true;
  }
  return s.budget;
}

UploadStats upload_stats() {
  State& s = state();
  std::lock_guard guard(s.lock);
  return s.stats;
}

void release_device_cache() {
  State& s = state();
  std::lock_guard guard(s.lock);
  s.cube.pairs.reset();
  s.cube.psi_weight.reset();
  s.cube.phi_weight.reset();
  s.cube.exceptions.reset();
  s.cube.valid = false;
  s.covariances.reset();
}

void note_tiled_search(std::int64_t tiles) {
  State& s = state();
  std::lock_guard guard(s.lock);
  ++s.stats.tiled_searches;
  s.stats.tiles += tiles;
}

std::size_t cube_bytes(const EncodedStack& stack, const PixelRect& rect, bool with_covariances) {
  const std::size_t per_pixel = stack.bytes_per_pair() + (with_covariances ? sizeof(float4) : 0);
  return std::size_t(padded_pitch(rect.width)) * rect.height * std::size_t(stack.exposures) * per_pixel;
}

std::size_t available_for_cube() {
  std::size_t free_bytes = 0, total = 0;
  SHIFTSTACK_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
  State& s = state();
  std::lock_guard guard(s.lock);
  return free_bytes / std::size_t(s.sharing) + s.cube.bytes() + s.covariances.data.bytes();
}

int device_count() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess ? count : 0;
}

DeviceWorkerScope::DeviceWorkerScope(int device, int sharing) {
  require(worker_state == nullptr, "internal: nested DeviceWorkerScope");
  require(sharing >= 1, "internal: DeviceWorkerScope sharing must be >= 1");
  const int count = device_count();
  require(device >= 0 && device < count, "CUDA device " + std::to_string(device) + " does not exist (" +
                                             std::to_string(count) + " visible)");
  SHIFTSTACK_CUDA_CHECK(cudaGetDevice(&previous_device_));
  SHIFTSTACK_CUDA_CHECK(cudaSetDevice(device));
  const std::size_t explicit_budget = memory_budget();  // the process-wide setting
  State* s = new State;
  s->sharing = sharing;
  s->budget = explicit_budget / std::size_t(sharing);
  s->budget_read = true;
  state_ = s;
  worker_state = s;
}

DeviceWorkerScope::~DeviceWorkerScope() {
  worker_state = nullptr;
  State* s = static_cast<State*>(state_);
  cudaDeviceSynchronize();  // no check: may run during unwinding; kernels must finish before frees
  delete s;                 // its buffers free themselves on the thread's device
  cudaSetDevice(previous_device_);
}

int device_sharing() { return state().sharing; }

namespace {

PixelRect whole_image(const EncodedStack& stack) { return {0, 0, stack.width, stack.height}; }

void fill_view(CachedCube& c, const EncodedStack& stack, const PixelRect& rect, int exception_count) {
  c.view.storage = storage_code(stack.encoding);
  c.view.image_width = stack.width;
  c.view.image_height = stack.height;
  c.view.exposures = stack.exposures;
  c.view.rect = rect;
  c.view.pitch = padded_pitch(rect.width);
  c.view.pairs = c.pairs.get();
  c.view.psi_weight = static_cast<const float*>(c.psi_weight.get());
  c.view.phi_weight = static_cast<const float*>(c.phi_weight.get());
  c.view.exceptions = static_cast<const DeviceException*>(c.exceptions.get());
  c.view.exception_count = exception_count;
}

void reset_cube(CachedCube& c) {
  c.pairs.reset();
  c.psi_weight.reset();
  c.phi_weight.reset();
  c.exceptions.reset();
  c.valid = false;
}

// A stack encoded on the device: the whole image is the built cube itself; any other rectangle
// is cut out of it into the ordinary cache slot, device to device.
StackView acquire_device_built(const EncodedStack& stack, const PixelRect& rect) {
  State& s = state();
  std::lock_guard guard(s.lock);
  CachedCube& b = s.built;
  require(b.valid && b.stack_id == stack.id,
          "encoded stack payload has 0 values, expected " +
              std::to_string(2 * stack.plane_size() * std::size_t(stack.exposures)) +
              ", and no cube encoded on the device for it (released already?)");
  if (rect == b.rect) {
    ++s.stats.reuses;
    return b.view;
  }
  CachedCube& c = s.cube;
  if (c.valid && c.stack_id == stack.id && c.rect == rect) {
    ++s.stats.reuses;
    return c.view;
  }
  reset_cube(c);
  const std::size_t pair_bytes = stack.bytes_per_pair();
  const std::size_t bytes = cube_bytes(stack, rect);
  char* pairs = static_cast<char*>(c.pairs.allocate(bytes));
  SHIFTSTACK_CUDA_CHECK(cudaMemset(pairs, 0, bytes));
  const std::size_t source_pitch = std::size_t(b.view.pitch) * pair_bytes;
  const std::size_t device_pitch = std::size_t(padded_pitch(rect.width)) * pair_bytes;
  const char* source = static_cast<const char*>(b.pairs.get());
  for (int e = 0; e < stack.exposures; ++e)
    SHIFTSTACK_CUDA_CHECK(cudaMemcpy2D(
        pairs + std::size_t(e) * rect.height * device_pitch, device_pitch,
        source + (std::size_t(e) * stack.height + rect.y0) * source_pitch + std::size_t(rect.x0) * pair_bytes,
        source_pitch, std::size_t(rect.width) * pair_bytes, rect.height, cudaMemcpyDeviceToDevice));
  const std::size_t weight_bytes = sizeof(float) * stack.exposures;
  SHIFTSTACK_CUDA_CHECK(cudaMemcpy(c.psi_weight.allocate(weight_bytes), b.psi_weight.get(), weight_bytes,
                                   cudaMemcpyDeviceToDevice));
  SHIFTSTACK_CUDA_CHECK(cudaMemcpy(c.phi_weight.allocate(weight_bytes), b.phi_weight.get(), weight_bytes,
                                   cudaMemcpyDeviceToDevice));
  // Exception keys hold full-image pixels, so the whole list serves any rectangle.
  if (b.exceptions.bytes() > 0)
    SHIFTSTACK_CUDA_CHECK(cudaMemcpy(c.exceptions.allocate(b.exceptions.bytes()), b.exceptions.get(),
                                     b.exceptions.bytes(), cudaMemcpyDeviceToDevice));
  c.stack_id = stack.id;
  c.rect = rect;
  fill_view(c, stack, rect, b.view.exception_count);
  c.valid = true;
  return c.view;
}

}  // namespace

StackView prepare_device_cube(const EncodedStack& shell) {
  require(shell.exposures > 0 && shell.width > 0 && shell.height > 0, "device encoding: empty stack");
  require(payload_elements(shell) == 0, "device encoding: the stack already has a host payload");
  State& s = state();
  std::lock_guard guard(s.lock);
  // Free first so that the new cube can take the old one's memory.
  reset_cube(s.built);
  const PixelRect rect = whole_image(shell);
  const std::size_t bytes = cube_bytes(shell, rect);
  SHIFTSTACK_CUDA_CHECK(cudaMemset(s.built.pairs.allocate(bytes), 0, bytes));  // row padding
  s.built.stack_id = shell.id;
  s.built.rect = rect;
  fill_view(s.built, shell, rect, 0);
  return s.built.view;
}

void commit_device_cube(const EncodedStack& shell) {
  require(int(shell.psi_weight.size()) == shell.exposures && int(shell.phi_weight.size()) == shell.exposures,
          "device encoding: weights do not match the exposure count");
  State& s = state();
  std::lock_guard guard(s.lock);
  CachedCube& b = s.built;
  require(b.stack_id == shell.id && b.pairs.get(), "device encoding: no cube prepared for this stack");
  const std::size_t weight_bytes = sizeof(float) * shell.exposures;
  SHIFTSTACK_CUDA_CHECK(cudaMemcpy(b.psi_weight.allocate(weight_bytes), shell.psi_weight.data(), weight_bytes,
                                   cudaMemcpyHostToDevice));
  SHIFTSTACK_CUDA_CHECK(cudaMemcpy(b.phi_weight.allocate(weight_bytes), shell.phi_weight.data(), weight_bytes,
                                   cudaMemcpyHostToDevice));
  std::vector<DeviceException> exceptions;
  exceptions.reserve(shell.exceptions.size());
  for (const EncodingException& x : shell.exceptions)
    exceptions.push_back({(static_cast<unsigned long long>(x.exposure) << 32) | x.pixel, x.psi, 0.0f});
  b.exceptions.reset();
  if (!exceptions.empty())
    SHIFTSTACK_CUDA_CHECK(cudaMemcpy(b.exceptions.allocate(exceptions.size() * sizeof(DeviceException)),
                                     exceptions.data(), exceptions.size() * sizeof(DeviceException),
                                     cudaMemcpyHostToDevice));
  fill_view(b, shell, b.rect, int(exceptions.size()));
  b.valid = true;
}

void download_device_cube(EncodedStack& shell) {
  State& s = state();
  std::lock_guard guard(s.lock);
  CachedCube& b = s.built;
  require(b.valid && b.stack_id == shell.id, "download: this stack has no cube encoded on the device");
  const std::size_t pair_bytes = shell.bytes_per_pair();
  const std::size_t elements = 2 * shell.plane_size() * std::size_t(shell.exposures);
  void* host = nullptr;
  switch (shell.encoding) {
    case Encoding::fp32: shell.fp32.resize(elements); host = shell.fp32.data(); break;
    case Encoding::fp16: shell.fp16.resize(elements); host = shell.fp16.data(); break;
    case Encoding::int8: shell.int8.resize(elements); host = shell.int8.data(); break;
  }
  // Rows of all exposures follow each other at the padded pitch: one strided copy drops the padding.
  const std::size_t row_bytes = std::size_t(shell.width) * pair_bytes;
  SHIFTSTACK_CUDA_CHECK(cudaMemcpy2D(host, row_bytes, b.pairs.get(), std::size_t(b.view.pitch) * pair_bytes,
                                     row_bytes, std::size_t(shell.height) * shell.exposures,
                                     cudaMemcpyDeviceToHost));
}

void release_device_cube() {
  State& s = state();
  std::lock_guard guard(s.lock);
  if (s.cube.valid && s.cube.stack_id == s.built.stack_id) reset_cube(s.cube);
  if (s.covariances.stack_id == s.built.stack_id) s.covariances.reset();
  reset_cube(s.built);
  s.built.stack_id = 0;
}

namespace {

// The fractional-mode planes must all be there, one value per pixel and exposure: a missing one
// would silently drop B's covariance terms.
void check_covariances(const EncodedStack& s) {
  const std::size_t expected = s.plane_size() * std::size_t(s.exposures);
  const std::pair<const char*, const std::vector<float>*> planes[] = {
      {"cov_right", &s.cov_right}, {"cov_down", &s.cov_down}, {"cov_diag", &s.cov_diag},
      {"cov_antidiag", &s.cov_antidiag}};
  for (const auto& [name, plane] : planes)
    require(plane->size() == expected,
            std::string("fractional shifts need the covariance planes of the likelihood (compute it "
                        "with covariances): ") +
                name + " has " + std::to_string(plane->size()) + " values, expected " +
                std::to_string(expected));
}

// The rectangle's covariance planes on the device (the caller holds the lock).
const float4* acquire_covariances(State& s, const EncodedStack& stack, const PixelRect& rect) {
  CachedCovariances& c = s.covariances;
  if (c.valid && c.stack_id == stack.id && c.rect == rect) return static_cast<const float4*>(c.data.get());
  c.reset();
  check_covariances(stack);
  const std::size_t pitch_bytes = std::size_t(padded_pitch(rect.width)) * sizeof(float4);
  const std::size_t bytes = pitch_bytes * rect.height * std::size_t(stack.exposures);
  char* device = static_cast<char*>(c.data.allocate(bytes));
  SHIFTSTACK_CUDA_CHECK(cudaMemset(device, 0, bytes));  // row padding: defined, never read
  const std::size_t plane = stack.plane_size();
  std::vector<float4> rows(std::size_t(rect.count()));
  for (int e = 0; e < stack.exposures; ++e) {
    for (int y = 0; y < rect.height; ++y)
      for (int x = 0; x < rect.width; ++x) {
        const std::size_t i = std::size_t(e) * plane + std::size_t(rect.y0 + y) * stack.width + rect.x0 + x;
        rows[std::size_t(y) * rect.width + x] =
            make_float4(stack.cov_right[i], stack.cov_down[i], stack.cov_diag[i], stack.cov_antidiag[i]);
      }
    SHIFTSTACK_CUDA_CHECK(cudaMemcpy2D(device + std::size_t(e) * rect.height * pitch_bytes, pitch_bytes,
                                       rows.data(), std::size_t(rect.width) * sizeof(float4),
                                       std::size_t(rect.width) * sizeof(float4), rect.height,
                                       cudaMemcpyHostToDevice));
  }
  c.stack_id = stack.id;
  c.rect = rect;
  c.valid = true;
  s.stats.bytes += std::int64_t(bytes);
  return static_cast<const float4*>(c.data.get());
}

StackView acquire_pairs(const EncodedStack& stack, const PixelRect& rect) {
  require(rect.x0 >= 0 && rect.y0 >= 0 && rect.width > 0 && rect.height > 0 &&
              rect.x0 + rect.width <= stack.width && rect.y0 + rect.height <= stack.height,
          "device upload: rectangle outside the image");
  if (payload_elements(stack) == 0 && stack.exposures > 0) return acquire_device_built(stack, rect);
  require(payload_elements(stack) == 2 * stack.plane_size() * std::size_t(stack.exposures),
          "encoded stack payload has " + std::to_string(payload_elements(stack)) +
              " values, expected 2 per pixel per exposure");
  require(int(stack.psi_weight.size()) == stack.exposures &&
              int(stack.phi_weight.size()) == stack.exposures,
          "encoded stack weights do not match its exposure count");
  State& s = state();
  std::lock_guard guard(s.lock);
  CachedCube& c = s.cube;
  if (c.valid && c.stack_id == stack.id && c.rect == rect) {
    ++s.stats.reuses;
    return c.view;
  }
  c.valid = false;
  if (stack.encoding == Encoding::int8) check_exceptions(stack);
  // Free first so that the new cube can take the old one's memory.
  c.pairs.reset();
  const std::size_t pair_bytes = stack.bytes_per_pair();
  const int pitch = padded_pitch(rect.width);
  const std::size_t bytes = cube_bytes(stack, rect);
  char* pairs = static_cast<char*>(c.pairs.allocate(bytes));
  SHIFTSTACK_CUDA_CHECK(cudaMemset(pairs, 0, bytes));  // row padding: defined, never summed
  const char* source = static_cast<const char*>(payload(stack));
  // Exposure by exposure through a host buffer: the rectangle's rows, invalid pairs cleaned.
  const std::size_t row_bytes = std::size_t(rect.width) * pair_bytes;
  const std::size_t source_pitch = std::size_t(stack.width) * pair_bytes;
  const std::size_t device_pitch = std::size_t(pitch) * pair_bytes;
  std::vector<char> plane(row_bytes * rect.height);
  for (int e = 0; e < stack.exposures; ++e) {
    for (int y = 0; y < rect.height; ++y)
      std::memcpy(plane.data() + std::size_t(y) * row_bytes,
                  source + (std::size_t(e) * stack.height + rect.y0 + y) * source_pitch +
                      std::size_t(rect.x0) * pair_bytes,
                  row_bytes);
    clean_invalid_pairs(stack.encoding, plane.data(), std::size_t(rect.count()));
    SHIFTSTACK_CUDA_CHECK(cudaMemcpy2D(pairs + std::size_t(e) * rect.height * device_pitch, device_pitch,
                                       plane.data(), row_bytes, row_bytes, rect.height,
                                       cudaMemcpyHostToDevice));
  }
  const std::size_t weight_bytes = sizeof(float) * stack.exposures;
  SHIFTSTACK_CUDA_CHECK(cudaMemcpy(c.psi_weight.allocate(weight_bytes), stack.psi_weight.data(),
                                   weight_bytes, cudaMemcpyHostToDevice));
  SHIFTSTACK_CUDA_CHECK(cudaMemcpy(c.phi_weight.allocate(weight_bytes), stack.phi_weight.data(),
                                   weight_bytes, cudaMemcpyHostToDevice));
  std::vector<DeviceException> exceptions;
  exceptions.reserve(stack.exceptions.size());
  for (const EncodingException& x : stack.exceptions)
    exceptions.push_back({(static_cast<unsigned long long>(x.exposure) << 32) | x.pixel, x.psi, 0.0f});
  c.exceptions.reset();
  if (!exceptions.empty())
    SHIFTSTACK_CUDA_CHECK(cudaMemcpy(c.exceptions.allocate(exceptions.size() * sizeof(DeviceException)),
                                     exceptions.data(), exceptions.size() * sizeof(DeviceException),
                                     cudaMemcpyHostToDevice));
  c.stack_id = stack.id;
  c.rect = rect;
  c.view.storage = storage_code(stack.encoding);
  c.view.image_width = stack.width;
  c.view.image_height = stack.height;
  c.view.exposures = stack.exposures;
  c.view.rect = rect;
  c.view.pitch = pitch;
  c.view.pairs = c.pairs.get();
  c.view.psi_weight = static_cast<const float*>(c.psi_weight.get());
  c.view.phi_weight = static_cast<const float*>(c.phi_weight.get());
  c.view.exceptions = static_cast<const DeviceException*>(c.exceptions.get());
  c.view.exception_count = int(exceptions.size());
  c.valid = true;
  ++s.stats.uploads;
  s.stats.bytes += std::int64_t(bytes + 2 * weight_bytes + exceptions.size() * sizeof(DeviceException));
  return c.view;
}

}  // namespace

StackView acquire_stack(const EncodedStack& stack, const PixelRect& rect, bool with_covariances) {
  StackView view = acquire_pairs(stack, rect);
  if (!with_covariances) return view;
  State& s = state();
  std::lock_guard guard(s.lock);
  view.covariances = acquire_covariances(s, stack, rect);
  return view;
}

}  // namespace shiftstack::cuda
