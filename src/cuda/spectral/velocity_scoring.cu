// Back half of the Fourier route, shared by the three engines: the inverse transform per velocity
// (in place; its real part is A, its imaginary part B), crop to the search region, the exact
// no-sample test, Z = A / sqrt(B), digest partials (double sums), candidates above a threshold,
// and per-origin top-k. Two routes: cuFFT along y and the inverse along x inside the scoring
// kernel (transform_score_kernel), or cuFFT's 2-D inverse and then score_kernel (top-k lists,
// and x axes too long for shared memory).
#include <algorithm>
#include <climits>
#include <cstdlib>
#include <string>
#include <vector>

#include "cuda/common/z_gate.hpp"
#include "axis_fft.cuh"
#include "spectra.cuh"

namespace shiftstack::cuda {

namespace {

// One-warp blocks per SM (score_kernel's launch bounds: 64 registers). Measured on the H200 (dense,
// cuda-tc, d89e3a8's kernel): 32 blocks 2.88 ms, 24 (no spills) 3.29, 16 with 8 trials in flight 4.47.
constexpr int kScoreBlocks = 32;

struct ScoreInputs {
  const float2* sums;          // [v_local][x][pitch]: the stacked (A, B)
  std::size_t velocity_stride; // values between velocities: nx * pitch
  int pitch;
  int va, b_begin;
  int rx0, ry0, rw, rh;
  const std::int32_t* sx;  // [a][E]
  const std::int32_t* sy;  // [b][E]
  const std::int32_t* probe_order;  // exposures, nearest t_ref first
  const std::int32_t* extreme_probes;  // [v][SpectralState::kExtremeProbes]
  int exposures;
  const std::uint32_t* informative;
  int words_per_column, width, height;
  const unsigned int* floor_bits;  // smallest, largest positive weighted phi (float bits), found on the device
  float exact_below;               // SpectralState::exact_below
  const float* fx;  // [a][E] fractional shifts: s - floor(s) (sx, sy hold the floors); else null
  const float* fy;  // [b][E]
  // Fractional shifts: what the exact gather of a trial reads (below-floor trials).
  DecodeInputs decode;
  const float* covariances;  // [right, down, diag, antidiag][e][y][x], decoded-phi units
};

// Where score_kernel writes: per-velocity partial digests, the candidate list, and the list of
// scored trials whose B must be gathered exactly.
struct ScoreOutputs {
  DigestPartial* partials;  // [global velocity][column strip]
  bool collect;
  double candidate_threshold;
  DeviceCandidate* candidates;
  unsigned long long* candidate_count;
  unsigned long long candidate_capacity;
  RecomputedTrial* recompute;
  unsigned long long* recompute_count;  // may exceed the capacity: the host then reruns the scan
  unsigned long long recompute_capacity;
};

// Is pixel (px, py) of exposure e inside the image and informative?
__device__ __forceinline__ bool informative_pixel(const std::uint32_t* informative, int words_per_column, int width,
                                                  int height, int e, int px, int py) {
  if (px < 0 || py < 0 || px >= width || py >= height) return false;
  const std::uint32_t word = __ldg(informative + (std::size_t(e) * width + px) * words_per_column + (py >> 5));
  return (word >> (py & 31)) & 1u;
}

// Does the sample of exposure e at (px, py) count? Integer shifts: that pixel. Fractional shifts
// (wide / tall: a nonzero fraction along x / y): any bilinear corner of nonzero weight, as in the
// reference, where a zero-weight corner is skipped.
__device__ __forceinline__ bool sample_counts(const std::uint32_t* informative, int words_per_column, int width,
                                              int height, int e, int px, int py, bool wide, bool tall) {
  return informative_pixel(informative, words_per_column, width, height, e, px, py) ||
         (wide && informative_pixel(informative, words_per_column, width, height, e, px + 1, py)) ||
         (tall && informative_pixel(informative, words_per_column, width, height, e, px, py + 1)) ||
         (wide && tall && informative_pixel(informative, words_per_column, width, height, e, px + 1, py + 1));
}

// Exact: does any sample of this trial carry information? Trials with none have B = 0 in the
// gather and are not scored; the FFT route's B there is rounding noise, so it is not used to
// decide. Probing the exposures nearest t_ref first (smallest shifts), almost every trial answers
// at its first probe; in stack order, trials near an edge moving outward probed hundreds.
// sx, sy, fx, fy: the trial's rows of the shift tables (fx, fy null for integer shifts).
__device__ __forceinline__ bool informative_at(const ScoreInputs& in, const std::int32_t* sx, const std::int32_t* sy,
                                               const float* fx, const float* fy, int e, int x, int y) {
  return sample_counts(in.informative, in.words_per_column, in.width, in.height, e, x + sx[e], y + sy[e],
                       fx && fx[e] > 0, fy && fy[e] > 0);
}

// The exposure nearest t_ref first (interior origins), then the velocity's extreme-shift
// exposures (origins near an edge or a corner), then every exposure nearest-first: the answer is
// exact, and almost always found within a few probes.
__device__ bool has_informative_sample(const ScoreInputs& in, int a, int b, int x, int y) {
  const std::int32_t* sx = in.sx + std::size_t(a) * in.exposures;
  const std::int32_t* sy = in.sy + std::size_t(b) * in.exposures;
  const float* fx = in.fx ? in.fx + std::size_t(a) * in.exposures : nullptr;
  const float* fy = in.fy ? in.fy + std::size_t(b) * in.exposures : nullptr;
  if (informative_at(in, sx, sy, fx, fy, __ldg(in.probe_order), x, y)) return true;
  const std::int32_t* extremes = in.extreme_probes + (std::size_t(b) * in.va + a) * SpectralState::kExtremeProbes;
  for (int k = 0; k < SpectralState::kExtremeProbes; ++k)
    if (informative_at(in, sx, sy, fx, fy, __ldg(extremes + k), x, y)) return true;
  for (int k = 1; k < in.exposures; ++k)
    if (informative_at(in, sx, sy, fx, fy, __ldg(in.probe_order + k), x, y)) return true;
  return false;
}

// One exposure's share of a trial's exact A and B (double sums), as the reference engine
// gathers it. Integer shifts: the nearest pixel. Fractional shifts: bilinear weights of the four
// corners, a corner counting when its weight is nonzero and its sample informative, and
// B = sum_ij w_i w_j Cov(psi_i, psi_j) (SPEC 2).
__device__ void exact_exposure_sums(const ScoreInputs& in, int a, int b, int x, int y, int e, double& sum_a,
                                    double& sum_b) {
  const int ix = x + in.sx[std::size_t(a) * in.exposures + e], iy = y + in.sy[std::size_t(b) * in.exposures + e];
  if (!in.fx) {
    if (ix < 0 || iy < 0 || ix >= in.width || iy >= in.height) return;
    float psi, phi;
    bool informative;
    decode_sample(in.decode, e, ix, iy, psi, phi, informative);
    sum_a += psi;
    sum_b += phi;
    return;
  }
  if (ix < -1 || iy < -1 || ix >= in.width || iy >= in.height) return;  // no corner inside
  const std::size_t image = std::size_t(in.width) * in.height;
  const double f = in.fx[std::size_t(a) * in.exposures + e], g = in.fy[std::size_t(b) * in.exposures + e];
  const double w[4] = {(1 - f) * (1 - g), f * (1 - g), (1 - f) * g, f * g};
  const int cx[4] = {ix, ix + 1, ix, ix + 1}, cy[4] = {iy, iy, iy + 1, iy + 1};
  bool valid[4];
#pragma unroll
  for (int c = 0; c < 4; ++c) {
    valid[c] = false;
    if (w[c] == 0 || cx[c] < 0 || cy[c] < 0 || cx[c] >= in.width || cy[c] >= in.height) continue;
    float psi, phi;
    decode_sample(in.decode, e, cx[c], cy[c], psi, phi, valid[c]);
    sum_a += w[c] * psi;
    sum_b += w[c] * w[c] * phi;
  }
  const double weight = in.decode.phi_weight[e];
  auto cov = [&](int plane, int px, int py) {
    return weight * in.covariances[(std::size_t(plane) * in.exposures + e) * image + std::size_t(py) * in.width + px];
  };
  if (valid[0] && valid[1]) sum_b += 2 * w[0] * w[1] * cov(0, ix, iy);
  if (valid[2] && valid[3]) sum_b += 2 * w[2] * w[3] * cov(0, ix, iy + 1);
  if (valid[0] && valid[2]) sum_b += 2 * w[0] * w[2] * cov(1, ix, iy);
  if (valid[1] && valid[3]) sum_b += 2 * w[1] * w[3] * cov(1, ix + 1, iy);
  if (valid[0] && valid[3]) sum_b += 2 * w[0] * w[3] * cov(2, ix, iy);
  if (valid[1] && valid[2]) sum_b += 2 * w[1] * w[2] * cov(3, ix, iy);
}

// The exact A and B of trial (a, b) at origin (x, y), one thread walking every exposure.
__device__ void exact_sums(const ScoreInputs& in, int a, int b, int x, int y, float& A, float& B) {
  double sum_a = 0, sum_b = 0;
  for (int e = 0; e < in.exposures; ++e) exact_exposure_sums(in, a, b, x, y, e, sum_a, sum_b);
  A = float(sum_a);
  B = float(sum_b);
}

// The same, the whole warp walking the exposures (32 per step) and summing in a fixed order, so
// the result does not change from run to run. Every lane gets A and B.
__device__ void warp_exact_sums(const ScoreInputs& in, int a, int b, int x, int y, int lane, float& A, float& B) {
  double sum_a = 0, sum_b = 0;
  for (int e = lane; e < in.exposures; e += 32) exact_exposure_sums(in, a, b, x, y, e, sum_a, sum_b);
  for (int offset = 16; offset > 0; offset /= 2) {
    sum_a += __shfl_xor_sync(0xffffffffu, sum_a, offset);
    sum_b += __shfl_xor_sync(0xffffffffu, sum_b, offset);
  }
  A = float(sum_a);
  B = float(sum_b);
}

// What the B of a trial is checked against (SpectralState::exact_below): the FFT route's B carries
// a rounding error of the order of the plane's largest values, so a B that is small against them
// is not trusted. Below max(smallest phi, exact_below * E * largest phi) the trial is gathered
// exactly (recomputed). Engines with exact_below = 0 (the FP16 ones, integer shifts only) instead
// raise a B below the smallest phi, which the exact B of a trial with a sample cannot undercut
// (clamped). Fractional shifts always recompute there: small corner weights can undercut any floor.
struct TrustRule {
  float b_floor;    // smallest positive weighted phi
  float trusted;    // B at or above this is used as the transform gave it
  bool recompute;   // below it: gathered exactly (else clamped to b_floor)
};

__device__ TrustRule trust_rule(const ScoreInputs& in) {
  TrustRule rule;
  rule.b_floor = __uint_as_float(__ldg(in.floor_bits));
  rule.trusted = rule.b_floor;
  if (in.exact_below > 0)
    rule.trusted = fmaxf(rule.b_floor, in.exact_below * float(in.exposures) * __uint_as_float(__ldg(in.floor_bits + 1)));
  rule.recompute = in.fx || in.exact_below > 0;
  return rule;
}

// A trial's A and B as the transform gave them (`sums`), clamped where the rule says so;
// `untrusted`: the trial must be gathered exactly before it is scored.
__device__ __forceinline__ void transform_sums(const TrustRule& rule, float2 sums, float& A, float& B, bool& clamped,
                                               bool& untrusted) {
  A = sums.x;
  B = sums.y;
  const bool low = B < rule.trusted;
  clamped = low && !rule.recompute;
  untrusted = low && rule.recompute;
  if (clamped) B = rule.b_floor;
}

// The same for trial v_local at origin (x, y).
__device__ __forceinline__ void transform_sums(const ScoreInputs& in, const TrustRule& rule, int v_local, int x, int y,
                                               float& A, float& B, bool& clamped, bool& untrusted) {
  transform_sums(rule, in.sums[std::size_t(v_local) * in.velocity_stride + std::size_t(x) * in.pitch + y], A, B,
                 clamped, untrusted);
}

__device__ void merge_partial(DigestPartial& into, const DigestPartial& other) {
  into.sumA += other.sumA;
  into.sumB += other.sumB;
  into.scored += other.scored;
  into.count += other.count;
  into.clamped += other.clamped;
  if (other.argmax_velocity < 0) return;
  const bool better =
      into.argmax_velocity < 0 || other.maxZ > into.maxZ ||
      (other.maxZ == into.maxZ &&
       (other.argmax_velocity != into.argmax_velocity ? other.argmax_velocity < into.argmax_velocity
        : other.argmax_y != into.argmax_y             ? other.argmax_y < into.argmax_y
                                                      : other.argmax_x < into.argmax_x));
  if (better) {
    into.maxZ = other.maxZ;
    into.argmax_velocity = other.argmax_velocity;
    into.argmax_x = other.argmax_x;
    into.argmax_y = other.argmax_y;
  }
}

// The probes of one velocity, resolved once per block: exposure and its shifts.
struct Probes {
  int exposure[1 + SpectralState::kExtremeProbes];
  int sx[1 + SpectralState::kExtremeProbes];
  int sy[1 + SpectralState::kExtremeProbes];
  bool wide[1 + SpectralState::kExtremeProbes];  // fractional: the x + 1 corners count
  bool tall[1 + SpectralState::kExtremeProbes];  // fractional: the y + 1 corners count
};

// Does probe k of the block find an informative sample for origin (x, y)? Integer shifts
// (Fractional false): only the nearest pixel counts, and the compiler drops the corner tests.
template <bool Fractional>
__device__ __forceinline__ bool probe_hits(const ScoreInputs& in, const Probes& probes, int k, int x, int y) {
  return sample_counts(in.informative, in.words_per_column, in.width, in.height, probes.exposure[k], x + probes.sx[k],
                       y + probes.sy[k], Fractional && probes.wide[k], Fractional && probes.tall[k]);
}

// The same for the extreme-shift probes (every probe but the first): false means "not found yet".
template <bool Fractional>
__device__ bool extreme_probes_hit(const ScoreInputs& in, const Probes& probes, int x, int y) {
#pragma unroll
  for (int k = 1; k < 1 + SpectralState::kExtremeProbes; ++k)
    if (probe_hits<Fractional>(in, probes, k, x, y)) return true;
  return false;
}

// Trials in flight per thread: their A, B loads and first probes are issued together. Two, not
// more: at 64 registers four spilled 32 bytes and eight 52, and the scoring of dense (cuda-tc, H200)
// took 2.00 ms with two, 2.42 with four, 3.34 with eight.
constexpr int kTrialsInFlight = 2;
// Trials every probe missed (mostly trials with no informative sample at all) wait in a per-warp
// queue and are then decided by the whole warp, 32 exposures per step: walked by one thread
// each, they kept whole blocks waiting at the final barrier. The queue is drained between groups
// of rows in flight, outside the unrolled loads.
// Scored trials whose transform B is untrusted are not gathered here but listed for
// recompute_kernel: the exact gather inlined in this kernel (845a5e5) took it from 78 to 106
// registers, 3 to 2 blocks per SM, and doubled the scoring time of every Fourier-route engine.
constexpr int hard_queue(int in_flight) { return 32 + 32 * in_flight; }
constexpr int kHardQueue = hard_queue(kTrialsInFlight);

// Queued trial flags.
constexpr int kClamped = 1;    // B was raised to the floor
constexpr int kUntrusted = 2;  // to be gathered exactly

struct HardTrial {
  int x, y;
  float A, B;
  int flags;
};

// A scored trial with a trusted (or clamped) B into the thread's partial digest and candidates;
// one with an untrusted B onto the list of trials to gather exactly (recompute_kernel).
// One thread's share of a velocity's digest: 32-bit counters (a thread scores at most one trial
// per origin of its columns) and no velocity (the block's), to keep the scoring loop's registers
// down; widened into a DigestPartial for the block's reduction.
struct ThreadDigest {
  double sumA = 0, sumB = 0, maxZ = -1e300;
  int scored = 0, count = 0, clamped = 0;
  int argmax_x = -1, argmax_y = -1;  // argmax_x < 0: nothing scored yet

  __device__ DigestPartial widen(long long velocity) const {
    return DigestPartial{sumA, sumB, maxZ, scored, count, clamped, argmax_x < 0 ? -1 : velocity, argmax_x, argmax_y};
  }
};

// Lists a scored trial whose transform B is untrusted, for recompute_kernel.
__device__ __forceinline__ void list_for_recompute(long long velocity, int x, int y, const ScoreOutputs& out) {
  const unsigned long long slot = atomicAdd(out.recompute_count, 1ull);
  if (slot < out.recompute_capacity) out.recompute[slot] = RecomputedTrial{x, y, int(velocity), 0, 0};
}

// A scored trial's share of the sums and counters.
__device__ __forceinline__ void tally(ThreadDigest& mine, float A, float B, bool clamped) {
  mine.sumA += A;
  mine.sumB += B;
  ++mine.scored;
  mine.clamped += clamped;
}

// A scored trial's Z against the threshold, the running maximum and the candidate threshold.
__device__ void rank(ThreadDigest& mine, long long velocity, int x, int y, float A, float B, double z_thr,
                     const ScoreOutputs& out) {
  // FP32, as the gathers score (score_trial).
  const float Z = A / sqrtf(B);
  if (Z > z_thr) ++mine.count;
  // Same velocity throughout: ties go to the smaller (y, x).
  if (mine.argmax_x < 0 || Z > mine.maxZ ||
      (Z == mine.maxZ && (y != mine.argmax_y ? y < mine.argmax_y : x < mine.argmax_x))) {
    mine.maxZ = Z;
    mine.argmax_x = x;
    mine.argmax_y = y;
  }
  if (out.collect && Z > out.candidate_threshold) {
    const unsigned long long slot = atomicAdd(out.candidate_count, 1ull);
    if (slot < out.candidate_capacity) out.candidates[slot] = DeviceCandidate{x, y, int(velocity), A, B, Z};
  }
}

// The gate of the thread's scored trials (ZGate): the floor is the smallest of the threshold, the
// candidate threshold and the thread's maximum so far; no gate before it has a maximum.
__device__ ZGate rank_gate(const ThreadDigest& mine, double z_thr, const ScoreOutputs& out) {
  if (mine.argmax_x < 0) return ZGate{};
  double floor = fmin(z_thr, mine.maxZ);
  if (out.collect) floor = fmin(floor, out.candidate_threshold);
  return ZGate(floor);
}

// A scored trial (B trusted, clamped, or untrusted) into the thread's digest, and ranked when the
// gate passes it, or onto the recompute list.
__device__ __forceinline__ void offer(ThreadDigest& mine, long long velocity, int x, int y, float A, float B,
                                      bool clamped, bool untrusted, double z_thr, const ScoreOutputs& out,
                                      const ZGate& gate) {
  if (untrusted) return list_for_recompute(velocity, x, y, out);
  tally(mine, A, B, clamped);
  if (gate.passes(A, B)) rank(mine, velocity, x, y, A, B, z_thr, out);
}

// A DigestPartial from another lane of the warp.
__device__ DigestPartial shuffle_partial(const DigestPartial& p, int offset) {
  DigestPartial q;
  q.sumA = __shfl_xor_sync(0xffffffffu, p.sumA, offset);
  q.sumB = __shfl_xor_sync(0xffffffffu, p.sumB, offset);
  q.maxZ = __shfl_xor_sync(0xffffffffu, p.maxZ, offset);
  q.scored = __shfl_xor_sync(0xffffffffu, p.scored, offset);
  q.count = __shfl_xor_sync(0xffffffffu, p.count, offset);
  q.clamped = __shfl_xor_sync(0xffffffffu, p.clamped, offset);
  q.argmax_velocity = __shfl_xor_sync(0xffffffffu, p.argmax_velocity, offset);
  q.argmax_x = __shfl_xor_sync(0xffffffffu, p.argmax_x, offset);
  q.argmax_y = __shfl_xor_sync(0xffffffffu, p.argmax_y, offset);
  return q;
}

// The probes of the block's velocity, read by its first threads (__syncwarp or __syncthreads after).
__device__ void load_probes(const ScoreInputs& in, int a, int b, long long velocity, Probes& probes) {
  if (threadIdx.x >= 1 + SpectralState::kExtremeProbes) return;
  const int k = threadIdx.x;
  const int e = k == 0 ? in.probe_order[0] : in.extreme_probes[velocity * SpectralState::kExtremeProbes + k - 1];
  probes.exposure[k] = e;
  probes.sx[k] = in.sx[std::size_t(a) * in.exposures + e];
  probes.sy[k] = in.sy[std::size_t(b) * in.exposures + e];
  probes.wide[k] = in.fx && in.fx[std::size_t(a) * in.exposures + e] > 0;
  probes.tall[k] = in.fy && in.fy[std::size_t(b) * in.exposures + e] > 0;
}

// The rows of the region one warp scores: first .. first + kTrialsInFlight - 1, then the same
// from first + step, and so on.
struct RowWalk {
  int first, step;
};

// One warp scores its rows x of a strip of 32 region columns y (lane = column; `mine` is the
// lane's share of the digest). `sums_at(x)` gives the lane's transform (A, B) at origin row x;
// it is called only for origins inside the region. `first_probe_word(x, px, column)` gives the
// lane's word of the first probe's bitmap at source row px (integer shifts; `column` points at
// the lane's word of row 0). Every lane runs the same iterations (the warp votes need all
// lanes), and no divisions run in the loop.
template <bool Fractional, int InFlight, class SumsAt, class FirstProbeWord>
__device__ void score_strip_rows(const ScoreInputs& in, const Probes& probes, HardTrial* hard, int a, int b,
                                 long long velocity, int strip, RowWalk rows, const SumsAt& sums_at,
                                 const FirstProbeWord& first_probe_word, double z_thr, const ScoreOutputs& out,
                                 ThreadDigest& mine) {
  const int lane = threadIdx.x & 31;
  const TrustRule rule = trust_rule(in);
  const std::int32_t* sx = in.sx + std::size_t(a) * in.exposures;
  const std::int32_t* sy = in.sy + std::size_t(b) * in.exposures;
  const float* fx = Fractional ? in.fx + std::size_t(a) * in.exposures : nullptr;
  const float* fy = Fractional ? in.fy + std::size_t(b) * in.exposures : nullptr;
  int queued = 0;  // warp-uniform
  auto drain = [&]() {
    __syncwarp();
    for (int t = 0; t < queued; ++t) {
      const HardTrial h = hard[t];
      bool found = false;
      for (int k0 = 0; k0 < in.exposures && !found; k0 += 32) {
        const int k = k0 + lane;
        found = __any_sync(0xffffffffu, k < in.exposures && informative_at(in, sx, sy, fx, fy, __ldg(in.probe_order + k), h.x, h.y));
      }
      if (found && lane == 0)
        offer(mine, velocity, h.x, h.y, h.A, h.B, (h.flags & kClamped) != 0, (h.flags & kUntrusted) != 0, z_thr, out,
              ZGate{});
    }
    queued = 0;
    __syncwarp();
  };
  const int j = strip * 32 + lane;
  const int y = in.ry0 + j;
  // The lane's word of the first probe's bitmap column (integer shifts: one pixel per trial, so
  // the row walk only moves along x).
  const int probe_py = y + probes.sy[0];
  const bool probe_row_inside = j < in.rh && probe_py >= 0 && probe_py < in.height;
  const std::uint32_t* probe_column =
      in.informative + std::size_t(probes.exposure[0]) * in.width * in.words_per_column + (probe_py >> 5);
  const int probe_bit = probe_py & 31;
  for (int i0 = rows.first; i0 < in.rw; i0 += rows.step) {
    float A[InFlight], B[InFlight];
    bool clamped[InFlight], untrusted[InFlight], hit[InFlight];
    // The loads of every row in flight first: the sums and the first probe (the exposure
    // nearest t_ref), which decides almost every trial.
#pragma unroll
    for (int u = 0; u < InFlight; ++u) {
      const int x = in.rx0 + i0 + u;
      const bool inside = j < in.rh && i0 + u < in.rw;
      if (inside) transform_sums(rule, sums_at(x), A[u], B[u], clamped[u], untrusted[u]);
      if constexpr (Fractional) {
        hit[u] = inside && probe_hits<true>(in, probes, 0, x, y);
      } else {
        const int px = x + probes.sx[0];
        hit[u] = inside && probe_row_inside && static_cast<unsigned>(px) < static_cast<unsigned>(in.width) &&
                 ((first_probe_word(x, px, probe_column) >> probe_bit) & 1u);
      }
    }
    const ZGate gate = rank_gate(mine, z_thr, out);
#pragma unroll
    for (int u = 0; u < InFlight; ++u) {
      const int x = in.rx0 + i0 + u;
      const bool inside = j < in.rh && i0 + u < in.rw;
      if (inside && !hit[u]) hit[u] = extreme_probes_hit<Fractional>(in, probes, x, y);
      if (hit[u]) offer(mine, velocity, x, y, A[u], B[u], clamped[u], untrusted[u], z_thr, out, gate);
      const bool hard_trial = inside && !hit[u];
      const unsigned ballot = __ballot_sync(0xffffffffu, hard_trial);
      if (hard_trial)
        hard[queued + __popc(ballot & ((1u << lane) - 1u))] =
            HardTrial{x, y, A[u], B[u], (clamped[u] ? kClamped : 0) | (untrusted[u] ? kUntrusted : 0)};
      queued += __popc(ballot);
    }
    if (queued > hard_queue(InFlight) - 32 * InFlight) drain();
  }
  if (queued > 0) drain();
}

// The warp's digest, the same in every lane: a butterfly (the additions commute and the argmax
// rule is a strict order), so the merge is the same from run to run.
__device__ DigestPartial warp_digest(const ThreadDigest& mine, long long velocity) {
  DigestPartial total = mine.widen(velocity);
  for (int offset = 16; offset > 0; offset /= 2) merge_partial(total, shuffle_partial(total, offset));
  return total;
}

// One warp per (velocity of the chunk, strip of 32 region columns y): lanes consecutive in y (the
// planes are y-contiguous), each walking the region's rows x; the warp's partial digest goes to
// its own slot, merged on the host in a fixed order. One-warp blocks, because blocks of 8 warps
// (one velocity) spent a quarter of the scoring at their final barrier, waiting for the warp with
// the most trials to decide exactly (Nsight Compute, `dense`, fb39fce).
// One instantiation per shift mode, so that the integer one carries no bilinear corner tests
// (they cost it a fifth of its time).
template <bool Fractional>
__global__ void __launch_bounds__(32, kScoreBlocks) score_kernel(ScoreInputs in, double z_thr, ScoreOutputs out) {
  __shared__ Probes probes;
  __shared__ HardTrial hard[kHardQueue];
  const int strips = (in.rh + 31) / 32;
  const int v_local = blockIdx.x / strips, strip = blockIdx.x % strips;
  const int a = v_local % in.va, b = in.b_begin + v_local / in.va;
  const long long velocity = (long long)b * in.va + a;
  load_probes(in, a, b, velocity, probes);
  __syncwarp();
  // The lane's column of the sums.
  const float2* column = in.sums + std::size_t(v_local) * in.velocity_stride + in.ry0 + strip * 32 + threadIdx.x;
  ThreadDigest mine;
  score_strip_rows<Fractional, kTrialsInFlight>(
      in, probes, hard, a, b, velocity, strip, RowWalk{0, kTrialsInFlight},
      [&](int x) { return column[std::size_t(x) * in.pitch]; },
      [&](int, int px, const std::uint32_t* probe_column) { return __ldg(probe_column + px * in.words_per_column); },
      z_thr, out, mine);
  const DigestPartial total = warp_digest(mine, velocity);
  if (threadIdx.x == 0) out.partials[velocity * strips + strip] = total;
}

// --- the fused route: the inverse along x inside the scoring ----------------------------------------
//
// After cuFFT's inverse along y, a block takes one (velocity, strip of 32 columns y): it reads the
// strip's nx rows once (coalesced, 256 bytes a row), runs 32 inverse transforms along x in shared
// memory (lane = column, so every access is conflict-free and every twiddle a broadcast), and
// scores the region's rows straight from there. The planes are not written back and read again,
// which the 2-D route's second cuFFT pass and the scoring's reads did.
//
// The transform: in-place mixed-radix decimation in time. Input row mx is placed at position
// p with digits d_s (p = d_1 + d_2 L_1 + ..., L_s = r_1 ... r_s) such that mx = sum_s d_s n / L_s
// (the mixed-radix digit reversal, AxisInverse::positions); stage s then combines r_s transforms
// of length L_{s-1} into transforms of length L_s, each butterfly reading and writing the same
// r_s positions. Signs as cuFFT's inverse: exp(+2 pi i j k / n), unnormalized (the contraction
// folds 1 / (nx ny) into its output).

// Shared memory of the fused kernel beyond its static arrays: the lines, the roots, and the first
// probe's bitmap words of the strip (two per region row; the region is at most n rows).
std::size_t fused_dynamic_bytes(int n) { return std::size_t(n) * 33 * sizeof(float2) + std::size_t(n) * 2 * 4; }

// One block of Warps warps per (velocity of the chunk, strip of 32 region columns y): the
// strip's lines after the inverse along y, inverted along x here, then scored; warp w scores
// rows w InFlight + ..., and the warps' digests merge in warp order (deterministic).
template <bool Fractional, int Warps, int InFlight>
__global__ void __launch_bounds__(32 * Warps, 2)
    transform_score_kernel(ScoreInputs in, AxisInverse fft, double z_thr, ScoreOutputs out) {
  extern __shared__ float2 lines[];  // [n][32], then the roots [n], then the probe words [rw][2]
  float2* roots = lines + std::size_t(fft.n) * 32;
  std::uint32_t* probe_words = reinterpret_cast<std::uint32_t*>(roots + fft.n);
  __shared__ Probes probes;
  __shared__ HardTrial hard[Warps][hard_queue(InFlight)];
  __shared__ DigestPartial warp_totals[Warps];
  const int strips = (in.rh + 31) / 32;
  const int v_local = blockIdx.x / strips, strip = blockIdx.x % strips;
  const int a = v_local % in.va, b = in.b_begin + v_local / in.va;
  const long long velocity = (long long)b * in.va + a;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  load_probes(in, a, b, velocity, probes);
  for (int m = threadIdx.x; m < fft.n; m += blockDim.x) roots[m] = __ldg(fft.roots + m);
  {
    const bool inside = strip * 32 + lane < in.rh;
    const float2* column = in.sums + std::size_t(v_local) * in.velocity_stride + in.ry0 + strip * 32 + lane;
#pragma unroll 8
    for (int mx = warp; mx < fft.n; mx += Warps)
      lines[__ldg(fft.positions + mx) * 32 + lane] = inside ? column[std::size_t(mx) * in.pitch] : float2{0, 0};
  }
  __syncthreads();
  // The first probe's bitmap words the strip's trials test (integer shifts): the strip's 32
  // columns y shifted by the probe's sy span two words; one row per region row x. Read once
  // here, so that the scoring's most frequent test waits on shared memory, not on L2.
  const int first_word = (in.ry0 + strip * 32 + probes.sy[0]) >> 5;  // floor, also below 0
  if constexpr (!Fractional) {
    const std::uint32_t* bitmap = in.informative + std::size_t(probes.exposure[0]) * in.width * in.words_per_column;
    for (int i = threadIdx.x; i < 2 * in.rw; i += blockDim.x) {
      const int px = in.rx0 + (i >> 1) + probes.sx[0], word = first_word + (i & 1);
      const bool inside = static_cast<unsigned>(px) < static_cast<unsigned>(in.width) &&
                          static_cast<unsigned>(word) < static_cast<unsigned>(in.words_per_column);
      probe_words[i] = inside ? __ldg(bitmap + std::size_t(px) * in.words_per_column + word) : 0u;
    }
  }
  inverse_along_x(fft, lines, roots);  // ends with a barrier: the probe words are visible after it
  // The lane's word among the two: first_word or the next (probe rows outside the image never ask).
  const int lane_word = ((in.ry0 + strip * 32 + lane + probes.sy[0]) >> 5) - first_word;
  ThreadDigest mine;
  score_strip_rows<Fractional, InFlight>(
      in, probes, hard[warp], a, b, velocity, strip, RowWalk{warp * InFlight, Warps * InFlight},
      [&](int x) { return lines[x * 32 + lane]; },
      [&](int x, int, const std::uint32_t*) { return probe_words[2 * (x - in.rx0) + lane_word]; },
      z_thr, out, mine);
  const DigestPartial total = warp_digest(mine, velocity);
  if (lane == 0) warp_totals[warp] = total;
  __syncthreads();
  if (threadIdx.x == 0) {
    DigestPartial merged = warp_totals[0];
    for (int w = 1; w < Warps; ++w) merge_partial(merged, warp_totals[w]);
    out.partials[velocity * strips + strip] = merged;
  }
}

// The fused kernel's shape: 16 warps per block, 2 trials in flight per warp (64 registers, so 2
// blocks fill the register file). Measured against 8 x 2, 8 x 4 and 12 x 2 (H100, one lease,
// `dense` and `kbmod` cuda-tc fp16): the most warps per SM won (bench/RESULTS.md, "Fourier-route
// stages on `dense`").
constexpr int kFusedWarps = 16;
constexpr int kFusedInFlight = 2;
const auto fused_integer_kernel = transform_score_kernel<false, kFusedWarps, kFusedInFlight>;
const auto fused_fractional_kernel = transform_score_kernel<true, kFusedWarps, kFusedInFlight>;

// The exact A and B of every listed trial, one warp per trial; the count is read on the device, so
// the host need not wait for the scoring (a fixed grid walks the list).
__global__ void recompute_kernel(ScoreInputs in, RecomputedTrial* trials, const unsigned long long* listed,
                                 unsigned long long capacity) {
  const unsigned long long count = *listed < capacity ? *listed : capacity;
  const unsigned long long warps = (gridDim.x * (unsigned long long)blockDim.x) / 32;
  const int lane = threadIdx.x & 31;
  for (unsigned long long t = (blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x) / 32; t < count; t += warps) {
    RecomputedTrial& trial = trials[t];
    float A, B;
    warp_exact_sums(in, trial.velocity % in.va, trial.velocity / in.va, trial.x, trial.y, lane, A, B);
    if (lane == 0) trial.A = A, trial.B = B;
  }
}

__device__ bool better_entry(float Z, int velocity, const TopEntry& than) {
  return Z > than.Z || (Z == than.Z && velocity < than.velocity);
}

constexpr int kTopKSlices = 8;  // warps per top-k block, each taking every 8th velocity of the chunk

std::size_t top_k_shared_bytes(int k) { return std::size_t(kTopKSlices) * k * 32 * sizeof(TopEntry); }

// Per origin: merge this chunk's velocities into the origin's best-k list (sorted best first).
// A block takes 32 origins, one per lane (consecutive y: coalesced reads); each of its warps keeps
// the best k of its slice of the velocities in shared memory ([slice][n][lane]), and warp 0 then
// merges the slices into the stored list. The order of entries is total (Z, then the smaller
// velocity), so the lists do not depend on how the velocities were sliced. A trial is tested for
// an informative sample only when it would enter its list: most fall below the list's worst.
__global__ void __launch_bounds__(32 * kTopKSlices) top_k_kernel(ScoreInputs in, int velocities, int k,
                                                                 bool first_chunk, TopEntry* top) {
  extern __shared__ TopEntry lists[];  // [kTopKSlices][k][32]
  const int lane = threadIdx.x & 31, slice = threadIdx.x >> 5;
  const long long origins = (long long)in.rw * in.rh;
  const long long idx = (long long)blockIdx.x * 32 + lane;
  const bool active = idx < origins;
  const int i = active ? int(idx / in.rh) : 0, j = active ? int(idx % in.rh) : 0;
  const int x = in.rx0 + i, y = in.ry0 + j;
  const TrustRule rule = trust_rule(in);
  auto entry = [&](int s, int n) -> TopEntry& { return lists[(s * k + n) * 32 + lane]; };
  auto insert = [&](int s, const TopEntry& e) {
    int n = k - 1;
    while (n > 0 && better_entry(e.Z, e.velocity, entry(s, n - 1))) {
      entry(s, n) = entry(s, n - 1);
      --n;
    }
    entry(s, n) = e;
  };
  TopEntry* stored = top + (std::size_t(j) * in.rw + i) * k;  // origin-major in region order
  const TopEntry empty{-__int_as_float(0x7f800000), 0, 0, -1};
  for (int n = 0; n < k; ++n) entry(slice, n) = slice == 0 && !first_chunk && active ? stored[n] : empty;
  for (int v_local = slice; active && v_local < velocities; v_local += kTopKSlices) {
    const int a = v_local % in.va, b = in.b_begin + v_local / in.va;
    const int velocity = b * in.va + a;
    float A, B;
    bool clamped, untrusted;
    transform_sums(in, rule, v_local, x, y, A, B, clamped, untrusted);
    if (!untrusted) {
      const float Z = A / sqrtf(B);
      if (better_entry(Z, velocity, entry(slice, k - 1)) && has_informative_sample(in, a, b, x, y))
        insert(slice, TopEntry{Z, A, B, velocity});
    } else if (has_informative_sample(in, a, b, x, y)) {
      exact_sums(in, a, b, x, y, A, B);
      const float Z = A / sqrtf(B);
      if (better_entry(Z, velocity, entry(slice, k - 1))) insert(slice, TopEntry{Z, A, B, velocity});
    }
  }
  __syncthreads();
  if (slice != 0 || !active) return;
  for (int s = 1; s < kTopKSlices; ++s)
    for (int n = 0; n < k; ++n) {  // each slice is sorted: its first entry below the bound ends it
      const TopEntry e = entry(s, n);
      if (!better_entry(e.Z, e.velocity, entry(0, k - 1))) break;
      insert(0, e);
    }
  for (int n = 0; n < k; ++n) stored[n] = entry(0, n);
}

}  // namespace

namespace {
// One warp per velocity: arg max / arg min over exposures of sx, sy, sx + sy, sx - sy (ties to the
// smaller exposure index).
__global__ void extreme_probes_kernel(const std::int32_t* sx, const std::int32_t* sy, int va, int velocities,
                                      int exposures, std::int32_t* probes) {
  const int v = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x & 31;
  if (v >= velocities) return;
  const int a = v % va, b = v / va;
  constexpr int kScores = SpectralState::kExtremeProbes;
  int best[kScores], where[kScores];
  for (int k = 0; k < kScores; ++k) best[k] = INT_MIN, where[k] = exposures;
  for (int e = lane; e < exposures; e += 32) {
    const int x = sx[std::size_t(a) * exposures + e], y = sy[std::size_t(b) * exposures + e];
    const int score[kScores] = {x, -x, y, -y, x + y, -x - y, x - y, y - x};
    for (int k = 0; k < kScores; ++k)
      if (score[k] > best[k]) best[k] = score[k], where[k] = e;  // e ascends: ties keep the first
  }
  for (int k = 0; k < kScores; ++k)
    for (int offset = 16; offset > 0; offset /= 2) {
      const int other = __shfl_xor_sync(0xffffffffu, best[k], offset);
      const int other_where = __shfl_xor_sync(0xffffffffu, where[k], offset);
      if (other > best[k] || (other == best[k] && other_where < where[k])) best[k] = other, where[k] = other_where;
    }
  if (lane < kScores) {
    int mine = where[0];
    for (int k = 1; k < kScores; ++k)
      if (lane == k) mine = where[k];
    probes[std::size_t(v) * kScores + lane] = mine;
  }
}
}  // namespace

void find_extreme_probes(SpectralState& s) {
  const int velocities = s.va * s.vb;
  s.extreme_probes.resize(std::size_t(velocities) * SpectralState::kExtremeProbes);
  extreme_probes_kernel<<<unsigned((velocities + 7) / 8), 256, 0, s.stream>>>(
      s.shift_x.get(), s.shift_y.get(), s.va, velocities, s.exposures, s.extreme_probes.get());
  SHIFTSTACK_CUDA_CHECK_LAUNCH();
}

namespace {

// Radices of an inverse along an axis of n points (2, 3, 5, 7-smooth, as fft_friendly_size
// makes them): eights first, then 4, 2, 7, 5, 3. Empty when n has another prime factor.
std::vector<int> axis_radices(int n) {
  std::vector<int> radices;
  for (int radix : {8, 4, 2, 7, 5, 3})
    while (n % radix == 0) radices.push_back(radix), n /= radix;
  if (n != 1) radices.clear();
  return radices;
}

}  // namespace

void choose_post_processing(SpectralState& s) {
  const int n = s.geometry.nx;
  const std::vector<int> radices = axis_radices(n);
  // SHIFTSTACK_FUSED_SCORING=0 keeps the 2-D route (A/B timing); 1, or unset, lets the fused one run.
  const char* forced = std::getenv("SHIFTSTACK_FUSED_SCORING");
  const std::string setting = forced ? forced : "1";
  require(setting == "0" || setting == "1",
          "SHIFTSTACK_FUSED_SCORING must be 0 or 1, not '" + setting + "'");
  bool fused = s.policy.top_k == 0 && !radices.empty() && int(radices.size()) <= kMaxAxisStages &&
               s.region.width <= n && setting == "1";
  if (fused) {
    // Two blocks per SM at least, or the 2-D route (a 4096-row CCD, say, does not fit at all).
    const std::size_t bytes = fused_dynamic_bytes(n);
    int device = 0, optin = 0;
    SHIFTSTACK_CUDA_CHECK(cudaGetDevice(&device));
    SHIFTSTACK_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    cudaFuncAttributes attributes{};  // the larger static shared memory of the two instantiations
    std::size_t static_bytes = 0;
    for (auto kernel : {fused_integer_kernel, fused_fractional_kernel}) {
      SHIFTSTACK_CUDA_CHECK(cudaFuncGetAttributes(&attributes, kernel));
      static_bytes = std::max(static_bytes, attributes.sharedSizeBytes);
    }
    fused = bytes + static_bytes <= std::size_t(optin);
    int blocks = 0;
    if (fused) {
      for (auto kernel : {fused_integer_kernel, fused_fractional_kernel})
        SHIFTSTACK_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
      SHIFTSTACK_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
          &blocks, s.fractional ? fused_fractional_kernel : fused_integer_kernel, 32 * kFusedWarps, bytes));
      fused = blocks >= 2;
    }
  }
  s.fused_scoring = fused;
  if (!fused) return;
  s.x_stages = int(radices.size());
  s.x_radices = 0;
  for (int k = 0; k < s.x_stages; ++k) s.x_radices |= (unsigned long long)radices[k] << (4 * k);
  // The digit reversal: position p (digits d_s, p = d_1 + d_2 L_1 + ...) holds input row
  // sum_s d_s n / L_s.
  std::vector<std::int32_t> positions(n);
  for (int p = 0; p < n; ++p) {
    int row = 0, below = 1;  // below = L_{s-1}
    for (int radix : radices) {
      const int digit = (p / below) % radix;
      below *= radix;
      row += digit * (n / below);
    }
    positions[row] = p;
  }
  s.x_positions.upload(positions, s.stream);
}

FftPlan& inverse_plan(SpectralState& s, int rows) {
  const FourierGeometry& g = s.geometry;
  const FftShape shape = s.fused_scoring ? FftShape::inverse_y_lines : FftShape::inverse_planes;
  const int batch = s.fused_scoring ? rows * s.va * g.nx : rows * s.va;
  auto& plan = s.inverse_plans[{shape, batch}];
  if (!plan) plan = std::make_unique<FftPlan>();
  plan->make(g.nx, g.ny, batch, shape, s.stream);
  return *plan;
}

void inverse_transforms(SpectralState& s, int rows) {
  if (s.row_route) return;  // nothing was transformed along y
  auto* spectra = reinterpret_cast<cufftComplex*>(s.velocity_spectra.get());
  SHIFTSTACK_CUFFT_CHECK(cufftExecC2C(inverse_plan(s, rows).handle(), spectra, spectra, CUFFT_INVERSE));
}

namespace {
// What the scoring kernels read, for the chunk of velocity rows from b_begin in
// velocity_spectra.
ScoreInputs score_inputs(SpectralState& s, int b_begin) {
  const FourierGeometry& g = s.geometry;
  ScoreInputs in{};
  in.sums = s.velocity_spectra.get();
  in.velocity_stride = std::size_t(g.nx) * g.ny;
  in.pitch = g.ny;
  in.va = s.va;
  in.b_begin = b_begin;
  in.rx0 = s.region.x0, in.ry0 = s.region.y0, in.rw = s.region.width, in.rh = s.region.height;
  in.sx = s.shift_x.get();
  in.sy = s.shift_y.get();
  in.probe_order = s.probe_order.get();
  in.extreme_probes = s.extreme_probes.get();
  in.exposures = s.exposures;
  in.informative = s.informative.get();
  in.words_per_column = s.words_per_column;
  in.width = g.width;
  in.height = g.height;
  in.floor_bits = s.floor_bits.get();
  in.exact_below = s.exact_below;
  in.fx = s.fractional ? s.frac_x.get() : nullptr;
  in.fy = s.fractional ? s.frac_y.get() : nullptr;
  in.decode = decode_inputs(s);
  in.covariances = s.fractional ? s.covariances.get() : nullptr;
  return in;
}
}  // namespace

void score_chunk(SpectralState& s, int b_begin, int b_end, bool first_chunk) {
  const int velocities = (b_end - b_begin) * s.va;
  const ScoreInputs in = score_inputs(s, b_begin);
  ScoreOutputs out{};
  out.partials = s.partials.get();
  out.collect = s.policy.collect_candidates;
  out.candidate_threshold = s.policy.candidate_threshold;
  out.candidates = s.candidates.get();
  out.candidate_count = s.candidate_count.get();
  out.candidate_capacity = s.candidates.size();
  out.recompute = s.recompute.get();
  out.recompute_count = s.recompute_count.get();
  out.recompute_capacity = s.recompute.size();
  const unsigned blocks = unsigned(velocities * s.score_strips());
  if (s.fused_scoring) {
    const AxisInverse fft = axis_inverse(s);
    (s.fractional ? fused_fractional_kernel : fused_integer_kernel)<<<blocks, 32 * kFusedWarps,
                                                                    fused_dynamic_bytes(fft.n), s.stream>>>(
        in, fft, s.z_thr, out);
  } else if (s.fractional) {
    score_kernel<true><<<blocks, 32, 0, s.stream>>>(in, s.z_thr, out);
  } else {
    score_kernel<false><<<blocks, 32, 0, s.stream>>>(in, s.z_thr, out);
  }
  SHIFTSTACK_CUDA_CHECK_LAUNCH();
  if (s.policy.top_k > 0) {
    // The lists read whole planes after the 2-D inverse: choose_post_processing never fuses here.
    require(!s.fused_scoring, "top-k lists need the 2-D inverse route");
    const long long origins = s.region.count();
    const std::size_t shared = top_k_shared_bytes(s.policy.top_k);
    SHIFTSTACK_CUDA_CHECK(cudaFuncSetAttribute(top_k_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(shared)));
    top_k_kernel<<<unsigned((origins + 31) / 32), 32 * kTopKSlices, shared, s.stream>>>(in, velocities, s.policy.top_k,
                                                                                      first_chunk, s.top.get());
    SHIFTSTACK_CUDA_CHECK_LAUNCH();
  }
}

void recompute_trials(SpectralState& s) {
  if (!s.recompute_listing()) return;
  const ScoreInputs in = score_inputs(s, 0);  // only the stack and the shift tables are read
  // About one warp per scheduler: the lists are short (tens to thousands of trials).
  constexpr int kBlocks = 132, kThreads = 128;
  recompute_kernel<<<kBlocks, kThreads, 0, s.stream>>>(in, s.recompute.get(), s.recompute_count.get(),
                                                       s.recompute.size());
  SHIFTSTACK_CUDA_CHECK_LAUNCH();
}

namespace {
// Informative samples along each listed trial (the reference's obs_count).
// The trials: listed (x, y, velocity), or every entry of the top-k lists (k per origin, origins
// in region order) when `listed` is null.
struct ObservedTrials {
  const int4* listed;
  const TopEntry* top;
  int k, rx0, ry0, rw;
  __device__ int4 operator[](int idx) const {
    if (listed) return listed[idx];
    const int origin = idx / k;
    return make_int4(rx0 + origin % rw, ry0 + origin / rw, top[idx].velocity, 0);
  }
};

__global__ void observation_count_kernel(ObservedTrials trials, int count, const std::int32_t* sx,
                                         const std::int32_t* sy, const float* fx, const float* fy, int va,
                                         int exposures, const std::uint32_t* informative, int words_per_column,
                                         int width, int height, int* counts) {
  const int idx = blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= count) return;
  const int4 t = trials[idx];  // x, y, velocity
  if (t.z < 0) {
    counts[idx] = 0;
    return;
  }
  const int a = t.z % va, b = t.z / va;
  int observed = 0;
  for (int e = 0; e < exposures; ++e) {
    const std::size_t ia = std::size_t(a) * exposures + e, ib = std::size_t(b) * exposures + e;
    observed += sample_counts(informative, words_per_column, width, height, e, t.x + sx[ia], t.y + sy[ib],
                              fx && fx[ia] > 0, fy && fy[ib] > 0);
  }
  counts[idx] = observed;
}

void launch_observation_counts(SpectralState& s, ObservedTrials trials, int count, int* counts) {
  observation_count_kernel<<<unsigned((count + 255) / 256), 256, 0, s.stream>>>(
      trials, count, s.shift_x.get(), s.shift_y.get(), s.fractional ? s.frac_x.get() : nullptr,
      s.fractional ? s.frac_y.get() : nullptr, s.va, s.exposures, s.informative.get(), s.words_per_column,
      s.geometry.width, s.geometry.height, counts);
  SHIFTSTACK_CUDA_CHECK_LAUNCH();
}
}  // namespace

std::vector<int> observation_counts(SpectralState& s, const std::vector<int4>& trials) {
  std::vector<int> counts(trials.size());
  if (trials.empty()) return counts;
  DeviceArray<int4> list;
  DeviceArray<int> out;
  list.upload(trials, s.stream);
  out.resize(trials.size());
  launch_observation_counts(s, ObservedTrials{list.get(), nullptr, 0, 0, 0, 0}, int(trials.size()), out.get());
  counts = out.download(s.stream);
  return counts;
}

void download_top_k(SpectralState& s) {
  const std::size_t entries = s.top.size();
  s.top_counts.resize(entries);
  launch_observation_counts(s, ObservedTrials{nullptr, s.top.get(), s.policy.top_k, s.region.x0, s.region.y0,
                                              s.region.width},
                            int(entries), s.top_counts.get());
  s.host_top.reserve(entries);
  s.host_top_counts.reserve(entries);
  SHIFTSTACK_CUDA_CHECK(cudaMemcpyAsync(s.host_top.get(), s.top.get(), entries * sizeof(TopEntry),
                                        cudaMemcpyDeviceToHost, s.stream));
  SHIFTSTACK_CUDA_CHECK(cudaMemcpyAsync(s.host_top_counts.get(), s.top_counts.get(), entries * sizeof(int),
                                        cudaMemcpyDeviceToHost, s.stream));
}

}  // namespace shiftstack::cuda
