// Storage encodings (SPEC 5): exact bit patterns, round trips, exceptions, and measured eta.
#include <gtest/gtest.h>

#include <cmath>

#include "test_support.hpp"

using namespace shiftstack;
using namespace shiftstack::testing;

TEST(Half, KnownBitPatterns) {
  EXPECT_EQ(float_to_half(1.0f), 0x3c00);
  EXPECT_EQ(float_to_half(-2.0f), 0xc000);
  EXPECT_EQ(float_to_half(65504.0f), 0x7bff);
  EXPECT_EQ(float_to_half(1e6f), 0x7c00);                 // overflow -> inf
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(float_to_half(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // tie -> even
  EXPECT_EQ(float_to_half(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);  // tie -> even (up)
  for (std::uint32_t h = 0; h < 0x7c00; ++h)  // every finite positive half survives a round trip
    ASSERT_EQ(float_to_half(half_to_float(std::uint16_t(h))), h) << h;
}

TEST(Encoding, DecodedValuesTrackFp32) {
  const KitStack kit = make_kit(small_kit(3));
  const LikelihoodStack L = compute_likelihood(kit.stack);
  const EncodedStack f32 = encode(L, Encoding::fp32), f16 = encode(L, Encoding::fp16),
                     i8 = encode(L, Encoding::int8);
  for (int e = 0; e < L.exposures; e += 5) {
    const double a = L.throughput[e];
    // psi noise level of this image: steps are a fixed fraction of it.
    std::vector<float> phis;
    for (std::size_t p = 0; p < L.plane_size(); ++p)
      if (L.phi[e * L.plane_size() + p] > 0) phis.push_back(L.phi[e * L.plane_size() + p]);
    std::nth_element(phis.begin(), phis.begin() + phis.size() / 2, phis.end());
    const double sigma = std::sqrt(phis[phis.size() / 2]);
    for (std::size_t p = 0; p < L.plane_size(); p += 7) {
      const double psi = L.psi[e * L.plane_size() + p], phi = L.phi[e * L.plane_size() + p];
      const DecodedSample d32 = decode(f32, e, p), d16 = decode(f16, e, p), d8 = decode(i8, e, p);
      ASSERT_EQ(d32.valid, phi > 0);
      if (!d32.valid) continue;
      EXPECT_NEAR(d32.psi, a * psi, 1e-6 * std::abs(a * psi));
      EXPECT_NEAR(d16.psi, a * psi, a * (std::abs(psi) * 1e-3 + sigma * 1e-4));
      EXPECT_NEAR(d16.phi, a * a * phi, a * a * phi * 1e-3);
      if (d8.valid) {
        EXPECT_NEAR(d8.psi, a * psi, a * sigma * int8_codes::psi_step_sigmas * 0.5001);
      }
    }
  }
}

TEST(Encoding, Int8ExceptionsKeepBrightValuesExactly) {
  KitOptions o = small_kit(4);
  o.injected_snr = 4000;  // a bright residual far beyond +-10.5 sigma per exposure
  const KitStack kit = make_kit(o);
  const LikelihoodStack L = compute_likelihood(kit.stack);
  const EncodedStack i8 = encode(L, Encoding::int8);
  ASSERT_GT(i8.saturated, 0);
  EXPECT_EQ(i8.saturated, std::int64_t(i8.exceptions.size()));
  for (const auto& x : i8.exceptions) {
    const DecodedSample d = decode(i8, int(x.exposure), x.pixel);
    const double exact = L.throughput[x.exposure] * L.psi[x.exposure * L.plane_size() + x.pixel];
    EXPECT_NEAR(d.psi, exact, 1e-5 * std::abs(exact));
  }
  // Invalid code wherever fp32 has no information.
  for (std::size_t i = 0; i < L.psi.size(); ++i) {
    if (L.phi[i] == 0) {
      EXPECT_EQ(i8.int8[2 * i], int8_codes::psi_invalid);
    }
  }
}

namespace {
double noise_scaled_int8(double x) {
  const double step = int8_codes::psi_step_sigmas;
  const double code = std::nearbyint(x / step);
  return std::abs(code) > int8_codes::psi_max ? x : code * step;  // exceptions keep x exactly
}
double bright_scaled_int8(double x) {  // 8 bits spanning +-100 sigma, clipped
  const double step = 100.0 / 127;
  return std::clamp(std::nearbyint(x / step), -127.0, 127.0) * step;
}
double sign_only(double x) { return x >= 0 ? 1.0 : -1.0; }
}  // namespace

TEST(Encoding, MeasuredEtaMatchesSpecFormula) {
  const std::size_t n = 2'000'000;
  // Rounding step Delta alone: eta = 1/sqrt(1 + Delta^2/12). MC error ~ 1e-4 at this n.
  const double d = int8_codes::psi_step_sigmas;
  EXPECT_NEAR(measured_eta(noise_scaled_int8, n, 1), 1 / std::sqrt(1 + d * d / 12), 2e-4);
  const double D = 100.0 / 127;
  EXPECT_NEAR(measured_eta(bright_scaled_int8, n, 2), 1 / std::sqrt(1 + D * D / 12), 3e-3);
  EXPECT_NEAR(measured_eta(sign_only, n, 3), std::sqrt(2 / M_PI), 2e-3);
}
