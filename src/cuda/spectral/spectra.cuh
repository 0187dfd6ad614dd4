// Device state shared by the Fourier-route engines: the encoded stack on the device, padded
// forward FFTs of psi and phi, the bitmap of informative samples, phase (unit root) tables, the
// FP16 spectra with per-frequency scales, and the per-velocity spectra the contraction fills.
//
// Layouts (c = channel: 0 psi, 1 phi; the halved transform axis is y, see tc_emulation.hpp):
//   spectra          [c][e][mx][my]  complex FP32, my < nyh (in place over the padded real
//                                    planes [c][e][x][2 nyh]); fractional shifts add the
//                                    covariance channels 2 right, 3 down, 4 diagonal + antidiagonal
//   half_spectra     [mx][my < nyh_pad][e < E_pad] uint2: (psi half2, phi half2), each divided by
//                                    its channel's largest magnitude at that frequency
//   half_covariances [mx][my < nyh_pad][e < E_pad] uint2, fractional only: (right half2, down half2)
//   half_diagonals   [mx][my < nyh_pad][e < E_pad] half2, fractional only: diagonal + antidiagonal;
//                                    both over the B-side scale, which for fractional shifts covers
//                                    phi and these channels (one accumulator sums them all)
//   scales           [c][mx][my]     that largest magnitude (1 where the spectrum is zero)
//   velocity_spectra [v][mx][my]     complex FP32, v = (b - b_begin) * va + a, my < ny (the full
//                                    grid): psihat + i phihat, so that one complex inverse
//                                    transform, in place, leaves (A, B) as one float2 per origin
//                                    [v][x][y] (full_spectrum.hpp)
//
// The row route of cuda-tc (row_route): the planes are transformed along x only, and the y shift
// of a trial becomes a row offset instead of a phase (a gather of rows, no multiplication):
//   spectra          [c][mx][e][y]   complex FP32, mx < nxh = nx / 2 + 1, y < height (written by
//                                    forward_rows_kernel, which decodes and transforms in one pass)
//   half_spectra     [mx][e < E_pad][j < row_span] uint2: (psi half2, phi half2) of image row
//                                    y = region.y0 + min_sy + j (zero outside the image), each
//                                    over its channel's largest magnitude at that mx
//   scales           [c][mx]
//   velocity_spectra [v][mx][y]      as after the planar route's inverse along y: psihat + i phihat
//                                    along x, rows y of the region only (pitch ny)
#pragma once
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cufft.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "cuda/common/check.cuh"
#include "cuda/common/device_buffer.cuh"
#include "shiftstack/encoding.hpp"
#include "shiftstack/motion.hpp"
#include "shiftstack/tc_emulation.hpp"
#include "full_spectrum.hpp"
#include "spectral_engine.hpp"

namespace shiftstack::cuda {

const char* cufft_status_name(cufftResult status);
const char* cublas_status_name(cublasStatus_t status);

}  // namespace shiftstack::cuda

#define SHIFTSTACK_CUFFT_CHECK(call)                                                              \
  do {                                                                                            \
    cufftResult shiftstack_fft_status_ = (call);                                                  \
    if (shiftstack_fft_status_ != CUFFT_SUCCESS)                                                  \
      throw ::shiftstack::Error(std::string("cuFFT error ") +                                     \
                                ::shiftstack::cuda::cufft_status_name(shiftstack_fft_status_) +   \
                                " in " #call " at " __FILE__ ":" + std::to_string(__LINE__));     \
  } while (0)

#define SHIFTSTACK_CUBLAS_CHECK(call)                                                             \
  do {                                                                                            \
    cublasStatus_t shiftstack_blas_status_ = (call);                                              \
    if (shiftstack_blas_status_ != CUBLAS_STATUS_SUCCESS)                                         \
      throw ::shiftstack::Error(std::string("cuBLAS error ") +                                    \
                                ::shiftstack::cuda::cublas_status_name(shiftstack_blas_status_) + \
                                " in " #call " at " __FILE__ ":" + std::to_string(__LINE__));     \
  } while (0)

namespace shiftstack::cuda {

// What an FftPlan transforms, in place.
enum class FftShape {
  forward_planes,  // batched 2-D real to half complex over nx x ny (real rows padded to 2 nyh)
  inverse_planes,  // batched 2-D complex to complex over the full nx x ny grid
  inverse_y_lines, // batched 1-D complex to complex along y (contiguous lines of ny)
};

// A cuFFT plan for a fixed shape, made once and reused.
class FftPlan {
 public:
  FftPlan() = default;
  FftPlan(const FftPlan&) = delete;
  FftPlan& operator=(const FftPlan&) = delete;
  ~FftPlan() {
    if (made_) cufftDestroy(handle_);
  }
  // `batch`: planes, or for the line shapes the lines.
  void make(int nx, int ny, int batch, FftShape shape, cudaStream_t stream);
  bool matches(int nx, int ny, int batch, FftShape shape) const {
    return made_ && nx == nx_ && ny == ny_ && batch == batch_ && shape == shape_;
  }
  cufftHandle handle() const { return handle_; }

 private:
  cufftHandle handle_{};
  bool made_ = false;
  FftShape shape_ = FftShape::forward_planes;
  int nx_ = 0, ny_ = 0, batch_ = 0;
};

// Per-trial partial digest of one scoring block; merged on the host in block order.
struct DigestPartial {
  double sumA, sumB;
  double maxZ;
  long long scored, count, clamped;
  long long argmax_velocity;  // global velocity index, -1 when nothing was scored
  int argmax_x, argmax_y;
};

// A scored trial whose FFT-route B was untrusted: listed by the scoring kernel, its exact A and B
// filled in by recompute_trials().
struct RecomputedTrial {
  int x, y, velocity;  // velocity: global index
  float A, B;
};

struct DeviceCandidate {
  int x, y, velocity;  // velocity: global index
  float A, B, Z;
};

// Top-k entry per origin: velocity -1 and Z = -inf while empty.
struct TopEntry {
  float Z, A, B;
  int velocity;
};
constexpr int kMaxTopK = 16;  // the top-k kernel holds 8 lists per origin in shared memory: 64 KB at 16

struct SpectralState {
  cudaStream_t stream = nullptr;
  cudaEvent_t events[8]{};

  // The encoded stack on the device (cached by EncodedStack::id: "data already on the device").
  std::uint64_t stack_id = 0;
  Encoding encoding = Encoding::fp32;
  DeviceArray<unsigned char> payload;
  DeviceArray<float> psi_weight, phi_weight;
  DeviceArray<EncodingException> exceptions;
  // Fractional shifts: the covariance planes [cov_right, cov_down, cov_diag, cov_antidiag][e][y][x]
  // as the encoder wrote them (decoded-phi units, before phi_weight), uploaded by the first
  // fractional search of the stack (covariances_id).
  std::uint64_t covariances_id = 0;
  DeviceArray<float> covariances;

  // This search.
  FourierGeometry geometry;
  int exposures = 0, exposures_padded = 0;  // E, and E rounded up to the contraction's chunk
  int va = 0, vb = 0;
  int nyh_padded = 0;                       // nyh rounded up to 16 (rows of an m16 tile)
  Region region;
  OutputPolicy policy;
  double z_thr = 0;

  // Integer shifts: round(s). Fractional shifts: floor(s), with the fraction s - floor(s) of
  // bilinear sampling in frac_x, frac_y (corners floor(s) and floor(s) + 1 on each axis).
  bool fractional = false;
  SeparableShifts shifts;                      // host copy
  DeviceArray<std::int32_t> shift_x, shift_y;  // [a][E], [b][E]
  DeviceArray<float> frac_x, frac_y;           // [a][E], [b][E]; fractional only
  std::vector<float> frac_y_host;              // host copy of frac_y
  DeviceArray<std::uint32_t> informative;      // bit y%32 of word [e][x][y/32]: the sample counts
  // Exposures by |t_e - t_ref|, nearest first: where the shifts are smallest, so the search for
  // one informative sample of a trial ends at its first probe almost always (edge trials too).
  DeviceArray<std::int32_t> probe_order;
  // Per velocity, the exposures most likely to put an edge origin's sample inside the image:
  // arg max and arg min of sx, sy, sx + sy and sx - sy (edges and corners), probed first.
  static constexpr int kExtremeProbes = 8;
  DeviceArray<std::int32_t> extreme_probes;  // [v][kExtremeProbes]
  int words_per_column = 0;
  DeviceArray<unsigned int> floor_bits;        // smallest and largest positive weighted phi, float bits
  // Trials whose FFT-route B is below max(smallest phi, exact_below * E * largest phi) are gathered
  // exactly (their B is small against the transform's rounding); 0: clamped to the smallest phi.
  float exact_below = 0;
  float b_floor = 0;
  DeviceArray<float2> spectra;                 // forward spectra (and padded real planes)
  FftPlan forward_plan;

  // Unit roots exp(2 pi i j / n): x axis in FP32 and FP16, y axis in FP32.
  DeviceArray<float2> root_x, root_y;
  DeviceArray<__half2> root_x_half;

  // FP16 path (cuda-tc, cuda-gemm).
  DeviceArray<uint2> half_spectra;
  DeviceArray<float> scales;
  DeviceArray<std::int32_t> shift_y_rel;  // [b < vb_padded][e < E_pad]: sy - min_sy, 0 in padding
  DeviceArray<float> frac_y_rel;          // fractional: [b < vb_padded][e < E_pad] y fractions, 0 in padding
  DeviceArray<uint2> half_covariances;    // fractional (layouts above)
  DeviceArray<__half2> half_diagonals;
  int vb_padded = 0;

  // Velocity chunk output and the inverse transforms.
  DeviceArray<float2> velocity_spectra;
  int chunk_rows = 0;  // velocity rows b per chunk (the last may have fewer)
  std::map<std::pair<FftShape, int>, std::unique_ptr<FftPlan>> inverse_plans;  // by shape and batch
  // Post-processing route of this search (choose_post_processing): true, cuFFT inverts along y
  // only and the scoring kernel inverts along x in shared memory, so the planes are not written
  // and read back a second time; false, cuFFT inverts both axes and the scoring reads the planes.
  bool fused_scoring = false;
  DeviceArray<std::int32_t> x_positions;  // fused: where input row mx sits before the in-place stages
  // Row route (cuda-tc, integer shifts, fused post-processing; plan_row_route): no transform along
  // y, so no inverse along y either. A CTA of the contraction takes a group of consecutive rows b and
  // 16 region rows; per exposure it copies one window of window_rows rows of half_spectra, starting
  // window_start[group][e] rows into its tile, and each row b reads from row_in_window[b][e] on.
  bool row_route = false;
  int row_span = 0;        // rows j of half_spectra per (mx, e)
  int window_rows = 0;     // rows copied per exposure (even)
  int window_pitch = 0;    // rows between exposures in shared memory (bank spread)
  DeviceArray<std::int32_t> window_start;   // [group][E_pad]
  DeviceArray<std::int32_t> row_in_window;  // [b < vb_padded][E_pad]
  int nxh() const { return geometry.nx / 2 + 1; }
  unsigned long long x_radices = 0;       // fused: the x transform's radices, 4 bits per stage
  int x_stages = 0;
  std::vector<cudaEvent_t> chunk_events;                  // 3 per velocity chunk

  // Scoring outputs.
  DeviceArray<DigestPartial> partials;
  std::vector<DigestPartial> host_partials;
  DeviceArray<DeviceCandidate> candidates;
  DeviceArray<unsigned long long> candidate_count;
  DeviceArray<TopEntry> top;
  DeviceArray<int> top_counts;                 // obs_count of each top-k entry
  PinnedArray<TopEntry> host_top;              // their page-locked downloads (download_top_k)
  PinnedArray<int> host_top_counts;
  DeviceArray<RecomputedTrial> recompute;  // recompute_capacity entries
  DeviceArray<unsigned long long> recompute_count;
  std::size_t recompute_capacity = std::size_t(1) << 16;  // grown to the count when a scan overflows it

  SpectralState();
  ~SpectralState();
  SpectralState(const SpectralState&) = delete;
  SpectralState& operator=(const SpectralState&) = delete;

  std::int64_t frequencies() const { return geometry.frequencies(); }
  // Planes transformed per exposure: psi and phi, plus three covariance channels for fractional
  // shifts (the bilinear variance is linear in phi and the neighbour covariances, SPEC 2).
  int input_channels() const { return fractional ? 5 : 2; }
  // Complex values of velocity_spectra for a chunk of `rows` velocity rows (both channels).
  std::size_t velocity_values(int rows) const { return std::size_t(rows) * va * geometry.nx * geometry.ny; }
  // Strips of 32 region columns: the scoring's warps per velocity, and its partial digests.
  int score_strips() const { return (region.height + 31) / 32; }
  // Normalization of the unnormalized inverse transform, folded into the contraction's output.
  float inverse_norm() const {
    return float(1.0 / (row_route ? double(geometry.nx) : double(geometry.nx) * geometry.ny));
  }
  // Can a trial's FFT-route B be untrusted and gathered exactly (else: clamped)?
  bool recompute_listing() const { return fractional || exact_below > 0; }
};

// --- complex arithmetic and the bilinear axis factors of fractional shifts --------------------------

__device__ __forceinline__ float2 cmul(float2 a, float2 b) {
  return make_float2(a.x * b.x - a.y * b.y, a.x * b.y + a.y * b.x);
}
__device__ __forceinline__ float2 cfma(float2 a, float2 b, float2 c) {  // a * b + c
  return make_float2(fmaf(a.x, b.x, fmaf(-a.y, b.y, c.x)), fmaf(a.x, b.y, fmaf(a.y, b.x, c.y)));
}
__device__ __forceinline__ float2 cscale(float2 a, float s) { return make_float2(a.x * s, a.y * s); }

// Bilinear axis factors at one frequency: whole = e^{i k n}, step = e^{i k}, f the fraction
// (docs/specification.md section 6). cuda-fourier and cuda-tc both build their tables from these.
struct AxisFactors {
  float2 interpolate;  // e^{ikn} ((1-f) + f e^{ik})       (A)
  float2 squares;      // e^{ikn} ((1-f)^2 + f^2 e^{ik})   (phi, and the covariance along the other axis)
  float2 cross;        // e^{ikn} 2 f (1-f)                (covariance along this axis)
};
__device__ __forceinline__ AxisFactors axis_factors(float2 whole, float2 step, float f) {
  const float g = 1.0f - f;
  AxisFactors t;
  t.interpolate = cmul(whole, make_float2(g + f * step.x, f * step.y));
  t.squares = cmul(whole, make_float2(g * g + f * f * step.x, f * f * step.y));
  t.cross = cscale(whole, 2.0f * f * g);
  return t;
}

// --- the encoded stack, decoded on the device ---------------------------------------------------------

struct DecodeInputs {
  Encoding encoding;
  const unsigned char* payload;
  const float* psi_weight;
  const float* phi_weight;
  const EncodingException* exceptions;
  int exception_count;
  int width, height;
};

// One decoded sample, weighted; informative = it counts in the reference's B (valid, weighted
// phi > 0). Mirrors decode() in encoding.cpp.
__device__ inline void decode_sample(const DecodeInputs& in, int e, int x, int y, float& psi, float& phi,
                              bool& informative) {
  const std::size_t pixel = std::size_t(y) * in.width + x;
  const std::size_t i = std::size_t(e) * in.width * in.height + pixel;
  float p = 0, f = 0;
  bool valid = true;
  switch (in.encoding) {
    case Encoding::fp32: {
      const float2 pair = reinterpret_cast<const float2*>(in.payload)[i];
      p = pair.x, f = pair.y;
      break;
    }
    case Encoding::fp16: {
      const __half2 pair = reinterpret_cast<const __half2*>(in.payload)[i];
      p = __low2float(pair), f = __high2float(pair);
      break;
    }
    case Encoding::int8: {
      const char2 pair = reinterpret_cast<const char2*>(in.payload)[i];
      const int code = pair.x;
      if (code == int8_codes::psi_invalid) {
        valid = false;
        break;
      }
      f = float(static_cast<unsigned char>(pair.y));
      if (code == int8_codes::psi_exception) {
        // Exceptions are sorted by (exposure, pixel): binary search.
        int lo = 0, hi = in.exception_count;
        while (lo < hi) {
          const int mid = (lo + hi) / 2;
          const EncodingException& m = in.exceptions[mid];
          const bool before = m.exposure != unsigned(e) ? m.exposure < unsigned(e) : m.pixel < unsigned(pixel);
          if (before) lo = mid + 1;
          else hi = mid;
        }
        if (lo < in.exception_count && in.exceptions[lo].exposure == unsigned(e) &&
            in.exceptions[lo].pixel == unsigned(pixel))
          p = in.exceptions[lo].psi;
        else
          valid = false;  // the host encoder never writes this; treat as no data
      } else {
        p = float(code);
      }
      break;
    }
  }
  valid = valid && f > 0;
  psi = valid ? in.psi_weight[e] * p : 0.0f;
  phi = valid ? in.phi_weight[e] * f : 0.0f;
  informative = valid && phi > 0;
  if (!informative) psi = phi = 0.0f;
}

inline DecodeInputs decode_inputs(SpectralState& s) {
  return DecodeInputs{s.encoding, s.payload.get(), s.psi_weight.get(), s.phi_weight.get(),
                      s.exceptions.get(), int(s.exceptions.size()), s.geometry.width, s.geometry.height};
}

// --- stages shared by the engines (spectra.cu) ------------------------------------------------------

// Uploads the encoded payload unless this stack is already on the device, and for fractional
// searches (state.fractional) its covariance planes.
void upload_stack(SpectralState& state, const EncodedStack& stack);
// Decodes every exposure into zero-padded weighted planes, marks informative samples, finds the
// smallest positive weighted phi, and runs the forward transforms (state.spectra).
void forward_transforms(SpectralState& state);
// FP16 spectra and per-frequency scales, and shift_y_rel, for the FP16 engines; for fractional
// shifts also the FP16 covariance channels and frac_y_rel.
void pack_half_spectra(SpectralState& state, int vb_granularity);
// The row route's windows for CTAs of `group_rows` consecutive rows b (host tables, uploaded):
// false, leaving state.row_route unset, where the rows of one group spread over more than a
// window of `max_window_rows` holds (a coarse vy grid) or SHIFTSTACK_TC_ROUTE=planes.
bool plan_row_route(SpectralState& state, int group_rows, int max_window_rows);
// Row route: FP16 rows and per-mx scales (half_spectra, scales).
void pack_half_rows(SpectralState& state);
// Picks state.fused_scoring for this search (before the plans are made): the fused route needs no
// top-k lists (their kernel reads whole planes), an x axis whose lines fit twice per SM in shared
// memory, and no SHIFTSTACK_FUSED_SCORING=0 (which keeps the 2-D route, for A/B timing).
void choose_post_processing(SpectralState& state);
// The inverse plan of a chunk of `rows` velocity rows on the chosen route (made once per shape).
FftPlan& inverse_plan(SpectralState& state, int rows);
// Velocity-spectrum chunk -> inverse FFTs -> crop, score, digest partials, candidates, top-k.
void inverse_transforms(SpectralState& state, int rows);
// Fills state.extreme_probes from the shift tables.
void find_extreme_probes(SpectralState& state);
void score_chunk(SpectralState& state, int b_begin, int b_end, bool first_chunk);
// After every chunk is scored: the exact A and B of the listed untrusted trials (state.recompute,
// as many as recompute_count says, up to its capacity; a count beyond it means the scan must be
// rerun with a longer list).
void recompute_trials(SpectralState& state);
// Informative samples along each trial (x, y, global velocity; velocity < 0 gives 0).
std::vector<int> observation_counts(SpectralState& state, const std::vector<int4>& trials);
// Queues the obs_count of every top-k entry and the downloads of the lists and counts into
// host_top and host_top_counts (complete after the stream is synchronized).
void download_top_k(SpectralState& state);

}  // namespace shiftstack::cuda
