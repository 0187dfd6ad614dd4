// The `cpu` engine's padded band layout (target-independent): for each band of origin rows,
// every exposure's (psi, phi) pairs are copied once into a zero-padded buffer in a compact element
// type (fp32 values, fp16 bits, int8 codes as the halves that equal them exactly), "cleaned" so
// that decoding becomes one conversion: a pixel that decode() calls invalid becomes (0, 0), and an
// int8 exception code becomes 0 with its exact value added back from a sparse list of correction
// rows. The padding makes out-of-image samples read zeros, so the inner loop has no branches.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "cpu/cpu_layout.hpp"
#include "shiftstack/error.hpp"

namespace shiftstack::cpu_fast {

// ---- shift taps -------------------------------------------------------------------------------

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

std::vector<Strip> make_strips(int width, int wide_vectors, int lanes) {
  std::vector<Strip> strips;
  const int wide = wide_vectors * lanes / 2, step = kEdgeStep * lanes / 2;
  int lx = 0;
  for (; lx + wide <= width; lx += wide) strips.push_back({lx, wide_vectors});
  if (lx < width) strips.push_back({lx, kEdgeStep * ((width - lx + step - 1) / step)});
  return strips;
}

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

namespace {

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

}  // namespace

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

template void fill_band<float, float>(const Context&, Band<float>&);
template void fill_band<std::uint16_t, std::uint16_t>(const Context&, Band<std::uint16_t>&);
template void fill_band<std::int8_t, std::uint16_t>(const Context&, Band<std::uint16_t>&);

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

void TopK::reset(int origins) {
  heaps.resize(origins);
  for (auto& h : heaps) h.clear();
  std::fill(std::begin(filter), std::end(filter), -std::numeric_limits<float>::infinity());
}

}  // namespace shiftstack::cpu_fast
