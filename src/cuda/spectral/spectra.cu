// Forward half of the Fourier route: the encoded stack on the device, decode into zero-padded
// weighted planes, the informative-sample bitmap, forward FFTs, FP16 spectra with per-frequency
// scales. Layouts in spectra.cuh.
#include <algorithm>
#include <cstdlib>
#include <string>

#include "axis_fft.cuh"
#include "row_windows.hpp"
#include "spectra.cuh"
#include "cuda/common/warp_mma.cuh"

namespace shiftstack::cuda {

const char* cufft_status_name(cufftResult status) {
  switch (status) {
    case CUFFT_SUCCESS: return "CUFFT_SUCCESS";
    case CUFFT_INVALID_PLAN: return "CUFFT_INVALID_PLAN";
    case CUFFT_ALLOC_FAILED: return "CUFFT_ALLOC_FAILED";
    case CUFFT_INVALID_TYPE: return "CUFFT_INVALID_TYPE";
    case CUFFT_INVALID_VALUE: return "CUFFT_INVALID_VALUE";
    case CUFFT_INTERNAL_ERROR: return "CUFFT_INTERNAL_ERROR";
    case CUFFT_EXEC_FAILED: return "CUFFT_EXEC_FAILED";
    case CUFFT_SETUP_FAILED: return "CUFFT_SETUP_FAILED";
    case CUFFT_INVALID_SIZE: return "CUFFT_INVALID_SIZE";
    default: return "cuFFT status (see cufft.h)";
  }
}

const char* cublas_status_name(cublasStatus_t status) { return cublasGetStatusName(status); }

void FftPlan::make(int nx, int ny, int batch, FftShape shape, cudaStream_t stream) {
  if (matches(nx, ny, batch, shape)) return;
  if (made_) SHIFTSTACK_CUFFT_CHECK(cufftDestroy(handle_));
  made_ = false;
  const int nyh = ny / 2 + 1;
  int n[2] = {nx, ny};
  int real_embed[2] = {nx, 2 * nyh};  // in place: real rows padded to 2 nyh floats
  int complex_embed[2] = {nx, nyh};
  const int real_dist = nx * 2 * nyh, complex_dist = nx * nyh;
  switch (shape) {
    case FftShape::forward_planes:
      SHIFTSTACK_CUFFT_CHECK(cufftPlanMany(&handle_, 2, n, real_embed, 1, real_dist, complex_embed, 1,
                                           complex_dist, CUFFT_R2C, batch));
      break;
    case FftShape::inverse_planes:
      SHIFTSTACK_CUFFT_CHECK(
          cufftPlanMany(&handle_, 2, n, nullptr, 1, nx * ny, nullptr, 1, nx * ny, CUFFT_C2C, batch));
      break;
    case FftShape::inverse_y_lines:
      SHIFTSTACK_CUFFT_CHECK(cufftPlanMany(&handle_, 1, &ny, nullptr, 1, ny, nullptr, 1, ny, CUFFT_C2C, batch));
      break;
  }
  SHIFTSTACK_CUFFT_CHECK(cufftSetStream(handle_, stream));
  made_ = true;
  nx_ = nx, ny_ = ny, batch_ = batch, shape_ = shape;
}

SpectralState::SpectralState() {
  SHIFTSTACK_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  for (auto& e : events) SHIFTSTACK_CUDA_CHECK(cudaEventCreate(&e));
}

SpectralState::~SpectralState() {
  for (auto& e : events) cudaEventDestroy(e);
  for (auto& e : chunk_events) cudaEventDestroy(e);
  if (stream) cudaStreamDestroy(stream);
}

void upload_stack(SpectralState& s, const EncodedStack& stack) {
  if (s.stack_id != stack.id || stack.id == 0) {
    s.stack_id = 0;
    s.covariances_id = 0;
    s.encoding = stack.encoding;
    switch (stack.encoding) {
      case Encoding::fp32:
        s.payload.upload(reinterpret_cast<const unsigned char*>(stack.fp32.data()), stack.fp32.size() * 4, s.stream);
        break;
      case Encoding::fp16:
        s.payload.upload(reinterpret_cast<const unsigned char*>(stack.fp16.data()), stack.fp16.size() * 2, s.stream);
        break;
      case Encoding::int8:
        s.payload.upload(reinterpret_cast<const unsigned char*>(stack.int8.data()), stack.int8.size(), s.stream);
        break;
    }
    const std::size_t expected = stack.plane_size() * stack.exposures * stack.bytes_per_pair();
    require(s.payload.size() == expected, "encoded stack payload has " + std::to_string(s.payload.size()) +
                                              " bytes, expected " + std::to_string(expected));
    s.psi_weight.upload(stack.psi_weight, s.stream);
    s.phi_weight.upload(stack.phi_weight, s.stream);
    s.exceptions.upload(stack.exceptions, s.stream);
    SHIFTSTACK_CUDA_CHECK(cudaStreamSynchronize(s.stream));
    s.stack_id = stack.id;
  }
  // The covariance planes only for fractional searches, once per stack.
  if (!s.fractional || (s.covariances_id == stack.id && stack.id != 0)) return;
  const std::size_t planes = stack.plane_size() * stack.exposures;
  std::vector<float> covariances;
  covariances.reserve(4 * planes);
  for (const auto* cov : {&stack.cov_right, &stack.cov_down, &stack.cov_diag, &stack.cov_antidiag}) {
    require(cov->size() == planes, "fractional shifts need the stack's covariance planes (SPEC 2): a plane has " +
                                       std::to_string(cov->size()) + " values, expected " + std::to_string(planes));
    covariances.insert(covariances.end(), cov->begin(), cov->end());
  }
  s.covariances.upload(covariances, s.stream);
  SHIFTSTACK_CUDA_CHECK(cudaStreamSynchronize(s.stream));
  s.covariances_id = stack.id;
}

namespace {

constexpr int kTile = 32;      // transpose tiles: 32 x 32 pixels, kTile x kTileRows threads
constexpr int kTileRows = 8;

// The block's smallest and largest positive weighted phi (each thread's own so far) into
// floor_bits[0], [1]. One update per block, and only where it improves what is already there:
// every warp's atomic on these two words (660,000 of each on dense) serialised in the L2 and took
// the decode from about 0.3 to 1.13 ms. The values only ever decrease (smallest) and increase
// (largest), so a stale read can only let a needless update through. Positive floats order like
// their bit patterns. Every thread of the block calls it (it has a barrier).
__device__ void publish_phi_range(float smallest, float largest, unsigned int* floor_bits) {
  for (int offset = 16; offset > 0; offset /= 2) {
    smallest = fminf(smallest, __shfl_xor_sync(0xffffffffu, smallest, offset));
    largest = fmaxf(largest, __shfl_xor_sync(0xffffffffu, largest, offset));
  }
  __shared__ float warp_smallest[32], warp_largest[32];
  const int thread = threadIdx.x + threadIdx.y * blockDim.x, warp = thread >> 5;
  const int warps = (blockDim.x * blockDim.y + 31) >> 5;
  if ((thread & 31) == 0) warp_smallest[warp] = smallest, warp_largest[warp] = largest;
  __syncthreads();
  if (thread == 0) {
    for (int w = 1; w < warps; ++w) smallest = fminf(smallest, warp_smallest[w]), largest = fmaxf(largest, warp_largest[w]);
    const volatile unsigned int* current = floor_bits;
    if (smallest < __int_as_float(0x7f800000) && __float_as_uint(smallest) < current[0])
      atomicMin(floor_bits, __float_as_uint(smallest));
    if (largest > 0 && __float_as_uint(largest) > current[1]) atomicMax(floor_bits + 1, __float_as_uint(largest));
  }
}

// Reads 32 x 32 pixel tiles along x, writes the padded planes [c][e][x][y] along y (transposed),
// the bitmap words, and the smallest and largest positive weighted phi (floor_bits[0], [1]).
// Grid: (y tiles of ny, x tiles of nx, E).
__global__ void decode_planes_kernel(DecodeInputs in, int exposures, int nx, int ny, int pitch, float* planes,
                                     std::uint32_t* informative_bits, int words_per_column,
                                     unsigned int* floor_bits) {
  __shared__ float psi_tile[kTile][kTile + 1], phi_tile[kTile][kTile + 1];
  __shared__ unsigned char flag_tile[kTile][kTile + 1];
  const int e = blockIdx.z, x0 = blockIdx.y * kTile, y0 = blockIdx.x * kTile;
  const int tx = threadIdx.x, ty = threadIdx.y;
  float smallest = __int_as_float(0x7f800000), largest = 0;  // +inf, 0
  for (int j = ty; j < kTile; j += blockDim.y) {
    const int x = x0 + tx, y = y0 + j;
    float psi = 0, phi = 0;
    bool informative = false;
    if (x < in.width && y < in.height) decode_sample(in, e, x, y, psi, phi, informative);
    psi_tile[j][tx] = psi, phi_tile[j][tx] = phi;
    flag_tile[j][tx] = informative;
    if (informative) smallest = fminf(smallest, phi), largest = fmaxf(largest, phi);
  }
  __syncthreads();
  const std::size_t plane = std::size_t(nx) * pitch;
  for (int i = ty; i < kTile; i += blockDim.y) {
    const int x = x0 + i, y = y0 + tx;
    if (x < nx && y < ny) {
      const std::size_t at = std::size_t(e) * plane + std::size_t(x) * pitch + y;
      planes[at] = psi_tile[tx][i];
      planes[std::size_t(exposures) * plane + at] = phi_tile[tx][i];
    }
    const unsigned word = __ballot_sync(0xffffffffu, flag_tile[tx][i] != 0);
    if (tx == 0 && x < in.width && y0 < in.height)
      informative_bits[(std::size_t(e) * in.width + x) * words_per_column + y0 / kTile] = word;
  }
  publish_phi_range(smallest, largest, floor_bits);
}

// Bytes of one encoded (psi, phi) sample.
__device__ inline int payload_sample_bytes(Encoding encoding) {
  return encoding == Encoding::fp32 ? 8 : encoding == Encoding::fp16 ? 4 : 2;
}

// Row route, the whole forward half in one pass per (exposure e, 32 image rows y0..): decode the
// rows (the bitmap words and the phi range as decode_planes_kernel), put z = psi + i phi of each
// row, zero-padded to nx, into the block's 32 lines, transform them along x, split the two real
// channels (Psi[k] = (Z[k] + conj Z[-k]) / 2, Phi[k] = (Z[k] - conj Z[-k]) / 2i), and write
// [c][mx][e][y] for mx < nxh, with the largest |spectrum|^2 per (c, mx) into scale_bits (atomicMax
// on the bits, only where it improves). One complex transform serves both channels, and neither
// the padded rows nor the spectra are written and read back, as with decode + cuFFT + a scale pass.
// Block: kForwardWarps warps; dynamic shared memory forward_rows_bytes(nx).
constexpr int kForwardWarps = 8;
constexpr int kForwardTile = 64;  // x values per load step: two per lane and row
__global__ void __launch_bounds__(32 * kForwardWarps)
    forward_rows_kernel(DecodeInputs in, AxisInverse fft, int exposures, float2* spectra,
                        std::uint32_t* informative_bits, int words_per_column, unsigned int* floor_bits,
                        unsigned int* scale_bits) {
  extern __shared__ float2 lines[];  // [nx][32], then the roots [nx], then the scale maxima [2][nxh]
  float2* roots = lines + std::size_t(fft.n) * 32;
  const int nxh = fft.n / 2 + 1;
  float* largest_squares = reinterpret_cast<float*>(roots + fft.n);
  __shared__ float2 tile[kTile][kForwardTile + 1];  // [row][x]: conj z, read along rows
  __shared__ unsigned char flag_tile[kTile][kForwardTile + 1];
  const int e = blockIdx.y, y0 = blockIdx.x * kTile;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  // The block's rows are one contiguous run of the payload: ask the L2 for all of it at once, so
  // that the load steps below wait on the L2 rather than each on its own trip to memory (one
  // step's loads alone were too few to cover that latency).
  {
    const int rows = min(kTile, in.height - y0);
    const std::size_t sample = payload_sample_bytes(in.encoding);
    const unsigned char* first = in.payload + (std::size_t(e) * in.height + y0) * in.width * sample;
    const std::size_t bytes = std::size_t(rows) * in.width * sample;
    for (std::size_t at = std::size_t(threadIdx.x) * 128; at < bytes; at += std::size_t(blockDim.x) * 128)
      asm volatile("prefetch.global.L2 [%0];" ::"l"(first + at));
  }
  for (int m = threadIdx.x; m < fft.n; m += blockDim.x) roots[m] = __ldg(fft.roots + m);
  float smallest = __int_as_float(0x7f800000), largest = 0;  // +inf, 0
  for (int x0 = 0; x0 < fft.n; x0 += kForwardTile) {
    // Rows read along x (lanes), into the tile; then each lane takes one row (line) and the
    // warps the tile's columns, so that the digit-reversed line writes do not share a bank.
    for (int j = warp; j < kTile; j += kForwardWarps) {
#pragma unroll
      for (int half = 0; half < kForwardTile / 32; ++half) {
        const int x = x0 + half * 32 + lane, y = y0 + j;
        float psi = 0, phi = 0;
        bool informative = false;
        if (x < in.width && y < in.height) decode_sample(in, e, x, y, psi, phi, informative);
        tile[j][half * 32 + lane] = make_float2(psi, -phi);
        flag_tile[j][half * 32 + lane] = informative;
        if (informative) smallest = fminf(smallest, phi), largest = fmaxf(largest, phi);
      }
    }
    __syncthreads();
    for (int i = warp; i < kForwardTile; i += kForwardWarps) {
      const int x = x0 + i;
      if (x < fft.n) lines[__ldg(fft.positions + x) * 32 + lane] = tile[lane][i];
      const unsigned word = __ballot_sync(0xffffffffu, flag_tile[lane][i] != 0);
      if (lane == 0 && x < in.width && y0 < in.height)
        informative_bits[(std::size_t(e) * in.width + x) * words_per_column + y0 / kTile] = word;
    }
    __syncthreads();
  }
  publish_phi_range(smallest, largest, floor_bits);  // its barrier also orders the line writes
  inverse_along_x(fft, lines, roots);  // of conj z; ends with a barrier
  // lines[k] holds conj Z[k].
  const int y = y0 + lane;
  const bool inside = y < in.height;
  const std::size_t lines_per_channel = std::size_t(nxh) * exposures * in.height;
  for (int mx = warp; mx < nxh; mx += kForwardWarps) {
    const float2 l = lines[mx * 32 + lane], m = lines[(mx == 0 ? 0 : fft.n - mx) * 32 + lane];
    float2 psi, phi;
    split_two_real_channels(make_float2(l.x, -l.y), make_float2(m.x, -m.y), psi, phi);
    if (inside) {
      const std::size_t at = (std::size_t(mx) * exposures + e) * in.height + y;
      spectra[at] = psi;
      spectra[lines_per_channel + at] = phi;
    }
    float psi_largest = inside ? psi.x * psi.x + psi.y * psi.y : 0.0f;
    float phi_largest = inside ? phi.x * phi.x + phi.y * phi.y : 0.0f;
    for (int offset = 16; offset > 0; offset /= 2) {
      psi_largest = fmaxf(psi_largest, __shfl_xor_sync(0xffffffffu, psi_largest, offset));
      phi_largest = fmaxf(phi_largest, __shfl_xor_sync(0xffffffffu, phi_largest, offset));
    }
    if (lane == 0) largest_squares[mx] = psi_largest, largest_squares[nxh + mx] = phi_largest;
  }
  // The block's maxima to the global ones together, not one L2 round trip per warp iteration.
  __syncthreads();
  for (int i = threadIdx.x; i < 2 * nxh; i += blockDim.x) {
    const float value = largest_squares[i];
    if (value > 0 && __float_as_uint(value) > *reinterpret_cast<volatile unsigned int*>(scale_bits + i))
      atomicMax(scale_bits + i, __float_as_uint(value));
  }
}

std::size_t forward_rows_bytes(int nx) { return std::size_t(nx) * 33 * sizeof(float2) + std::size_t(nx / 2 + 1) * 2 * sizeof(float); }

// Fractional shifts: the covariance channels of the bilinear variance (SPEC 2), weighted by
// phi_weight, each nonzero only where both samples of its pair are informative (the reference
// adds a pair's covariance only when both corners count), written like the decoded planes:
// channel 2 Cov(p, p + x), 3 Cov(p, p + y), 4 Cov(p, p + x + y) + Cov(p + x, p + y), where the
// pair's first corner is p. Grid: (y tiles of ny, x tiles of nx, E); kTile x kTileRows threads.
__global__ void covariance_planes_kernel(const float* covariances, const float* phi_weight, int exposures,
                                         int width, int height, int nx, int ny, int pitch,
                                         const std::uint32_t* informative_bits, int words_per_column,
                                         float* planes) {
  __shared__ float tile[3][kTile][kTile + 1];
  const int e = blockIdx.z, x0 = blockIdx.y * kTile, y0 = blockIdx.x * kTile;
  const int tx = threadIdx.x, ty = threadIdx.y;
  const std::size_t image = std::size_t(width) * height;
  auto informative = [&](int x, int y) {
    if (x >= width || y >= height) return false;
    const std::uint32_t word = informative_bits[(std::size_t(e) * width + x) * words_per_column + (y >> 5)];
    return ((word >> (y & 31)) & 1u) != 0;
  };
  auto cov = [&](int plane, int x, int y) {
    return covariances[(std::size_t(plane) * exposures + e) * image + std::size_t(y) * width + x];
  };
  const float weight = phi_weight[e];
  for (int j = ty; j < kTile; j += blockDim.y) {
    const int x = x0 + tx, y = y0 + j;
    float right = 0, down = 0, diagonals = 0;
    if (x < width && y < height) {
      const bool here = informative(x, y), east = informative(x + 1, y), south = informative(x, y + 1);
      if (here && east) right = __fmul_rn(weight, cov(0, x, y));
      if (here && south) down = __fmul_rn(weight, cov(1, x, y));
      if (here && informative(x + 1, y + 1)) diagonals = __fmul_rn(weight, cov(2, x, y));
      if (east && south) diagonals += __fmul_rn(weight, cov(3, x, y));
    }
    tile[0][j][tx] = right;
    tile[1][j][tx] = down;
    tile[2][j][tx] = diagonals;
  }
  __syncthreads();
  const std::size_t plane = std::size_t(nx) * pitch;
  for (int i = ty; i < kTile; i += blockDim.y) {
    const int x = x0 + i, y = y0 + tx;
    if (x >= nx || y >= ny) continue;
    for (int c = 0; c < 3; ++c)
      planes[(std::size_t(2 + c) * exposures + e) * plane + std::size_t(x) * pitch + y] = tile[c][tx][i];
  }
}

// Largest |spectrum|^2 per frequency over a slice of the exposures, folded into scale_bits with
// atomicMax: non-negative floats order like their bit patterns, so the result is exact and the
// same whatever the order. Channel 0 (psi) and the B side, which is phi alone for integer shifts
// and phi with the covariance channels up to channel last_b for fractional ones (their products
// share one accumulator, hence one scale). Grid: (frequency blocks, exposure slices); one thread
// per frequency walking every exposure kept only F threads in flight for the whole card.
__global__ void spectrum_scale_kernel(const float2* spectra, int exposures, std::int64_t frequencies, int last_b,
                                      int exposures_per_slice, unsigned int* scale_bits) {
  const std::int64_t f = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (f >= frequencies) return;
  const int e_begin = blockIdx.y * exposures_per_slice;
  const int e_end = min(exposures, e_begin + exposures_per_slice);
  for (int side = 0; side < 2; ++side) {
    float largest = 0;
    const int first = side, last = side == 0 ? 0 : last_b;
    for (int c = first; c <= last; ++c) {
      const float2* base = spectra + std::size_t(c) * exposures * frequencies + f;
      for (int e = e_begin; e < e_end; ++e) {
        const float2 z = base[std::size_t(e) * frequencies];
        largest = fmaxf(largest, z.x * z.x + z.y * z.y);
      }
    }
    if (largest > 0) atomicMax(scale_bits + std::size_t(side) * frequencies + f, __float_as_uint(largest));
  }
}

// The scales from the largest |spectrum|^2 (in place): its square root, or 1 where every sample is 0.
__global__ void finish_scales_kernel(std::int64_t count, float* scales) {
  const std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= count) return;
  const float largest = scales[i];
  scales[i] = largest > 0 ? sqrtf(largest) : 1.0f;
}

// A transposing pack: per frequency f and exposure e, pack(e, f) (a T; zero for padded exposures
// and frequencies past the last) written to exposure-fastest rows [mx][my < nyh_padded][e].
// Tiles of 32 frequencies x 32 exposures; grid (frequency tiles, padded-exposure tiles).
template <class T, class Pack>
__global__ void pack_transposed_kernel(Pack pack, int exposures, int exposures_padded, std::int64_t frequencies,
                                       int nyh, int nyh_padded, T* out) {
  __shared__ T tile[kTile][kTile + 1];
  const std::int64_t f0 = std::int64_t(blockIdx.x) * kTile;
  const int e0 = blockIdx.y * kTile, tx = threadIdx.x, ty = threadIdx.y;
  for (int j = ty; j < kTile; j += blockDim.y) {
    const std::int64_t f = f0 + tx;
    const int e = e0 + j;
    tile[j][tx] = f < frequencies && e < exposures ? pack(e, f) : T{};
  }
  __syncthreads();
  for (int i = ty; i < kTile; i += blockDim.y) {
    const std::int64_t f = f0 + i;
    const int e = e0 + tx;
    if (f < frequencies && e < exposures_padded) {
      const std::int64_t mx = f / nyh, my = f % nyh;
      out[(std::size_t(mx) * nyh_padded + my) * exposures_padded + e] = tile[tx][i];
    }
  }
}

// FP16 value of a complex spectrum sample over a scale, as its half2 bits.
__device__ inline std::uint32_t scaled_half2(float2 z, float scale) {
  return half2_bits(__floats2half2_rn(z.x / scale, z.y / scale));
}

// What the packers read: the FP32 spectra [c][e][f] and the per-frequency scales [side][f].
struct PackSource {
  const float2* spectra;
  const float* scales;
  int exposures;
  std::int64_t frequencies;
  __device__ float2 at(int channel, int e, std::int64_t f) const {
    return spectra[(std::size_t(channel) * exposures + e) * frequencies + f];
  }
};

// (psi, phi) over their scales.
struct SpectrumPair : PackSource {
  __device__ uint2 operator()(int e, std::int64_t f) const {
    return make_uint2(scaled_half2(at(0, e, f), scales[f]), scaled_half2(at(1, e, f), scales[frequencies + f]));
  }
};

// Fractional shifts, over the B-side scale: the covariance channels 2 (right) and 3 (down) as a
// pair, and channel 4 (the diagonals) alone.
struct CovariancePair : PackSource {
  __device__ uint2 operator()(int e, std::int64_t f) const {
    const float sb = scales[frequencies + f];
    return make_uint2(scaled_half2(at(2, e, f), sb), scaled_half2(at(3, e, f), sb));
  }
};
struct Diagonals : PackSource {
  __device__ __half2 operator()(int e, std::int64_t f) const {
    return bits_half2(scaled_half2(at(4, e, f), scales[frequencies + f]));
  }
};

// Row route: [c][mx][e][y] FP32 -> [mx][e][j] (psi, phi) FP16 over the per-mx scales, image row
// y = first_row + j, zero outside the image and for padded exposures. Grid: (row blocks, E_pad,
// nxh); threads walk j, so that reads and writes are both consecutive.
__global__ void pack_rows_kernel(const float2* spectra, const float* scales, int exposures, int height, int nxh,
                                 int first_row, int row_span, uint2* out) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x, e = blockIdx.y, mx = blockIdx.z;
  if (j >= row_span) return;
  const int y = first_row + j;
  uint2 value = make_uint2(0, 0);
  if (e < exposures && y >= 0 && y < height) {
    const std::size_t at = (std::size_t(mx) * exposures + e) * height + y;
    const std::size_t lines_per_channel = std::size_t(nxh) * exposures * height;
    value = make_uint2(scaled_half2(spectra[at], scales[mx]), scaled_half2(spectra[lines_per_channel + at], scales[nxh + mx]));
  }
  out[(std::size_t(mx) * gridDim.y + e) * row_span + j] = value;
}

}  // namespace

void forward_transforms(SpectralState& s) {
  const FourierGeometry& g = s.geometry;
  const int E = s.exposures, pitch = 2 * g.nyh;
  s.words_per_column = (g.height + 31) / 32;
  s.informative.resize(std::size_t(E) * g.width * s.words_per_column);
  s.spectra.resize(std::max(std::size_t(s.input_channels()) * E * g.nx * g.nyh,  // = the real planes' floats / 2
                            std::size_t(2) * E * g.height * s.nxh()));           // the row route's
  s.floor_bits.resize(2);
  const unsigned int range_bits[2] = {0x7f800000u, 0u};  // +inf, 0: no informative sample yet
  SHIFTSTACK_CUDA_CHECK(cudaMemcpyAsync(s.floor_bits.get(), range_bits, sizeof range_bits,
                                        cudaMemcpyHostToDevice, s.stream));
  const DecodeInputs in = decode_inputs(s);
  const dim3 block(kTile, kTileRows);
  if (s.row_route) {
    // Rows along x, only the image's rows: the y shifts are row offsets, nothing wraps along y.
    s.scales.resize(std::size_t(2) * s.nxh());
    SHIFTSTACK_CUDA_CHECK(cudaMemsetAsync(s.scales.get(), 0, s.scales.bytes(), s.stream));
    const dim3 grid((g.height + kTile - 1) / kTile, E);
    forward_rows_kernel<<<grid, 32 * kForwardWarps, forward_rows_bytes(g.nx), s.stream>>>(
        in, axis_inverse(s), E, s.spectra.get(), s.informative.get(), s.words_per_column, s.floor_bits.get(),
        reinterpret_cast<unsigned int*>(s.scales.get()));
    SHIFTSTACK_CUDA_CHECK_LAUNCH();
    return;
  }
  const dim3 grid((g.ny + kTile - 1) / kTile, (g.nx + kTile - 1) / kTile, E);
  decode_planes_kernel<<<grid, block, 0, s.stream>>>(in, E, g.nx, g.ny, pitch,
                                                     reinterpret_cast<float*>(s.spectra.get()),
                                                     s.informative.get(), s.words_per_column,
                                                     s.floor_bits.get());
  SHIFTSTACK_CUDA_CHECK_LAUNCH();
  if (s.fractional) {
    require(s.covariances.size() == 4 * std::size_t(E) * g.width * g.height,
            "fractional shifts need the covariance planes of the stack (SPEC 2)");
    covariance_planes_kernel<<<grid, block, 0, s.stream>>>(s.covariances.get(), s.phi_weight.get(), E, g.width,
                                                           g.height, g.nx, g.ny, pitch, s.informative.get(),
                                                           s.words_per_column,
                                                           reinterpret_cast<float*>(s.spectra.get()));
    SHIFTSTACK_CUDA_CHECK_LAUNCH();
  }
  s.forward_plan.make(g.nx, g.ny, s.input_channels() * E, FftShape::forward_planes, s.stream);
  SHIFTSTACK_CUFFT_CHECK(cufftExecR2C(s.forward_plan.handle(), reinterpret_cast<cufftReal*>(s.spectra.get()),
                                      reinterpret_cast<cufftComplex*>(s.spectra.get())));
}

void pack_half_spectra(SpectralState& s, int vb_granularity) {
  const FourierGeometry& g = s.geometry;
  const std::int64_t F = g.frequencies();
  s.scales.resize(std::size_t(2) * F);
  const bool fresh = s.half_spectra.resize(std::size_t(g.nx) * s.nyh_padded * s.exposures_padded);
  if (fresh || s.nyh_padded != g.nyh) {
    // Rows my in [nyh, nyh_padded) are never written by the packer: keep them zero.
    SHIFTSTACK_CUDA_CHECK(cudaMemsetAsync(s.half_spectra.get(), 0, s.half_spectra.bytes(), s.stream));
  }
  SHIFTSTACK_CUDA_CHECK(cudaMemsetAsync(s.scales.get(), 0, s.scales.bytes(), s.stream));  // 0.0f: no sample yet
  constexpr int kScaleSlice = 64;  // exposures per thread
  const dim3 scale_grid(unsigned((F + 255) / 256), unsigned((s.exposures + kScaleSlice - 1) / kScaleSlice));
  spectrum_scale_kernel<<<scale_grid, 256, 0, s.stream>>>(s.spectra.get(), s.exposures, F, s.input_channels() - 1,
                                                          kScaleSlice, reinterpret_cast<unsigned int*>(s.scales.get()));
  SHIFTSTACK_CUDA_CHECK_LAUNCH();
  finish_scales_kernel<<<unsigned((2 * F + 255) / 256), 256, 0, s.stream>>>(2 * F, s.scales.get());
  SHIFTSTACK_CUDA_CHECK_LAUNCH();
  const dim3 block(kTile, kTileRows), grid(unsigned((F + kTile - 1) / kTile), s.exposures_padded / kTile);
  const PackSource source{s.spectra.get(), s.scales.get(), s.exposures, F};
  const SpectrumPair pairs{source};
  pack_transposed_kernel<<<grid, block, 0, s.stream>>>(pairs, s.exposures, s.exposures_padded, F, g.nyh, s.nyh_padded,
                                                       s.half_spectra.get());
  SHIFTSTACK_CUDA_CHECK_LAUNCH();
  if (s.fractional) {
    const std::size_t samples = std::size_t(g.nx) * s.nyh_padded * s.exposures_padded;
    const bool fresh_pairs = s.half_covariances.resize(samples);
    const bool fresh_diagonals = s.half_diagonals.resize(samples);
    if (fresh_pairs || fresh_diagonals || s.nyh_padded != g.nyh) {
      SHIFTSTACK_CUDA_CHECK(cudaMemsetAsync(s.half_covariances.get(), 0, s.half_covariances.bytes(), s.stream));
      SHIFTSTACK_CUDA_CHECK(cudaMemsetAsync(s.half_diagonals.get(), 0, s.half_diagonals.bytes(), s.stream));
    }
    const CovariancePair covariances{source};
    pack_transposed_kernel<<<grid, block, 0, s.stream>>>(covariances, s.exposures, s.exposures_padded, F, g.nyh,
                                                         s.nyh_padded, s.half_covariances.get());
    SHIFTSTACK_CUDA_CHECK_LAUNCH();
    const Diagonals diagonals{source};
    pack_transposed_kernel<<<grid, block, 0, s.stream>>>(diagonals, s.exposures, s.exposures_padded, F, g.nyh,
                                                         s.nyh_padded, s.half_diagonals.get());
    SHIFTSTACK_CUDA_CHECK_LAUNCH();
  }

  // sy - min_sy per (b, e), zero in the padding rows and columns.
  s.vb_padded = (s.vb + vb_granularity - 1) / vb_granularity * vb_granularity;
  std::vector<std::int32_t> rel(std::size_t(s.vb_padded) * s.exposures_padded, 0);
  for (int b = 0; b < s.vb; ++b)
    for (int e = 0; e < s.exposures; ++e)
      rel[std::size_t(b) * s.exposures_padded + e] = s.shifts.y[std::size_t(b) * s.exposures + e] - g.min_sy;
  s.shift_y_rel.upload(rel, s.stream);
  if (s.fractional) {
    // The y fractions s - floor(s) laid out like shift_y_rel (0 in the padding).
    const std::vector<float>& fy = s.frac_y_host;
    std::vector<float> padded(std::size_t(s.vb_padded) * s.exposures_padded, 0.0f);
    for (int b = 0; b < s.vb; ++b)
      for (int e = 0; e < s.exposures; ++e)
        padded[std::size_t(b) * s.exposures_padded + e] = fy[std::size_t(b) * s.exposures + e];
    s.frac_y_rel.upload(padded, s.stream);
  }
}

}  // namespace shiftstack::cuda

namespace shiftstack::cuda {

bool plan_row_route(SpectralState& s, int group_rows, int max_window_rows) {
  s.row_route = false;
  const char* forced = std::getenv("SHIFTSTACK_TC_ROUTE");
  const std::string setting = forced ? forced : "rows";
  require(setting == "rows" || setting == "planes", "SHIFTSTACK_TC_ROUTE must be rows or planes, not '" + setting + "'");
  // Integer shifts and the fused post-processing only: the fractional contraction and the top-k
  // lists (which read whole planes after cuFFT's 2-D inverse) stay on the planar route.
  if (setting == "planes" || s.fractional || !s.fused_scoring) return false;
  // The contraction keeps its group's window starts for every exposure in shared memory (4 bytes
  // each, beside its pipeline stages; the engine checks the whole, row_route_fits); longer stacks
  // take the planar route.
  constexpr int kMaxExposures = 8192;
  if (s.exposures_padded > kMaxExposures) return false;
  // The forward kernel keeps 32 lines of nx points in shared memory (as the fused scoring does).
  const std::size_t forward_bytes = forward_rows_bytes(s.geometry.nx);
  int device = 0, optin = 0;
  SHIFTSTACK_CUDA_CHECK(cudaGetDevice(&device));
  SHIFTSTACK_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  cudaFuncAttributes attributes{};
  SHIFTSTACK_CUDA_CHECK(cudaFuncGetAttributes(&attributes, forward_rows_kernel));
  if (forward_bytes + attributes.sharedSizeBytes > std::size_t(optin)) return false;
  SHIFTSTACK_CUDA_CHECK(
      cudaFuncSetAttribute(forward_rows_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(forward_bytes)));
  const FourierGeometry& g = s.geometry;
  RowWindows windows = plan_row_windows(s.shifts.y, s.vb, s.exposures, s.exposures_padded, group_rows, g.min_sy,
                                        g.max_sy, s.region.height);
  if (windows.rows > max_window_rows) return false;
  s.window_rows = windows.rows;
  s.window_pitch = windows.pitch;
  s.row_span = windows.span;
  s.window_start.upload(windows.start, s.stream);
  s.row_in_window.upload(windows.offset, s.stream);
  s.row_route = true;
  return true;
}

void pack_half_rows(SpectralState& s) {
  const FourierGeometry& g = s.geometry;
  const int nxh = s.nxh();
  s.half_spectra.resize(std::size_t(nxh) * s.exposures_padded * s.row_span);  // every value written below
  // forward_rows_kernel left the largest |spectrum|^2 per (c, mx) in scales.
  finish_scales_kernel<<<unsigned((2 * nxh + 255) / 256), 256, 0, s.stream>>>(2 * nxh, s.scales.get());
  SHIFTSTACK_CUDA_CHECK_LAUNCH();
  constexpr int kThreads = 128;
  const dim3 grid(unsigned((s.row_span + kThreads - 1) / kThreads), unsigned(s.exposures_padded), unsigned(nxh));
  pack_rows_kernel<<<grid, kThreads, 0, s.stream>>>(s.spectra.get(), s.scales.get(), s.exposures, g.height, nxh,
                                                    s.region.y0 + g.min_sy, s.row_span, s.half_spectra.get());
  SHIFTSTACK_CUDA_CHECK_LAUNCH();
}

}  // namespace shiftstack::cuda
