// The CPU emulation of the tensor-core operator (FP16 operands, FP32 sums): its padding rule, its
// per-frequency arithmetic against the exact double product, and its whole search on `ci`
// against the `reference` engine with SPEC 4's reduced tolerances.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>

#include "shiftstack/tc_emulation.hpp"
#include "test_support.hpp"

using namespace shiftstack;
using namespace shiftstack::testing;

TEST(FourierGeometry, SizesAreFftFriendly) {
  EXPECT_EQ(fft_friendly_size(1), 1);
  EXPECT_EQ(fft_friendly_size(11), 12);
  EXPECT_EQ(fft_friendly_size(275), 280);
  EXPECT_EQ(fft_friendly_size(143), 144);
  EXPECT_EQ(fft_friendly_size(289), 294);
  EXPECT_THROW(fft_friendly_size(0), Error);
}

// Brute force on one axis: after padding, the circular index of every sample taken from an origin
// inside the image is inside the image exactly when the linear one is.
TEST(FourierGeometry, CircularShiftEqualsLinearShift) {
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> extent(1, 60), shift(-25, 25);
  for (int trial = 0; trial < 400; ++trial) {
    const int w = extent(rng);
    int lo = shift(rng), hi = shift(rng);
    if (lo > hi) std::swap(lo, hi);
    const int n = padded_fourier_size(w, lo, hi);
    ASSERT_GE(n, w);
    for (int x = 0; x < w; ++x)
      for (int s = lo; s <= hi; ++s) {
        const int linear = x + s, circular = ((linear % n) + n) % n;
        const bool inside_linear = linear >= 0 && linear < w, inside_circular = circular < w;
        ASSERT_EQ(inside_linear, inside_circular) << "w=" << w << " shifts [" << lo << "," << hi
                                                  << "] n=" << n << " x=" << x << " s=" << s;
        if (inside_linear) {
          ASSERT_EQ(linear, circular);
        }
      }
  }
}

TEST(FourierGeometry, DenseWorkloadPadding) {
  const KitStack kit = make_kit(workload("ci"));
  const FourierGeometry g = fourier_geometry(128, 128, integer_shifts(kit.bank));
  EXPECT_GE(g.nx, 128 + std::max(g.max_sx, -g.min_sx));
  EXPECT_GE(g.ny, 128 + std::max(g.max_sy, -g.min_sy));
  EXPECT_EQ(g.nyh, g.ny / 2 + 1);
  EXPECT_EQ(g.frequencies(), std::int64_t(g.nx) * g.nyh);
}

namespace {

FrequencyProblem random_problem(std::mt19937& rng, int E, int va, int vb) {
  FrequencyProblem p;
  std::uniform_int_distribution<int> size(16, 48), shift(-9, 9);
  std::normal_distribution<double> normal;
  std::uniform_real_distribution<double> decades(-3, 3);
  p.exposures = E, p.va = va, p.vb = vb;
  p.nx = size(rng), p.ny = size(rng);
  p.mx = std::uniform_int_distribution<int>(0, p.nx - 1)(rng);
  p.my = std::uniform_int_distribution<int>(0, p.ny / 2)(rng);
  for (int i = 0; i < va * E; ++i) p.sx.push_back(shift(rng));
  for (int i = 0; i < vb * E; ++i) p.sy.push_back(shift(rng));
  // Magnitudes over six decades, as PSF-filtered spectra have across exposures.
  const double level = std::pow(10.0, decades(rng));
  for (int e = 0; e < E; ++e)
    p.spectrum.emplace_back(level * normal(rng) * std::pow(10.0, decades(rng)),
                            level * normal(rng) * std::pow(10.0, decades(rng)));
  return p;
}

}  // namespace

TEST(TcEmulation, OperatorWithinFp16BoundOfExactProduct) {
  std::mt19937 rng(17);
  double worst_fraction_of_bound = 0;
  for (int trial = 0; trial < 60; ++trial) {
    const int E = std::uniform_int_distribution<int>(1, 200)(rng);
    const int va = std::uniform_int_distribution<int>(1, 9)(rng);
    const int vb = std::uniform_int_distribution<int>(1, 9)(rng);
    const FrequencyProblem p = random_problem(rng, E, va, vb);
    const auto exact = exact_frequency_product(p);
    const auto emulated = emulated_tc_frequency_product(p);
    const double bound = emulated_tc_error_bound(p);
    ASSERT_EQ(exact.size(), emulated.size());
    for (std::size_t i = 0; i < exact.size(); ++i) {
      const double err = std::abs(emulated[i] - exact[i]);
      ASSERT_LE(err, bound) << "trial " << trial << " output " << i << " E=" << E;
      worst_fraction_of_bound = std::max(worst_fraction_of_bound, err / bound);
    }
  }
  // The bound is worst case; typical errors sit well inside it.
  EXPECT_LT(worst_fraction_of_bound, 0.5);
}

// The rounding is real: with random phases the typical relative error is of the order of the FP16
// unit roundoff (2^-11 = 4.9e-4), neither zero nor far above it.
TEST(TcEmulation, TypicalErrorIsHalfPrecision) {
  std::mt19937 rng(23);
  double err2 = 0, ref2 = 0;
  for (int trial = 0; trial < 20; ++trial) {
    FrequencyProblem p = random_problem(rng, 256, 8, 8);
    for (auto& z : p.spectrum) z = {std::normal_distribution<double>()(rng), std::normal_distribution<double>()(rng)};
    const auto exact = exact_frequency_product(p);
    const auto emulated = emulated_tc_frequency_product(p);
    for (std::size_t i = 0; i < exact.size(); ++i) {
      err2 += std::norm(emulated[i] - exact[i]);
      ref2 += std::norm(exact[i]);
    }
  }
  const double relative = std::sqrt(err2 / ref2);
  EXPECT_GT(relative, 1e-5);
  EXPECT_LT(relative, 2e-3);
}

TEST(TcEmulation, RefusesWhatTheFourierRouteCannotComputeExactly) {
  KitStack kit = make_kit(workload("ci"));
  const EncodedStack stack = encode_kit(kit);
  MotionBank listed = kit.bank;
  listed.velocity_list = {{0.1, 0.2}, {0.3, -0.1}};
  EXPECT_THROW(emulated_tc_search(stack, listed), Error);
  MotionBank fractional = kit.bank;
  fractional.mode = ShiftMode::fractional;
  EXPECT_THROW(emulated_tc_search(stack, fractional), Error);
}

class TcEmulationDigest : public ::testing::TestWithParam<Encoding> {};

TEST_P(TcEmulationDigest, AgreesWithReferenceOnCi) {
  const KitStack kit = make_kit(workload("ci"));
  const EncodedStack stack = encode_kit(kit, GetParam());
  auto reference = make_engine("reference");
  const SearchResult ref = search(*reference, stack, kit.bank);
  const EmulatedSearch emu = emulated_tc_search(stack, kit.bank);
  EXPECT_EQ(emu.digest.scored, ref.digest.scored);
  EXPECT_EQ(emu.clamped, 0) << "FFT-route B fell below the smallest positive contribution";
  const DigestComparison cmp = compare(ref.digest, emu.digest, DigestTolerance::reduced());
  std::printf("reference: %s\nemulated:  %s\n  d maxZ %.3g, rel sumA %.3g, rel sumB %.3g, d count %lld\n",
              describe(ref.digest).c_str(), describe(emu.digest).c_str(), cmp.d_maxZ, cmp.rel_sumA,
              cmp.rel_sumB, (long long)cmp.d_count);
  for (const auto& f : cmp.failures) ADD_FAILURE() << f;
  EXPECT_TRUE(cmp.agrees) << "reference: " << describe(ref.digest) << "\nemulated:  " << describe(emu.digest);
}

INSTANTIATE_TEST_SUITE_P(Storage, TcEmulationDigest, ::testing::Values(Encoding::fp32, Encoding::fp16),
                         [](const auto& p) { return to_string(p.param); });

// The fractional Fourier route's algebra (what cuda-fourier computes in FP32), in double, against
// the reference gather's bilinear A and exact B for every scored trial of a small stack with
// masks, edges and shifts beyond both sides of the image.
TEST(FractionalRoute, EqualsTheBilinearGather) {
  KitOptions o = workload("ci");
  o.exposures = 10, o.width = 40, o.height = 30, o.vx_count = 5, o.vy_count = 4;
  o.velocity_displacement = 9, o.curve_amplitude = 2, o.shift_mode = ShiftMode::fractional;
  o.inject = false;  // too small for the injected track; noise, masks and edges are the point
  const KitStack kit = make_kit(o);
  const EncodedStack stack = encode_kit(kit, Encoding::fp16);
  OutputPolicy all;
  all.collect_candidates = true;
  all.candidate_threshold = -std::numeric_limits<double>::infinity();
  auto reference = make_engine("reference");
  const SearchResult exact = search(*reference, stack, kit.bank, all);
  const FractionalRoutePlanes route = fractional_route_planes(stack, kit.bank);
  double largest_b = 0;
  for (const Candidate& c : exact.candidates) largest_b = std::max(largest_b, double(c.B));
  ASSERT_GT(exact.candidates.size(), 1000u);
  ASSERT_GT(largest_b, 0);
  // Double-precision transforms of planes whose values reach largest_b: 1e-9 of it is far above
  // their rounding and far below any difference of operator (a dropped covariance term is ~1e-2).
  const double tolerance_b = 1e-9 * largest_b, tolerance_a = 1e-9 * std::sqrt(largest_b);
  const std::size_t image = std::size_t(stack.width) * stack.height;
  double worst_a = 0, worst_b = 0;
  for (const Candidate& c : exact.candidates) {
    const std::size_t at = std::size_t(c.velocity) * image + std::size_t(c.y) * stack.width + c.x;
    worst_a = std::max(worst_a, std::abs(route.A[at] - double(c.A)));
    worst_b = std::max(worst_b, std::abs(route.B[at] - double(c.B)) / std::max(double(c.B), 1e-3 * largest_b));
  }
  // Candidates carry A and B rounded to float: compare at float resolution, relative to each B
  // (floored at 1e-3 of the largest, below which float's absolute resolution rules).
  EXPECT_LT(worst_a, 1e-6 * std::sqrt(largest_b) + tolerance_a);
  EXPECT_LT(worst_b, 1e-6 + tolerance_b / largest_b);
  EXPECT_THROW(fractional_route_planes(encode(compute_likelihood(kit.stack, false), Encoding::fp16), kit.bank), Error);
}

