// cuda-tc: the fused tensor-core contraction of SPEC 6 (the chapter's case study, on Hopper).
//
// Per x frequency mx the whole velocity plane is one complex product
//   D[(b, my), a] = sum_e  ( P_y(my sy[b,e]) * S_e(mx, my) ) * Y_x(mx sx[a,e])
// with rows (b, my), columns a and inner dimension E. The A operand (rows) is the diagonal fused
// into the operand load: the FP16 spectrum sample times the FP32 y phase, formed in registers and
// rounded once to FP16; the B operand is the FP16 x-phase table of mx, shared by every row.
// The complex product is a real block product: the real outputs take the k pairs (Xr, -Xi) and
// the imaginary outputs (Xi, Xr) against the same (Yr, Yi) pairs, FP32 accumulation, 8 real FLOPs
// per complex MAC (no redundant arithmetic beyond tile padding).
//
// One CTA = one mx, one block of 16 consecutive my, kWarps consecutive b (one per warp), and all
// columns of one a block; it loops over exposure chunks through a cp.async pipeline. Both
// channels (psi, phi) share the operand loads and the B tiles. Two kernels compute the same thing:
//  - contract_kernel<tiles> (the default): warp-level mma.sync m16n8k16 (HMMA), B by ldmatrix;
//  - contract_wgmma_kernel: warpgroup m64n72k16 products (HGMMA), A from registers, B from shared
//    memory, for full 72-column blocks. It was the default until the stage copies stopped costing
//    as much as the operand formation; since then mma.sync is the faster of the two on the H200
//    (bench/RESULTS.md, "Fourier-route stages").
// SHIFTSTACK_TC_KERNEL=mma|wgmma|wgmma-split forces one (tests and the version table in
// bench/RESULTS.md); their digests agreed to every printed digit on the tested stacks.
// Fractional (bilinear) shifts: contract_fractional_kernel, mma.sync with three x tables and the
// covariance channels for the exact B (the section "fractional" below).
#include <algorithm>
#include <cstdlib>
#include <type_traits>

#include "core/engine_registry.hpp"
#include "spectra.cuh"
#include "cuda/common/warp_mma.cuh"

namespace shiftstack::cuda {

namespace tc {

// Velocity rows b per CTA, one per warp. Two CTAs of 4 warps put 2 warps on each of the 4 SM
// sub-partitions, so each thread may hold up to 255 registers (the 144 accumulators and the
// operands need about 190); 5 warps per CTA would cap them at 168 and spill.
constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kRows = 16;          // my rows per warp: one m16 tile
constexpr int kChunk = 32;         // exposures per pipeline stage: 4 k16 steps of 8 exposures
constexpr int kStages = 3;         // cp.async pipeline depth
// The row kernel's depth: its stages are smaller (no phase table, windows of up to 32 rows), and a
// fourth stage took the `dense` contraction from 6.81 to 6.68 ms (H100, one lease, A/B). Past
// about 7,900 exposures the starts table and four stages leave room for one CTA per SM, not two.
constexpr int kRowStages = 4;
constexpr int kMaxColumnTiles = 9; // n8 tiles per CTA: 72 columns (65 velocities + 7 padding)
// A paired n8 tile holds up to 4 velocities a, two columns each: (Yr, Yi), whose product with the
// real rows (Xr, -Xi) of the block form is the real output, and (Yi, -Yr), whose product with the
// same rows is the imaginary one. It costs one product per channel and k16 step where a tile of 8
// velocities costs two. The row mma kernel may end its column blocks with one (kPairedLast), so
// that `dense`'s 65 velocities take 8 tiles and a paired one (34 products per step, not 36).
constexpr int kPairedVelocities = 4;
__host__ __device__ constexpr int block_velocities(int column_tiles, bool paired_last) {
  return column_tiles * 8 - (paired_last ? 8 - kPairedVelocities : 0);
}
// Shared-memory rows, padded so that the 8 rows one ldmatrix (or one 8-byte load phase) touches
// fall in distinct banks: a row of Y holds kChunk half2 (128 B) + 16 B; a row of spectra kChunk
// (psi, phi) half2 pairs (256 B) + 32 B.
constexpr int kYRowBytes = kChunk * 4 + 16;
constexpr int kSpectrumRowBytes = kChunk * 8 + 32;
constexpr int kShiftRowBytes = kChunk * 4;

struct Params {
  const uint2* half_spectra;        // [mx][my < nyh_padded][E_pad]
  const float* scales;              // [c][mx][my < nyh]
  const __half2* x_phases;          // [mx][a < va_padded][E_pad]
  const std::int32_t* shift_y_rel;  // [b < vb_padded][E_pad]: sy - min_sy
  const float2* root_y;             // [ny]
  int min_sy, shift_span;           // sy - min_sy in [0, shift_span)
  int ny, nyh, nyh_padded, exposures_padded, va, va_padded, my_tiles;
  int b_begin, b_end;
  float norm;
  float2* out;                      // [(b - b_begin) * va + a][mx][my < ny] (store_both_channels)
};

template <int kColumnTiles>
struct Layout {
  static constexpr int y_bytes = kColumnTiles * 8 * kYRowBytes;
  static constexpr int spectrum_bytes = kRows * kSpectrumRowBytes;
  static constexpr int shift_bytes = kWarps * kShiftRowBytes;
  static constexpr int stage_bytes = y_bytes + spectrum_bytes + shift_bytes;
  __host__ __device__ static int phase_bytes(int span) { return (kRows * span * 8 + 15) / 16 * 16; }
  __host__ __device__ static int total_bytes(int span) { return phase_bytes(span) + kStages * stage_bytes; }
};

// The wgmma variant: one warpgroup (the CTA's 4 warps = 64 rows) issues m64n72k16 products with
// the A operand from registers and B from shared memory in the canonical K-major layout without
// swizzle: core matrices of 8 columns a x 16 bytes (4 exposures), contiguous, K-neighbours 128 B
// apart, 8-column groups kChunk * 4 bytes apart. Loads run two chunks ahead through 4 stages, so
// the stage being refilled belongs to a chunk whose products have all completed.
constexpr int kWgmmaColumns = 72;
constexpr int kWgmmaStages = 4;
struct WgmmaLayout {
  static constexpr int y_bytes = kWgmmaColumns * kChunk * 4;
  static constexpr int group_bytes = kChunk * 4 / 16 * 128;  // one 8-column group: kChunk / 4 core matrices
  static constexpr int stage_bytes = y_bytes + Layout<9>::spectrum_bytes + Layout<9>::shift_bytes;
  __host__ __device__ static int total_bytes(int span) {
    return Layout<9>::phase_bytes(span) + kWgmmaStages * stage_bytes;
  }
};

// A thread's share of one operand's rows in a pipeline stage: rows row0, row0 + rows_per_pass, ...
// below kRowCount, each row kParts 16-byte copies of which this thread makes number `part`. Found
// once per kernel, so that a stage costs one copy and an add per row: the loop over threadIdx.x
// it replaces cost about 450 instructions of 64-bit address arithmetic per stage in the wgmma
// kernel, as many as the operand formation of the stage's four k16 steps.
template <int kRowCount, int kParts, int kBlockThreads>
struct RowShare {
  static_assert(kBlockThreads % kParts == 0);
  static constexpr int rows_per_pass = kBlockThreads / kParts;
  static constexpr int passes = (kRowCount + rows_per_pass - 1) / rows_per_pass;
  int row0 = int(threadIdx.x) / kParts, part = int(threadIdx.x) % kParts;
  // Only the last pass can run past the rows (row0 < rows_per_pass).
  __device__ bool has(int pass) const { return pass + 1 < passes || row0 + pass * rows_per_pass < kRowCount; }
  // The copies of one stage: dst and src are this thread's first row; later rows follow at fixed strides.
  template <class T>
  __device__ __forceinline__ void copy(unsigned char* dst, int dst_pass_bytes, const T* src,
                                       std::size_t src_pass_elements) const {
#pragma unroll
    for (int k = 0; k < passes; ++k)
      if (has(k)) copy_async_16(dst + k * dst_pass_bytes, src + k * src_pass_elements);
  }
};

// The spectra (16 rows of kChunk (psi, phi) pairs, 16 copies each) and the y shifts (the CTA's
// kWarps rows b, 8 copies each) of one stage of the integer kernels, which place them right
// after their x phases (y_bytes into the stage).
template <int kBlockThreads>
struct SpectrumShiftCopies {
  RowShare<kRows, 16, kBlockThreads> spectrum_rows;
  RowShare<kWarps, 8, kBlockThreads> shift_rows;
  const uint2* spectrum_src;
  const std::int32_t* shift_src;
  int spectrum_dst, shift_dst;
  std::size_t spectrum_pass_elements;
  __device__ SpectrumShiftCopies(const Params& p, int mx, int my0, int b_cta, int y_bytes) {
    const std::size_t E = p.exposures_padded;
    spectrum_src =
        p.half_spectra + (std::size_t(mx) * p.nyh_padded + my0 + spectrum_rows.row0) * E + spectrum_rows.part * 2;
    spectrum_dst = y_bytes + spectrum_rows.row0 * kSpectrumRowBytes + spectrum_rows.part * 16;
    spectrum_pass_elements = decltype(spectrum_rows)::rows_per_pass * E;
    shift_src = p.shift_y_rel + std::size_t(b_cta + shift_rows.row0) * E + shift_rows.part * 4;
    shift_dst = y_bytes + Layout<9>::spectrum_bytes + shift_rows.row0 * kShiftRowBytes + shift_rows.part * 16;
  }
  __device__ __forceinline__ void copy(unsigned char* stage, int e0) const {
    spectrum_rows.copy(stage + spectrum_dst, decltype(spectrum_rows)::rows_per_pass * kSpectrumRowBytes,
                       spectrum_src + e0, spectrum_pass_elements);
    shift_rows.copy(stage + shift_dst, 0, shift_src + e0, 0);
  }
};

// The y phases of a CTA's 16 rows for every shift: phase[r][s] = exp(2 pi i (my0 + r)(s + min_sy) / ny).
__device__ __forceinline__ void fill_phase_table(const Params& p, int my0, float2* phase, int threads) {
  for (int i = threadIdx.x; i < kRows * p.shift_span; i += threads) {
    const int r = i / p.shift_span, s = i % p.shift_span + p.min_sy;
    int j = int((long long)(my0 + r) * s % p.ny);
    if (j < 0) j += p.ny;
    phase[i] = p.root_y[j];
  }
}

// Zeroes the mma.sync kernels' accumulators [channel][real, imaginary][n8 tile][fragment].
template <int kColumnTiles>
__device__ __forceinline__ void zero_accumulators(float (&acc)[2][2][kColumnTiles][4]) {
#pragma unroll
  for (int c = 0; c < 2; ++c)
#pragma unroll
    for (int r = 0; r < 2; ++r)
#pragma unroll
      for (int n = 0; n < kColumnTiles; ++n)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[c][r][n][i] = 0.0f;
}

// Starts a cp.async pipeline: the first kAhead chunks into slots 0 .. kAhead - 1, one commit
// group each (empty past the last chunk, so that the waits count the same groups).
template <int kAhead, class LoadStage>
__device__ __forceinline__ void prime_pipeline(int chunks, LoadStage& load_stage) {
  for (int s = 0; s < kAhead; ++s) {
    if (s < chunks) load_stage(s, s);
    copy_async_commit();
  }
}

// One step of a cp.async pipeline of kStageCount stages: waits for chunk `chunk`'s stage, then
// starts loading the chunk kStageCount - 1 ahead into the slot the last iteration finished with.
template <int kStageCount, class LoadStage>
__device__ __forceinline__ void advance_pipeline(int chunk, int chunks, LoadStage& load_stage) {
  copy_async_wait<kStageCount - 2>();
  __syncthreads();
  const int next = chunk + kStageCount - 1;
  if (next < chunks) load_stage(next, next % kStageCount);
  copy_async_commit();
}

// This lane's inputs of one k16 step, in the order of the A registers 0-3 = (row g, k 2q),
// (row g+8, k 2q), (row g, k 2q+8), (row g+8, k 2q+8), i.e. exposures q and q + 4 of the step:
// the spectrum samples (psi, phi) and the y phases of their shifts. The wgmma kernel reads them
// one step ahead, so that the dependent shift -> phase loads overlap the products in flight.
struct StepInputs {
  uint2 spectrum[4];
  float2 phase[4];
};
__device__ __forceinline__ StepInputs read_step_inputs(const unsigned char* spectra, const std::int32_t* shifts,
                                                       const float2* phase_lo, const float2* phase_hi, int group,
                                                       int quad, int step) {
  const int e_lo = step * 8 + quad, e_hi = e_lo + 4;
  const int s_lo = shifts[e_lo], s_hi = shifts[e_hi];
  StepInputs in;
  in.spectrum[0] = *reinterpret_cast<const uint2*>(spectra + group * kSpectrumRowBytes + e_lo * 8);
  in.spectrum[1] = *reinterpret_cast<const uint2*>(spectra + (group + 8) * kSpectrumRowBytes + e_lo * 8);
  in.spectrum[2] = *reinterpret_cast<const uint2*>(spectra + group * kSpectrumRowBytes + e_hi * 8);
  in.spectrum[3] = *reinterpret_cast<const uint2*>(spectra + (group + 8) * kSpectrumRowBytes + e_hi * 8);
  in.phase[0] = phase_lo[s_lo];
  in.phase[1] = phase_hi[s_lo];
  in.phase[2] = phase_lo[s_hi];
  in.phase[3] = phase_hi[s_hi];
  return in;
}
// The A fragments of one channel: [0] real-output rows (Xr, -Xi), [1] imaginary-output rows (Xi, Xr).
__device__ __forceinline__ void form_channel_operands(const StepInputs& in, int channel, std::uint32_t (&a)[2][4]) {
#pragma unroll
  for (int r = 0; r < 4; ++r)
    spectral_operand(in.phase[r], channel ? in.spectrum[r].y : in.spectrum[r].x, a[0][r], a[1][r]);
}
// Both channels: [c * 2 + 0] real-output rows, [c * 2 + 1] imaginary-output rows of channel c.
__device__ __forceinline__ void form_operands(const StepInputs& in, std::uint32_t (&a)[4][4]) {
  form_channel_operands(in, 0, reinterpret_cast<std::uint32_t(&)[2][4]>(a[0]));
  form_channel_operands(in, 1, reinterpret_cast<std::uint32_t(&)[2][4]>(a[2]));
}

// One k16 step of the integer mma.sync kernels: both channels' real and imaginary rows
// (operands[c * 2 + r]) against every n8 tile of the x table at ystep (ldmatrix rows ld_row,
// ld_row_x2 for a last odd tile). With kPairedLast the last tile is a paired tile (see
// kPairedVelocities): the real rows alone, one product per channel, into acc[c][0] of the tile.
// first_b, if given, holds the first pair of tiles' B registers, already read (the row kernel
// reads them before the chunk's barrier).
template <int kColumnTiles, bool kPairedLast = false>
__device__ __forceinline__ void column_products(const unsigned char* ystep, int ld_row, int ld_row_x2,
                                                const std::uint32_t (&operands)[4][4],
                                                float (&acc)[2][2][kColumnTiles][4],
                                                const std::uint32_t* first_b = nullptr) {
  const auto tile_products = [&](int n, std::uint32_t b0, std::uint32_t b1) {
    const bool paired = kPairedLast && n == kColumnTiles - 1;
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      mma_16x8x16(acc[c][0][n], operands[2 * c], b0, b1);
      if (!paired) mma_16x8x16(acc[c][1][n], operands[2 * c + 1], b0, b1);
    }
  };
#pragma unroll
  for (int n = 0; n < kColumnTiles; n += 2) {
    std::uint32_t b0, b1, b2 = 0, b3 = 0;
    if (n == 0 && first_b) {
      b0 = first_b[0], b1 = first_b[1], b2 = first_b[2], b3 = first_b[3];
    } else if (n + 1 < kColumnTiles) {
      load_matrix_x4(b0, b1, b2, b3, ystep + n * 8 * kYRowBytes + ld_row);
    } else {
      load_matrix_x2(b0, b1, ystep + n * 8 * kYRowBytes + ld_row_x2);
    }
    tile_products(n, b0, b1);
    if (n + 1 < kColumnTiles) tile_products(n + 1, b2, b3);
  }
}

// The accumulator elements a warp's lane holds, for the epilogues: per half of the warp's 16 rows
// (row = group + 8 half), enter_half(row) says whether the row is written (and may set up what its
// elements share); then visit(row, a, n, i) for each velocity column a < va of n8 tile n, i the
// element's index in the tile's fragment.
template <int kColumnTiles, class EnterHalf, class Visit>
__device__ __forceinline__ void for_each_fragment_element(int a0, int va, int group, int quad, EnterHalf enter_half,
                                                          Visit visit) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int row = group + 8 * half;
    if (!enter_half(row)) continue;
#pragma unroll
    for (int n = 0; n < kColumnTiles; ++n)
#pragma unroll
      for (int col = 0; col < 2; ++col) {
        const int a = a0 + n * 8 + 2 * quad + col;
        if (a < va) visit(row, a, n, 2 * half + col);
      }
  }
}

// Scales the accumulators back and writes the velocity spectra (both channels at once, see
// store_both_channels); value(c, r, n, i) reads the fragment element i of n8 tile n (real r = 0,
// imaginary r = 1) of channel c.
template <int kColumnTiles, class Value>
__device__ __forceinline__ void write_outputs(const Params& p, int mx, int my0, int b, int a0, int group, int quad,
                                              Value value) {
  if (b >= p.b_end) return;
  const int nx = int(gridDim.z);
  const std::size_t frequencies = std::size_t(nx) * p.nyh;
  float scale_psi = 0, scale_phi = 0;
  for_each_fragment_element<kColumnTiles>(
      a0, p.va, group, quad,
      [&](int row) {
        const int my = my0 + row;
        if (my >= p.nyh) return false;
        const std::size_t f = std::size_t(mx) * p.nyh + my;
        scale_psi = p.scales[f] * p.norm, scale_phi = p.scales[frequencies + f] * p.norm;
        return true;
      },
      [&](int row, int a, int n, int i) {
        float2* velocity = p.out + (std::size_t(b - p.b_begin) * p.va + a) * nx * p.ny;
        store_both_channels(velocity, nx, p.ny, mx, my0 + row,
                            make_float2(value(0, 0, n, i) * scale_psi, value(0, 1, n, i) * scale_psi),
                            make_float2(value(1, 0, n, i) * scale_phi, value(1, 1, n, i) * scale_phi));
      });
}

// kSplit = false: one warpgroup (128 threads) forms and multiplies both channels (4 accumulators).
// kSplit = true: two warpgroups share the stages, warpgroup c forms and multiplies channel c only
// (2 accumulators): twice the warps to hide the operand formation, and every x-phase tile loaded
// from L2 feeds twice the products.
template <bool kSplit>
__global__ void __launch_bounds__(kSplit ? 2 * kThreads : kThreads, 2) contract_wgmma_kernel(Params p) {
  constexpr int kBlockThreads = kSplit ? 2 * kThreads : kThreads;
  constexpr int kProducts = kSplit ? 2 : 4;  // accumulators per thread: (channels) x (real, imaginary)
  extern __shared__ __align__(16) unsigned char smem[];  // 16 B suffices: no swizzle
  const int warp = (threadIdx.x >> 5) & (kWarps - 1), lane = threadIdx.x & 31;
  const int channel = kSplit ? int(threadIdx.x >> 7) : 0;  // warpgroup index
  const int group = lane >> 2, quad = lane & 3;
  const int tile = blockIdx.x;
  const int my0 = (tile % p.my_tiles) * kRows;
  const int b_cta = p.b_begin + (tile / p.my_tiles) * kWarps;
  const int b = b_cta + warp;
  const int a0 = blockIdx.y * kWgmmaColumns;
  const int mx = blockIdx.z;

  float2* phase = reinterpret_cast<float2*>(smem);
  unsigned char* stages = smem + Layout<9>::phase_bytes(p.shift_span);
  fill_phase_table(p, my0, phase, kBlockThreads);

  const int chunks = p.exposures_padded / kChunk;
  const std::size_t E = p.exposures_padded;
  // x phases: 72 rows (columns a) of 8 copies (4 exposures = one core-matrix row).
  const RowShare<kWgmmaColumns, 8, kBlockThreads> x_rows;
  static_assert(decltype(x_rows)::rows_per_pass % 8 == 0);
  const __half2* x_src = p.x_phases + (std::size_t(mx) * p.va_padded + a0 + x_rows.row0) * E + x_rows.part * 4;
  const int x_dst = (x_rows.row0 >> 3) * WgmmaLayout::group_bytes + x_rows.part * 128 + (x_rows.row0 & 7) * 16;
  const SpectrumShiftCopies<kBlockThreads> spectrum_shift_copies(p, mx, my0, b_cta, WgmmaLayout::y_bytes);
  auto load_stage = [&](int chunk, int slot) {
    unsigned char* st = stages + slot * WgmmaLayout::stage_bytes;
    const int e0 = chunk * kChunk;
    x_rows.copy(st + x_dst, decltype(x_rows)::rows_per_pass / 8 * WgmmaLayout::group_bytes, x_src + e0,
                decltype(x_rows)::rows_per_pass * E);
    spectrum_shift_copies.copy(st, e0);
  };
  prime_pipeline<kWgmmaStages - 2>(chunks, load_stage);

  float acc[kProducts][36];  // [channel * 2 + (real, imaginary)] (own channel only when split)
#pragma unroll
  for (int k = 0; k < kProducts; ++k)
#pragma unroll
    for (int i = 0; i < 36; ++i) acc[k][i] = 0.0f;
  std::uint32_t a[2][kProducts][4];  // double-buffered A fragments: one k16 step in flight, the next formed
  const float2* phase_lo = phase + group * p.shift_span;
  const float2* phase_hi = phase + (group + 8) * p.shift_span;
  auto stage_at = [&](int chunk) { return stages + (chunk % kWgmmaStages) * WgmmaLayout::stage_bytes; };
  auto read_inputs = [&](const unsigned char* st, int step) {
    const unsigned char* ss = st + WgmmaLayout::y_bytes;
    const std::int32_t* shifts = reinterpret_cast<const std::int32_t*>(ss + Layout<9>::spectrum_bytes) + warp * kChunk;
    return read_step_inputs(ss, shifts, phase_lo, phase_hi, group, quad, step);
  };
  // Waits for a chunk's stage, then starts loading the one kWgmmaStages - 2 further on into the
  // slot of the chunk before it, whose products have all completed (at most one group is pending).
  auto enter_chunk = [&](int chunk) {
    copy_async_wait<kWgmmaStages - 3>();
    fence_async_shared();
    __syncthreads();
    const int ahead = chunk + kWgmmaStages - 2;
    if (ahead < chunks) load_stage(ahead, ahead % kWgmmaStages);
    copy_async_commit();
  };

  enter_chunk(0);
  StepInputs next = read_inputs(stage_at(0), 0);
  for (int chunk = 0; chunk < chunks; ++chunk) {
    const unsigned char* st = stage_at(chunk);
#pragma unroll
    for (int step = 0; step < kChunk / 8; ++step) {
      const int buffer = step & 1;  // kChunk / 8 is even: the parity carries across chunks
      const StepInputs in = next;
      // The products that read this buffer two steps ago must be done before it is rewritten;
      // the previous step's products keep running while this step's operands are formed.
      warpgroup_wait<1>();
      if constexpr (kSplit) {
        form_channel_operands(in, channel, reinterpret_cast<std::uint32_t(&)[2][4]>(a[buffer]));
      } else {
        form_operands(in, reinterpret_cast<std::uint32_t(&)[4][4]>(a[buffer]));
      }
      const std::uint64_t desc = matrix_descriptor(st + step * 2 * 128, 128, WgmmaLayout::group_bytes);
      warpgroup_fence();
#pragma unroll
      for (int k = 0; k < kProducts; ++k) {
#pragma unroll
        for (int i = 0; i < 36; ++i) pin(acc[k][i]);
        wgmma_64x72x16(acc[k], a[buffer][k], desc);
      }
      warpgroup_commit();
      if (step + 1 < kChunk / 8) {
        next = read_inputs(st, step + 1);
      } else if (chunk + 1 < chunks) {
        enter_chunk(chunk + 1);
        next = read_inputs(stage_at(chunk + 1), 0);
      }
    }
  }
  warpgroup_wait<0>();
#pragma unroll
  for (int k = 0; k < kProducts; ++k)
#pragma unroll
    for (int i = 0; i < 36; ++i) pin(acc[k][i]);
  if constexpr (kSplit) {
    // Both channels of a frequency go out together: the phi warpgroup hands its accumulators to
    // the psi warpgroup through the (now idle) stages, one column per thread (no bank conflicts).
    static_assert(kWgmmaStages * WgmmaLayout::stage_bytes >= kProducts * 36 * kThreads * 4);
    __syncthreads();
    float* exchange = reinterpret_cast<float*>(stages);
    const int t = threadIdx.x & (kThreads - 1);
    if (channel == 1) {
#pragma unroll
      for (int k = 0; k < kProducts; ++k)
#pragma unroll
        for (int i = 0; i < 36; ++i) exchange[(k * 36 + i) * kThreads + t] = acc[k][i];
    }
    __syncthreads();
    if (channel == 1) return;
    write_outputs<9>(p, mx, my0, b, a0, group, quad, [&](int c, int r, int n, int i) {
      return c == 0 ? acc[r][4 * n + i] : exchange[(r * 36 + 4 * n + i) * kThreads + t];
    });
  } else {
    write_outputs<9>(p, mx, my0, b, a0, group, quad,
                     [&](int c, int r, int n, int i) { return acc[c * 2 + r][4 * n + i]; });
  }
}

template <int kColumnTiles>
__global__ void __launch_bounds__(kThreads, 2) contract_kernel(Params p) {
  using L = Layout<kColumnTiles>;
  extern __shared__ __align__(16) unsigned char smem[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int group = lane >> 2, quad = lane & 3;  // mma fragment coordinates
  const int tile = blockIdx.x;
  const int my0 = (tile % p.my_tiles) * kRows;
  const int b_cta = p.b_begin + (tile / p.my_tiles) * kWarps;
  const int b = b_cta + warp;
  const int a0 = blockIdx.y * kColumnTiles * 8;
  const int mx = blockIdx.z;

  float2* phase = reinterpret_cast<float2*>(smem);
  unsigned char* stages = smem + L::phase_bytes(p.shift_span);
  fill_phase_table(p, my0, phase, kThreads);

  const int chunks = p.exposures_padded / kChunk;
  const std::size_t E = p.exposures_padded;
  // x phases: kColumnTiles * 8 rows of kChunk half2 = 8 copies each.
  const RowShare<kColumnTiles * 8, 8, kThreads> x_rows;
  const __half2* x_src = p.x_phases + (std::size_t(mx) * p.va_padded + a0 + x_rows.row0) * E + x_rows.part * 4;
  const int x_dst = x_rows.row0 * kYRowBytes + x_rows.part * 16;
  const SpectrumShiftCopies<kThreads> spectrum_shift_copies(p, mx, my0, b_cta, L::y_bytes);
  auto load_stage = [&](int chunk, int slot) {
    unsigned char* st = stages + slot * L::stage_bytes;
    const int e0 = chunk * kChunk;
    x_rows.copy(st + x_dst, decltype(x_rows)::rows_per_pass * kYRowBytes, x_src + e0,
                decltype(x_rows)::rows_per_pass * E);
    spectrum_shift_copies.copy(st, e0);
  };

  prime_pipeline<kStages - 1>(chunks, load_stage);

  float acc[2][2][kColumnTiles][4];  // [channel][real, imaginary][n8 tile][fragment]
  zero_accumulators(acc);

  const float2* phase_lo = phase + group * p.shift_span;        // row my0 + group
  const float2* phase_hi = phase + (group + 8) * p.shift_span;  // row my0 + group + 8
  // ldmatrix row addresses: lane l serves matrix l/8 (0: tile n, k 0-7; 1: tile n, k 8-15;
  // 2: tile n+1, k 0-7; 3: tile n+1, k 8-15), row l%8 (a column of the product).
  const int ld_row = ((lane >> 4) * 8 + (lane & 7)) * kYRowBytes + ((lane >> 3) & 1) * 16;
  const int ld_row_x2 = (lane & 7) * kYRowBytes + ((lane >> 3) & 1) * 16;

  auto stage_at = [&](int chunk) { return stages + (chunk % kStages) * L::stage_bytes; };
  auto read_inputs = [&](const unsigned char* st, int step) {
    const unsigned char* ss = st + L::y_bytes;
    const std::int32_t* shifts = reinterpret_cast<const std::int32_t*>(ss + L::spectrum_bytes) + warp * kChunk;
    return read_step_inputs(ss, shifts, phase_lo, phase_hi, group, quad, step);
  };
  // Each step reads its inputs and forms its operands just before its products: reading them a
  // step ahead, as the wgmma kernel does, measured no faster here (the compiler already overlaps
  // them with the previous step's products; bench/RESULTS.md, "Fourier-route stages").
  for (int chunk = 0; chunk < chunks; ++chunk) {
    advance_pipeline<kStages>(chunk, chunks, load_stage);
    const unsigned char* ys = stage_at(chunk);
#pragma unroll
    for (int step = 0; step < kChunk / 8; ++step) {
      std::uint32_t operands[4][4];
      form_operands(read_inputs(ys, step), operands);
      const unsigned char* ystep = ys + step * 32;  // 8 exposures = 32 bytes into each row
      column_products<kColumnTiles>(ystep, ld_row, ld_row_x2, operands, acc);
    }
  }

  // Epilogue: scale back (per-frequency scale and the inverse transform's 1/(nx ny)), write
  // the velocity spectra; 8 consecutive my per column are 64 contiguous bytes.
  write_outputs<kColumnTiles>(p, mx, my0, b, a0, group, quad,
                              [&](int c, int r, int n, int i) { return acc[c][r][n][i]; });
}

// --- the row route: transforms along x only, y shifts as row offsets --------------------------------
//
// Per x frequency mx (mx <= nx / 2) and image row y of the region the velocity plane is
//   D[(b, y), a] = sum_e  S_e(mx, y + sy[b,e]) * Y_x(mx sx[a,e])
// with S_e the transform of exposure e along x only. The A operand is a gather of rows of S: no
// phase and no multiplication, so a k16 step costs four 8-byte shared loads and the sign and swap
// of the real block form, where the planar kernel spends about 100 instructions forming A.
// One CTA = one mx, 16 region rows, kWarps consecutive b (one per warp), one a block of columns.
// Per exposure of a chunk the CTA copies one window of half_spectra rows that covers its four
// rows b (SpectralState::window_start); warp b reads its 16 rows from row_in_window[b][e] on.
struct RowParams {
  const uint2* half_rows;             // [mx][e < E_pad][j < row_span]: (psi half2, phi half2)
  const float* scales;                // [c][mx]
  const __half2* x_phases;            // [mx][a < va_padded][E_pad]
  const std::int32_t* window_start;   // [group][E_pad]
  const std::int32_t* row_in_window;  // [b < vb_padded][E_pad]
  int row_span, window_rows, window_pitch, exposures_padded, va, va_padded, row_tiles;
  int nx, out_pitch, region_y0, region_height;
  int b_begin, b_end;                 // the velocity chunk's rows b (outputs are indexed from b_begin)
  int group_b0;                       // first row b of the launch's first group of kWarps
  float norm;
  float2* out;                        // [(b - b_begin) * va + a][mx < nx][y < out_pitch]
};
constexpr int kMaxWindowRows = 32;    // rows copied per exposure: 16 and a spread of the group's shifts

template <int kColumnTiles>
struct RowLayout {
  static constexpr int y_bytes = kColumnTiles * 8 * kYRowBytes;
  static constexpr int offset_bytes = kWarps * kShiftRowBytes;
  static constexpr int accumulators = 2 * 2 * kColumnTiles * 4;  // per lane: [channel][re, im][tile][fragment]
  __host__ __device__ static int window_bytes(int pitch) { return kChunk * pitch * 8; }
  __host__ __device__ static int stage_bytes(int pitch) { return y_bytes + offset_bytes + window_bytes(pitch); }
  __host__ __device__ static int starts_bytes(int exposures_padded) { return exposures_padded * 4; }
  __host__ __device__ static int total_bytes(int pitch, int exposures_padded) {
    return starts_bytes(exposures_padded) + kRowStages * stage_bytes(pitch);
  }
};

// The row-route part of one stage: the CTA's rows b of row_in_window (kWarps rows of kChunk
// offsets, at offsets_at into the stage) and the windows (kChunk exposures of window_rows / 2
// copies of two rows each, at windows_at). Each exposure has kWindowSlots copy slots, of which
// the first window_rows / 2 copy: a thread's slot and its first exposure follow from threadIdx.x
// by shifts, where dealing the copies out in turn cost an integer division per copy (a chain of
// dependent multiplies on the contraction's critical path). Loads the group's window starts into
// shared memory at `starts` first (every copy needs one).
constexpr int kWindowSlots = kMaxWindowRows / 2;
static_assert(kThreads % kWindowSlots == 0 && kChunk % (kThreads / kWindowSlots) == 0);
struct RowWindowCopies {
  static constexpr int exposures_per_pass = kThreads / kWindowSlots;
  static constexpr int copies_per_chunk = kChunk / exposures_per_pass;
  const RowParams& p;
  const std::int32_t* starts;
  const uint2* source;  // this thread's slot in exposure first_exposure's tile rows at this mx
  int first_exposure;   // this thread copies exposures first_exposure + k exposures_per_pass
  int pass_elements;    // pairs between its exposures: exposures_per_pass * row_span
  bool copies;          // its slot is one of the window's
  int destination;      // bytes into the windows of its first copy
  RowShare<kWarps, 8, kThreads> offset_rows;
  const std::int32_t* offset_src;
  int offset_dst;
  __device__ RowWindowCopies(const RowParams& params, int mx, int row0, int b_cta, std::int32_t* group_starts,
                             int offsets_at, int windows_at)
      : p(params), starts(group_starts) {
    const int slot = int(threadIdx.x) % kWindowSlots;
    first_exposure = int(threadIdx.x) / kWindowSlots;
    copies = slot < params.window_rows / 2;
    source = params.half_rows + std::size_t(mx) * params.exposures_padded * params.row_span + row0 + 2 * slot +
             std::size_t(first_exposure) * params.row_span;
    pass_elements = exposures_per_pass * params.row_span;
    destination = windows_at + (first_exposure * params.window_pitch + 2 * slot) * 8;
    offset_src = p.row_in_window + std::size_t(b_cta + offset_rows.row0) * p.exposures_padded + offset_rows.part * 4;
    offset_dst = offsets_at + offset_rows.row0 * kShiftRowBytes + offset_rows.part * 16;
    const std::int32_t* group = p.window_start + std::size_t(b_cta / kWarps) * p.exposures_padded;
    for (int e = threadIdx.x; e < p.exposures_padded; e += kThreads) group_starts[e] = group[e];
    __syncthreads();
  }
  // This thread's window starts for the chunk at e0. The mma kernel reads them a chunk ahead, so
  // that a stage's copies do not wait on shared memory (a load, then a dependent address, per copy).
  __device__ __forceinline__ void read_starts(int e0, int (&values)[copies_per_chunk]) const {
#pragma unroll
    for (int k = 0; k < copies_per_chunk; ++k) values[k] = starts[e0 + first_exposure + k * exposures_per_pass];
  }
  // Offsets from `source` in 32 bits: an mx plane of half_rows holds fewer than 2^31 pairs
  // (row_route_fits checks), and none is negative, so each copy's address is one unsigned wide
  // multiply-add.
  __device__ __forceinline__ void copy(unsigned char* stage, int e0, const int (&start_values)[copies_per_chunk]) const {
    offset_rows.copy(stage + offset_dst, 0, offset_src + e0, 0);
    if (!copies) return;
    const int first = e0 * p.row_span;
#pragma unroll
    for (int k = 0; k < copies_per_chunk; ++k)
      copy_async_16(stage + destination + k * exposures_per_pass * p.window_pitch * 8,
                    source + unsigned(first + k * pass_elements + start_values[k]));
  }
  __device__ __forceinline__ void copy(unsigned char* stage, int e0) const {
    int start_values[copies_per_chunk];
    read_starts(e0, start_values);
    copy(stage, e0, start_values);
  }
};

// The row route's epilogue: the per-mx scales and 1 / nx, rows y of the region only, mx and its
// mirror (store_both_channels_x); value(c, r, n, i) as in write_outputs. With kPairedLast the
// last tile is paired: lane quad holds velocity a0 + 8 (kColumnTiles - 1) + quad, its real and
// imaginary outputs in the real accumulators' elements 2 half and 2 half + 1.
template <int kColumnTiles, bool kPairedLast, class Value>
__device__ __forceinline__ void write_row_outputs(const RowParams& p, int mx, int row0, int b, int a0, int group,
                                                  int quad, Value value) {
  if (b >= p.b_end) return;
  const float scale_psi = p.scales[mx] * p.norm, scale_phi = p.scales[gridDim.z + mx] * p.norm;
  const auto scaled = [](float2 v, float scale) { return make_float2(v.x * scale, v.y * scale); };
  const auto store = [&](int row, int a, float2 psi, float2 phi) {
    float2* velocity = p.out + (std::size_t(b - p.b_begin) * p.va + a) * p.nx * p.out_pitch;
    store_both_channels_x(velocity, p.nx, p.out_pitch, mx, p.region_y0 + row0 + row, scaled(psi, scale_psi),
                          scaled(phi, scale_phi));
  };
  constexpr int kPlainTiles = kColumnTiles - (kPairedLast ? 1 : 0);
  const int mirror_x = mx == 0 ? 0 : p.nx - mx;
  if (a0 + kPlainTiles * 8 <= p.va && row0 + kRows <= p.region_height && mirror_x != mx) {
    // Whole tiles (every CTA of `dense`): one pointer per lane and column, stepped by 8 velocity
    // planes per tile, and no test per element; mx is not its own mirror here, so each element
    // is store_both_channels_x's pair.
    const std::size_t plane = std::size_t(p.nx) * p.out_pitch;
    float2* at = p.out + (std::size_t(b - p.b_begin) * p.va + a0 + 2 * quad) * plane + std::size_t(mx) * p.out_pitch +
                 p.region_y0 + row0 + group;
    const std::ptrdiff_t to_mirror = std::ptrdiff_t(mirror_x - mx) * p.out_pitch;
#pragma unroll
    for (int col = 0; col < 2; ++col) {
      float2* column = at + col * plane;
#pragma unroll
      for (int n = 0; n < kPlainTiles; ++n, column += 8 * plane)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int i = 2 * half + col;
          const MirroredPair<float2> z =
              mirrored_pair(scaled(make_float2(value(0, 0, n, i), value(0, 1, n, i)), scale_psi),
                            scaled(make_float2(value(1, 0, n, i), value(1, 1, n, i)), scale_phi));
          column[8 * half] = z.at_k;
          column[to_mirror + 8 * half] = z.at_mirror;
        }
    }
  } else {
    for_each_fragment_element<kPlainTiles>(
        a0, p.va, group, quad, [&](int row) { return row0 + row < p.region_height; },
        [&](int row, int a, int n, int i) {
          store(row, a, make_float2(value(0, 0, n, i), value(0, 1, n, i)),
                make_float2(value(1, 0, n, i), value(1, 1, n, i)));
        });
  }
  if constexpr (kPairedLast) {
    const int a = a0 + kPlainTiles * 8 + quad;
    if (a >= p.va) return;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = group + 8 * half;
      if (row0 + row >= p.region_height) continue;
      store(row, a, make_float2(value(0, 0, kPlainTiles, 2 * half), value(0, 0, kPlainTiles, 2 * half + 1)),
            make_float2(value(1, 0, kPlainTiles, 2 * half), value(1, 0, kPlainTiles, 2 * half + 1)));
    }
  }
}

// One k16 step's A registers of a row-route warp: exposures q and q + 4 of the step, rows g and
// g + 8 of the warp's 16 (window rows offset + g), as (psi real, psi imaginary, phi real, phi
// imaginary) rows of the real block form.
struct RowSamples {
  uint2 pair[4];  // (psi, phi) of A registers 0-3
};
__device__ __forceinline__ RowSamples read_row_samples(const unsigned char* windows, const std::int32_t* offsets,
                                                       int window_pitch_bytes, int quad, int step) {
  const int e_lo = step * 8 + quad, e_hi = e_lo + 4;
  const unsigned char* lo = windows + e_lo * window_pitch_bytes + offsets[e_lo] * 8;
  const unsigned char* hi = windows + e_hi * window_pitch_bytes + offsets[e_hi] * 8;
  return {{*reinterpret_cast<const uint2*>(lo), *reinterpret_cast<const uint2*>(lo + 64),
           *reinterpret_cast<const uint2*>(hi), *reinterpret_cast<const uint2*>(hi + 64)}};
}
__device__ __forceinline__ void form_row_operands(const RowSamples& samples, std::uint32_t (&operands)[4][4]) {
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    block_pairs(samples.pair[r].x, operands[0][r], operands[1][r]);
    block_pairs(samples.pair[r].y, operands[2][r], operands[3][r]);
  }
}
__device__ __forceinline__ void gather_row_operands(const unsigned char* windows, const std::int32_t* offsets,
                                                    int window_pitch_bytes, int quad, int step,
                                                    std::uint32_t (&operands)[4][4]) {
  form_row_operands(read_row_samples(windows, offsets, window_pitch_bytes, quad, step), operands);
}

// The last group of a velocity chunk may hold fewer than kWarps real rows b. Its CTAs split the
// k16 steps of each chunk between the kWarpsPerRow warps of each real row, and sum the partial
// accumulators through shared memory at the end, so that no warp multiplies padding rows: warp
// w serves row b_cta + w / kWarpsPerRow, and of each chunk the steps congruent to w modulo
// kWarpsPerRow. With kWarpsPerRow = 1 this is the plain kernel (one row b per warp, every step).
template <int kWarpsPerRow>
struct RowSplit {
  static_assert(kWarps % kWarpsPerRow == 0 && (kChunk / 8) % kWarpsPerRow == 0);
  static constexpr int steps = kChunk / 8 / kWarpsPerRow;
  int row, part;
  __device__ explicit RowSplit(int warp) : row(warp / kWarpsPerRow), part(warp % kWarpsPerRow) {}
  __device__ int step(int s) const { return s * kWarpsPerRow + part; }
  // Shared bytes of the partial sums, `values` floats per lane of each warp past part 0.
  __host__ __device__ static constexpr int reduction_bytes(int values) {
    return (kWarps - kWarps / kWarpsPerRow) * values * 32 * 4;
  }
  // After the last chunk: warps with part > 0 leave their sums in `scratch` (the stages, free
  // once every copy has landed); part 0 adds them. Returns whether this warp writes outputs.
  template <int kValues>
  __device__ bool gather_partials(float* values, unsigned char* scratch, int lane) const {
    if constexpr (kWarpsPerRow == 1) {
      return true;
    } else {
      copy_async_wait<0>();
      __syncthreads();
      float* partials = reinterpret_cast<float*>(scratch);
      const int slot = row * (kWarpsPerRow - 1) + part - 1;
      if (part > 0) {
#pragma unroll
        for (int i = 0; i < kValues; ++i) partials[(slot * kValues + i) * 32 + lane] = values[i];
      }
      __syncthreads();
      if (part > 0) return false;
#pragma unroll
      for (int other = 0; other < kWarpsPerRow - 1; ++other) {
        const int from = row * (kWarpsPerRow - 1) + other;
#pragma unroll
        for (int i = 0; i < kValues; ++i) values[i] += partials[(from * kValues + i) * 32 + lane];
      }
      return true;
    }
  }
};

template <int kColumnTiles, int kWarpsPerRow, bool kPairedLast>
__global__ void __launch_bounds__(kThreads, 2) contract_rows_kernel(RowParams p) {
  using L = RowLayout<kColumnTiles>;
  extern __shared__ __align__(16) unsigned char smem[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int group = lane >> 2, quad = lane & 3;
  const int tile = blockIdx.x;
  const int row0 = (tile % p.row_tiles) * kRows;  // region row of the CTA's first row
  const int b_cta = p.group_b0 + (tile / p.row_tiles) * kWarps;
  const RowSplit<kWarpsPerRow> split(warp);
  const int b = b_cta + split.row;
  const int a0 = blockIdx.y * block_velocities(kColumnTiles, kPairedLast);  // the block's first velocity
  const int mx = blockIdx.z;
  const int stage_bytes = L::stage_bytes(p.window_pitch);

  // The group's window starts for every exposure first, then the stages.
  unsigned char* stages = smem + L::starts_bytes(p.exposures_padded);
  const RowWindowCopies window_copies(p, mx, row0, b_cta, reinterpret_cast<std::int32_t*>(smem), L::y_bytes,
                                      L::y_bytes + L::offset_bytes);
  const int chunks = p.exposures_padded / kChunk;
  const std::size_t E = p.exposures_padded;
  const RowShare<kColumnTiles * 8, 8, kThreads> x_rows;
  const int table_row0 = blockIdx.y * kColumnTiles * 8;  // the block's first x-table row (8 per tile)
  const __half2* x_src =
      p.x_phases + (std::size_t(mx) * p.va_padded + table_row0 + x_rows.row0) * E + x_rows.part * 4;
  const int x_dst = x_rows.row0 * kYRowBytes + x_rows.part * 16;
  // Stages load in chunk order, so each load reads the next chunk's window starts.
  int next_starts[RowWindowCopies::copies_per_chunk];
  window_copies.read_starts(0, next_starts);
  auto load_stage = [&](int chunk, int slot) {
    unsigned char* st = stages + slot * stage_bytes;
    const int e0 = chunk * kChunk;
    x_rows.copy(st + x_dst, decltype(x_rows)::rows_per_pass * kYRowBytes, x_src + e0,
                decltype(x_rows)::rows_per_pass * E);
    window_copies.copy(st, e0, next_starts);
    if (e0 + kChunk < p.exposures_padded) window_copies.read_starts(e0 + kChunk, next_starts);
  };
  prime_pipeline<kRowStages - 1>(chunks, load_stage);

  float acc[2][2][kColumnTiles][4];  // [channel][real, imaginary][n8 tile][fragment]
  static_assert(sizeof(acc) == L::accumulators * sizeof(float));
  zero_accumulators(acc);
  const int ld_row = ((lane >> 4) * 8 + (lane & 7)) * kYRowBytes + ((lane >> 3) & 1) * 16;
  const int ld_row_x2 = (lane & 7) * kYRowBytes + ((lane >> 3) & 1) * 16;
  const int window_pitch_bytes = p.window_pitch * 8;

  // Each chunk waits for the next chunk's stage too, and its last step reads the next chunk's
  // first samples and first pair of B tiles, so that the products after the chunk's barrier start
  // from registers. H100, one lease (bench/RESULTS.md): `dense` contraction 6.31 -> 6.25 ms
  // against reading them after the barrier; issuing the stage copies after the first step's
  // products instead of before lost (6.46).
  const auto stage_at = [&](int chunk) { return stages + (chunk % kRowStages) * stage_bytes; };
  // A stage's row offsets of this warp's row b, and its windows at this lane's first row.
  const auto offsets_in = [&](const unsigned char* st) {
    return reinterpret_cast<const std::int32_t*>(st + L::y_bytes) + split.row * kChunk;
  };
  const auto windows_in = [&](const unsigned char* st) { return st + L::y_bytes + L::offset_bytes + group * 8; };
  RowSamples next_samples;
  std::uint32_t next_b[4];
  const auto read_first_operands = [&](int chunk) {
    const unsigned char* st = stage_at(chunk);
    next_samples = read_row_samples(windows_in(st), offsets_in(st), window_pitch_bytes, quad, split.step(0));
    const unsigned char* ystep = st + split.step(0) * 32;
    if constexpr (kColumnTiles > 1) {
      load_matrix_x4(next_b[0], next_b[1], next_b[2], next_b[3], ystep + ld_row);
    } else {
      load_matrix_x2(next_b[0], next_b[1], ystep + ld_row_x2);
      next_b[2] = next_b[3] = 0;
    }
  };
  copy_async_wait<kRowStages - 2>();
  __syncthreads();
  read_first_operands(0);
  // The chunks that still start a stage load, then the last kRowStages - 1 that do not: two loops,
  // so that neither branches on the chunk count inside its body.
  const auto run_chunk = [&](int chunk, auto loads_ahead) {
    // Chunk + 1's stage (for the early reads) must have landed; the slot refilled is chunk - 1's.
    copy_async_wait<kRowStages - 3>();
    __syncthreads();
    // Written out: naming chunk + kRowStages - 1 in a block here took ptxas from 234 to 240 registers.
    if constexpr (decltype(loads_ahead)::value)
      load_stage(chunk + kRowStages - 1, (chunk + kRowStages - 1) % kRowStages);
    copy_async_commit();
    const unsigned char* st = stage_at(chunk);
    const std::int32_t* offsets = offsets_in(st);
    const unsigned char* windows = windows_in(st);
#pragma unroll
    for (int s = 0; s < RowSplit<kWarpsPerRow>::steps; ++s) {
      const int step = split.step(s);
      std::uint32_t operands[4][4];
      form_row_operands(s == 0 ? next_samples : read_row_samples(windows, offsets, window_pitch_bytes, quad, step),
                        operands);
      const std::uint32_t first_b[4] = {next_b[0], next_b[1], next_b[2], next_b[3]};
      // The last chunk reads its own stage again (unused), so that no chunk branches here.
      if (s + 1 == RowSplit<kWarpsPerRow>::steps) read_first_operands(min(chunk + 1, chunks - 1));
      column_products<kColumnTiles, kPairedLast>(st + step * 32, ld_row, ld_row_x2, operands, acc,
                                                 s == 0 ? first_b : nullptr);
    }
  };
  int chunk = 0;
  for (; chunk + kRowStages - 1 < chunks; ++chunk) run_chunk(chunk, std::true_type{});
  for (; chunk < chunks; ++chunk) run_chunk(chunk, std::false_type{});

  if (!split.template gather_partials<L::accumulators>(&acc[0][0][0][0], stages, lane)) return;
  write_row_outputs<kColumnTiles, kPairedLast>(p, mx, row0, b, a0, group, quad,
                                               [&](int c, int r, int n, int i) { return acc[c][r][n][i]; });
}

// The row route on wgmma: the CTA's warpgroup (4 rows b x 16 rows y = 64 rows) issues m64n72k16
// products, A from registers (the gathered rows), B from shared memory in the canonical K-major
// layout of contract_wgmma_kernel; loads two chunks ahead through kWgmmaStages stages.
struct RowWgmmaLayout {
  static constexpr int offset_bytes = kWarps * kShiftRowBytes;
  __host__ __device__ static int stage_bytes(int pitch) {
    return WgmmaLayout::y_bytes + offset_bytes + kChunk * pitch * 8;
  }
  __host__ __device__ static int total_bytes(int pitch, int exposures_padded) {
    return exposures_padded * 4 + kWgmmaStages * stage_bytes(pitch);
  }
};

__global__ void __launch_bounds__(kThreads, 2) contract_rows_wgmma_kernel(RowParams p) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int group = lane >> 2, quad = lane & 3;
  const int tile = blockIdx.x;
  const int row0 = (tile % p.row_tiles) * kRows;
  const int b_cta = p.group_b0 + (tile / p.row_tiles) * kWarps;
  const int b = b_cta + warp;
  const int a0 = blockIdx.y * kWgmmaColumns;
  const int mx = blockIdx.z;
  const int stage_bytes = RowWgmmaLayout::stage_bytes(p.window_pitch);

  unsigned char* stages = smem + p.exposures_padded * 4;
  const RowWindowCopies window_copies(p, mx, row0, b_cta, reinterpret_cast<std::int32_t*>(smem), WgmmaLayout::y_bytes,
                                      WgmmaLayout::y_bytes + RowWgmmaLayout::offset_bytes);
  const int chunks = p.exposures_padded / kChunk;
  const std::size_t E = p.exposures_padded;
  const RowShare<kWgmmaColumns, 8, kThreads> x_rows;
  const __half2* x_src = p.x_phases + (std::size_t(mx) * p.va_padded + a0 + x_rows.row0) * E + x_rows.part * 4;
  const int x_dst = (x_rows.row0 >> 3) * WgmmaLayout::group_bytes + x_rows.part * 128 + (x_rows.row0 & 7) * 16;
  auto load_stage = [&](int chunk, int slot) {
    unsigned char* st = stages + slot * stage_bytes;
    const int e0 = chunk * kChunk;
    x_rows.copy(st + x_dst, decltype(x_rows)::rows_per_pass / 8 * WgmmaLayout::group_bytes, x_src + e0,
                decltype(x_rows)::rows_per_pass * E);
    window_copies.copy(st, e0);
  };
  prime_pipeline<kWgmmaStages - 2>(chunks, load_stage);

  float acc[4][36];  // [channel * 2 + (real, imaginary)]
#pragma unroll
  for (int k = 0; k < 4; ++k)
#pragma unroll
    for (int i = 0; i < 36; ++i) acc[k][i] = 0.0f;
  std::uint32_t a[2][4][4];  // double-buffered A fragments
  const int window_pitch_bytes = p.window_pitch * 8;
  auto stage_at = [&](int chunk) { return stages + (chunk % kWgmmaStages) * stage_bytes; };
  auto enter_chunk = [&](int chunk) {
    copy_async_wait<kWgmmaStages - 3>();
    fence_async_shared();
    __syncthreads();
    const int ahead = chunk + kWgmmaStages - 2;
    if (ahead < chunks) load_stage(ahead, ahead % kWgmmaStages);
    copy_async_commit();
  };

  for (int chunk = 0; chunk < chunks; ++chunk) {
    enter_chunk(chunk);
    const unsigned char* st = stage_at(chunk);
    const std::int32_t* offsets = reinterpret_cast<const std::int32_t*>(st + WgmmaLayout::y_bytes) + warp * kChunk;
    const unsigned char* windows = st + WgmmaLayout::y_bytes + RowWgmmaLayout::offset_bytes + group * 8;
#pragma unroll
    for (int step = 0; step < kChunk / 8; ++step) {
      const int buffer = step & 1;  // kChunk / 8 is even: the parity carries across chunks
      // The products that read this buffer two steps ago must be done before it is rewritten.
      warpgroup_wait<1>();
      gather_row_operands(windows, offsets, window_pitch_bytes, quad, step, a[buffer]);
      const std::uint64_t desc = matrix_descriptor(st + step * 2 * 128, 128, WgmmaLayout::group_bytes);
      warpgroup_fence();
#pragma unroll
      for (int k = 0; k < 4; ++k) {
#pragma unroll
        for (int i = 0; i < 36; ++i) pin(acc[k][i]);
        wgmma_64x72x16(acc[k], a[buffer][k], desc);
      }
      warpgroup_commit();
    }
  }
  warpgroup_wait<0>();
#pragma unroll
  for (int k = 0; k < 4; ++k)
#pragma unroll
    for (int i = 0; i < 36; ++i) pin(acc[k][i]);
  write_row_outputs<9, false>(p, mx, row0, b, a0, group, quad,
                              [&](int c, int r, int n, int i) { return acc[c * 2 + r][4 * n + i]; });
}

// --- fractional (bilinear) shifts ---------------------------------------------------------------
//
// The three products of cuda-fourier's fractional phase sum (fourier.cu, Layout), on the tensor
// cores: per sample the row operands
//   A  = Iy psi                    against the x table Ix  (interpolation: e^{ikn} ((1-f) + f e^{ik}))
//   B1 = Qy phi + Cy down          against Qx              (squares: e^{ikn} ((1-f)^2 + f^2 e^{ik}))
//   B2 = Qy right + Cy / 2 diag    against Cx              (cross: e^{ikn} 2 f (1-f))
// with B1 and B2 summed in one accumulator, so B is the exact bilinear variance of SPEC 2 and
// the inverse transforms and the scoring are those of integer shifts. The y factors are formed in
// registers from the CTA's phase table, the row's unit root and the trial's y fraction; the x
// tables are FP16 like the integer phases. mma.sync only: six products per k16 step need more
// shared memory per exposure, so chunks are 16 exposures (two k16 steps), three stages.
constexpr int kFracChunk = 16;
constexpr int kFracStages = 3;
constexpr int kFracTables = 3;                        // Ix, Qx, Cx
constexpr int kFracYRowBytes = kFracChunk * 4 + 16;   // 8 ldmatrix rows in distinct banks
constexpr int kFracPairRowBytes = kFracChunk * 8 + 32;
constexpr int kFracHalfRowBytes = kFracChunk * 4 + 16;
constexpr int kFracShiftRowBytes = kFracChunk * 4;

template <int kColumnTiles>
struct FractionalLayout {
  static constexpr int table_bytes = kColumnTiles * 8 * kFracYRowBytes;
  static constexpr int y_bytes = kFracTables * table_bytes;
  static constexpr int spectrum_bytes = kRows * kFracPairRowBytes;    // (psi, phi)
  static constexpr int covariance_bytes = kRows * kFracPairRowBytes;  // (right, down)
  static constexpr int diagonal_bytes = kRows * kFracHalfRowBytes;
  static constexpr int shift_bytes = kWarps * kFracShiftRowBytes;     // floor(sy) - min_sy
  static constexpr int fraction_bytes = kWarps * kFracShiftRowBytes;  // sy - floor(sy)
  static constexpr int stage_bytes =
      y_bytes + spectrum_bytes + covariance_bytes + diagonal_bytes + shift_bytes + fraction_bytes;
  __host__ __device__ static int total_bytes(int span) {
    return Layout<kColumnTiles>::phase_bytes(span) + kFracStages * stage_bytes;
  }
};

struct FractionalParams {
  Params base;                      // x_phases: [table][mx][a < va_padded][E_pad]
  std::size_t table_stride;         // half2 between the x tables
  const uint2* half_covariances;    // [mx][my < nyh_padded][E_pad]: (right, down)
  const __half2* half_diagonals;    // [mx][my < nyh_padded][E_pad]
  const float* frac_y_rel;          // [b < vb_padded][E_pad]
};

__device__ __forceinline__ float2 half2_value(std::uint32_t bits) { return __half22float2(bits_half2(bits)); }
// One FP32 value rounded to FP16, as the two k-pairs of the real block form.
__device__ __forceinline__ void rounded_pairs(float2 value, std::uint32_t& real_pair, std::uint32_t& imag_pair) {
  block_pairs(half2_bits(__floats2half2_rn(value.x, value.y)), real_pair, imag_pair);
}

// The row operands of one sample (fragment register r): whole = the y phase of floor(sy),
// step = e^{i ky} of the row, f = the y fraction. A alone, then B1 and B2 (formed just before
// their products, so that only one side's operands are live; the factors a side does not use
// are dropped by the compiler).
__device__ __forceinline__ void fractional_a(float2 whole, float2 step, float f, std::uint32_t psi, int r,
                                             std::uint32_t (&a)[2][4]) {
  const AxisFactors y = axis_factors(whole, step, f);
  rounded_pairs(cmul(y.interpolate, half2_value(psi)), a[0][r], a[1][r]);
}
__device__ __forceinline__ void fractional_b(float2 whole, float2 step, float f, std::uint32_t phi, uint2 covariance,
                                             std::uint32_t diagonal, int r, std::uint32_t (&a)[4][4]) {
  const AxisFactors y = axis_factors(whole, step, f);
  const float2 B1 = cfma(y.cross, half2_value(covariance.y), cmul(y.squares, half2_value(phi)));
  const float2 B2 = cfma(cscale(y.cross, 0.5f), half2_value(diagonal), cmul(y.squares, half2_value(covariance.x)));
  rounded_pairs(B1, a[0][r], a[1][r]);
  rounded_pairs(B2, a[2][r], a[3][r]);
}

// acc[r][n] += operands[r] x table (n8 tiles of the shared x table at `table`), r = real, imaginary.
template <int kColumnTiles>
__device__ __forceinline__ void table_products(const unsigned char* table, int ld_row, int ld_row_x2,
                                               const std::uint32_t (&real_pairs)[4],
                                               const std::uint32_t (&imag_pairs)[4],
                                               float (&acc)[2][kColumnTiles][4]) {
#pragma unroll
  for (int n = 0; n < kColumnTiles; n += 2) {
    std::uint32_t b0, b1, b2 = 0, b3 = 0;
    if (n + 1 < kColumnTiles) load_matrix_x4(b0, b1, b2, b3, table + n * 8 * kFracYRowBytes + ld_row);
    else load_matrix_x2(b0, b1, table + n * 8 * kFracYRowBytes + ld_row_x2);
    mma_16x8x16(acc[0][n], real_pairs, b0, b1);
    mma_16x8x16(acc[1][n], imag_pairs, b0, b1);
    if (n + 1 < kColumnTiles) {
      mma_16x8x16(acc[0][n + 1], real_pairs, b2, b3);
      mma_16x8x16(acc[1][n + 1], imag_pairs, b2, b3);
    }
  }
}

template <int kColumnTiles>
__global__ void __launch_bounds__(kThreads, 2) contract_fractional_kernel(FractionalParams fp) {
  using L = FractionalLayout<kColumnTiles>;
  const Params& p = fp.base;
  extern __shared__ __align__(16) unsigned char smem[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int group = lane >> 2, quad = lane & 3;
  const int tile = blockIdx.x;
  const int my0 = (tile % p.my_tiles) * kRows;
  const int b_cta = p.b_begin + (tile / p.my_tiles) * kWarps;
  const int b = b_cta + warp;
  const int a0 = blockIdx.y * kColumnTiles * 8;
  const int mx = blockIdx.z;

  float2* phase = reinterpret_cast<float2*>(smem);
  unsigned char* stages = smem + Layout<kColumnTiles>::phase_bytes(p.shift_span);
  fill_phase_table(p, my0, phase, kThreads);

  const int chunks = p.exposures_padded / kFracChunk;
  const std::size_t E = p.exposures_padded;
  constexpr int kTableParts = kFracChunk * 4 / 16;  // 16-byte pieces of a table (or shift) row
  constexpr int kPairParts = kFracChunk * 8 / 16;   // of a (psi, phi) or covariance row
  // Three x tables of kColumnTiles * 8 rows; spectra and covariances (16 rows of pairs each);
  // diagonals (16 rows); the shifts and the fractions of the CTA's kWarps rows b.
  const RowShare<kColumnTiles * 8, kTableParts, kThreads> x_rows;
  const RowShare<kRows, kPairParts, kThreads> pair_rows;
  const RowShare<kRows, kTableParts, kThreads> diagonal_rows;
  const RowShare<kWarps, kTableParts, kThreads> shift_rows;
  using XRows = decltype(x_rows);
  const __half2* x_src = p.x_phases + (std::size_t(mx) * p.va_padded + a0 + x_rows.row0) * E + x_rows.part * 4;
  const int x_dst = x_rows.row0 * kFracYRowBytes + x_rows.part * 16;
  const std::size_t pair_at = (std::size_t(mx) * p.nyh_padded + my0 + pair_rows.row0) * E + pair_rows.part * 2;
  const int pair_dst = pair_rows.row0 * kFracPairRowBytes + pair_rows.part * 16;
  const __half2* diagonal_src =
      fp.half_diagonals + (std::size_t(mx) * p.nyh_padded + my0 + diagonal_rows.row0) * E + diagonal_rows.part * 4;
  const int diagonal_dst = L::y_bytes + L::spectrum_bytes + L::covariance_bytes +
                           diagonal_rows.row0 * kFracHalfRowBytes + diagonal_rows.part * 16;
  const std::size_t shift_at = std::size_t(b_cta + shift_rows.row0) * E + shift_rows.part * 4;
  const int shift_dst = L::y_bytes + L::spectrum_bytes + L::covariance_bytes + L::diagonal_bytes +
                        shift_rows.row0 * kFracShiftRowBytes + shift_rows.part * 16;
  auto load_stage = [&](int chunk, int slot) {
    unsigned char* st = stages + slot * L::stage_bytes;
    const int e0 = chunk * kFracChunk;
#pragma unroll
    for (int t = 0; t < kFracTables; ++t)
      x_rows.copy(st + t * L::table_bytes + x_dst, XRows::rows_per_pass * kFracYRowBytes,
                  x_src + t * fp.table_stride + e0, XRows::rows_per_pass * E);
    pair_rows.copy(st + L::y_bytes + pair_dst, 0, p.half_spectra + pair_at + e0, 0);
    pair_rows.copy(st + L::y_bytes + L::spectrum_bytes + pair_dst, 0, fp.half_covariances + pair_at + e0, 0);
    diagonal_rows.copy(st + diagonal_dst, 0, diagonal_src + e0, 0);
    shift_rows.copy(st + shift_dst, 0, p.shift_y_rel + shift_at + e0, 0);
    shift_rows.copy(st + shift_dst + L::shift_bytes, 0, fp.frac_y_rel + shift_at + e0, 0);
  };

  prime_pipeline<kFracStages - 1>(chunks, load_stage);

  float acc[2][2][kColumnTiles][4];  // [A, B][real, imaginary][n8 tile][fragment]
  zero_accumulators(acc);

  const float2* phase_lo = phase + group * p.shift_span;
  const float2* phase_hi = phase + (group + 8) * p.shift_span;
  // e^{i ky} of the lane's two rows; rows past nyh carry zero spectra, any root serves them.
  const float2 step_lo = p.root_y[min(my0 + group, p.ny - 1)];
  const float2 step_hi = p.root_y[min(my0 + group + 8, p.ny - 1)];
  const int ld_row = ((lane >> 4) * 8 + (lane & 7)) * kFracYRowBytes + ((lane >> 3) & 1) * 16;
  const int ld_row_x2 = (lane & 7) * kFracYRowBytes + ((lane >> 3) & 1) * 16;

  for (int chunk = 0; chunk < chunks; ++chunk) {
    advance_pipeline<kFracStages>(chunk, chunks, load_stage);
    const unsigned char* st = stages + (chunk % kFracStages) * L::stage_bytes;
    const unsigned char* ss = st + L::y_bytes;
    const unsigned char* sc = ss + L::spectrum_bytes;
    const unsigned char* sd = sc + L::covariance_bytes;
    const std::int32_t* shifts = reinterpret_cast<const std::int32_t*>(sd + L::diagonal_bytes) + warp * kFracChunk;
    const float* fractions =
        reinterpret_cast<const float*>(sd + L::diagonal_bytes + L::shift_bytes) + warp * kFracChunk;
#pragma unroll 1
    for (int step = 0; step < kFracChunk / 8; ++step) {
      const unsigned char* ystep = st + step * 32;
      // Fragment registers 0-3: (row g, exposure q), (row g + 8, q), (row g, q + 4), (row g + 8, q + 4).
      {
        std::uint32_t operands[2][4];
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          const int e = step * 8 + quad + 4 * (r >> 1), row = group + 8 * (r & 1);
          const std::uint32_t psi = *reinterpret_cast<const std::uint32_t*>(ss + row * kFracPairRowBytes + e * 8);
          fractional_a((r & 1) ? phase_hi[shifts[e]] : phase_lo[shifts[e]], (r & 1) ? step_hi : step_lo,
                       fractions[e], psi, r, operands);
        }
        table_products<kColumnTiles>(ystep, ld_row, ld_row_x2, operands[0], operands[1], acc[0]);
      }
      {
        std::uint32_t operands[4][4];
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          const int e = step * 8 + quad + 4 * (r >> 1), row = group + 8 * (r & 1);
          const std::uint32_t phi =
              *reinterpret_cast<const std::uint32_t*>(ss + row * kFracPairRowBytes + e * 8 + 4);
          const uint2 covariance = *reinterpret_cast<const uint2*>(sc + row * kFracPairRowBytes + e * 8);
          const std::uint32_t diagonal = *reinterpret_cast<const std::uint32_t*>(sd + row * kFracHalfRowBytes + e * 4);
          fractional_b((r & 1) ? phase_hi[shifts[e]] : phase_lo[shifts[e]], (r & 1) ? step_hi : step_lo,
                       fractions[e], phi, covariance, diagonal, r, operands);
        }
        table_products<kColumnTiles>(ystep + L::table_bytes, ld_row, ld_row_x2, operands[0], operands[1], acc[1]);
        table_products<kColumnTiles>(ystep + 2 * L::table_bytes, ld_row, ld_row_x2, operands[2], operands[3], acc[1]);
      }
    }
  }

  write_outputs<kColumnTiles>(p, mx, my0, b, a0, group, quad,
                              [&](int c, int r, int n, int i) { return acc[c][r][n][i]; });
}

// The fractional x tables in FP16, [table][mx][a][e] (Ix, Qx, Cx above) from floor(sx) and the
// fraction, formed in FP32; zero for padded a and e.
__global__ void fractional_x_table_kernel(const std::int32_t* sx, const float* fx, const float2* root_x, int nx,
                                          int va, int va_padded, int exposures, int exposures_padded,
                                          __half2* tables) {
  const std::size_t idx = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::size_t total = std::size_t(nx) * va_padded * exposures_padded;
  if (idx >= total) return;
  const int e = int(idx % exposures_padded);
  const int a = int(idx / exposures_padded % va_padded);
  const int mx = int(idx / (std::size_t(exposures_padded) * va_padded));
  AxisFactors t{make_float2(0, 0), make_float2(0, 0), make_float2(0, 0)};
  if (a < va && e < exposures) {
    const std::size_t at = std::size_t(a) * exposures + e;
    int j = int((long long)mx * sx[at] % nx);
    if (j < 0) j += nx;
    t = axis_factors(root_x[j], root_x[mx], fx[at]);
  }
  tables[idx] = __floats2half2_rn(t.interpolate.x, t.interpolate.y);
  tables[total + idx] = __floats2half2_rn(t.squares.x, t.squares.y);
  tables[2 * total + idx] = __floats2half2_rn(t.cross.x, t.cross.y);
}

// x phases in FP16: table[mx][row][e] for mx < rows (nx, or nx / 2 + 1 on the row route), zero
// for padded a and e; row a holds Y = exp(2 pi i mx sx[a,e] / nx) = (Yr, Yi). With paired_last,
// each block of 8 column_tiles rows ends with a paired tile (kPairedVelocities): its rows 2j and
// 2j + 1 hold (Yr, Yi) and (Yi, -Yr) of the block's velocity 8 (column_tiles - 1) + j.
__global__ void x_phase_table_kernel(const std::int32_t* sx, const __half2* root_x, int nx, int rows, int va,
                                     int va_padded, int column_tiles, bool paired_last, int exposures,
                                     int exposures_padded, __half2* table) {
  const std::size_t idx = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::size_t total = std::size_t(rows) * va_padded * exposures_padded;
  if (idx >= total) return;
  const int e = int(idx % exposures_padded);
  const int row = int(idx / exposures_padded % va_padded);
  const int mx = int(idx / (std::size_t(exposures_padded) * va_padded));
  const int block_rows = column_tiles * 8, plain_rows = block_rows - (paired_last ? 8 : 0);
  const int block = row / block_rows, r = row % block_rows;
  const bool paired = r >= plain_rows;
  const int a = block * block_velocities(column_tiles, paired_last) + (paired ? plain_rows + (r - plain_rows) / 2 : r);
  __half2 value = __floats2half2_rn(0.0f, 0.0f);
  if (a < va && e < exposures) {
    int j = int((long long)mx * sx[std::size_t(a) * exposures + e] % nx);
    if (j < 0) j += nx;
    value = root_x[j];
    if (paired && (r - plain_rows) % 2 == 1) value = __halves2half2(__high2half(value), __hneg(__low2half(value)));
  }
  table[idx] = value;
}

}  // namespace tc

namespace {

class TensorCoreEngine final : public SpectralEngine {
 public:
  std::string name() const override { return "cuda-tc"; }

 protected:
  bool supports_fractional() const override { return true; }
  std::string engine_unsupported_reason(const SearchInput& input) const override {
    const bool fractional = input.bank->mode == ShiftMode::fractional;
    const SeparableShifts shifts = integer_shifts(*input.bank);
    const auto [lo, hi] = std::minmax_element(shifts.y.begin(), shifts.y.end());
    // Fractional shifts use floor(s) and a second corner: at most two more rows than round(s).
    const int span = *hi - *lo + 1 + (fractional ? 2 : 0);
    const int stages = fractional ? tc::kFracStages * tc::FractionalLayout<tc::kMaxColumnTiles>::stage_bytes
                                  : tc::kWgmmaStages * tc::WgmmaLayout::stage_bytes;
    const int needed = fractional ? tc::FractionalLayout<tc::kMaxColumnTiles>::total_bytes(span)
                                  : std::max(tc::Layout<tc::kMaxColumnTiles>::total_bytes(span),
                                             tc::WgmmaLayout::total_bytes(span));
    if (needed > kSharedBudget)
      return "y shifts span " + std::to_string(span) + " pixels: the per-CTA phase table would not fit in "
             "shared memory (at most about " + std::to_string((kSharedBudget - stages) / (tc::kRows * 8)) + ")";
    return {};
  }
  int row_granularity() const override { return tc::kWarps; }
  // The row route has mma.sync and one-warpgroup wgmma kernels: forcing wgmma-split keeps the
  // planar route.
  int row_route_window_limit() const override {
    return forced_kernel() == "wgmma-split" ? 0 : tc::kMaxWindowRows;
  }
  // The row kernels keep the group's window starts of every exposure beside their stages, and
  // address one x frequency's rows (exposures x row span) with 32-bit offsets.
  bool row_route_fits(const SpectralState& s) const override {
    if (std::size_t(s.exposures_padded) * s.row_span >= (std::size_t(1) << 31)) return false;
    const int bytes = forced_kernel() == "mma"
                          ? tc::RowLayout<tc::kMaxColumnTiles>::total_bytes(s.window_pitch, s.exposures_padded)
                          : tc::RowWgmmaLayout::total_bytes(s.window_pitch, s.exposures_padded);
    return bytes <= kSharedBudget;
  }

  void prepare(SpectralState& s) override {
    if (s.row_route) {
      pack_half_rows(s);
    } else {
      pack_half_spectra(s, tc::kWarps);
    }
    column_tiles_ = std::min(tc::kMaxColumnTiles, (s.va + 7) / 8);
    // mma.sync (HMMA), the faster on `dense` on the H200 and on an H100; the environment variable
    // SHIFTSTACK_TC_KERNEL=mma|wgmma|wgmma-split forces one (for tests and timing).
    const std::string kernel = forced_kernel();
    require(!s.fractional || kernel == "mma",
            "SHIFTSTACK_TC_KERNEL=" + kernel + ": fractional shifts run on the mma.sync kernel only (their six "
            "products per step are not built for wgmma)");
    use_wgmma_ = kernel != "mma";
    split_channels_ = kernel == "wgmma-split";
    tail_split_ = split_last_group(s.exposures_padded / tc::kChunk);
    if (use_wgmma_) column_tiles_ = tc::kWgmmaColumns / 8;
    column_blocks_ = (s.va + column_tiles_ * 8 - 1) / (column_tiles_ * 8);
    paired_last_ = false;
    const int forced_paired = forced_switch("SHIFTSTACK_TC_PAIRED_TILE");  // checked on every route
    if (s.row_route && !use_wgmma_) choose_paired_tile(s.va, forced_paired);
    va_padded_ = column_blocks_ * column_tiles_ * 8;  // x-table rows per mx
    const FourierGeometry& g = s.geometry;
    const int table_rows = s.row_route ? s.nxh() : g.nx;
    table_stride_ = std::size_t(table_rows) * va_padded_ * s.exposures_padded;
    const unsigned blocks = unsigned((table_stride_ + 255) / 256);
    if (s.fractional) {
      x_phases_.resize(tc::kFracTables * table_stride_);
      tc::fractional_x_table_kernel<<<blocks, 256, 0, s.stream>>>(s.shift_x.get(), s.frac_x.get(),
                                                                  s.root_x.get(), g.nx, s.va, va_padded_,
                                                                  s.exposures, s.exposures_padded, x_phases_.get());
    } else {
      x_phases_.resize(table_stride_);
      tc::x_phase_table_kernel<<<blocks, 256, 0, s.stream>>>(s.shift_x.get(), s.root_x_half.get(), g.nx, table_rows,
                                                             s.va, va_padded_, column_tiles_, paired_last_,
                                                             s.exposures, s.exposures_padded, x_phases_.get());
    }
    SHIFTSTACK_CUDA_CHECK_LAUNCH();
  }

  void contract(SpectralState& s, int b_begin, int b_end) override {
    if (s.fractional) {
      with_column_tiles([&]<int kTiles>() { launch_fractional<kTiles>(s, b_begin, b_end); });
    } else if (s.row_route && use_wgmma_) {
      launch_rows_wgmma(s, b_begin, b_end);
    } else if (s.row_route) {
      with_column_tiles([&]<int kTiles>() { launch_rows<kTiles>(s, b_begin, b_end); });
    } else if (use_wgmma_) {
      launch_wgmma(s, b_begin, b_end);
    } else {
      with_column_tiles([&]<int kTiles>() { launch<kTiles>(s, b_begin, b_end); });
    }
  }

 private:
  static constexpr int kSharedBudget = 110 * 1024;  // two CTAs per SM (228 KB each SM)

  // Whether the row kernels' last group of one or two rows b is launched apart with its steps
  // split (launch_row_groups). It saves the padding rows' products but costs a second launch and
  // a reduction: on an H100, `dense` (32 chunks of exposures) 6.73-6.85 -> 6.60 ms, `kbmod` (7)
  // 1.817 -> 1.798, `ci` (1) 0.043 -> 0.051. Hence the split from 4 chunks on (a threshold
  // between the measured 1 and 7); SHIFTSTACK_TC_ROW_TAIL=0 or 1 forces it off or on.
  static bool split_last_group(int chunks) {
    const int forced = forced_switch("SHIFTSTACK_TC_ROW_TAIL");
    return forced < 0 ? chunks >= 4 : forced == 1;
  }

  // An on/off switch from the environment: -1 where unset, else 0 or 1 (any other value is refused).
  static int forced_switch(const char* variable) {
    const char* forced = std::getenv(variable);
    if (!forced) return -1;
    const std::string value = forced;
    require(value == "0" || value == "1", std::string(variable) + " must be 0 or 1, not '" + value + "'");
    return value == "1";
  }

  // The row mma kernel's column blocks may end with a paired tile (tc::kPairedVelocities): taken
  // where it needs fewer products per k16 step over all blocks than tiles of 8 velocities only
  // (`dense`'s 65 velocities: 34 against 36); `forced` is SHIFTSTACK_TC_PAIRED_TILE (forced_switch).
  void choose_paired_tile(int va, int forced) {
    const int paired_tiles = std::min(tc::kMaxColumnTiles, (va + 8 - tc::kPairedVelocities + 7) / 8);
    const int velocities = tc::block_velocities(paired_tiles, true);
    const int paired_blocks = (va + velocities - 1) / velocities;
    const bool fewer_products = paired_blocks * (2 * paired_tiles - 1) < column_blocks_ * 2 * column_tiles_;
    if (forced < 0 ? !fewer_products : forced == 0) return;
    paired_last_ = true;
    column_tiles_ = paired_tiles;
    column_blocks_ = paired_blocks;
  }

  static std::string forced_kernel() {
    const char* forced = std::getenv("SHIFTSTACK_TC_KERNEL");
    const std::string kernel = forced ? forced : "mma";
    require(kernel == "mma" || kernel == "wgmma" || kernel == "wgmma-split",
            "SHIFTSTACK_TC_KERNEL must be mma, wgmma or wgmma-split, not '" + kernel + "'");
    return kernel;
  }

  tc::Params params(SpectralState& s, int b_begin, int b_end) const {
    const FourierGeometry& g = s.geometry;
    tc::Params p{};
    p.half_spectra = s.half_spectra.get();
    p.scales = s.scales.get();
    p.x_phases = x_phases_.get();
    p.shift_y_rel = s.shift_y_rel.get();
    p.root_y = s.root_y.get();
    p.min_sy = g.min_sy;
    p.shift_span = g.max_sy - g.min_sy + 1;
    p.ny = g.ny;
    p.nyh = g.nyh;
    p.nyh_padded = s.nyh_padded;
    p.exposures_padded = s.exposures_padded;
    p.va = s.va;
    p.va_padded = va_padded_;
    p.my_tiles = s.nyh_padded / tc::kRows;
    p.b_begin = b_begin;
    p.b_end = b_end;
    p.norm = s.inverse_norm();
    p.out = s.velocity_spectra.get();
    return p;
  }

  void launch_wgmma(SpectralState& s, int b_begin, int b_end) {
    const tc::Params p = params(s, b_begin, b_end);
    const int row_groups = (b_end - b_begin + tc::kWarps - 1) / tc::kWarps;
    const int smem = tc::WgmmaLayout::total_bytes(p.shift_span);
    const dim3 grid(unsigned(row_groups * p.my_tiles), unsigned(column_blocks_), unsigned(s.geometry.nx));
    if (split_channels_) {
      SHIFTSTACK_CUDA_CHECK(
          cudaFuncSetAttribute(tc::contract_wgmma_kernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
      tc::contract_wgmma_kernel<true><<<grid, 2 * tc::kThreads, smem, s.stream>>>(p);
    } else {
      SHIFTSTACK_CUDA_CHECK(
          cudaFuncSetAttribute(tc::contract_wgmma_kernel<false>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
      tc::contract_wgmma_kernel<false><<<grid, tc::kThreads, smem, s.stream>>>(p);
    }
    SHIFTSTACK_CUDA_CHECK_LAUNCH();
  }

  template <int kColumnTiles>
  void launch(SpectralState& s, int b_begin, int b_end) {
    const FourierGeometry& g = s.geometry;
    const tc::Params p = params(s, b_begin, b_end);
    const int row_groups = (b_end - b_begin + tc::kWarps - 1) / tc::kWarps;
    const int smem = tc::Layout<kColumnTiles>::total_bytes(p.shift_span);
    SHIFTSTACK_CUDA_CHECK(cudaFuncSetAttribute(tc::contract_kernel<kColumnTiles>,
                                               cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    const dim3 grid(unsigned(row_groups * p.my_tiles), unsigned(column_blocks_), unsigned(g.nx));
    tc::contract_kernel<kColumnTiles><<<grid, tc::kThreads, smem, s.stream>>>(p);
    SHIFTSTACK_CUDA_CHECK_LAUNCH();
  }

  tc::RowParams row_params(SpectralState& s, int b_begin, int b_end, int group_b0) const {
    tc::RowParams p{};
    p.half_rows = s.half_spectra.get();
    p.scales = s.scales.get();
    p.x_phases = x_phases_.get();
    p.window_start = s.window_start.get();
    p.row_in_window = s.row_in_window.get();
    p.row_span = s.row_span;
    p.window_rows = s.window_rows;
    p.window_pitch = s.window_pitch;
    p.exposures_padded = s.exposures_padded;
    p.va = s.va;
    p.va_padded = va_padded_;
    p.row_tiles = (s.region.height + tc::kRows - 1) / tc::kRows;
    p.nx = s.geometry.nx;
    p.out_pitch = s.geometry.ny;
    p.region_y0 = s.region.y0;
    p.region_height = s.region.height;
    p.b_begin = b_begin;
    p.b_end = b_end;
    p.group_b0 = group_b0;
    p.norm = s.inverse_norm();
    p.out = s.velocity_spectra.get();
    return p;
  }

  // One of the row kernels over `groups` groups of kWarps rows b from group_b0 (within the chunk
  // b_begin .. b_end), row tiles and mx <= nx / 2.
  template <class Kernel>
  void launch_row_kernel(Kernel kernel, int smem, SpectralState& s, int b_begin, int b_end, int group_b0,
                         int groups) {
    const tc::RowParams p = row_params(s, b_begin, b_end, group_b0);
    require(smem <= kSharedBudget, "engine 'cuda-tc': the row route needs " + std::to_string(smem) +
                                       " bytes of shared memory per CTA (window starts of " +
                                       std::to_string(p.exposures_padded) + " exposures); set SHIFTSTACK_TC_ROUTE=planes");
    SHIFTSTACK_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    const dim3 grid(unsigned(groups * p.row_tiles), unsigned(column_blocks_), unsigned(s.nxh()));
    kernel<<<grid, tc::kThreads, smem, s.stream>>>(p);
    SHIFTSTACK_CUDA_CHECK_LAUNCH();
  }
  void launch_rows_wgmma(SpectralState& s, int b_begin, int b_end) {
    launch_row_kernel(tc::contract_rows_wgmma_kernel,
                      tc::RowWgmmaLayout::total_bytes(s.window_pitch, s.exposures_padded), s, b_begin, b_end,
                      b_begin, (b_end - b_begin + tc::kWarps - 1) / tc::kWarps);
  }
  // With tail_split_: the chunk's full groups of kWarps rows b, then a last group of one or two
  // rows with its k16 steps split between kWarps / rows warps per row (RowSplit), so that no warp
  // multiplies padding rows. A last group of three rows keeps one padding warp (a split of 4 / 3
  // does not divide).
  template <class Launch>
  void launch_row_groups(int b_begin, int b_end, Launch&& launch) const {
    const int groups = (b_end - b_begin + tc::kWarps - 1) / tc::kWarps, rest = (b_end - b_begin) % tc::kWarps;
    if (!tail_split_ || rest == 0 || rest == 3) {
      launch.template operator()<1>(b_begin, groups);
      return;
    }
    if (groups > 1) launch.template operator()<1>(b_begin, groups - 1);
    const int last = b_begin + (groups - 1) * tc::kWarps;
    if (rest == 1) {
      launch.template operator()<4>(last, 1);
    } else {
      launch.template operator()<2>(last, 1);
    }
  }
  template <int kColumnTiles>
  void launch_rows(SpectralState& s, int b_begin, int b_end) {
    launch_row_groups(b_begin, b_end, [&]<int kWarpsPerRow>(int group_b0, int groups) {
      using L = tc::RowLayout<kColumnTiles>;
      const int smem = std::max(L::total_bytes(s.window_pitch, s.exposures_padded),
                                L::starts_bytes(s.exposures_padded) +
                                    tc::RowSplit<kWarpsPerRow>::reduction_bytes(L::accumulators));
      if (paired_last_) {
        launch_row_kernel(tc::contract_rows_kernel<kColumnTiles, kWarpsPerRow, true>, smem, s, b_begin, b_end,
                          group_b0, groups);
      } else {
        launch_row_kernel(tc::contract_rows_kernel<kColumnTiles, kWarpsPerRow, false>, smem, s, b_begin, b_end,
                          group_b0, groups);
      }
    });
  }

  // Calls launch.operator()<column_tiles_>() (kernels are instantiated for 1 to 9 n8 tiles).
  template <class Launch>
  void with_column_tiles(Launch&& launch) const {
    switch (column_tiles_) {
      case 1: launch.template operator()<1>(); break;
      case 2: launch.template operator()<2>(); break;
      case 3: launch.template operator()<3>(); break;
      case 4: launch.template operator()<4>(); break;
      case 5: launch.template operator()<5>(); break;
      case 6: launch.template operator()<6>(); break;
      case 7: launch.template operator()<7>(); break;
      case 8: launch.template operator()<8>(); break;
      default: launch.template operator()<9>(); break;
    }
  }

  template <int kColumnTiles>
  void launch_fractional(SpectralState& s, int b_begin, int b_end) {
    tc::FractionalParams fp{};
    fp.base = params(s, b_begin, b_end);
    fp.table_stride = table_stride_;
    fp.half_covariances = s.half_covariances.get();
    fp.half_diagonals = s.half_diagonals.get();
    fp.frac_y_rel = s.frac_y_rel.get();
    const int row_groups = (b_end - b_begin + tc::kWarps - 1) / tc::kWarps;
    const int smem = tc::FractionalLayout<kColumnTiles>::total_bytes(fp.base.shift_span);
    SHIFTSTACK_CUDA_CHECK(cudaFuncSetAttribute(tc::contract_fractional_kernel<kColumnTiles>,
                                               cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    const dim3 grid(unsigned(row_groups * fp.base.my_tiles), unsigned(column_blocks_), unsigned(s.geometry.nx));
    tc::contract_fractional_kernel<kColumnTiles><<<grid, tc::kThreads, smem, s.stream>>>(fp);
    SHIFTSTACK_CUDA_CHECK_LAUNCH();
  }

  int column_tiles_ = 0, column_blocks_ = 0, va_padded_ = 0;
  std::size_t table_stride_ = 0;  // half2 per x table
  bool use_wgmma_ = false, split_channels_ = false, tail_split_ = false, paired_last_ = false;
  DeviceArray<__half2> x_phases_;
};

}  // namespace

void register_tensor_core_engine() {
  register_engine({"cuda-tc",
                   "Fourier route, fused tensor-core contraction (FP16 operands with per-frequency scales, "
                   "FP32 sums; wgmma, or mma.sync for narrow banks and fractional shifts), cuFFT forward and "
                   "inverse transforms",
                   true, 30, [] { return std::make_unique<TensorCoreEngine>(); }, cuda_device_available, true});
}

}  // namespace shiftstack::cuda
