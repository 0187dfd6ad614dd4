// The `cpu` engine's vector code, compiled once per SIMD target by Google Highway
// (foreach_target.h re-includes this file for each); the engine calls the best target this
// processor runs (HWY_DYNAMIC_DISPATCH) or the one it is asked for.
//
// Work. Origins are cut into strips along x (`integer_vectors` vectors of interleaved (A, B)
// pairs, kept in registers while all exposures are added: 64 origins with AVX-512, 32 with AVX2)
// and a few rows; per origin row the velocities run in bank order, so consecutive vx read the same
// input rows, which stay in L1. Each (velocity, exposure) has one precomputed buffer offset.
// Per-exposure weights enter with one FMA per vector. The code is written for any fixed lane count
// (1 lane on the scalar target: vector k then holds element k of the interleaved pairs), so every
// encoding and both shift modes run the same algorithm on every target.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "cpu/cpu_layout.hpp"
#include "shiftstack/encoding.hpp"
#include "shiftstack/error.hpp"

// Scalable-vector targets (SVE, RVV) have sizeless vector types, which cannot be kept in the
// arrays of accumulators this kernel is built on; on those machines NEON (or scalar) code runs.
#ifndef HWY_DISABLED_TARGETS
#define HWY_DISABLED_TARGETS (HWY_SVE | HWY_SVE2 | HWY_SVE_256 | HWY_SVE2_128 | HWY_RVV)
#endif

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/cpu_kernels.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace shiftstack::cpu_fast::HWY_NAMESPACE {
namespace {

namespace hn = hwy::HWY_NAMESPACE;
using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;
using MF = hn::Mask<DF>;
constexpr int kLanes = int(hn::MaxLanes(DF()));
static_assert(kLanes <= kMaxLanes && (kLanes == 1 || kLanes % 2 == 0), "unexpected vector width");

// Accumulators per strip. Integer mode keeps 8 sums, one weight and one loaded vector in
// registers. Fractional mode keeps 4 sums, 4 covariance sums and 8 weights: on 16-register
// targets some weights spill, which still measured 6% faster with AVX2 than 2 + 2 sums, and 2 + 2
// measured 13% slower with AVX-512 (shorter strips read more of their halo per origin).
constexpr int kIntegerVectors = 8;
constexpr int kFractionalVectors = 4;
static_assert(kIntegerVectors * kLanes / 2 <= kMaxStripOrigins, "TopK::filter is too small");

// Newton steps after the hardware's reciprocal square root estimate: x86 gives at least 11 bits
// (AVX-512: 14), one step reaches about 1e-7; other estimates (NEON: 8 bits; the scalar target's
// bit trick) need two.
#if HWY_ARCH_X86 && HWY_TARGET != HWY_SCALAR && HWY_TARGET != HWY_EMU128
constexpr int kNewtonSteps = 1;
#else
constexpr int kNewtonSteps = 2;
#endif

// Trials' A and B are summed in FP32 over this many velocities, then added to per-lane doubles:
// the partial sums stay exact to about 1e-6 relative while costing one add per vector.
constexpr int kVelocitiesPerFlush = 16;
const float kNegInf = -std::numeric_limits<float>::infinity();

// ---- vector helpers ---------------------------------------------------------------------------

HWY_INLINE VF load(const float* p) { return hn::LoadU(DF(), p); }
HWY_INLINE VF load(const std::uint16_t* p) {  // IEEE halves
  const hn::Rebind<hwy::float16_t, DF> dh;
  return hn::PromoteTo(DF(), hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(p)));
}

// The weights (p[0], p[1]) of interleaved (psi, phi) pairs: vector k is multiplied by of(k).
// With two or more lanes that is the pattern (p0, p1, p0, p1, ...) for every vector; with one
// lane, even vectors hold psi and odd ones phi. (One member where one suffices: a choice between
// two members would keep the struct in memory.)
#if HWY_TARGET == HWY_SCALAR
struct PairWeight {
  VF even, odd;
  HWY_INLINE VF of(int k) const { return k & 1 ? odd : even; }
};
HWY_INLINE PairWeight pair_weight(const float* p) { return {hn::Set(DF(), p[0]), hn::Set(DF(), p[1])}; }
#else
struct PairWeight {
  VF both;
  HWY_INLINE VF of(int) const { return both; }
};
// Broadcast as a double (the pair's 64 bits): a floating-point broadcast, where an integer one
// would feed the FMAs across the integer/floating-point bypass.
HWY_INLINE PairWeight pair_weight(const float* p) {
  double bits;
  std::memcpy(&bits, p, sizeof bits);
  return {hn::BitCast(DF(), hn::Set(hn::Repartition<double, DF>(), bits))};
}
#endif

// Splits two vectors of interleaved pairs into their even (psi/A) and odd (phi/B) elements.
HWY_INLINE void deinterleave(VF lo, VF hi, VF& even, VF& odd) {
#if HWY_TARGET == HWY_SCALAR
  even = lo;
  odd = hi;
#else
  even = hn::ConcatEven(DF(), hi, lo);
  odd = hn::ConcatOdd(DF(), hi, lo);
#endif
}

// a / sqrt(b) in lanes of `valid` (b > 0 there), -inf elsewhere. Enough to filter; exact values
// are recomputed in double for every trial that passes a filter.
HWY_INLINE VF ratio_sqrt(VF a, VF b, MF valid) {
  const DF d;
  VF r = hn::ApproximateReciprocalSqrt(b);
  const VF half_b = hn::Mul(b, hn::Set(d, 0.5f));
  for (int i = 0; i < kNewtonSteps; ++i)
    r = hn::Mul(r, hn::NegMulAdd(hn::Mul(half_b, r), r, hn::Set(d, 1.5f)));
  return hn::IfThenElse(valid, hn::Mul(a, r), hn::Set(d, kNegInf));
}

HWY_INLINE std::uint32_t mask_bits(MF m) {  // bit i = lane i
  std::uint8_t bytes[8] = {};
  hn::StoreMaskBits(DF(), m, bytes);
  return std::uint32_t(bytes[0]) | std::uint32_t(bytes[1]) << 8;
}

// Per-lane double sums: lanes [0, L/2) in lo, [L/2, L) in hi (one lane: lo only).
#if HWY_TARGET == HWY_SCALAR
using DHalf = DF;
constexpr int kDoubleLanes = 1;
#else
using DHalf = hn::Half<DF>;
constexpr int kDoubleLanes = kLanes / 2;
#endif
using DD = hn::Rebind<double, DHalf>;
using VD = hn::Vec<DD>;
struct LaneSums {
  VD lo, hi;
  // Declared here so that the target's attributes apply (an implicit constructor has none).
  HWY_INLINE LaneSums() : lo(hn::Zero(DD())), hi(hn::Zero(DD())) {}
  HWY_INLINE void load_from(const double* p) {
    lo = hn::LoadU(DD(), p);
    hi = kLanes > 1 ? hn::LoadU(DD(), p + kDoubleLanes) : hn::Zero(DD());
  }
  HWY_INLINE void store_to(double* p) const {
    hn::StoreU(lo, DD(), p);
    if (kLanes > 1) hn::StoreU(hi, DD(), p + kDoubleLanes);
  }
  // Adds the lanes of `live` (others add zero).
  HWY_INLINE void add(VF a, MF live) {
    const VF x = hn::IfThenElseZero(live, a);
#if HWY_TARGET == HWY_SCALAR
    lo = hn::Add(lo, hn::PromoteTo(DD(), x));
#else
    lo = hn::Add(lo, hn::PromoteTo(DD(), hn::LowerHalf(DHalf(), x)));
    hi = hn::Add(hi, hn::PromoteTo(DD(), hn::UpperHalf(DHalf(), x)));
#endif
  }
};

// ---- accumulation -----------------------------------------------------------------------------

// Where one strip row's samples start, and the exception rows that may apply.
template <class Code>
struct StripView {
  const Code* pairs;   // the origin's own pair position in the buffer (offset 0)
  const float* cov_a;  // same position in the covariance buffers (fractional)
  const float* cov_b;
  int lx, ly;          // origin column/row in buffer coordinates before the tap offsets
};

// Adds the exact values of int8 exceptions that fall on the rows this strip reads.
template <int NV, class Code>
HWY_INLINE void add_exception_rows(const Band<Code>& band, const Context& c, int e, int r, int col,
                                   const PairWeight& weight, VF (&acc)[NV]) {
  const std::int32_t row = band.exception_row[std::size_t(e) * c.layout.padded_height + r];
  if (row < 0) return;
  const float* q = &band.exception_pairs[(std::size_t(row) * c.layout.padded_width + col) * 2];
  for (int k = 0; k < NV; ++k) acc[k] = hn::MulAdd(weight.of(k), load(q + kLanes * k), acc[k]);
}

// A and B of one velocity for the strip's origins, as NV vectors of interleaved pairs.
template <int NV, bool kExceptions, class Code>
HWY_INLINE void integer_sums(const Context& c, const Band<Code>& band, const StripView<Code>& view,
                             std::size_t v, VF (&acc)[NV]) {
  const int E = c.stack->exposures;
  const std::int32_t* offset = &c.layout.offset[v * E];
  for (int k = 0; k < NV; ++k) acc[k] = hn::Zero(DF());
  for (int e = 0; e < E; ++e) {
    const Code* p = view.pairs + 2 * std::ptrdiff_t(offset[e]);
    const PairWeight w = pair_weight(&c.exposure_weights[2 * e]);
#pragma GCC unroll 16
    for (int k = 0; k < NV; ++k) acc[k] = hn::MulAdd(w.of(k), load(p + kLanes * k), acc[k]);
    if constexpr (kExceptions) {
      const std::size_t i = v * E + e;
      add_exception_rows<NV>(band, c, e, view.ly + c.taps.dy[i] - c.taps.min_y,
                             view.lx + c.taps.dx[i] - c.taps.min_x, w, acc);
    }
  }
}

// Fractional mode: bilinear psi/phi at four corners into `acc`, covariance terms into `cov`
// (both elements of a `cov` pair belong to B).
template <int NV, bool kExceptions, class Code>
HWY_INLINE void fractional_sums(const Context& c, const Band<Code>& band, const StripView<Code>& view,
                                std::size_t v, VF (&acc)[NV], VF (&cov)[NV]) {
  const int E = c.stack->exposures;
  const std::ptrdiff_t row = 2 * std::ptrdiff_t(c.layout.padded_width);  // next row, in elements
  const std::int32_t* offset = &c.layout.offset[v * E];
  // fp32: one base pointer per buffer row read (5), each then indexed by the exposure's offset
  // with a constant displacement per vector, hidden from the optimiser. Otherwise GCC folds `row`
  // into one register per (row, vector) displacement, runs out of registers and reloads the bases
  // from the stack in every exposure (4 stack loads with AVX-512: 8% slower than the hand-written
  // AVX-512 loop, which reloaded one; this one reloads none). Halves keep GCC's own addressing
  // (5 stack loads): their loop without stack loads measured 4% slower, not understood.
  constexpr bool kHidden = std::is_same_v<Code, float>;
  const Code* pairs_top = view.pairs;
  const Code* pairs_bottom = view.pairs + row;
  const float* cov_a_top = view.cov_a;
  const float* cov_a_bottom = view.cov_a + row;
  const float* cov_b_top = view.cov_b;
  if constexpr (kHidden)
    asm("" : "+r"(pairs_top), "+r"(pairs_bottom), "+r"(cov_a_top), "+r"(cov_a_bottom), "+r"(cov_b_top));
  for (int k = 0; k < NV; ++k) acc[k] = cov[k] = hn::Zero(DF());
  for (int e = 0; e < E; ++e) {
    const std::ptrdiff_t o = 2 * std::ptrdiff_t(offset[e]);
    const Code* p = (kHidden ? pairs_top : view.pairs) + o;
    const Code* pd = kHidden ? pairs_bottom + o : p + row;
    const float* a = (kHidden ? cov_a_top : view.cov_a) + o;
    const float* ad = kHidden ? cov_a_bottom + o : a + row;
    const float* b = (kHidden ? cov_b_top : view.cov_b) + o;
    const float* wt = &c.taps.weights[(v * E + e) * 16];
    const PairWeight w0 = pair_weight(wt), w1 = pair_weight(wt + 2), w2 = pair_weight(wt + 4),
                     w3 = pair_weight(wt + 6), c0 = pair_weight(wt + 8), c1 = pair_weight(wt + 10),
                     c2 = pair_weight(wt + 12), c3 = pair_weight(wt + 14);
#pragma GCC unroll 16
    for (int k = 0; k < NV; ++k) {
      const int lane = kLanes * k;
      acc[k] = hn::MulAdd(w0.of(k), load(p + lane), acc[k]);
      acc[k] = hn::MulAdd(w1.of(k), load(p + 2 + lane), acc[k]);
      acc[k] = hn::MulAdd(w2.of(k), load(pd + lane), acc[k]);
      acc[k] = hn::MulAdd(w3.of(k), load(pd + 2 + lane), acc[k]);
      cov[k] = hn::MulAdd(c0.of(k), load(a + lane), cov[k]);
      cov[k] = hn::MulAdd(c1.of(k), load(ad + lane), cov[k]);
      cov[k] = hn::MulAdd(c2.of(k), load(a + 2 + lane), cov[k]);
      cov[k] = hn::MulAdd(c3.of(k), load(b + lane), cov[k]);
    }
    if constexpr (kExceptions) {
      const std::size_t i = v * E + e;
      const int r = view.ly + c.taps.dy[i] - c.taps.min_y, col = view.lx + c.taps.dx[i] - c.taps.min_x;
      add_exception_rows<NV>(band, c, e, r, col, w0, acc);
      add_exception_rows<NV>(band, c, e, r, col + 1, w1, acc);
      add_exception_rows<NV>(band, c, e, r + 1, col, w2, acc);
      add_exception_rows<NV>(band, c, e, r + 1, col + 1, w3, acc);
    }
  }
}

// ---- scoring ----------------------------------------------------------------------------------

// Counters of one strip row, kept in registers and added to the item once per row.
struct RowTally {
  std::int64_t scored = 0, count = 0;
  float best_filter = kNegInf;  // admission bound for a new best trial of the item
};

float filter_below(double z) { return float(z) - kFilterSlack * std::max(1.0f, std::abs(float(z))); }

void offer(TopK& top, int origin, const Candidate& cand) {
  std::vector<Candidate>& heap = top.heaps[origin];
  if (int(heap.size()) == top.k) {
    if (!better_candidate(cand, heap.front())) return;
    std::pop_heap(heap.begin(), heap.end(), better_candidate);
    heap.back() = cand;
  } else {
    heap.push_back(cand);
  }
  std::push_heap(heap.begin(), heap.end(), better_candidate);
  if (int(heap.size()) == top.k) top.filter[origin] = filter_below(heap.front().Z);
}

// Scores kLanes origins (lanes) of row y from x, velocity v; `live` marks origins in the region.
// (sumA and sumB are summed separately, see PartialSums.)
HWY_INLINE void score(const ScanShared& s, VF A, VF B, MF live, int x, int y, std::size_t v,
                      ItemResult& out, RowTally& tally, TopK* top, int lane0) {
  const DF d;
  const Context& c = *s.c;
  const MF valid = hn::And(hn::Gt(B, hn::Zero(d)), live);
  if (hn::AllFalse(d, valid)) return;
  tally.scored += std::int64_t(hn::CountTrue(d, valid));
  const VF Z = ratio_sqrt(A, B, valid);
  tally.count += std::int64_t(hn::CountTrue(d, hn::And(hn::Gt(Z, hn::Set(d, s.z_thr)), valid)));

  MF wanted = hn::And(hn::Ge(Z, hn::Set(d, tally.best_filter)), valid);
  if (c.policy.collect_candidates)
    wanted = hn::Or(wanted, hn::And(hn::Gt(Z, hn::Set(d, s.candidate_filter)), valid));
  if (top) wanted = hn::Or(wanted, hn::And(hn::Ge(Z, hn::LoadU(d, top->filter + lane0)), valid));
  if (hn::AllFalse(d, wanted)) return;

  float a[kLanes], b[kLanes];
  hn::StoreU(A, d, a);
  hn::StoreU(B, d, b);
  for (std::uint32_t bits = mask_bits(wanted); bits; bits &= bits - 1) {
    const int lane = std::countr_zero(bits);
    const double z = double(a[lane]) / std::sqrt(double(b[lane]));
    const std::int64_t xo = x + lane;
    Digest& best = out.best;
    if (z > best.maxZ || (z == best.maxZ && best.precedes(std::int64_t(v), y, xo))) {
      best.maxZ = z;
      best.argmax_x = xo;
      best.argmax_y = y;
      best.argmax_velocity = std::int64_t(v);
      tally.best_filter = filter_below(z);
    }
    const bool is_candidate = c.policy.collect_candidates && z > c.policy.candidate_threshold;
    if (!is_candidate && !top) continue;
    const Velocity vel = c.bank->velocity(v);
    const Candidate cand{int(xo), y, std::int32_t(v), float(vel.vx), float(vel.vy), a[lane], b[lane],
                         float(z), float(double(a[lane]) / double(b[lane])), 0};
    if (is_candidate && ++*s.candidate_total <= c.policy.max_candidates) out.candidates.push_back(cand);
    if (top) offer(*top, lane0 + lane, cand);
  }
}

// A and B of kLanes origins from two vectors of interleaved pairs (plus, in fractional mode, the
// covariance sums, both of whose elements belong to B).
template <bool kFractional>
HWY_INLINE void split_sums(const VF* acc, const VF* cov, int k, VF& A, VF& B) {
  deinterleave(acc[k], acc[k + 1], A, B);
  if constexpr (kFractional) {
    VF right, down;
    deinterleave(cov[k], cov[k + 1], right, down);
    B = hn::Add(B, hn::Add(right, down));
  }
}

// Lanes of the scoring group starting at origin `first` of a strip that lie in the region.
HWY_INLINE MF live_lanes(int origins, int first) {
  return hn::FirstN(DF(), std::size_t(std::clamp(origins - first, 0, kLanes)));
}

// sumA and sumB of one strip row: FP32 partial sums over a few velocities, then per-lane doubles.
// Trials that are not scored (B <= 0) add nothing without a mask: all their samples read cleaned
// (0, 0) pairs, so their A and B are exactly zero.
template <int NV, bool kFractional>
struct PartialSums {
  VF acc[NV], cov[NV];
  LaneSums sumA, sumB;
  HWY_INLINE PartialSums() { clear(); }
  HWY_INLINE void clear() {
    for (int k = 0; k < NV; ++k) acc[k] = cov[k] = hn::Zero(DF());
  }
  HWY_INLINE void add(const VF (&a)[NV], const VF (&c)[NV]) {
    for (int k = 0; k < NV; ++k) {
      acc[k] = hn::Add(acc[k], a[k]);
      if constexpr (kFractional) cov[k] = hn::Add(cov[k], c[k]);
    }
  }
  HWY_INLINE void flush(int origins) {
    for (int k = 0; k < NV; k += 2) {
      VF A, B;
      split_sums<kFractional>(acc, cov, k, A, B);
      const MF live = live_lanes(origins, k * kLanes / 2);
      sumA.add(A, live);
      sumB.add(B, live);
    }
    clear();
  }
};

// ---- one strip row, one work item ---------------------------------------------------------------

template <int NV, bool kFractional, bool kExceptions, class Code>
void strip_row(const ScanShared& s, const Band<Code>& band, const Strip& strip, int ly,
               ItemResult& out, TopK* top) {
  const Context& c = *s.c;
  const Layout& l = c.layout;
  const std::size_t at = std::size_t(ly) * l.padded_width + strip.lx;
  const StripView<Code> view{band.pairs.data() + 2 * at, kFractional ? band.cov_a.data() + 2 * at : nullptr,
                             kFractional ? band.cov_b.data() + 2 * at : nullptr, strip.lx, ly};
  const int origins = std::min(NV * kLanes / 2, c.region.width - strip.lx);
  const int x = c.region.x0 + strip.lx, y = band.y0 + ly;
  if (top) top->reset(origins);
  VF acc[NV], cov[NV];
  for (int k = 0; k < NV; ++k) cov[k] = hn::Zero(DF());
  PartialSums<NV, kFractional> sums;
  sums.sumA.load_from(out.sumA);
  sums.sumB.load_from(out.sumB);
  RowTally tally;
  if (out.best.argmax_velocity >= 0) tally.best_filter = filter_below(out.best.maxZ);
  for (std::size_t v = 0; v < c.taps.velocities; ++v) {
    if constexpr (kFractional) fractional_sums<NV, kExceptions>(c, band, view, v, acc, cov);
    else integer_sums<NV, kExceptions>(c, band, view, v, acc);
    sums.add(acc, cov);
    for (int k = 0; k < NV; k += 2) {
      VF A, B;
      split_sums<kFractional>(acc, cov, k, A, B);
      const int first = k * kLanes / 2;
      score(s, A, B, live_lanes(origins, first), x + first, y, v, out, tally, top, first);
    }
    if ((v + 1) % kVelocitiesPerFlush == 0) sums.flush(origins);
  }
  sums.flush(origins);
  sums.sumA.store_to(out.sumA);
  sums.sumB.store_to(out.sumB);
  out.scored += tally.scored;
  out.count += tally.count;
  if (!top) return;
  const int k = top->k;
  for (int i = 0; i < origins; ++i) {
    std::vector<Candidate>& heap = top->heaps[i];
    std::sort(heap.begin(), heap.end(), better_candidate);
    const std::size_t origin = std::size_t(y - c.region.y0) * c.region.width + (x + i - c.region.x0);
    Candidate* slot = &(*s.top_k_out)[origin * k];
    for (int n = 0; n < k; ++n)
      slot[n] = n < int(heap.size()) ? heap[n] : Candidate{x + i, y, -1, 0, 0, 0, 0, kNegInf, 0, 0};
  }
}

template <bool kFractional, bool kExceptions, class Code>
void strip_row_of_width(const ScanShared& s, const Band<Code>& band, const Strip& strip, int ly,
                        ItemResult& out, TopK* top) {
  // make_strips() gives the wide strips and edge strips in steps of kEdgeStep vectors.
  static_assert(kEdgeStep == 2 && kIntegerVectors == 8 && kFractionalVectors % 2 == 0 &&
                    kFractionalVectors <= 4,
                "the cases below list every strip width");
  if constexpr (kFractional) {
    switch (strip.vectors) {
      case 4: return strip_row<4, true, kExceptions>(s, band, strip, ly, out, top);
      case 2: return strip_row<2, true, kExceptions>(s, band, strip, ly, out, top);
    }
  } else {
    switch (strip.vectors) {
      case 8: return strip_row<8, false, kExceptions>(s, band, strip, ly, out, top);
      case 6: return strip_row<6, false, kExceptions>(s, band, strip, ly, out, top);
      case 4: return strip_row<4, false, kExceptions>(s, band, strip, ly, out, top);
      case 2: return strip_row<2, false, kExceptions>(s, band, strip, ly, out, top);
    }
  }
  throw Error("cpu engine: unexpected strip width " + std::to_string(strip.vectors));
}

template <class Code>
void scan_item(const ScanShared& s, const Band<Code>& band, const Strip& strip, int ly0, int ly1,
               ItemResult& out, TopK* top) {
  const bool fractional = s.c->taps.fractional, exceptions = !band.exception_row.empty();
  for (int ly = ly0; ly < ly1; ++ly) {
    if (fractional && exceptions) strip_row_of_width<true, true>(s, band, strip, ly, out, top);
    else if (fractional) strip_row_of_width<true, false>(s, band, strip, ly, out, top);
    else if (exceptions) strip_row_of_width<false, true>(s, band, strip, ly, out, top);
    else strip_row_of_width<false, false>(s, band, strip, ly, out, top);
  }
}

void scan_fp32(const ScanShared& s, const Band<float>& band, const Strip& strip, int ly0, int ly1,
               ItemResult& out, TopK* top) {
  scan_item(s, band, strip, ly0, ly1, out, top);
}
void scan_fp16(const ScanShared& s, const Band<std::uint16_t>& band, const Strip& strip, int ly0,
               int ly1, ItemResult& out, TopK* top) {
  scan_item(s, band, strip, ly0, ly1, out, top);
}

}  // namespace

const Kernels* target_kernels() {
  static const Kernels kernels{HWY_TARGET,      hwy::TargetName(HWY_TARGET), kLanes, kIntegerVectors,
                               kFractionalVectors, &scan_fp32,              &scan_fp16};
  return &kernels;
}

}  // namespace shiftstack::cpu_fast::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace shiftstack::cpu_fast {

HWY_EXPORT(target_kernels);

const Kernels& best_kernels() { return *HWY_DYNAMIC_DISPATCH(target_kernels)(); }

std::vector<const Kernels*> runnable_kernels() {
  const std::int64_t supported = hwy::SupportedTargets();
  std::vector<const Kernels*> out;
  // Every compiled target has one entry of the dispatch table (unused slots are null).
  for (const auto entry : HWY_DISPATCH_TABLE(target_kernels)) {
    if (!entry) continue;
    const Kernels* k = entry();
    const bool runs = (k->target & supported) != 0 || k->target == HWY_STATIC_TARGET;
    const bool listed = std::any_of(out.begin(), out.end(), [&](const Kernels* o) { return o->target == k->target; });
    if (runs && !listed) out.push_back(k);
  }
  // Highway numbers better targets with lower bits.
  std::sort(out.begin(), out.end(), [](const Kernels* a, const Kernels* b) { return a->target < b->target; });
  return out;
}

}  // namespace shiftstack::cpu_fast
#endif  // HWY_ONCE
