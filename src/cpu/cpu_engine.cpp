// The `cpu` engine: the fast CPU search, FP32 accumulation over all cores.
//
// Layout. For each band of origin rows, every exposure's (psi, phi) pairs are copied once into a
// zero-padded buffer in a compact element type (fp32 values, fp16 bits, int8 codes as the halves
// that equal them exactly), "cleaned" so that decoding becomes one conversion: a pixel that
// decode() calls invalid becomes (0, 0), and an int8 exception code becomes 0 with its exact
// value added back from a sparse list of correction rows. The padding makes out-of-image samples
// read zeros, so the inner loop has no branches. Per-exposure weights enter with one FMA per
// vector.
//
// Work. Origins are cut into strips along x (64 origins: eight vectors of eight interleaved
// (A, B) pairs, kept in registers while all exposures are added) and a few rows; per origin row
// the velocities run in bank order, so consecutive vx read the same input rows, which stay in L1.
// Each (velocity, exposure) has one precomputed buffer offset (from integer_shifts() for a
// Cartesian bank). Work items keep their own partial digests, merged in item order, so the digest
// does not depend on the thread count.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <type_traits>

#include "cpu/simd16.hpp"
#include "core/engine_registry.hpp"
#include "shiftstack/error.hpp"
#include "shiftstack/search.hpp"

namespace shiftstack {

void register_cpu_fast_engine();

namespace {

using simd::F16;
using simd::Mask;

constexpr int kOriginsPerVector = simd::kLanes / 2;  // interleaved (A, B): 8 origins per vector
// Integer mode: 8 accumulators (64 origins) per strip; with the weight and a loaded vector that
// is well inside the 32 vector registers, and 64 pairs of fp32 = 512 B per input row read.
constexpr int kIntegerVectors = 8;
// Fractional mode keeps a second accumulator set (covariance terms) and 8 weights: 4 + 4 + 8.
constexpr int kFractionalVectors = 4;
// The strip at the region's right edge is as narrow as the rest of the row allows, in steps of
// two vectors (16 origins, one scoring group): at most 15 computed origins are wasted.
constexpr int kEdgeStep = 2;
// Origin rows per work item: enough items for dynamic balancing, few enough to amortize.
constexpr int kRowsPerItem = 2;
// Largest padded copy of one band (bytes); bands split the origin rows when the stack is larger.
constexpr double kBandBudgetBytes = 512.0 * 1024 * 1024;
// Trials' A and B are summed in FP32 over this many velocities, then added to per-lane doubles:
// the partial sums stay exact to about 1e-6 relative while costing one add per vector.
constexpr int kVelocitiesPerFlush = 16;
// Filters run on approximate scores (about 1e-7 relative); this margin keeps every trial that
// might pass, and the exact double score then decides.
constexpr float kFilterSlack = 1e-5f;

const float kNegInf = -std::numeric_limits<float>::infinity();

// ---- shift taps -------------------------------------------------------------------------------

// Per (velocity, exposure): the integer part of the shift and, in fractional mode, the bilinear
// weights as (psi, phi) pairs: 4 corners, then the 4 covariance terms.
struct Taps {
  int exposures = 0;
  std::size_t velocities = 0;
  bool fractional = false;
  std::vector<std::int32_t> dx, dy;  // [v * E + e]
  std::vector<float> weights;        // [(v * E + e) * 16], fractional only
  int min_x = 0, max_x = 0, min_y = 0, max_y = 0;  // sample offsets read, corners included
};

Taps make_taps(const MotionBank& bank, const EncodedStack& s) {
  Taps t;
  const int E = s.exposures;
  const std::size_t V = bank.size();
  t.exposures = E;
  t.velocities = V;
  t.fractional = bank.mode == ShiftMode::fractional;
  t.dx.resize(V * E);
  t.dy.resize(V * E);
  if (!t.fractional && bank.is_cartesian()) {
    const SeparableShifts sep = integer_shifts(bank);
    const std::size_t va = bank.vx_count();
    for (std::size_t v = 0; v < V; ++v)
      for (int e = 0; e < E; ++e) {
        t.dx[v * E + e] = sep.x[(v % va) * E + e];
        t.dy[v * E + e] = sep.y[(v / va) * E + e];
      }
  } else if (!t.fractional) {
    for (std::size_t v = 0; v < V; ++v)
      for (int e = 0; e < E; ++e) {
        t.dx[v * E + e] = round_shift(bank.shift_x(v, e));
        t.dy[v * E + e] = round_shift(bank.shift_y(v, e));
      }
  } else {
    t.weights.resize(V * E * 16);
    for (std::size_t v = 0; v < V; ++v)
      for (int e = 0; e < E; ++e) {
        const double sx = bank.shift_x(v, e), sy = bank.shift_y(v, e);
        const double ix = std::floor(sx), iy = std::floor(sy);
        const double fx = sx - ix, fy = sy - iy;
        t.dx[v * E + e] = std::int32_t(ix);
        t.dy[v * E + e] = std::int32_t(iy);
        // Corners 0:(0,0) 1:(1,0) 2:(0,1) 3:(1,1), as in the reference engine.
        const double w[4] = {(1 - fx) * (1 - fy), fx * (1 - fy), (1 - fx) * fy, fx * fy};
        const double a = s.psi_weight[e], b = s.phi_weight[e];
        float* out = &t.weights[(v * E + e) * 16];
        for (int c = 0; c < 4; ++c) {
          out[2 * c] = float(w[c] * a);
          out[2 * c + 1] = float(w[c] * w[c] * b);
        }
        // Covariance pairs read as (cov_right, cov_down) at (0,0), (0,1), (1,0) and as
        // (cov_diag, cov_antidiag) at (0,0); each neighbouring pair once, doubled.
        const float pairs[8] = {float(2 * w[0] * w[1] * b), float(2 * w[0] * w[2] * b),
                                float(2 * w[2] * w[3] * b), 0.0f,
                                0.0f,                       float(2 * w[1] * w[3] * b),
                                float(2 * w[0] * w[3] * b), float(2 * w[1] * w[2] * b)};
        std::copy(pairs, pairs + 8, out + 8);
      }
  }
  const bool any = V * E > 0;
  if (any) {
    auto [lo_x, hi_x] = std::minmax_element(t.dx.begin(), t.dx.end());
    auto [lo_y, hi_y] = std::minmax_element(t.dy.begin(), t.dy.end());
    const int corner = t.fractional ? 1 : 0;
    t.min_x = *lo_x;
    t.max_x = *hi_x + corner;
    t.min_y = *lo_y;
    t.max_y = *hi_y + corner;
  }
  return t;
}

// ---- strips and the padded band layout --------------------------------------------------------

struct Strip {
  int lx;       // first origin, relative to the region's x0
  int vectors;  // accumulators: origins = vectors * kOriginsPerVector
};

std::vector<Strip> make_strips(int width, int wide_vectors) {
  std::vector<Strip> strips;
  const int wide = wide_vectors * kOriginsPerVector, step = kEdgeStep * kOriginsPerVector;
  int lx = 0;
  for (; lx + wide <= width; lx += wide) strips.push_back({lx, wide_vectors});
  if (lx < width) strips.push_back({lx, kEdgeStep * ((width - lx + step - 1) / step)});
  return strips;
}

// Buffer column c holds image x = region.x0 + min_x + c; buffer row r of a band holds image
// y = band_y0 + min_y + r. One plane per exposure, planes `plane` pairs apart.
struct Layout {
  int padded_width = 0;   // pairs per buffer row
  int padded_height = 0;  // rows per exposure plane (for the tallest band)
  std::size_t plane = 0;  // pairs per exposure plane
  int band_rows = 0;      // origin rows per band
  std::vector<std::int32_t> offset;  // [v * E + e]: pair offset from the origin's own position
};

Layout make_layout(const Taps& t, const Region& r, int computed_width, std::size_t bytes_per_pair) {
  Layout l;
  l.padded_width = computed_width + (t.max_x - t.min_x);
  const int halo = t.max_y - t.min_y;
  const double row_bytes = double(t.exposures) * l.padded_width * bytes_per_pair;
  const int budget_rows = int(std::min<double>(kBandBudgetBytes / row_bytes, 1 << 30));
  l.band_rows = std::clamp(budget_rows - halo, 1, r.height);
  l.padded_height = l.band_rows + halo;
  l.plane = std::size_t(l.padded_height) * l.padded_width;
  require(double(l.plane) * t.exposures < double(std::numeric_limits<std::int32_t>::max()),
          "cpu engine: one band of " + std::to_string(t.exposures) + " exposures with a " +
              std::to_string(l.padded_width) + "-pixel padded row does not fit 32-bit offsets");
  l.offset.resize(t.velocities * t.exposures);
  for (std::size_t v = 0; v < t.velocities; ++v)
    for (int e = 0; e < t.exposures; ++e) {
      const std::size_t i = v * t.exposures + e;
      l.offset[i] = std::int32_t(e * l.plane + std::size_t(t.dy[i] - t.min_y) * l.padded_width +
                                 (t.dx[i] - t.min_x));
    }
  return l;
}

// ---- cleaning the payload ---------------------------------------------------------------------

// Each returns whether decode() would call the pixel valid, and writes the pair the inner loop
// reads: (0, 0) for invalid pixels, so their contribution is exactly nothing.
bool clean_pair(const float* in, float* out) {
  const bool valid = in[1] > 0;
  out[0] = valid ? in[0] : 0.0f;
  out[1] = valid ? in[1] : 0.0f;
  return valid;
}
bool clean_pair(const std::uint16_t* in, std::uint16_t* out) {
  const bool valid = half_to_float(in[1]) > 0;
  out[0] = valid ? in[0] : std::uint16_t(0);
  out[1] = valid ? in[1] : std::uint16_t(0);
  return valid;
}
// int8 codes are stored as IEEE halves, which hold every code exactly (integers up to 2048): the
// same values and arithmetic as an inline int8 decode, for one conversion instruction per vector
// instead of sign/zero extension plus conversion.
bool clean_pair(const std::int8_t* in, std::uint16_t* out) {
  const bool valid = in[0] != int8_codes::psi_invalid && std::uint8_t(in[1]) != 0;
  // An exception's exact value is added from the correction rows; its code reads as 0.
  out[0] = float_to_half(valid && in[0] != int8_codes::psi_exception ? float(in[0]) : 0.0f);
  out[1] = float_to_half(valid ? float(std::uint8_t(in[1])) : 0.0f);
  return valid;
}

template <class Source>
const Source* payload(const EncodedStack& s);
template <>
const float* payload<float>(const EncodedStack& s) {
  return s.fp32.data();
}
template <>
const std::uint16_t* payload<std::uint16_t>(const EncodedStack& s) {
  return s.fp16.data();
}
template <>
const std::int8_t* payload<std::int8_t>(const EncodedStack& s) {
  return s.int8.data();
}

// One band's padded, cleaned copy of every exposure.
template <class Code>
struct Band {
  int y0 = 0, rows = 0;  // origin rows [y0, y0 + rows) of the image
  std::vector<Code> pairs;
  // Fractional mode: (cov_right, cov_down) and (cov_diag, cov_antidiag) pairs, zero for any
  // pair with an invalid or out-of-image pixel (the reference drops those terms).
  std::vector<float> cov_a, cov_b;
  // int8 exceptions: exception_row[e * padded_height + r] indexes a row of (psi, 0) pairs in
  // exception_pairs, or is -1 when that buffer row has no exception.
  std::vector<std::int32_t> exception_row;
  std::vector<float> exception_pairs;
};

struct Context {
  const EncodedStack* stack;
  const MotionBank* bank;
  Region region;
  OutputPolicy policy;
  double z_thr;
  Taps taps;
  Layout layout;
  std::vector<float> exposure_weights;  // (psi_weight, phi_weight) per exposure
};

// Source: the payload's element type; Code: the band's.
template <class Source, class Code>
void fill_band(const Context& c, Band<Code>& band) {
  const EncodedStack& s = *c.stack;
  const Layout& l = c.layout;
  const int E = s.exposures, W = s.width, H = s.height;
  const int x_first = c.region.x0 + c.taps.min_x, y_first = band.y0 + c.taps.min_y;
  const std::size_t total = std::size_t(E) * l.plane;
  band.pairs.assign(2 * total, Code(0));
  const bool fractional = c.taps.fractional;
  if (fractional) {
    band.cov_a.assign(2 * total, 0.0f);
    band.cov_b.assign(2 * total, 0.0f);
  }
  const Source* in = payload<Source>(s);
  const std::size_t plane = s.plane_size();
  std::int64_t exception_codes = 0;

#pragma omp parallel for schedule(static) reduction(+ : exception_codes)
  for (int er = 0; er < E * l.padded_height; ++er) {
    const int e = er / l.padded_height, r = er % l.padded_height, y = y_first + r;
    if (y < 0 || y >= H) continue;
    const std::size_t out_row = e * l.plane + std::size_t(r) * l.padded_width;
    const int c_lo = std::max(0, -x_first), c_hi = std::min(l.padded_width, W - x_first);
    for (int col = c_lo; col < c_hi; ++col) {
      const std::size_t pixel = std::size_t(y) * W + (x_first + col);
      const Source* src = in + 2 * (e * plane + pixel);
      clean_pair(src, &band.pairs[2 * (out_row + col)]);
      if constexpr (std::is_same_v<Source, std::int8_t>)
        exception_codes += src[0] == int8_codes::psi_exception && std::uint8_t(src[1]) != 0;
    }
    if (!fractional) continue;
    // Validity as decode() sees it, for the covariance pairs.
    auto valid = [&](int x, int yy) {
      if (x < 0 || yy < 0 || x >= W || yy >= H) return false;
      Code scratch[2];
      return clean_pair(in + 2 * (e * plane + std::size_t(yy) * W + x), scratch);
    };
    auto cov = [&](const std::vector<float>& p, int x) {
      return p[e * plane + std::size_t(y) * W + x];
    };
    for (int col = c_lo; col < c_hi; ++col) {
      const int x = x_first + col;
      float* a = &band.cov_a[2 * (out_row + col)];
      float* b = &band.cov_b[2 * (out_row + col)];
      const bool v00 = valid(x, y), v10 = valid(x + 1, y), v01 = valid(x, y + 1),
                 v11 = valid(x + 1, y + 1);
      a[0] = v00 && v10 ? cov(s.cov_right, x) : 0.0f;
      a[1] = v00 && v01 ? cov(s.cov_down, x) : 0.0f;
      b[0] = v00 && v11 ? cov(s.cov_diag, x) : 0.0f;
      b[1] = v10 && v01 ? cov(s.cov_antidiag, x) : 0.0f;
    }
  }

  band.exception_row.clear();
  band.exception_pairs.clear();
  if constexpr (std::is_same_v<Source, std::int8_t>) {
    std::int64_t matched = 0;
    for (const EncodingException& x : s.exceptions) {
      const int px = int(x.pixel % W), py = int(x.pixel / W);
      const int col = px - x_first, r = py - y_first;
      if (col < 0 || col >= l.padded_width || r < 0 || r >= l.padded_height) continue;
      const Source* src = in + 2 * (std::size_t(x.exposure) * plane + x.pixel);
      if (src[0] != int8_codes::psi_exception || std::uint8_t(src[1]) == 0) continue;  // unused
      if (band.exception_row.empty()) band.exception_row.assign(std::size_t(E) * l.padded_height, -1);
      std::int32_t& row = band.exception_row[std::size_t(x.exposure) * l.padded_height + r];
      if (row < 0) {
        row = std::int32_t(band.exception_pairs.size() / (2 * std::size_t(l.padded_width)));
        band.exception_pairs.resize(band.exception_pairs.size() + 2 * std::size_t(l.padded_width), 0.0f);
      }
      band.exception_pairs[(std::size_t(row) * l.padded_width + col) * 2] = x.psi;
      ++matched;
    }
    require(matched == exception_codes,
            "int8 stack has " + std::to_string(exception_codes) + " exception codes but " +
                std::to_string(matched) + " exception entries for them");
  }
}

// ---- accumulation -----------------------------------------------------------------------------

// Where one strip row's samples start, and the exception rows that may apply.
template <class Code>
struct StripView {
  const Code* pairs;       // the origin's own pair position in the buffer (offset 0)
  const float* cov_a;      // same position in the covariance buffers (fractional)
  const float* cov_b;
  int lx, ly;              // origin column/row in buffer coordinates before the tap offsets
};

// Adds the exact values of int8 exceptions that fall on the rows this strip reads.
template <int NV, class Code>
inline void add_exception_rows(const Band<Code>& band, const Context& c, int e, int r, int col,
                               F16 weight, F16 (&acc)[NV]) {
  const std::int32_t row = band.exception_row[std::size_t(e) * c.layout.padded_height + r];
  if (row < 0) return;
  const float* q = &band.exception_pairs[(std::size_t(row) * c.layout.padded_width + col) * 2];
  for (int k = 0; k < NV; ++k) acc[k] = simd::fma(weight, simd::load(q + simd::kLanes * k), acc[k]);
}

// A and B of one velocity for the strip's origins, as NV vectors of interleaved pairs.
template <int NV, bool kExceptions, class Code>
inline void integer_sums(const Context& c, const Band<Code>& band, const StripView<Code>& view,
                         std::size_t v, F16 (&acc)[NV]) {
  const int E = c.stack->exposures;
  const std::int32_t* offset = &c.layout.offset[v * E];
  for (int k = 0; k < NV; ++k) acc[k] = simd::zero();
  for (int e = 0; e < E; ++e) {
    const Code* p = view.pairs + 2 * std::ptrdiff_t(offset[e]);
    const F16 w = simd::splat_pair(&c.exposure_weights[2 * e]);
#pragma GCC unroll 16
    for (int k = 0; k < NV; ++k) acc[k] = simd::fma(w, simd::load(p + simd::kLanes * k), acc[k]);
    if constexpr (kExceptions) {
      const std::size_t i = v * E + e;
      add_exception_rows<NV>(band, c, e, view.ly + c.taps.dy[i] - c.taps.min_y,
                             view.lx + c.taps.dx[i] - c.taps.min_x, w, acc);
    }
  }
}

// Fractional mode: bilinear psi/phi at four corners into `acc`, covariance terms into `cov`
// (both lanes of `cov` belong to B).
template <int NV, bool kExceptions, class Code>
inline void fractional_sums(const Context& c, const Band<Code>& band, const StripView<Code>& view,
                            std::size_t v, F16 (&acc)[NV], F16 (&cov)[NV]) {
  const int E = c.stack->exposures;
  const std::ptrdiff_t row = 2 * std::ptrdiff_t(c.layout.padded_width);  // next row, in elements
  const std::int32_t* offset = &c.layout.offset[v * E];
  for (int k = 0; k < NV; ++k) acc[k] = cov[k] = simd::zero();
  for (int e = 0; e < E; ++e) {
    const std::ptrdiff_t o = 2 * std::ptrdiff_t(offset[e]);
    const Code* p = view.pairs + o;
    const float* a = view.cov_a + o;
    const float* b = view.cov_b + o;
    const float* wt = &c.taps.weights[(v * E + e) * 16];
    const F16 w0 = simd::splat_pair(wt), w1 = simd::splat_pair(wt + 2), w2 = simd::splat_pair(wt + 4),
              w3 = simd::splat_pair(wt + 6), c0 = simd::splat_pair(wt + 8),
              c1 = simd::splat_pair(wt + 10), c2 = simd::splat_pair(wt + 12),
              c3 = simd::splat_pair(wt + 14);
#pragma GCC unroll 16
    for (int k = 0; k < NV; ++k) {
      const int lane = simd::kLanes * k;
      acc[k] = simd::fma(w0, simd::load(p + lane), acc[k]);
      acc[k] = simd::fma(w1, simd::load(p + 2 + lane), acc[k]);
      acc[k] = simd::fma(w2, simd::load(p + row + lane), acc[k]);
      acc[k] = simd::fma(w3, simd::load(p + row + 2 + lane), acc[k]);
      cov[k] = simd::fma(c0, simd::load(a + lane), cov[k]);
      cov[k] = simd::fma(c1, simd::load(a + row + lane), cov[k]);
      cov[k] = simd::fma(c2, simd::load(a + 2 + lane), cov[k]);
      cov[k] = simd::fma(c3, simd::load(b + lane), cov[k]);
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

// What one work item found; merged in item order.
struct ItemResult {
  simd::D16 sumA, sumB;
  std::int64_t scored = 0, count = 0;
  Digest best;  // maxZ and its argmax only
  std::vector<Candidate> candidates;
};

// Top-k of the origins of one strip row.
struct TopK {
  int k = 0;
  std::vector<std::vector<Candidate>> heaps;  // per origin, worst on top
  alignas(64) float filter[kIntegerVectors * kOriginsPerVector];  // approximate admission bound
  void reset(int origins) {
    heaps.resize(origins);
    for (auto& h : heaps) h.clear();
    std::fill(std::begin(filter), std::end(filter), kNegInf);
  }
};

// Counters of one strip row, kept in registers and added to the item once per row.
struct RowTally {
  std::int64_t scored = 0, count = 0;
  float best_filter = kNegInf;  // admission bound for a new best trial of the item
};

struct Scorer {
  const Context& c;
  std::atomic<std::int64_t>& candidate_total;
  float z_thr, candidate_filter;

  // Scores 16 origins (lanes) of row y from x, velocity v; `live` marks origins in the region.
  // (sumA and sumB are summed separately, see PartialSums.)
  [[gnu::always_inline]] inline void score(F16 A, F16 B, Mask live, int x, int y, std::size_t v,
                                           ItemResult& out, RowTally& tally, TopK* top,
                                           int lane0) const {
    const Mask valid = simd::greater(B, simd::zero()) & live;
    if (!valid) return;
    tally.scored += simd::popcount(valid);
    const F16 Z = simd::ratio_sqrt(A, B, valid, kNegInf);
    tally.count += simd::popcount(simd::greater(Z, simd::splat(z_thr)) & valid);

    Mask wanted = simd::greater_equal(Z, simd::splat(tally.best_filter)) & valid;
    if (c.policy.collect_candidates) wanted |= simd::greater(Z, simd::splat(candidate_filter)) & valid;
    if (top) wanted |= simd::greater_equal(Z, simd::load(top->filter + lane0)) & valid;
    if (!wanted) return;

    alignas(64) float a[simd::kLanes], b[simd::kLanes];
    simd::store(a, A);
    simd::store(b, B);
    for (; wanted; wanted &= wanted - 1) {
      const int lane = std::countr_zero(wanted);
      const double z = double(a[lane]) / std::sqrt(double(b[lane]));
      const std::int64_t xo = x + lane;
      Digest& d = out.best;
      if (z > d.maxZ || (z == d.maxZ && d.precedes(std::int64_t(v), y, xo))) {
        d.maxZ = z;
        d.argmax_x = xo;
        d.argmax_y = y;
        d.argmax_velocity = std::int64_t(v);
        tally.best_filter = filter_below(z);
      }
      const bool is_candidate = c.policy.collect_candidates && z > c.policy.candidate_threshold;
      if (!is_candidate && !top) continue;
      const Velocity vel = c.bank->velocity(v);
      const Candidate cand{int(xo), y, std::int32_t(v), float(vel.vx), float(vel.vy), a[lane], b[lane],
                           float(z), float(double(a[lane]) / double(b[lane])), 0};
      if (is_candidate && ++candidate_total <= c.policy.max_candidates) out.candidates.push_back(cand);
      if (top) offer(*top, lane0 + lane, cand);
    }
  }

  static float filter_below(double z) {
    return float(z) - kFilterSlack * std::max(1.0f, std::abs(float(z)));
  }

  static void offer(TopK& top, int origin, const Candidate& cand) {
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
};

// A and B of 16 origins from two vectors of interleaved pairs (plus, in fractional mode, the
// covariance sums, both of whose lanes belong to B).
inline void split_sums(const F16* acc, const F16* cov, int k, F16& A, F16& B) {
  simd::deinterleave(acc[k], acc[k + 1], A, B);
  if (!cov) return;
  F16 right, down;
  simd::deinterleave(cov[k], cov[k + 1], right, down);
  B = simd::add(B, simd::add(right, down));
}

// Lanes of the 16-origin group starting at origin `first` of a strip that lie in the region.
inline Mask live_lanes(int origins, int first) {
  const int count = std::clamp(origins - first, 0, simd::kLanes);
  return count == simd::kLanes ? Mask(0xffff) : (Mask(1) << count) - 1;
}

// Scores NV vectors of interleaved (A, B) for `origins` live origins starting at image x.
template <int NV>
inline void score_strip(const Scorer& scorer, const F16 (&acc)[NV], const F16* cov, int origins,
                        int x, int y, std::size_t v, ItemResult& out, RowTally& tally, TopK* top) {
  for (int k = 0; k < NV; k += 2) {
    F16 A, B;
    split_sums(acc, cov, k, A, B);
    const int first = k * kOriginsPerVector;
    scorer.score(A, B, live_lanes(origins, first), x + first, y, v, out, tally, top, first);
  }
}

// sumA and sumB of one strip row: FP32 partial sums over a few velocities, then per-lane doubles.
// Trials that are not scored (B <= 0) add nothing without a mask: all their samples read cleaned
// (0, 0) pairs, so their A and B are exactly zero.
template <int NV>
struct PartialSums {
  F16 acc[NV], cov[NV];
  PartialSums() { clear(); }
  void clear() {
    for (int k = 0; k < NV; ++k) acc[k] = cov[k] = simd::zero();
  }
  void add(const F16 (&a)[NV], const F16* c) {
    for (int k = 0; k < NV; ++k) {
      acc[k] = simd::add(acc[k], a[k]);
      if (c) cov[k] = simd::add(cov[k], c[k]);
    }
  }
  void flush(bool fractional, int origins, ItemResult& out) {
    for (int k = 0; k < NV; k += 2) {
      F16 A, B;
      split_sums(acc, fractional ? cov : nullptr, k, A, B);
      const Mask live = live_lanes(origins, k * kOriginsPerVector);
      simd::accumulate(out.sumA, A, live);
      simd::accumulate(out.sumB, B, live);
    }
    clear();
  }
};

// ---- the engine -------------------------------------------------------------------------------

// Number of exposures whose sample at (x, y) along velocity v is valid, exactly as the
// reference engine counts it.
std::int32_t observation_count(const EncodedStack& s, const MotionBank& bank, int x, int y,
                               std::size_t v) {
  std::int32_t obs = 0;
  for (int e = 0; e < s.exposures; ++e) {
    const double sx = bank.shift_x(v, e), sy = bank.shift_y(v, e);
    if (bank.mode == ShiftMode::integer) {
      const int px = x + round_shift(sx), py = y + round_shift(sy);
      if (px < 0 || py < 0 || px >= s.width || py >= s.height) continue;
      obs += decode(s, e, std::size_t(py) * s.width + px).valid;
      continue;
    }
    const double u = x + sx, w = y + sy;
    const int ix = int(std::floor(u)), iy = int(std::floor(w));
    const double fx = u - ix, fy = w - iy;
    const double weight[4] = {(1 - fx) * (1 - fy), fx * (1 - fy), (1 - fx) * fy, fx * fy};
    bool any = false;
    for (int corner = 0; corner < 4 && !any; ++corner) {
      const int px = ix + (corner & 1), py = iy + (corner >> 1);
      if (px < 0 || py < 0 || px >= s.width || py >= s.height || weight[corner] == 0) continue;
      any = decode(s, e, std::size_t(py) * s.width + px).valid;
    }
    obs += any;
  }
  return obs;
}

// What a band's contents depend on: repeated searches of the same stack over the same region
// and shift extents (a benchmark, a policy change) reuse the padded copy instead of rebuilding it.
struct BandKey {
  std::uint64_t stack_id = 0;
  int x0 = 0, y0 = 0, rows = 0, min_x = 0, max_x = 0, min_y = 0, max_y = 0, padded_width = 0;
  bool fractional = false;
  bool operator==(const BandKey&) const = default;
};

// One search at a time per engine object: the band cache below is its only state.
class CpuEngine final : public Engine {
 public:
  std::string name() const override { return "cpu"; }
  std::string unsupported_reason(const SearchInput&) const override { return {}; }

  SearchResult search(const SearchInput& in) override {
    switch (in.stack->encoding) {
      case Encoding::fp32: return run<float, float>(in);
      case Encoding::fp16: return run<std::uint16_t, std::uint16_t>(in);
      case Encoding::int8: return run<std::int8_t, std::uint16_t>(in);
    }
    throw Error("cpu engine: unknown encoding");
  }

 private:
  template <class Source, class Code>
  SearchResult run(const SearchInput& in) {
    const EncodedStack& s = *in.stack;
    Context c{&s, in.bank, in.region, in.policy, digest_threshold(in), make_taps(*in.bank, s), {}, {}};
    const bool fractional = c.taps.fractional;
    const std::vector<Strip> strips =
        make_strips(c.region.width, fractional ? kFractionalVectors : kIntegerVectors);
    const Strip& last = strips.back();
    const int computed_width = last.lx + last.vectors * kOriginsPerVector;
    const std::size_t bytes_per_pair = 2 * sizeof(Code) + (fractional ? 4 * sizeof(float) : 0);
    c.layout = make_layout(c.taps, c.region, computed_width, bytes_per_pair);
    c.exposure_weights.resize(2 * s.exposures);
    for (int e = 0; e < s.exposures; ++e) {
      c.exposure_weights[2 * e] = s.psi_weight[e];
      c.exposure_weights[2 * e + 1] = s.phi_weight[e];
    }

    SearchResult result;
    result.digest.z_thr = c.z_thr;
    const int k = in.policy.top_k;
    if (k > 0) result.top_k.resize(std::size_t(c.region.count()) * k);
    std::atomic<std::int64_t> candidate_total{0};
    Scorer scorer{c, candidate_total, float(c.z_thr),
                  float(in.policy.candidate_threshold) -
                      kFilterSlack * std::max(1.0f, std::abs(float(in.policy.candidate_threshold)))};
    if (!std::isfinite(scorer.candidate_filter)) scorer.candidate_filter = float(in.policy.candidate_threshold);

    Band<Code>& band = cached_band<Code>();
    for (int y0 = 0; y0 < c.region.height; y0 += c.layout.band_rows) {
      const int rows = std::min(c.layout.band_rows, c.region.height - y0);
      const BandKey key{s.id, c.region.x0, c.region.y0 + y0, rows, c.taps.min_x, c.taps.max_x,
                        c.taps.min_y, c.taps.max_y, c.layout.padded_width, fractional};
      if (!(cached_ && key == cached_key_)) {
        cached_ = false;
        band.y0 = key.y0;
        band.rows = rows;
        fill_band<Source>(c, band);
        // Only a band covering the whole region stays valid for the next search.
        cached_ = rows == c.region.height;
        cached_key_ = key;
      }
      const int row_groups = (band.rows + kRowsPerItem - 1) / kRowsPerItem;
      const int items = int(strips.size()) * row_groups;
      std::vector<ItemResult> item_results(items);
#pragma omp parallel
      {
        TopK top;
        top.k = k;
#pragma omp for schedule(dynamic, 1)
        for (int item = 0; item < items; ++item) {
          if (in.policy.stop_requested()) continue;  // a stop request skips the remaining items
          const Strip& strip = strips[item % strips.size()];
          const int ly0 = (item / int(strips.size())) * kRowsPerItem;
          const int ly1 = std::min(band.rows, ly0 + kRowsPerItem);
          ItemResult& out = item_results[item];
          out.best.maxZ = -1e300;
          for (int ly = ly0; ly < ly1; ++ly)
            run_strip_row(c, band, scorer, strip, ly, out, k > 0 ? &top : nullptr, result.top_k);
        }
      }
      if (in.policy.stop_requested()) throw Cancelled("cpu engine: search stopped on request");
      for (const ItemResult& item : item_results) {
        Digest part;
        part.sumA = simd::total(item.sumA);
        part.sumB = simd::total(item.sumB);
        part.scored = item.scored;
        part.count = item.count;
        part.maxZ = item.best.maxZ;
        part.argmax_x = item.best.argmax_x;
        part.argmax_y = item.best.argmax_y;
        part.argmax_velocity = item.best.argmax_velocity;
        result.digest.merge(part);
        result.candidates.insert(result.candidates.end(), item.candidates.begin(), item.candidates.end());
      }
    }
    const std::int64_t total = candidate_total.load();
    require(total <= in.policy.max_candidates,
            "candidate list of " + std::to_string(total) + " trials exceeds max_candidates (" +
                std::to_string(in.policy.max_candidates) +
                "): raise the candidate threshold or the limit");
    std::sort(result.candidates.begin(), result.candidates.end(), [](const Candidate& a, const Candidate& b) {
      if (a.velocity != b.velocity) return a.velocity < b.velocity;
      if (a.y != b.y) return a.y < b.y;
      return a.x < b.x;
    });
    fill_observation_counts(s, *in.bank, result.candidates);
    fill_observation_counts(s, *in.bank, result.top_k);
    return result;
  }

  template <class Code>
  Band<Code>& cached_band() {
    if constexpr (std::is_same_v<Code, float>) return band_fp32_;
    else return band_fp16_;
  }

  BandKey cached_key_;
  bool cached_ = false;
  Band<float> band_fp32_;
  Band<std::uint16_t> band_fp16_;  // fp16 payloads and int8 codes

  template <class Code>
  static void run_strip_row(const Context& c, const Band<Code>& band, const Scorer& scorer,
                            const Strip& strip, int ly, ItemResult& out, TopK* top,
                            std::vector<Candidate>& top_k_out) {
    static_assert(kIntegerVectors == 8 && kFractionalVectors == 4 && kEdgeStep == 2,
                  "the cases below list every strip width");
    switch (strip.vectors) {
      case 8: return strip_row<8>(c, band, scorer, strip, ly, out, top, top_k_out);
      case 6: return strip_row<6>(c, band, scorer, strip, ly, out, top, top_k_out);
      case 4: return strip_row<4>(c, band, scorer, strip, ly, out, top, top_k_out);
      case 2: return strip_row<2>(c, band, scorer, strip, ly, out, top, top_k_out);
    }
    throw Error("cpu engine: unexpected strip width");
  }

  template <int NV, class Code>
  static void strip_row(const Context& c, const Band<Code>& band, const Scorer& scorer,
                        const Strip& strip, int ly, ItemResult& out, TopK* top,
                        std::vector<Candidate>& top_k_out) {
    const Layout& l = c.layout;
    const std::size_t at = std::size_t(ly) * l.padded_width + strip.lx;
    const StripView<Code> view{band.pairs.data() + 2 * at,
                               c.taps.fractional ? band.cov_a.data() + 2 * at : nullptr,
                               c.taps.fractional ? band.cov_b.data() + 2 * at : nullptr, strip.lx, ly};
    const int origins = std::min(NV * kOriginsPerVector, c.region.width - strip.lx);
    const int x = c.region.x0 + strip.lx, y = band.y0 + ly;
    if (top) top->reset(origins);
    const bool exceptions = !band.exception_row.empty();
    F16 acc[NV], cov[NV];
    PartialSums<NV> sums;
    RowTally tally;
    if (out.best.argmax_velocity >= 0) tally.best_filter = Scorer::filter_below(out.best.maxZ);
    for (std::size_t v = 0; v < c.taps.velocities; ++v) {
      if (c.taps.fractional) {
        if (exceptions) fractional_sums<NV, true>(c, band, view, v, acc, cov);
        else fractional_sums<NV, false>(c, band, view, v, acc, cov);
        sums.add(acc, cov);
        score_strip<NV>(scorer, acc, cov, origins, x, y, v, out, tally, top);
      } else {
        if (exceptions) integer_sums<NV, true>(c, band, view, v, acc);
        else integer_sums<NV, false>(c, band, view, v, acc);
        sums.add(acc, nullptr);
        score_strip<NV>(scorer, acc, nullptr, origins, x, y, v, out, tally, top);
      }
      if ((v + 1) % kVelocitiesPerFlush == 0) sums.flush(c.taps.fractional, origins, out);
    }
    sums.flush(c.taps.fractional, origins, out);
    out.scored += tally.scored;
    out.count += tally.count;
    if (!top) return;
    const int k = top->k;
    for (int i = 0; i < origins; ++i) {
      std::vector<Candidate>& heap = top->heaps[i];
      std::sort(heap.begin(), heap.end(), better_candidate);
      const std::size_t origin = std::size_t(y - c.region.y0) * c.region.width + (x + i - c.region.x0);
      Candidate* slot = &top_k_out[origin * k];
      for (int n = 0; n < k; ++n)
        slot[n] = n < int(heap.size()) ? heap[n] : Candidate{x + i, y, -1, 0, 0, 0, 0, kNegInf, 0, 0};
    }
  }

  static void fill_observation_counts(const EncodedStack& s, const MotionBank& bank,
                                      std::vector<Candidate>& list) {
#pragma omp parallel for schedule(dynamic, 256)
    for (std::size_t i = 0; i < list.size(); ++i)
      if (list[i].velocity >= 0)
        list[i].obs_count = observation_count(s, bank, list[i].x, list[i].y, std::size_t(list[i].velocity));
  }
};

}  // namespace

void register_cpu_fast_engine() {
  register_engine({"cpu",
                   "fast CPU search: all cores, SIMD along x, padded cleaned payload, FP32 sums",
                   false, 10, [] { return std::make_unique<CpuEngine>(); }, nullptr});
}

}  // namespace shiftstack
