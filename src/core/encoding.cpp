#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>
#include <random>

#include "shiftstack/encoding.hpp"
#include "shiftstack/error.hpp"

namespace shiftstack {

std::string to_string(Encoding encoding) {
  switch (encoding) {
    case Encoding::fp32: return "fp32";
    case Encoding::fp16: return "fp16";
    case Encoding::int8: return "int8";
  }
  return "?";
}

Encoding parse_encoding(const std::string& name) {
  for (Encoding e : all_encodings())
    if (to_string(e) == name) return e;
  throw Error("unknown encoding '" + name + "' (expected fp32, fp16 or int8)");
}

const std::vector<Encoding>& all_encodings() {
  static const std::vector<Encoding> list = {Encoding::fp32, Encoding::fp16, Encoding::int8};
  return list;
}

std::size_t EncodedStack::bytes_per_pair() const {
  switch (encoding) {
    case Encoding::fp32: return 8;
    case Encoding::fp16: return 4;
    case Encoding::int8: return 2;
  }
  return 0;
}

std::uint16_t float_to_half(float value) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
  const std::uint32_t sign = (bits >> 16) & 0x8000u;
  const std::uint32_t exponent = (bits >> 23) & 0xffu;
  std::uint32_t mantissa = bits & 0x7fffffu;
  if (exponent == 0xff) return std::uint16_t(sign | 0x7c00u | (mantissa ? 0x200u : 0u));
  int e = int(exponent) - 127 + 15;
  if (e >= 0x1f) return std::uint16_t(sign | 0x7c00u);  // overflow -> inf
  if (e <= 0) {
    // Subnormal half (or zero): shift the full significand, rounding to nearest even.
    if (e < -10) return std::uint16_t(sign);
    mantissa |= 0x800000u;
    const int shift = 14 - e;
    std::uint32_t half = mantissa >> shift;
    const std::uint32_t rest = mantissa & ((1u << shift) - 1);
    const std::uint32_t halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (half & 1u))) ++half;
    return std::uint16_t(sign | half);
  }
  std::uint32_t half = (std::uint32_t(e) << 10) | (mantissa >> 13);
  const std::uint32_t rest = mantissa & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) ++half;  // may carry into exponent: ok
  return std::uint16_t(sign | half);
}

float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = std::uint32_t(h & 0x8000u) << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1fu;
  const std::uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0) {
    const float magnitude = std::ldexp(float(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  return std::bit_cast<float>(sign | ((exponent - 15 + 127) << 23) | (mantissa << 13));
}

namespace {

std::atomic<std::uint64_t> next_stack_id{1};

// s_e: the psi noise level of an image, sqrt of the median positive phi (Var psi = phi).
double noise_scale(const float* phi, std::size_t n) {
  std::vector<float> positive;
  positive.reserve(n);
  for (std::size_t p = 0; p < n; ++p)
    if (phi[p] > 0) positive.push_back(phi[p]);
  if (positive.empty()) return 1.0;
  auto mid = positive.begin() + positive.size() / 2;
  std::nth_element(positive.begin(), mid, positive.end());
  return std::sqrt(double(*mid));
}

}  // namespace

std::uint64_t new_encoded_stack_id() { return next_stack_id++; }

EncodedStack encode(const LikelihoodStack& L, Encoding encoding) {
  require(L.exposures > 0 && L.width > 0 && L.height > 0, "encode: empty likelihood stack");
  EncodedStack out;
  out.encoding = encoding;
  out.width = L.width;
  out.height = L.height;
  out.exposures = L.exposures;
  out.id = next_stack_id++;
  out.throughput = L.throughput;
  const std::size_t plane = L.plane_size(), total = plane * L.exposures;
  out.psi_weight.resize(L.exposures);
  out.phi_weight.resize(L.exposures);
  switch (encoding) {
    case Encoding::fp32: out.fp32.resize(2 * total); break;
    case Encoding::fp16: out.fp16.resize(2 * total); break;
    case Encoding::int8: out.int8.resize(2 * total); break;
  }
  std::vector<std::vector<EncodingException>> exceptions(L.exposures);
  std::vector<double> phi_unit(L.exposures, 1.0);  // raw phi per unit of decoded phi

#pragma omp parallel for schedule(dynamic, 1)
  for (int e = 0; e < L.exposures; ++e) {
    const float* psi = L.psi.data() + e * plane;
    const float* phi = L.phi.data() + e * plane;
    const double a = L.throughput[e];
    if (encoding == Encoding::fp32) {
      out.psi_weight[e] = float(a);
      out.phi_weight[e] = float(a * a);
      for (std::size_t p = 0; p < plane; ++p) {
        const bool valid = phi[p] > 0;
        out.fp32[2 * (e * plane + p)] = valid ? psi[p] : 0.0f;
        out.fp32[2 * (e * plane + p) + 1] = valid ? phi[p] : 0.0f;
      }
      continue;
    }
    const double s = noise_scale(phi, plane);
    if (encoding == Encoding::fp16) {
      // Unit-variance psi and phi near 1 sit in half precision's dense range.
      out.psi_weight[e] = float(a * s);
      out.phi_weight[e] = float(a * a * s * s);
      phi_unit[e] = s * s;
      for (std::size_t p = 0; p < plane; ++p) {
        const bool valid = phi[p] > 0;
        out.fp16[2 * (e * plane + p)] = float_to_half(valid ? float(psi[p] / s) : 0.0f);
        out.fp16[2 * (e * plane + p) + 1] = float_to_half(valid ? float(phi[p] / (s * s)) : 0.0f);
      }
      continue;
    }
    // int8: psi in steps of a fixed fraction of its noise; phi linear up to the image maximum.
    const double psi_step = s * int8_codes::psi_step_sigmas;
    const double phi_max = *std::max_element(phi, phi + plane);
    const double phi_step = phi_max > 0 ? phi_max / int8_codes::phi_max : 1.0;
    out.psi_weight[e] = float(a * psi_step);
    out.phi_weight[e] = float(a * a * phi_step);
    phi_unit[e] = phi_step;
    for (std::size_t p = 0; p < plane; ++p) {
      std::int8_t* pair = out.int8.data() + 2 * (e * plane + p);
      const long phi_code = phi[p] > 0 ? std::lround(phi[p] / phi_step) : 0;
      if (phi_code <= 0) {
        // No information, or less than half a phi step: the pixel contributes to neither sum.
        pair[0] = int8_codes::psi_invalid;
        pair[1] = 0;
        continue;
      }
      pair[1] = std::int8_t(std::uint8_t(std::min<long>(phi_code, int8_codes::phi_max)));
      const double scaled = psi[p] / psi_step;
      const long code = std::lround(scaled);
      if (std::labs(code) > int8_codes::psi_max) {
        pair[0] = int8_codes::psi_exception;
        exceptions[e].push_back({std::uint32_t(e), std::uint32_t(p), float(scaled)});
      } else {
        pair[0] = std::int8_t(code);
      }
    }
  }
  for (auto& list : exceptions) {
    out.saturated += std::int64_t(list.size());
    out.exceptions.insert(out.exceptions.end(), list.begin(), list.end());
  }
  if (L.has_covariances()) {
    // Covariances are in raw phi units; express them in decoded-phi units so phi_weight applies.
    auto scaled = [&](const std::vector<float>& cov) {
      std::vector<float> r(cov.size());
      for (int e = 0; e < L.exposures; ++e)
        for (std::size_t p = 0; p < plane; ++p)
          r[e * plane + p] = float(cov[e * plane + p] / phi_unit[e]);
      return r;
    };
    out.cov_right = scaled(L.cov_right);
    out.cov_down = scaled(L.cov_down);
    out.cov_diag = scaled(L.cov_diag);
    out.cov_antidiag = scaled(L.cov_antidiag);
  }
  return out;
}

DecodedSample decode(const EncodedStack& s, int e, std::size_t pixel) {
  const std::size_t i = std::size_t(e) * s.plane_size() + pixel;
  DecodedSample out;
  float psi = 0, phi = 0;
  switch (s.encoding) {
    case Encoding::fp32:
      psi = s.fp32[2 * i];
      phi = s.fp32[2 * i + 1];
      break;
    case Encoding::fp16:
      psi = half_to_float(s.fp16[2 * i]);
      phi = half_to_float(s.fp16[2 * i + 1]);
      break;
    case Encoding::int8: {
      const std::int8_t code = s.int8[2 * i];
      if (code == int8_codes::psi_invalid) return out;
      phi = float(std::uint8_t(s.int8[2 * i + 1]));
      if (code == int8_codes::psi_exception) {
        const EncodingException key{std::uint32_t(e), std::uint32_t(pixel), 0.0f};
        auto it = std::lower_bound(s.exceptions.begin(), s.exceptions.end(), key,
                                   [](const EncodingException& a, const EncodingException& b) {
                                     return a.exposure != b.exposure ? a.exposure < b.exposure
                                                                     : a.pixel < b.pixel;
                                   });
        require(it != s.exceptions.end() && it->exposure == key.exposure && it->pixel == key.pixel,
                "int8 exception code without an exception entry at exposure " + std::to_string(e));
        psi = it->psi;
      } else {
        psi = float(code);
      }
      break;
    }
  }
  if (!(phi > 0)) return out;
  out.psi = s.psi_weight[e] * psi;
  out.phi = s.phi_weight[e] * phi;
  out.valid = true;
  return out;
}

double measured_eta(double (*quantize)(double), std::size_t samples, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal;
  double xq = 0, xx = 0, qq = 0;
  for (std::size_t i = 0; i < samples; ++i) {
    const double x = normal(rng), q = quantize(x);
    xq += x * q;
    xx += x * x;
    qq += q * q;
  }
  return xq / std::sqrt(xx * qq);
}

}  // namespace shiftstack
