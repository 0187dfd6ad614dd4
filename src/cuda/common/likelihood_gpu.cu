// psi/phi on the GPU and their encoding into the gather engines' device cube (likelihood_gpu.hpp).
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/likelihood_kernels.hpp"
#include "cuda/common/check.cuh"
#include "cuda/common/device_buffer.cuh"
#include "cuda/common/device_stack.cuh"
#include "cuda/common/likelihood_gpu.hpp"
#include "shiftstack/error.hpp"

namespace shiftstack::cuda {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

constexpr int threads_per_block = 256;
// Rows per launch are spread over grid.y, which CUDA caps at 65535.
constexpr int max_grid_rows = 65535;
// Exposures in flight through pinned staging: the host fills one while the device copies another.
constexpr int staging_slots = 3;
// Host copies into staging are cut into pieces of this size, shared among the OpenMP threads.
constexpr std::size_t staging_piece_bytes = std::size_t(1) << 20;
// Device memory left free beyond what the planes and the cube take (cuFFT/cuBLAS handles, the
// search's own tables and outputs).
constexpr std::size_t memory_margin_bytes = std::size_t(1) << 30;

// ---- correlation kernels -------------------------------------------------------------------
// Every operation is written with an explicit rounding intrinsic so that nvcc does not contract
// a*b+c into an FMA: the CPU path (compiled for baseline x86-64) rounds each product and each sum,
// and with the same order of terms the GPU then gives the CPU's doubles bit for bit.

// w = 1/V and I*w where unmasked, 0 where masked (masked science may be NaN and is never read).
__global__ void weights_kernel(const float* science, const float* variance, const unsigned char* mask,
                               std::size_t pixels, double* weight, double* weighted_science) {
  for (std::size_t p = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; p < pixels;
       p += std::size_t(gridDim.x) * blockDim.x) {
    const bool masked = mask != nullptr && mask[p] != 0;
    const double w = masked ? 0.0 : __ddiv_rn(1.0, double(variance[p]));
    weight[p] = w;
    weighted_science[p] = masked ? 0.0 : __dmul_rn(double(science[p]), w);
  }
}

// Separable kernels, first pass: along x, taps in ascending offset, from a zero sum.
__global__ void row_pass_kernel(const double* weighted_science, const double* weight, int width, int height,
                                const double* psi_row, const double* phi_row, int rx, double* psi_tmp,
                                double* phi_tmp) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x;
  if (x >= width) return;
  const int lo = max(-rx, -x), hi = min(rx, width - 1 - x);
  for (int y = blockIdx.y; y < height; y += gridDim.y) {
    const std::size_t row = std::size_t(y) * width;
    double a = 0.0, b = 0.0;
    for (int dx = lo; dx <= hi; ++dx) {
      a = __dadd_rn(a, __dmul_rn(psi_row[dx + rx], weighted_science[row + x + dx]));
      b = __dadd_rn(b, __dmul_rn(phi_row[dx + rx], weight[row + x + dx]));
    }
    psi_tmp[row + x] = a;
    phi_tmp[row + x] = b;
  }
}

// Second pass: along y, then one rounding to float, into exposure e's planes.
__global__ void column_pass_kernel(const double* psi_tmp, const double* phi_tmp, int width, int height,
                                   const double* psi_column, const double* phi_column, int ry, float* psi,
                                   float* phi) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x;
  if (x >= width) return;
  for (int y = blockIdx.y; y < height; y += gridDim.y) {
    double a = 0.0, b = 0.0;
    for (int dy = max(-ry, -y); dy <= min(ry, height - 1 - y); ++dy) {
      const std::size_t i = std::size_t(y + dy) * width + x;
      a = __dadd_rn(a, __dmul_rn(psi_column[dy + ry], psi_tmp[i]));
      b = __dadd_rn(b, __dmul_rn(phi_column[dy + ry], phi_tmp[i]));
    }
    psi[std::size_t(y) * width + x] = __double2float_rn(a);
    phi[std::size_t(y) * width + x] = __double2float_rn(b);
  }
}

// A kernel that is not an outer product: the direct 2-D sum, rows of taps then taps in a row.
__global__ void general_kernel(const double* weighted_science, const double* weight, int width, int height,
                               const double* psi_values, const double* phi_values, int rx, int ry, float* psi,
                               float* phi) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x;
  if (x >= width) return;
  const int taps_x = 2 * rx + 1;
  for (int y = blockIdx.y; y < height; y += gridDim.y) {
    double a = 0.0, b = 0.0;
    for (int dy = max(-ry, -y); dy <= min(ry, height - 1 - y); ++dy)
      for (int dx = max(-rx, -x); dx <= min(rx, width - 1 - x); ++dx) {
        const int k = (dy + ry) * taps_x + dx + rx;
        const std::size_t i = std::size_t(y + dy) * width + x + dx;
        a = __dadd_rn(a, __dmul_rn(psi_values[k], weighted_science[i]));
        b = __dadd_rn(b, __dmul_rn(phi_values[k], weight[i]));
      }
    psi[std::size_t(y) * width + x] = __double2float_rn(a);
    phi[std::size_t(y) * width + x] = __double2float_rn(b);
  }
}

// ---- the noise scale: exact median of the positive phi of each exposure ---------------------
// encode() takes s_e = sqrt(median positive phi) via nth_element. Positive floats order like
// their bit patterns, so a three-digit radix selection (12 + 12 + 8 bits) over the patterns finds
// the same element: each pass histograms the next digit among the values that share the digits
// found so far, and one thread per exposure walks its histogram to the bin holding the rank.
constexpr int select_bins = 4096;  // 12-bit digits
struct SelectDigit {
  int shift;
  unsigned digit_mask, prefix_mask;  // prefix_mask: the bits fixed by earlier digits
};
constexpr SelectDigit select_digits[3] = {
    {20, 0xfffu, 0x00000000u}, {8, 0xfffu, 0xfff00000u}, {0, 0xffu, 0xffffff00u}};

__global__ void phi_histogram_kernel(const float* phi, std::size_t plane, SelectDigit digit, const unsigned* prefix,
                                     unsigned* histogram, unsigned* max_bits) {
  __shared__ unsigned counts[select_bins];
  const int e = blockIdx.y;
  for (int b = threadIdx.x; b < select_bins; b += blockDim.x) counts[b] = 0;
  __syncthreads();
  const float* values = phi + std::size_t(e) * plane;
  const unsigned wanted = prefix[e];
  unsigned largest = 0;
  for (std::size_t p = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; p < plane;
       p += std::size_t(gridDim.x) * blockDim.x) {
    const float v = values[p];
    if (!(v > 0.0f)) continue;
    const unsigned bits = __float_as_uint(v);
    largest = max(largest, bits);
    if ((bits & digit.prefix_mask) == wanted) atomicAdd(&counts[(bits >> digit.shift) & digit.digit_mask], 1u);
  }
  if (max_bits) {
    largest = __reduce_max_sync(0xffffffffu, largest);  // every lane gets here: no early exit above
    if ((threadIdx.x & 31) == 0) atomicMax(&max_bits[e], largest);
  }
  __syncthreads();
  for (int b = threadIdx.x; b < select_bins; b += blockDim.x)
    if (counts[b]) atomicAdd(&histogram[std::size_t(e) * select_bins + b], counts[b]);
}

// rank[e] is the 0-based position sought among the values that match prefix[e]; the first digit
// also sets count[e] (positive values) and rank[e] = count / 2, nth_element's middle.
__global__ void select_digit_kernel(const unsigned* histogram, int exposures, SelectDigit digit, bool first,
                                    unsigned* prefix, unsigned* rank, unsigned* count) {
  const int e = blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= exposures) return;
  const unsigned* h = histogram + std::size_t(e) * select_bins;
  const int bins = int(digit.digit_mask) + 1;
  if (first) {
    unsigned total = 0;
    for (int b = 0; b < bins; ++b) total += h[b];
    count[e] = total;
    rank[e] = total / 2;
  }
  unsigned k = rank[e];
  for (int b = 0; b < bins; ++b) {
    if (k < h[b]) {
      prefix[e] |= unsigned(b) << digit.shift;
      rank[e] = k;
      return;
    }
    k -= h[b];
  }
}

// ---- encoding into the cube ----------------------------------------------------------------
struct DeviceEncodingException {
  unsigned exposure, pixel;
  float psi;
};

struct EncodeArguments {
  const float* psi;
  const float* phi;
  int width, height, exposures;
  std::size_t plane;
  int pitch;
  void* pairs;
  const double* psi_scale;  // fp16: s_e; int8: psi step
  const double* phi_scale;  // fp16: s_e^2; int8: phi step
  DeviceEncodingException* exceptions;
  unsigned long long* exception_count;
  unsigned long long exception_capacity;
};

// encode() pixel by pixel, plus the cleaning acquire_stack() applies to host payloads: fp32 and
// fp16 pairs whose phi does not decode as > 0 are stored as (0, 0).
template <Encoding S>
__global__ void encode_kernel(EncodeArguments a) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x;
  if (x >= a.width) return;
  const long long rows = (long long)a.exposures * a.height;
  for (long long r = blockIdx.y; r < rows; r += gridDim.y) {
    const int e = int(r / a.height), y = int(r % a.height);
    const std::size_t pixel = std::size_t(y) * a.width + x;
    const std::size_t in = std::size_t(e) * a.plane + pixel;
    const std::size_t out = std::size_t(r) * a.pitch + x;
    const float psi = a.psi[in], phi = a.phi[in];
    const bool valid = phi > 0.0f;
    if constexpr (S == Encoding::fp32) {
      static_cast<float2*>(a.pairs)[out] = valid ? make_float2(psi, phi) : make_float2(0.0f, 0.0f);
    } else if constexpr (S == Encoding::fp16) {
      const double s = a.psi_scale[e], s2 = a.phi_scale[e];
      __half hpsi = __float2half_rn(valid ? __double2float_rn(__ddiv_rn(double(psi), s)) : 0.0f);
      __half hphi = __float2half_rn(valid ? __double2float_rn(__ddiv_rn(double(phi), s2)) : 0.0f);
      if (!(__half2float(hphi) > 0.0f)) hpsi = hphi = __float2half_rn(0.0f);
      static_cast<__half2*>(a.pairs)[out] = __halves2half2(hpsi, hphi);
    } else {
      const double psi_step = a.psi_scale[e], phi_step = a.phi_scale[e];
      const long long phi_code = valid ? llround(__ddiv_rn(double(phi), phi_step)) : 0;
      char2 pair;
      if (phi_code <= 0) {
        pair = make_char2(int8_codes::psi_invalid, 0);
      } else {
        pair.y = static_cast<char>(static_cast<unsigned char>(min(phi_code, (long long)int8_codes::phi_max)));
        const double scaled = __ddiv_rn(double(psi), psi_step);
        const long long code = llround(scaled);
        if (llabs(code) > int8_codes::psi_max) {
          pair.x = int8_codes::psi_exception;
          const unsigned long long slot = atomicAdd(a.exception_count, 1ull);
          if (slot < a.exception_capacity)
            a.exceptions[slot] = {unsigned(e), unsigned(pixel), __double2float_rn(scaled)};
        } else {
          pair.x = static_cast<char>(code);
        }
      }
      static_cast<char2*>(a.pairs)[out] = pair;
    }
  }
}

__global__ void gather_kernel(const float* psi, const float* phi, const unsigned long long* index, std::size_t n,
                              float* psi_out, float* phi_out) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x) {
    psi_out[i] = psi[index[i]];
    phi_out[i] = phi[index[i]];
  }
}

int blocks_for(std::size_t n) {
  // Enough blocks to fill the device several times over; the kernels stride over the rest.
  constexpr std::size_t max_blocks = 4096;
  return int(std::max<std::size_t>(1, std::min(max_blocks, (n + threads_per_block - 1) / threads_per_block)));
}

dim3 image_grid(int width, long long rows) {
  return dim3((width + threads_per_block - 1) / threads_per_block, unsigned(std::min<long long>(rows, max_grid_rows)));
}

// Copies with every OpenMP thread: one thread alone cannot read host memory fast enough to keep
// the copy engine busy.
void parallel_copy(char* destination, const void* source, std::size_t bytes) {
  const char* from = static_cast<const char*>(source);
  const long long pieces = (long long)((bytes + staging_piece_bytes - 1) / staging_piece_bytes);
#pragma omp parallel for schedule(static)
  for (long long i = 0; i < pieces; ++i) {
    const std::size_t offset = std::size_t(i) * staging_piece_bytes;
    std::memcpy(destination + offset, from + offset, std::min(staging_piece_bytes, bytes - offset));
  }
}

// Coefficients of every exposure's kernels in one device array: per exposure, the psi and phi
// factors (row, column) when separable, else the psi and phi tap grids.
struct KernelTable {
  struct Entry {
    bool separable;
    int rx, ry;
    std::size_t psi_a, phi_a, psi_b, phi_b;  // offsets: rows (separable) or tap grids; columns
  };
  std::vector<Entry> entries;
  std::vector<double> coefficients;
};

KernelTable kernel_table(const ExposureStack& stack) {
  KernelTable t;
  auto append = [&](const std::vector<double>& v) {
    const std::size_t at = t.coefficients.size();
    t.coefficients.insert(t.coefficients.end(), v.begin(), v.end());
    return at;
  };
  for (const Exposure& x : stack.exposures) {
    const detail::LikelihoodKernels k = detail::likelihood_kernels(x.psf);
    KernelTable::Entry entry{k.psf.separable, k.psf.rx, k.psf.ry, 0, 0, 0, 0};
    if (entry.separable) {
      entry.psi_a = append(k.psf.row);
      entry.phi_a = append(k.psf_squared.row);
      entry.psi_b = append(k.psf.column);
      entry.phi_b = append(k.psf_squared.column);
    } else {
      entry.psi_a = append(k.psf.values);
      entry.phi_a = append(k.psf_squared.values);
    }
    t.entries.push_back(entry);
  }
  return t;
}

}  // namespace

// ---- DeviceLikelihood ------------------------------------------------------------------------

struct DeviceLikelihood::State {
  int width = 0, height = 0, exposures = 0;
  std::size_t plane = 0;
  std::vector<double> throughput, epochs;
  DeviceArray<float> psi, phi;  // exposure-major planes, like LikelihoodStack
  DeviceLikelihoodTimes times;
};

bool likelihood_gpu_available() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

void warm_up_device() {
  if (likelihood_gpu_available()) cudaFree(nullptr);  // creates the context; any error shows up later
}

DeviceLikelihood::DeviceLikelihood(const ExposureStack& stack, bool validated) : state_(std::make_unique<State>()) {
  const auto start = Clock::now();
  State& s = *state_;
  if (!validated) validate(stack);
  s.times.validate = seconds_since(start);
  s.width = stack.width();
  s.height = stack.height();
  s.exposures = stack.size();
  s.plane = std::size_t(s.width) * s.height;
  require(s.plane < (std::size_t(1) << 32), "GPU likelihood: images of 2^32 pixels or more are not supported");
  for (const Exposure& x : stack.exposures) {
    s.throughput.push_back(x.throughput);
    s.epochs.push_back(x.epoch);
  }
  const std::size_t total = s.plane * s.exposures;
  const std::size_t input_bytes = s.plane * (2 * sizeof(float) + 1);  // science, variance, mask
  const std::size_t scratch_bytes = 4 * s.plane * sizeof(double);
  const std::size_t cube_bytes_fp32 = std::size_t(padded_pitch(s.width)) * s.height * s.exposures * 2 * sizeof(float);
  const std::size_t needed = 2 * total * sizeof(float) + cube_bytes_fp32 + scratch_bytes +
                             staging_slots * input_bytes + memory_margin_bytes;
  std::size_t free_bytes = 0, device_bytes = 0;
  SHIFTSTACK_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &device_bytes));
  require(needed <= free_bytes, "GPU likelihood: needs " + std::to_string(needed >> 20) + " MiB of device memory (planes, cube, scratch), " +
                                    std::to_string(free_bytes >> 20) + " MiB are free");

  s.psi.resize(total);
  s.phi.resize(total);
  DeviceArray<double> weight(s.plane), weighted_science(s.plane), psi_tmp(s.plane), phi_tmp(s.plane);
  const KernelTable table = kernel_table(stack);
  DeviceArray<double> coefficients;
  coefficients.upload(table.coefficients);

  cudaStream_t stream = nullptr;
  SHIFTSTACK_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  struct Slot {
    PinnedArray<char> host;
    DeviceArray<char> device;
    cudaEvent_t copied = nullptr;  // the host buffer may be refilled once this has passed
  };
  Slot slots[staging_slots];
  struct Cleanup {
    cudaStream_t stream;
    Slot* slots;
    ~Cleanup() {
      for (int i = 0; i < staging_slots; ++i)
        if (slots[i].copied) cudaEventDestroy(slots[i].copied);
      cudaStreamSynchronize(stream);  // unchecked: may run during unwinding
      cudaStreamDestroy(stream);
    }
  } cleanup{stream, slots};
  for (Slot& slot : slots) {
    slot.host.reserve(input_bytes);
    slot.device.resize(input_bytes);
    SHIFTSTACK_CUDA_CHECK(cudaEventCreateWithFlags(&slot.copied, cudaEventDisableTiming));
  }

  const std::size_t float_bytes = s.plane * sizeof(float);
  const dim3 grid = image_grid(s.width, s.height);
  for (int e = 0; e < s.exposures; ++e) {
    const Exposure& x = stack.exposures[e];
    Slot& slot = slots[e % staging_slots];
    SHIFTSTACK_CUDA_CHECK(cudaEventSynchronize(slot.copied));
    const auto staging_start = Clock::now();
    parallel_copy(slot.host.get(), x.science.pixels.data(), float_bytes);
    parallel_copy(slot.host.get() + float_bytes, x.variance.pixels.data(), float_bytes);
    const bool has_mask = !x.mask.empty();
    if (has_mask) parallel_copy(slot.host.get() + 2 * float_bytes, x.mask.pixels.data(), s.plane);
    s.times.staging += seconds_since(staging_start);
    SHIFTSTACK_CUDA_CHECK(cudaMemcpyAsync(slot.device.get(), slot.host.get(), has_mask ? input_bytes : 2 * float_bytes,
                                          cudaMemcpyHostToDevice, stream));
    SHIFTSTACK_CUDA_CHECK(cudaEventRecord(slot.copied, stream));
    const float* science = reinterpret_cast<const float*>(slot.device.get());
    const float* variance = reinterpret_cast<const float*>(slot.device.get() + float_bytes);
    const unsigned char* mask =
        has_mask ? reinterpret_cast<const unsigned char*>(slot.device.get() + 2 * float_bytes) : nullptr;
    weights_kernel<<<blocks_for(s.plane), threads_per_block, 0, stream>>>(science, variance, mask, s.plane,
                                                                          weight.get(), weighted_science.get());
    SHIFTSTACK_CUDA_CHECK_LAUNCH();
    const KernelTable::Entry& k = table.entries[e];
    const double* c = coefficients.get();
    float* psi = s.psi.get() + std::size_t(e) * s.plane;
    float* phi = s.phi.get() + std::size_t(e) * s.plane;
    if (k.separable) {
      row_pass_kernel<<<grid, threads_per_block, 0, stream>>>(weighted_science.get(), weight.get(), s.width, s.height,
                                                              c + k.psi_a, c + k.phi_a, k.rx, psi_tmp.get(),
                                                              phi_tmp.get());
      SHIFTSTACK_CUDA_CHECK_LAUNCH();
      column_pass_kernel<<<grid, threads_per_block, 0, stream>>>(psi_tmp.get(), phi_tmp.get(), s.width, s.height,
                                                                 c + k.psi_b, c + k.phi_b, k.ry, psi, phi);
    } else {
      general_kernel<<<grid, threads_per_block, 0, stream>>>(weighted_science.get(), weight.get(), s.width, s.height,
                                                             c + k.psi_a, c + k.phi_a, k.rx, k.ry, psi, phi);
    }
    SHIFTSTACK_CUDA_CHECK_LAUNCH();
  }
  SHIFTSTACK_CUDA_CHECK(cudaStreamSynchronize(stream));
  s.times.total = seconds_since(start);
}

DeviceLikelihood::~DeviceLikelihood() = default;

int DeviceLikelihood::width() const { return state_->width; }
int DeviceLikelihood::height() const { return state_->height; }
int DeviceLikelihood::exposures() const { return state_->exposures; }
const DeviceLikelihoodTimes& DeviceLikelihood::times() const { return state_->times; }

LikelihoodStack DeviceLikelihood::download() const {
  const State& s = *state_;
  LikelihoodStack out;
  out.width = s.width;
  out.height = s.height;
  out.exposures = s.exposures;
  out.throughput = s.throughput;
  out.epochs = s.epochs;
  const std::size_t total = s.plane * s.exposures;
  out.psi = s.psi.download(total);
  out.phi = s.phi.download(total);
  return out;
}

EncodedStack DeviceLikelihood::encode(Encoding encoding) const {
  const State& s = *state_;
  const int E = s.exposures;
  EncodedStack shell;
  shell.encoding = encoding;
  shell.width = s.width;
  shell.height = s.height;
  shell.exposures = E;
  shell.id = new_encoded_stack_id();
  shell.throughput = s.throughput;
  shell.psi_weight.resize(E);
  shell.phi_weight.resize(E);

  // Per-exposure scales, as encode() computes them.
  std::vector<double> psi_scale(E, 1.0), phi_scale(E, 1.0);
  if (encoding != Encoding::fp32) {
    DeviceArray<unsigned> histogram(std::size_t(E) * select_bins), prefix(E), rank(E), count(E), max_bits(E);
    SHIFTSTACK_CUDA_CHECK(cudaMemset(prefix.get(), 0, E * sizeof(unsigned)));
    SHIFTSTACK_CUDA_CHECK(cudaMemset(max_bits.get(), 0, E * sizeof(unsigned)));
    // Blocks per exposure: enough to fill the device with E exposures side by side.
    constexpr int blocks_per_exposure = 64;
    for (int level = 0; level < 3; ++level) {
      SHIFTSTACK_CUDA_CHECK(cudaMemset(histogram.get(), 0, std::size_t(E) * select_bins * sizeof(unsigned)));
      phi_histogram_kernel<<<dim3(blocks_per_exposure, E), threads_per_block>>>(
          s.phi.get(), s.plane, select_digits[level], prefix.get(), histogram.get(), level == 0 ? max_bits.get() : nullptr);
      SHIFTSTACK_CUDA_CHECK_LAUNCH();
      select_digit_kernel<<<(E + threads_per_block - 1) / threads_per_block, threads_per_block>>>(
          histogram.get(), E, select_digits[level], level == 0, prefix.get(), rank.get(), count.get());
      SHIFTSTACK_CUDA_CHECK_LAUNCH();
    }
    const std::vector<unsigned> median_bits = prefix.download(E), positives = count.download(E),
                                largest_bits = max_bits.download(E);
    for (int e = 0; e < E; ++e) {
      float median = 0, largest = 0;
      std::memcpy(&median, &median_bits[e], sizeof median);
      std::memcpy(&largest, &largest_bits[e], sizeof largest);
      const double noise = positives[e] > 0 ? std::sqrt(double(median)) : 1.0;
      if (encoding == Encoding::fp16) {
        psi_scale[e] = noise;
        phi_scale[e] = noise * noise;
      } else {
        const double phi_max = largest;  // 0 when no phi is positive, as max_element gives <= 0
        psi_scale[e] = noise * int8_codes::psi_step_sigmas;
        phi_scale[e] = phi_max > 0 ? phi_max / int8_codes::phi_max : 1.0;
      }
    }
  }
  for (int e = 0; e < E; ++e) {
    const double a = s.throughput[e];
    switch (encoding) {
      case Encoding::fp32:
        shell.psi_weight[e] = float(a);
        shell.phi_weight[e] = float(a * a);
        break;
      case Encoding::fp16: {
        const double noise = psi_scale[e];
        shell.psi_weight[e] = float(a * noise);
        shell.phi_weight[e] = float(a * a * noise * noise);
        break;
      }
      case Encoding::int8:
        shell.psi_weight[e] = float(a * psi_scale[e]);
        shell.phi_weight[e] = float(a * a * phi_scale[e]);
        break;
    }
  }

  const StackView view = prepare_device_cube(shell);
  DeviceArray<double> device_psi_scale, device_phi_scale;
  device_psi_scale.upload(psi_scale);
  device_phi_scale.upload(phi_scale);
  DeviceArray<unsigned long long> exception_count(1);
  // Exceptions are rare (bright residuals); the list grows and the encoding reruns if not.
  unsigned long long capacity = 1 << 16;
  DeviceArray<DeviceEncodingException> exceptions;
  std::vector<DeviceEncodingException> found;
  for (;;) {
    exceptions.resize(capacity);
    SHIFTSTACK_CUDA_CHECK(cudaMemset(exception_count.get(), 0, sizeof(unsigned long long)));
    EncodeArguments args{s.psi.get(), s.phi.get(), s.width, s.height, E, s.plane, view.pitch,
                         const_cast<void*>(view.pairs), device_psi_scale.get(), device_phi_scale.get(),
                         exceptions.get(), exception_count.get(), capacity};
    const dim3 grid = image_grid(s.width, (long long)E * s.height);
    switch (encoding) {
      case Encoding::fp32: encode_kernel<Encoding::fp32><<<grid, threads_per_block>>>(args); break;
      case Encoding::fp16: encode_kernel<Encoding::fp16><<<grid, threads_per_block>>>(args); break;
      case Encoding::int8: encode_kernel<Encoding::int8><<<grid, threads_per_block>>>(args); break;
    }
    SHIFTSTACK_CUDA_CHECK_LAUNCH();
    const unsigned long long n = exception_count.download(1)[0];
    if (n <= capacity) {
      found = exceptions.download(n);
      break;
    }
    capacity = n;
  }
  shell.exceptions.reserve(found.size());
  for (const DeviceEncodingException& x : found) shell.exceptions.push_back({x.exposure, x.pixel, x.psi});
  std::sort(shell.exceptions.begin(), shell.exceptions.end(), [](const EncodingException& a, const EncodingException& b) {
    return a.exposure != b.exposure ? a.exposure < b.exposure : a.pixel < b.pixel;
  });
  shell.saturated = std::int64_t(shell.exceptions.size());
  commit_device_cube(shell);
  return shell;
}

std::vector<LightCurve> DeviceLikelihood::light_curves(const MotionBank& bank, const std::vector<Candidate>& candidates,
                                                       std::size_t begin, std::size_t end) const {
  const State& s = *state_;
  const int E = s.exposures;
  require(bank.exposures() == E, "light curve: the motion bank has " + std::to_string(bank.exposures()) +
                                     " epochs, the stack " + std::to_string(E) + " exposures");
  require(bank.mode == ShiftMode::integer, "GPU light curves: integer shifts only");
  require(begin <= end && end <= candidates.size(), "light curves: candidate range outside the list");
  const std::size_t n = end - begin;
  // Samples outside the image are not fetched; `slot` maps (candidate, exposure) to its sample.
  std::vector<unsigned long long> index;
  std::vector<long long> slot(n * E, -1);
  index.reserve(n * E);
  for (std::size_t i = 0; i < n; ++i) {
    const Candidate& c = candidates[begin + i];
    require(c.velocity >= 0 && std::size_t(c.velocity) < bank.size(),
            "light curve: velocity index " + std::to_string(c.velocity) + " outside the bank of " +
                std::to_string(bank.size()));
    for (int e = 0; e < E; ++e) {
      const PixelIndex p = sampled_pixel(bank, c.x, c.y, std::size_t(c.velocity), e);
      if (p.x < 0 || p.y < 0 || p.x >= s.width || p.y >= s.height) continue;
      slot[i * E + e] = (long long)index.size();
      index.push_back((std::size_t(e) * s.height + p.y) * s.width + p.x);
    }
  }
  std::vector<float> psi, phi;
  if (!index.empty()) {
    DeviceArray<unsigned long long> device_index;
    device_index.upload(index);
    DeviceArray<float> device_psi(index.size()), device_phi(index.size());
    gather_kernel<<<blocks_for(index.size()), threads_per_block>>>(s.psi.get(), s.phi.get(), device_index.get(),
                                                                   index.size(), device_psi.get(), device_phi.get());
    SHIFTSTACK_CUDA_CHECK_LAUNCH();
    psi = device_psi.download(index.size());
    phi = device_phi.download(index.size());
  }
  std::vector<LightCurve> curves(n);
  for (std::size_t i = 0; i < n; ++i) {
    LightCurve& c = curves[i];
    c.psi.assign(E, 0.0);
    c.phi.assign(E, 0.0);
    c.valid.assign(E, 0);
    for (int e = 0; e < E; ++e) {
      const long long k = slot[i * E + e];
      if (k < 0 || !(phi[k] > 0)) continue;
      const double a = s.throughput[e];
      c.psi[e] = a * double(psi[k]);
      c.phi[e] = a * a * double(phi[k]);
      c.valid[e] = 1;
    }
  }
  return curves;
}

LikelihoodStack compute_likelihood_gpu(const ExposureStack& stack) { return DeviceLikelihood(stack).download(); }

}  // namespace shiftstack::cuda
