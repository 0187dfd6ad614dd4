// cuda-fast for fractional shifts: bilinear sampling with the covariance-exact B of SPEC 2, at
// gather speed.
//
// Two facts make it cheap.
// 1. Every origin of a block shares the fraction of a shift: origin x samples exposure e at
//    x + s, whose fraction is that of s, so the corner weights depend on (velocity, exposure)
//    only and are computed once, not per origin.
// 2. The bilinear sums are separable. With lx = 1 - fx, gx0 = lx^2, gx1 = fx^2, hx = 2 lx fx (the
//    same along y):
//      A = ly Ra(iy) + fy Ra(iy + 1),                Ra(r) = lx psi(ix, r) + fx psi(ix + 1, r)
//      B = gy0 Rb(iy) + gy1 Rb(iy + 1) + hy S(iy),   Rb(r) = gx0 phi(ix, r) + gx1 phi(ix + 1, r) + hx ch(ix, r)
//                                                    S(r)  = gx0 cv(ix, r) + gx1 cv(ix + 1, r) + hx D(ix, r)
//    where ch and cv are the right and down covariances and D the mean of the two diagonal ones
//    (both diagonal pairs carry the weight product w0 w3 = w1 w2). Each covariance is zero unless
//    both samples of its pair are valid, and psi, phi are zero at invalid samples: then every term
//    the reference skips is a zero here, and B is exactly the variance of A.
//
// So a packet is one vx and a run of vy. Per exposure the block first interpolates along x
// (Ra, Rb, S over the packet's window, in shared memory: the "x pass"); every (vy, origin) then
// costs five FMAs on three shared values per row, a thread's consecutive origin rows sharing
// their rows (the "y pass"). Separate warps of the block run the two passes (see the kernel).
// Before the scans, a pass over the tile writes the weighted, masked planes the x pass reads
// (psi, phi, ch, cv as a float4 and D), so the inner loops have no tests.
//
// Against the reference (FP64 positions per origin): the weights come from frac(s) rather than
// from frac(fl(x + s)); the two differ by at most one ulp of x + s (2^-41 for images below 4096
// pixels), which moves a weight by as much and can keep a corner of weight below 1e-12 that the
// reference rounds to zero. Sums are FP32, as in every CUDA gather.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "cuda/common/check.cuh"
#include "cuda/common/device_buffer.cuh"
#include "cuda/common/warp_mma.cuh"
#include "cuda/gather/bilinear_sample.cuh"
#include "cuda/gather/gather_bilinear.hpp"
#include "cuda/gather/gather_driver.cuh"
#include "cuda/gather/velocity_packets.cuh"
#include "shiftstack/error.hpp"

namespace shiftstack::cuda {

namespace {

constexpr int kWarp = 32;          // origins along x per block: the window's columns, one per lane
constexpr int kMaxChunk = 8;       // exposures interpolated along x per barrier
constexpr int kPlaneThreadsX = 32;  // the planes pass: one thread per pixel
constexpr int kPlaneThreadsY = 8;

// The tile's weighted planes: per pixel (psi, phi, right covariance, down covariance) and the
// mean diagonal covariance, each zero where the sample (or one sample of the pair) is invalid.
struct BilinearPlanes {
  const float4* values = nullptr;
  const float* diagonal = nullptr;
  PixelRect rect;
  int pitch = 0;  // pixels per plane row
};

// One window row of the planes as copied: 32 columns and the one to their right.
struct RawRow {
  float4 values[kWarp + 1];
  float diagonal[kWarp];  // 656 bytes in all: rows stay 16-byte aligned
};

// The y weights of one (velocity, exposure) of the packet: (ly, fy, ly^2, fy^2), 2 ly fy, and the
// window row of floor(s).
struct YWeights {
  float4 low_high;
  float cross;
  int row;
  int pad[2];  // 32 bytes: two aligned loads
};

struct FastBilinearParams {
  BilinearPlanes planes;
  PacketTables t;        // vx runs of one; t.shift_x, t.shift_y are floor(s)
  const float* x_frac;   // [a * E + e]: s - floor(s) along x
  const float* y_frac;   // [b * E + e]
  ScanOutputs out;
  int groups;
  int chunk;       // exposures per x pass
  int rows_max;    // window rows reserved per exposure (the largest over packets)
  int slots;       // raw rows per producer warp and exposure: ceil(rows_max / producer warps)
};

template <StorageCode S>
__global__ void bilinear_planes_kernel(StackView view, float4* values, float* diagonal, int pitch) {
  const int lx = blockIdx.x * blockDim.x + threadIdx.x, ly = blockIdx.y * blockDim.y + threadIdx.y;
  const int e = blockIdx.z;
  if (lx >= view.rect.width || ly >= view.rect.height) return;
  const int X = view.rect.x0 + lx, Y = view.rect.y0 + ly;
  const RawSample here = decode_pixel<S>(view, e, X, Y);
  const bool right = decode_pixel<S>(view, e, X + 1, Y).valid;
  const bool down = decode_pixel<S>(view, e, X, Y + 1).valid;
  const bool diag = decode_pixel<S>(view, e, X + 1, Y + 1).valid;
  const float psi_w = view.psi_weight[e], phi_w = view.phi_weight[e];
  const float4 c = covariances_at(view, e, X, Y);
  float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  if (here.valid) {
    // Weighted samples rounded to float first, as shiftstack::decode() hands them over.
    v.x = __fmul_rn(psi_w, here.psi);
    v.y = __fmul_rn(phi_w, here.phi);
    if (right) v.z = __fmul_rn(phi_w, c.x);
    if (down) v.w = __fmul_rn(phi_w, c.y);
  }
  // The antidiagonal pair (X+1, Y)-(X, Y+1) keeps its covariance here even where (X, Y) is masked.
  const float d = here.valid && diag ? __fmul_rn(phi_w, c.z) : 0.0f;
  const float a = right && down ? __fmul_rn(phi_w, c.w) : 0.0f;
  const std::size_t index = (std::size_t(e) * view.rect.height + ly) * std::size_t(pitch) + lx;
  values[index] = v;
  diagonal[index] = 0.5f * (d + a);
}

// The block's warps split the work. The first NWY x NWV warps ("consumers") hold the trials'
// sums and do only the y pass. The last NP warps ("producers") do the x pass: each streams its
// share of the window rows through a ring of Depth exposures filled by asynchronous copies, and
// writes the next chunk's windows and y weights while the consumers sum the current chunk.
// Kept apart, neither loop carries the other's registers (with both in every warp, addressing
// was recomputed per row and the x pass cost more instructions than the y pass).
template <int RY, int VT, int NWY, int NWV, int NP, int Depth>
__global__ void __launch_bounds__(kWarp*(NWY * NWV + NP), 1) fast_bilinear_kernel(FastBilinearParams P) {
  constexpr int consumer_warps = NWY * NWV;
  constexpr int consumers = kWarp * consumer_warps;
  constexpr int warps = consumer_warps + NP;
  constexpr int rows_per_block = NWY * RY;
  constexpr int packet_vy = NWV * VT;
  static_assert(Depth >= 2 && (Depth & (Depth - 1)) == 0, "the ring's places are counted modulo Depth");

  // Shared memory: the producers' raw rows [producer warp][Depth][P.slots]; then per buffer (2)
  // and exposure slot (chunk) the interpolated window, (Ra, Rb) pairs [rows_max][32] and
  // S [rows_max][32]; then the y weights [buffer][exposure slot][packet_vy].
  extern __shared__ __align__(16) unsigned char shared_bytes[];
  __shared__ LocalDigest scratch[warps];
  RawRow* raw_rows = reinterpret_cast<RawRow*>(shared_bytes);
  float* windows = reinterpret_cast<float*>(raw_rows + NP * Depth * P.slots);
  const int pair_floats = 2 * P.rows_max * kWarp;  // the (Ra, Rb) plane of one window
  const int slot_floats = 3 * P.rows_max * kWarp;  // one window: pairs, then S
  YWeights* y_weights = reinterpret_cast<YWeights*>(windows + 2 * P.chunk * slot_floats);
  const BilinearPlanes& planes = P.planes;
  const PacketTables& t = P.t;
  const ScanOutputs& out = P.out;

  const PacketThread<NWY, RY> me(out, t, P.groups);
  const int tid = me.tid, lane = me.lane, warp_id = me.warp_id;
  const int group = me.group, block_x0 = me.block_x0, block_y0 = me.block_y0;
  const int first = me.first, last = me.last;
  const int E = t.exposures;
  const int chunks = (E + P.chunk - 1) / P.chunk;
  auto chunk_count = [&](int ch) { return min(P.chunk, E - ch * P.chunk); };

  if (warp_id >= consumer_warps) {
    // ---- producers: the x pass ----
    // Exposures stream through a ring of Depth places, each holding this warp's rows of one
    // exposure (rows pw, pw + NP, ...: P.slots at most): while it interpolates exposure e, the
    // copies of the next Depth - 1 exposures are in flight. Placement is worked out once per
    // exposure; a row costs a multiply-add of addressing.
    const int pw = warp_id - consumer_warps, ptid = tid - consumers;
    const long long plane_pixels = (long long)planes.rect.height * planes.pitch;
    const unsigned width = static_cast<unsigned>(planes.rect.width);
    const unsigned height = static_cast<unsigned>(planes.rect.height);
    RawRow* ring = raw_rows + pw * Depth * P.slots;
    for (int p = first; p < last; ++p) {
      const int gx = p % t.x_groups, gy = p / t.x_groups;
      const int a = t.x_start[gx];  // runs of one vx
      const int b0 = t.y_start[gy], nb = t.y_count[gy];
      const int rows = rows_per_block + t.y_span[gy] + 1;
      const int* y_min = t.y_min + gy * E;

      // Starts the copies of this warp's rows of exposure e into `place` (one commit group per
      // exposure, empty past the last, so that a fixed wait count finds exposure e complete).
      auto issue = [&](int e, RawRow* place) {
        if (e < E) {
          const int column = block_x0 + t.shift_x[a * E + e] - planes.rect.x0 + lane;
          const int top = block_y0 + y_min[e] - planes.rect.y0;
          const bool in_x = static_cast<unsigned>(column) < width;
          const bool right_x = static_cast<unsigned>(column + 1) < width;
          const long long base = e * plane_pixels + column;
          for (int r = pw; r < rows; r += NP, ++place) {
            const int Y = top + r;
            const bool row_in = static_cast<unsigned>(Y) < height;
            const bool in = row_in && in_x, right = row_in && right_x;
            const long long at = base + (row_in ? Y : 0) * planes.pitch;  // < 2^31 per exposure (scan())
            // Outside the planes a copy fills zeros and reads nothing (from a valid address).
            copy_16_or_zero(&place->values[lane], planes.values + (in ? at : 0), in ? 16 : 0);
            copy_4_or_zero(&place->diagonal[lane], planes.diagonal + (in ? at : 0), in ? 4 : 0);
            if (lane == kWarp - 1)
              copy_16_or_zero(&place->values[kWarp], planes.values + (right ? at + 1 : 0), right ? 16 : 0);
          }
        }
        copy_async_commit();
      };

      for (int e = 0; e < Depth; ++e) issue(e, ring + e * P.slots);
      for (int ch = 0; ch < chunks; ++ch) {
        float* window = windows + (ch & 1) * P.chunk * slot_floats;
        const int count = chunk_count(ch);
        for (int c = 0; c < count; ++c, window += slot_floats) {
          const int e = ch * P.chunk + c;
          RawRow* place = ring + (e & (Depth - 1)) * P.slots;
          const float fx = __ldg(P.x_frac + a * E + e), lx = 1.0f - fx;
          const float gx0 = lx * lx, gx1 = fx * fx, hx = 2.0f * lx * fx;
          // Committed groups: Depth plus one per exposure taken before, so Depth - 1 pending
          // leaves exposure e complete.
          copy_async_wait<Depth - 1>();
          __syncwarp();  // lanes read their right neighbour's copy
          const RawRow* row = place;
#pragma unroll 4
          for (int r = pw; r < rows; r += NP, ++row) {
            const float4 q = row->values[lane], right = row->values[lane + 1];
            const float d = row->diagonal[lane];
            reinterpret_cast<float2*>(window)[r * kWarp + lane] =
                make_float2(fmaf(fx, right.x, lx * q.x), fmaf(hx, q.z, fmaf(gx1, right.y, gx0 * q.y)));
            window[pair_floats + r * kWarp + lane] = fmaf(hx, d, fmaf(gx1, right.w, gx0 * q.w));
          }
          __syncwarp();  // the place is refilled below
          issue(e + Depth, place);
        }
        YWeights* weights = y_weights + (ch & 1) * P.chunk * packet_vy;
        const int e0 = ch * P.chunk;
        for (int q = ptid; q < count * packet_vy; q += NP * kWarp) {
          const int c = q / packet_vy, j = q - c * packet_vy, e = e0 + c;
          YWeights w{};
          if (j < nb) {
            const int b = b0 + j;
            const float fy = __ldg(P.y_frac + b * E + e), ly = 1.0f - fy;
            w.low_high = make_float4(ly, fy, ly * ly, fy * fy);
            w.cross = 2.0f * ly * fy;
            w.row = t.shift_y[b * E + e] - y_min[e];
          }
          weights[c * packet_vy + j] = w;
        }
        __syncthreads();  // chunk ch is ready; the consumers have left chunk ch - 1's buffer
      }
      __syncthreads();  // the consumers' last chunk
    }
    write_block_digest(out, LocalDigest{}, block_key(out, group, block_x0, block_y0, kWarp, rows_per_block),
                       scratch);
    return;
  }

  // ---- consumers: the y pass and the trials ----
  const int warp_y = me.warp_y, warp_v = me.warp_v, x = me.x, y0 = me.y0;
  // The thread's digest and top-k bounds live in shared memory: they are touched once per trial,
  // and in registers they would cost the main loop 12 + 2 RY of them.
  __shared__ LocalDigest digests[consumers];
  __shared__ TopKBound bounds[RY][consumers];
  LocalDigest& digest = digests[tid];
  digest = LocalDigest{};
#pragma unroll
  for (int j = 0; j < RY; ++j) bounds[j][tid] = TopKBound{};

  for (int p = first; p < last; ++p) {
    const int gx = p % t.x_groups, gy = p / t.x_groups;
    const int a = t.x_start[gx];
    const int b0 = t.y_start[gy], nb = t.y_count[gy];

    float A[VT][RY], B[VT][RY];
#pragma unroll
    for (int k = 0; k < VT; ++k)
#pragma unroll
      for (int j = 0; j < RY; ++j) A[k][j] = B[k][j] = 0.0f;

    __syncthreads();  // chunk 0 is ready
    for (int ch = 0; ch < chunks; ++ch) {
      // Per velocity of this thread, its rows of each window of the chunk.
      const int count = chunk_count(ch);
      const float* window = windows + (ch & 1) * P.chunk * slot_floats;
      const int own = (warp_y * RY) * kWarp + lane;  // this thread's first origin row and column
      const YWeights* weights = y_weights + (ch & 1) * P.chunk * packet_vy + warp_v * VT;
      for (int c = 0; c < count; ++c, window += slot_floats, weights += packet_vy) {
#pragma unroll
        for (int k = 0; k < VT; ++k) {
          if (warp_v * VT + k >= nb) continue;  // the same for the whole warp
          const float4 w = weights[k].low_high;  // ly, fy, ly^2, fy^2
          const float hy = weights[k].cross;
          const int at = weights[k].row * kWarp + own;
          const float2* pairs = reinterpret_cast<const float2*>(window) + at;
          const float* cross = window + pair_floats + at;
          float2 low = pairs[0];
#pragma unroll
          for (int j = 0; j < RY; ++j) {
            const float2 high = pairs[(j + 1) * kWarp];
            const float s = cross[j * kWarp];
            A[k][j] = fmaf(w.y, high.x, fmaf(w.x, low.x, A[k][j]));
            B[k][j] = fmaf(hy, s, fmaf(w.w, high.y, fmaf(w.z, low.y, B[k][j])));
            low = high;
          }
        }
      }
      __syncthreads();  // done with this buffer; the next chunk is ready
    }

    const int v_first = b0 + warp_v * VT;
#pragma unroll
    for (int j = 0; j < RY; ++j) {
      const int y = y0 + j;
      const bool origin_in = x < out.tile_x0 + out.tile_width && y < out.tile_y0 + out.tile_height;
      if (!origin_in) continue;
      TopKEntry* list = out.top_k > 0 ? topk_list(out, x, y, group * NWV + warp_v) : nullptr;
#pragma unroll
      for (int k = 0; k < VT; ++k)
        if (warp_v * VT + k < nb)
          finish_trial(out, digest, A[k][j], B[k][j], x, y, (v_first + k) * t.vx_count + a, list, &bounds[j][tid]);
    }
  }
  const long long key = block_key(out, group, block_x0, block_y0, kWarp, rows_per_block);
  write_block_digest(out, LocalDigest(digest), key, scratch);
}

using FastBilinearKernel = void (*)(FastBilinearParams);

// A shape of the kernel, built with two ring depths: 4 exposures in flight, or 2 where the
// deeper ring leaves no room for the windows (large packet windows: coarse grids along vy).
struct FastBilinearVariant {
  std::string name;
  int rows_per_thread, vy_per_thread, warps_y, warps_v, producer_warps;
  FastBilinearKernel deep, shallow;  // rings of kDeepRing and kShallowRing exposures
  int threads() const { return kWarp * (warps_y * warps_v + producer_warps); }
  int rows_per_block() const { return warps_y * rows_per_thread; }
  int packet_vy() const { return warps_v * vy_per_thread; }
};

constexpr int kDeepRing = 4, kShallowRing = 2;

template <int RY, int VT, int NWY, int NWV, int NP>
FastBilinearVariant make_bilinear_variant() {
  const std::string name = "bilinear-r" + std::to_string(RY) + "v" + std::to_string(VT) + "-w" +
                           std::to_string(NWY) + "x" + std::to_string(NWV) + "-p" + std::to_string(NP);
  return FastBilinearVariant{name,
                             RY,
                             VT,
                             NWY,
                             NWV,
                             NP,
                             fast_bilinear_kernel<RY, VT, NWY, NWV, NP, kDeepRing>,
                             fast_bilinear_kernel<RY, VT, NWY, NWV, NP, kShallowRing>};
}

// In the automatic choice's order: the fastest on `dense` first (bench/RESULTS.md).
const std::vector<FastBilinearVariant>& bilinear_variants() {
  static const std::vector<FastBilinearVariant> list = {
      make_bilinear_variant<8, 4, 2, 6, 4>(),
      make_bilinear_variant<8, 4, 2, 4, 8>(),
      make_bilinear_variant<8, 3, 2, 6, 4>(),
  };
  return list;
}

struct BilinearPlan {
  const FastBilinearVariant* variant = nullptr;
  FastBilinearKernel kernel = nullptr;  // the variant's deep or shallow build
  std::string problem;
  int chunk = 0, rows_max = 0, shared_bytes = 0, slots = 0;
};

int shared_memory_per_multiprocessor() {
  int device = 0, bytes = 0;
  SHIFTSTACK_CUDA_CHECK(cudaGetDevice(&device));
  SHIFTSTACK_CUDA_CHECK(cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device));
  return bytes;
}

BilinearPlan plan_bilinear(const FastBilinearVariant& v, const AxisRuns& y_runs) {
  BilinearPlan plan;
  plan.variant = &v;
  plan.rows_max = v.rows_per_block() + y_runs.max_span + 1;
  plan.slots = (plan.rows_max + v.producer_warps - 1) / v.producer_warps;
  const int slot_bytes = 3 * plan.rows_max * kWarp * int(sizeof(float)) + v.packet_vy() * int(sizeof(YWeights));
  for (const auto& [kernel, depth] : {std::pair{v.deep, kDeepRing}, std::pair{v.shallow, kShallowRing}}) {
    cudaFuncAttributes attributes{};
    SHIFTSTACK_CUDA_CHECK(cudaFuncGetAttributes(&attributes, kernel));
    // Dynamic shared memory for one block per multiprocessor, beside the kernel's static arrays
    // and the 1 KB per block the driver reserves.
    const int static_bytes = int(attributes.sharedSizeBytes);
    const int per_block = std::min(max_shared_memory_per_block() - static_bytes,
                                   shared_memory_per_multiprocessor() - static_bytes - 1024);
    const int raw_bytes = int(sizeof(RawRow)) * v.producer_warps * depth * plan.slots;
    plan.chunk = std::min(kMaxChunk, (per_block - raw_bytes) / (2 * slot_bytes));
    if (plan.chunk >= 1) {
      plan.kernel = kernel;
      plan.shared_bytes = 2 * plan.chunk * slot_bytes + raw_bytes;
      return plan;
    }
  }
  plan.problem = "the packet's window (" + std::to_string(plan.rows_max) +
                 " rows) does not fit in shared memory twice beside the producers' rings";
  return plan;
}

const FastBilinearVariant* named_variant(const std::string& name) {
  for (const FastBilinearVariant& v : bilinear_variants())
    if (v.name == name) return &v;
  return nullptr;
}

// floor(s) and s - floor(s) per axis value and exposure, both from the one s computed here (a
// floor taken from another computation of s could sit on the other side of an integer).
struct BilinearShifts {
  SeparableShifts floors;
  std::vector<float> x_frac, y_frac;
};

BilinearShifts bilinear_shifts(const MotionBank& bank) {
  const int E = bank.exposures();
  BilinearShifts s;
  s.floors.exposures = E;
  auto axis = [&](const std::vector<double>& velocities, bool along_x, std::vector<std::int32_t>& floors,
                  std::vector<float>& fractions) {
    floors.resize(velocities.size() * E);
    fractions.resize(velocities.size() * E);
    for (std::size_t a = 0; a < velocities.size(); ++a)
      for (int e = 0; e < E; ++e) {
        const double shift = velocities[a] * bank.dt(e) + (along_x ? bank.curve_at_x(e) : bank.curve_at_y(e));
        const double f = std::floor(shift);
        floors[a * E + e] = std::int32_t(f);
        fractions[a * E + e] = float(shift - f);
      }
  };
  axis(bank.vx_axis, true, s.floors.x, s.x_frac);
  axis(bank.vy_axis, false, s.floors.y, s.y_frac);
  return s;
}

// The first variant (or the forced one) whose window fits in shared memory for this bank.
BilinearPlan choose_bilinear(const MotionBank& bank, const SeparableShifts& floors,
                             const FastBilinearVariant* forced) {
  std::string problems;
  for (const FastBilinearVariant& v : bilinear_variants()) {
    if (forced && &v != forced) continue;
    const AxisRuns y_runs = cut_axis(floors.y, int(bank.vy_count()), bank.exposures(), v.packet_vy());
    BilinearPlan plan = plan_bilinear(v, y_runs);
    if (plan.problem.empty()) return plan;
    problems += (problems.empty() ? "" : "; ") + v.name + ": " + plan.problem;
  }
  BilinearPlan none;
  none.problem = problems;
  return none;
}

class FastBilinearMethod final : public GatherMethod {
 public:
  // `plan` is choose_bilinear()'s for this bank, from these shifts.
  FastBilinearMethod(BilinearShifts shifts, BilinearPlan plan) : shifts_(std::move(shifts)), plan_(std::move(plan)) {}

  GatherGeometry prepare(const SearchInput& input) override {
    const MotionBank& bank = *input.bank;
    const BilinearShifts& shifts = shifts_;
    const FastBilinearVariant& v = *plan_.variant;
    packets_.build(bank, shifts.floors, 1, v.packet_vy());
    x_frac_.upload(shifts.x_frac);
    y_frac_.upload(shifts.y_frac);
    shift_tables_.upload(bank);  // FP64 positions for the obs_count pass, as the reference
    upload_bytes_per_pixel_ = input.stack->bytes_per_pair() + sizeof(float4);  // pairs and covariances

    SHIFTSTACK_CUDA_CHECK(
        cudaFuncSetAttribute(plan_.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, plan_.shared_bytes));
    int per_sm = 0;
    SHIFTSTACK_CUDA_CHECK(
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, plan_.kernel, v.threads(), plan_.shared_bytes));
    require(per_sm > 0, "cuda-fast: bilinear variant " + v.name + " does not fit on a multiprocessor");
    const long long origin_blocks = (long long)((input.region.width + kWarp - 1) / kWarp) *
                                    ((input.region.height + v.rows_per_block() - 1) / v.rows_per_block());
    groups_ = velocity_groups(packets_.packets(), origin_blocks, multiprocessor_count(), per_sm, 64 / v.warps_v);
    return GatherGeometry{kWarp, v.rows_per_block(), groups_, groups_ * v.warps_v};
  }

  void scan(const StackView& view, const ScanOutputs& out, cudaStream_t stream) override {
    require(view.covariances != nullptr, "internal: bilinear gather without covariance planes on the device");
    const int pitch = (view.rect.width + 31) / 32 * 32;
    // The kernel's row offsets within one exposure's planes are 32-bit.
    require((long long)view.rect.height * pitch < (1LL << 31),
            "cuda-fast's bilinear kernel: a tile of " + std::to_string(view.rect.width) + " x " +
                std::to_string(view.rect.height) + " pixels is too large for one exposure's planes");
    const std::size_t pixels = std::size_t(view.exposures) * view.rect.height * pitch;
    values_.resize(pixels);
    diagonal_.resize(pixels);
    const dim3 plane_block(kPlaneThreadsX, kPlaneThreadsY);
    const dim3 plane_grid((view.rect.width + kPlaneThreadsX - 1) / kPlaneThreadsX,
                          (view.rect.height + kPlaneThreadsY - 1) / kPlaneThreadsY, view.exposures);
    dispatch_storage(view.storage, [&]<StorageCode S>() {
      bilinear_planes_kernel<S><<<plane_grid, plane_block, 0, stream>>>(view, values_.get(), diagonal_.get(), pitch);
      SHIFTSTACK_CUDA_CHECK_LAUNCH();
    });
    FastBilinearParams params{};
    params.planes = BilinearPlanes{values_.get(), diagonal_.get(), view.rect, pitch};
    params.t = packets_.tables();
    params.x_frac = x_frac_.get();
    params.y_frac = y_frac_.get();
    params.out = out;
    params.groups = groups_;
    params.chunk = plan_.chunk;
    params.rows_max = plan_.rows_max;
    params.slots = plan_.slots;
    const FastBilinearVariant& v = *plan_.variant;
    const dim3 grid((out.tile_width + kWarp - 1) / kWarp, (out.tile_height + v.rows_per_block() - 1) / v.rows_per_block(),
                    groups_);
    plan_.kernel<<<grid, v.threads(), plan_.shared_bytes, stream>>>(params);
    SHIFTSTACK_CUDA_CHECK_LAUNCH();
  }

  // The planes beside the upload: 20 bytes per pixel against the upload's pairs and covariances.
  double stack_copies() const override {
    return 1.0 + double(sizeof(float4) + sizeof(float)) / double(upload_bytes_per_pixel_);
  }

  ShiftSource shifts() const override { return shift_tables_.source(); }

 private:
  BilinearShifts shifts_;
  BilinearPlan plan_;
  PacketTableSet packets_;
  DeviceArray<float> x_frac_, y_frac_;
  Fp64ShiftTables shift_tables_;
  DeviceArray<float4> values_;
  DeviceArray<float> diagonal_;
  std::size_t upload_bytes_per_pixel_ = 1;
  int groups_ = 1;
};

}  // namespace

std::vector<std::string> fast_bilinear_variant_names() {
  std::vector<std::string> names;
  for (const FastBilinearVariant& v : bilinear_variants()) names.push_back(v.name);
  return names;
}

std::string fast_bilinear_problem(const SearchInput& input, const std::string& variant) {
  std::string problem = tiled_bilinear_problem(input);
  if (!problem.empty()) return problem;
  const FastBilinearVariant* forced = variant.empty() ? nullptr : named_variant(variant);
  if (!variant.empty() && !forced) return "no cuda-fast bilinear variant named '" + variant + "'";
  const BilinearShifts shifts = bilinear_shifts(*input.bank);
  return choose_bilinear(*input.bank, shifts.floors, forced).problem;
}

SearchResult run_fast_bilinear(const SearchInput& input, GatherWorkspace& workspace, const std::string& variant,
                               std::string* ran) {
  const std::string problem = tiled_bilinear_problem(input);
  require(problem.empty(), problem);
  const FastBilinearVariant* forced = variant.empty() ? nullptr : named_variant(variant);
  require(variant.empty() || forced, "no cuda-fast bilinear variant named '" + variant + "'");
  BilinearShifts shifts = bilinear_shifts(*input.bank);
  BilinearPlan plan = choose_bilinear(*input.bank, shifts.floors, forced);
  if (!plan.problem.empty() && !forced) {
    // No variant's window fits this bank: cuda-tiled's kernel, whose packets shrink to one velocity.
    if (ran) *ran = tiled_bilinear_name();
    return run_tiled_bilinear(input, workspace);
  }
  require(plan.problem.empty(), "cuda-fast's bilinear kernel cannot run this input: " + plan.problem);
  if (ran) *ran = plan.variant->name;
  FastBilinearMethod method(std::move(shifts), std::move(plan));
  return run_gather(method, input, workspace);
}

}  // namespace shiftstack::cuda
