// Storage encodings of the likelihood planes (SPEC section 5): fp32, fp16, int8 codes scaled to
// the noise per image. Engines accumulate decode(code) times a per-exposure weight, so each
// image's scale is folded into that weight and decoding is a plain conversion.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "shiftstack/likelihood.hpp"

namespace shiftstack {

enum class Encoding { fp32, fp16, int8 };

std::string to_string(Encoding encoding);
Encoding parse_encoding(const std::string& name);  // throws Error naming the accepted values
const std::vector<Encoding>& all_encodings();

// int8 code layout: psi is a signed code, phi an unsigned code.
namespace int8_codes {
constexpr std::int8_t psi_invalid = -128;   // masked / no data: the pixel contributes nothing
constexpr std::int8_t psi_exception = 127;  // value beyond the code range: look up the exact value
constexpr int psi_max = 126;                // valid codes are -psi_max..psi_max
constexpr int phi_max = 255;                // phi codes 1..255; phi code 0 means no information
// Quantization step of psi in units of the image's psi noise (sigma = sqrt(median phi)):
// 1/12 sigma gives a range of +-10.5 sigma and eta = 1/sqrt(1 + (1/12)^2/12) = 0.99971.
constexpr double psi_step_sigmas = 1.0 / 12.0;
}  // namespace int8_codes

// A value beyond the int8 code range, kept exactly (in the same units as decoded codes).
struct EncodingException {
  std::uint32_t exposure;
  std::uint32_t pixel;  // y * width + x
  float psi;            // exact value; the decoded phi code stays valid
};

struct EncodedStack {
  Encoding encoding = Encoding::fp32;
  int width = 0, height = 0, exposures = 0;
  std::uint64_t id = 0;  // unique per encode() call; device caches key on it

  // Per exposure: A += psi_weight[e] * decoded_psi, B += phi_weight[e] * decoded_phi.
  std::vector<float> psi_weight, phi_weight;

  // Exactly one payload is filled, pixel-interleaved (psi, phi) pairs, exposure-major:
  // pair index = (e * height + y) * width + x.
  std::vector<float> fp32;          // 2 floats per pixel
  std::vector<std::uint16_t> fp16;  // 2 IEEE half bit patterns per pixel
  std::vector<std::int8_t> int8;    // psi code, then phi code (read as uint8) per pixel

  // int8 only: values beyond the code range, sorted by (exposure, pixel).
  std::vector<EncodingException> exceptions;
  std::int64_t saturated = 0;  // how many psi values took the exception path

  // Covariance planes (fractional mode), always fp32, already in "B units" (weight phi_weight[e]
  // applies to them too), or empty.
  std::vector<float> cov_right, cov_down, cov_diag, cov_antidiag;

  std::vector<double> throughput;  // a_e, for reference
  std::size_t plane_size() const { return std::size_t(width) * height; }
  std::size_t bytes_per_pair() const;
};

// Encodes the likelihood stack. Scales: fp32 keeps raw values (weights a_e, a_e^2); fp16 and
// int8 divide psi by s_e = sqrt(median positive phi_e) and phi by s_e^2 first.
EncodedStack encode(const LikelihoodStack& likelihood, Encoding encoding);

// A fresh EncodedStack::id, for encoders other than encode() (the CUDA one builds its cube on the
// device): ids never repeat within a process, so device caches keyed on them stay correct.
std::uint64_t new_encoded_stack_id();

// CPU decode of one pixel's pair into weighted (a_e psi, a_e^2 phi) contributions; valid=false
// for invalid codes or phi <= 0. Every CPU engine reads through this, so each runs every encoding.
struct DecodedSample {
  float psi = 0, phi = 0;  // already multiplied by the exposure weights
  bool valid = false;
};
DecodedSample decode(const EncodedStack& stack, int exposure, std::size_t pixel);

// IEEE binary16 conversions (round to nearest even), shared by the encoder and CPU emulations.
std::uint16_t float_to_half(float value);
float half_to_float(std::uint16_t bits);

// Retained SNR fraction of a quantizer applied to unit-variance Gaussian samples:
// eta = E[X Q(X)] / sqrt(E[X^2] E[Q(X)^2]) (SPEC 5), measured on `samples` draws.
double measured_eta(double (*quantize)(double), std::size_t samples, std::uint64_t seed);

}  // namespace shiftstack
