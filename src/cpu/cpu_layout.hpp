// Internal to the `cpu` engine: what its three parts share. cpu_layout.cpp builds the padded,
// cleaned copy of the stack (target-independent scalar code); cpu_kernels.cpp is compiled once
// per SIMD target (Google Highway, runtime dispatch) and scans it; cpu_engine.cpp picks a target,
// runs the work items on all cores and merges their results.
#pragma once
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "shiftstack/search.hpp"

namespace shiftstack::cpu_fast {

// Widest float vector of any target compiled in (AVX-512: 16 lanes); per-lane sums are kept in
// arrays of this size so that the target-independent parts need not know the target.
constexpr int kMaxLanes = 16;
// Most origins one strip may have (AVX-512: 8 vectors of 8 interleaved pairs).
constexpr int kMaxStripOrigins = 64;
// The strip at the region's right edge is as narrow as the rest of the row allows, in steps of
// two vectors (one scoring group of `lanes` origins).
constexpr int kEdgeStep = 2;
// Origin rows per work item: enough items for dynamic balancing, few enough to amortize.
constexpr int kRowsPerItem = 2;
// Filters run on approximate scores (about 1e-7 relative); this margin keeps every trial that
// might pass, and the exact double score then decides.
constexpr float kFilterSlack = 1e-5f;
// Largest padded copy of one band (bytes); bands split the origin rows when the stack is larger.
constexpr double kBandBudgetBytes = 512.0 * 1024 * 1024;

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
Taps make_taps(const MotionBank& bank, const EncodedStack& s);

// A run of origins along x that keeps its sums in `vectors` vector registers while every
// exposure is added: vectors * lanes / 2 origins (each vector holds lanes/2 interleaved pairs).
struct Strip {
  int lx;       // first origin, relative to the region's x0
  int vectors;  // accumulators
};
std::vector<Strip> make_strips(int width, int wide_vectors, int lanes);
inline int strip_origins(const Strip& s, int lanes) { return s.vectors * lanes / 2; }

// Buffer column c holds image x = region.x0 + min_x + c; buffer row r of a band holds image
// y = band_y0 + min_y + r. One plane per exposure, planes `plane` pairs apart.
struct Layout {
  int padded_width = 0;   // pairs per buffer row
  int padded_height = 0;  // rows per exposure plane (for the tallest band)
  std::size_t plane = 0;  // pairs per exposure plane
  int band_rows = 0;      // origin rows per band
  std::vector<std::int32_t> offset;  // [v * E + e]: pair offset from the origin's own position
};
Layout make_layout(const Taps& t, const Region& r, int computed_width, std::size_t bytes_per_pair);

// One band's padded, cleaned copy of every exposure. Code: float (fp32 payloads) or IEEE half
// bits (fp16 payloads, and int8 codes, which halves hold exactly).
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

// Source: the payload's element type (float, std::uint16_t, std::int8_t); Code: the band's.
template <class Source, class Code>
void fill_band(const Context& c, Band<Code>& band);

// Number of exposures whose sample at (x, y) along velocity v is valid, exactly as the
// reference engine counts it.
std::int32_t observation_count(const EncodedStack& s, const MotionBank& bank, int x, int y,
                               std::size_t v);

// What one work item found; merged in item order, so the digest does not depend on the thread
// count. sumA and sumB are per-lane running sums (lanes beyond the target's stay zero).
struct ItemResult {
  double sumA[kMaxLanes] = {}, sumB[kMaxLanes] = {};
  std::int64_t scored = 0, count = 0;
  Digest best;  // maxZ and its argmax only
  std::vector<Candidate> candidates;
};

// Top-k of the origins of one strip row (one per thread, reused).
struct TopK {
  int k = 0;
  std::vector<std::vector<Candidate>> heaps;  // per origin, worst on top
  float filter[kMaxStripOrigins];             // approximate admission bound per origin
  void reset(int origins);
};

// What every work item of one search reads besides the band.
struct ScanShared {
  const Context* c;
  std::atomic<std::int64_t>* candidate_total;
  float z_thr, candidate_filter;       // approximate-score filters (see kFilterSlack)
  std::vector<Candidate>* top_k_out;   // origin-major, k per origin
};

// One SIMD target's kernels: each scans the origin rows [ly0, ly1) of one strip of a band.
template <class Code>
using ScanItem = void (*)(const ScanShared&, const Band<Code>&, const Strip&, int ly0, int ly1,
                          ItemResult&, TopK*);
struct Kernels {
  std::int64_t target;     // Highway's bit for the target
  const char* name;        // Highway's name for it: AVX3 (AVX-512), AVX2, SSE4, SSSE3, NEON, ...
  int lanes;               // floats per vector
  int integer_vectors;     // accumulators per strip, integer shifts
  int fractional_vectors;  // accumulators per strip (and as many covariance sums), bilinear
  ScanItem<float> scan_fp32;
  ScanItem<std::uint16_t> scan_fp16;
};
const Kernels& best_kernels();                    // the best target this processor runs
std::vector<const Kernels*> runnable_kernels();   // every target compiled in that it runs, best first

}  // namespace shiftstack::cpu_fast
