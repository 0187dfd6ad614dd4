// Bad input gets a clear Error naming what is wrong, never a silent wrong digest.
#include <gtest/gtest.h>

#include <cmath>

#include "test_support.hpp"

using namespace shiftstack;
using namespace shiftstack::testing;

namespace {
KitStack tiny() {
  KitOptions o = workload("ci");
  o.exposures = 4, o.width = 64, o.height = 64, o.vx_count = 3, o.vy_count = 3;
  o.velocity_displacement = 4, o.curve_amplitude = 1;
  return make_kit(o);
}
void expect_error_containing(const std::function<void()>& f, const std::string& text) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one mentioning '" << text << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
  }
}
}  // namespace

TEST(BadInput, MismatchedShapes) {
  KitStack k = tiny();
  k.stack.exposures[2].variance = Image<float>(63, 64, 1.0f);
  expect_error_containing([&] { validate(k.stack); }, "exposure 2");
  k = tiny();
  k.stack.exposures[1].science = Image<float>(64, 65, 0.0f);
  expect_error_containing([&] { validate(k.stack); }, "64x65");
}

TEST(BadInput, NanInUnmaskedPixel) {
  KitStack k = tiny();
  k.stack.exposures[3].mask(10, 12) = 0;
  k.stack.exposures[3].science(10, 12) = std::nanf("");
  expect_error_containing([&] { compute_likelihood(k.stack); }, "x=10, y=12");
  k.stack.exposures[3].mask(10, 12) = 1;  // masked NaN is fine
  EXPECT_NO_THROW(compute_likelihood(k.stack));
}

TEST(BadInput, NonPositiveVariance) {
  KitStack k = tiny();
  k.stack.exposures[0].mask(5, 6) = 0;
  k.stack.exposures[0].variance(5, 6) = 0;
  expect_error_containing([&] { validate(k.stack); }, "variance <= 0");
  k.stack.exposures[0].variance(5, 6) = -1;
  expect_error_containing([&] { validate(k.stack); }, "exposure 0");
}

TEST(BadInput, AllMaskedExposure) {
  KitStack k = tiny();
  std::fill(k.stack.exposures[1].mask.pixels.begin(), k.stack.exposures[1].mask.pixels.end(), 1);
  expect_error_containing([&] { validate(k.stack); }, "every pixel is masked");
}

TEST(BadInput, EmptyStackAndBank) {
  expect_error_containing([] { validate(ExposureStack{}); }, "empty stack");
  KitStack k = tiny();
  EncodedStack s = encode_kit(k);
  MotionBank bank = k.bank;
  bank.vx_axis.clear();
  auto engine = make_engine("reference");
  expect_error_containing([&] { search(*engine, s, bank); }, "no velocities");
}

TEST(BadInput, SharedEpochsAreSeparateExposures) {
  // Two exposures at one epoch (snaps, or detectors on one grid) are valid input: each adds its
  // own samples. The search must give exactly what it gives when that epoch differs by a time
  // too small to move any shift across a rounding boundary.
  // (Exposure 1's epoch: an interior one, whose shifts sit at no rounding boundary; the extreme
  // epochs of the kit can give exact half-pixel shifts.)
  KitStack k = tiny();
  k.stack.exposures[2].epoch = k.stack.exposures[1].epoch;
  validate(k.stack);
  MotionBank shared = k.bank, apart = k.bank;
  shared.epochs[2] = shared.epochs[1];
  apart.epochs[2] = apart.epochs[1] + 1e-9;
  shared.curve_x[2] = apart.curve_x[2] = shared.curve_x[1];
  shared.curve_y[2] = apart.curve_y[2] = shared.curve_y[1];
  EncodedStack s = encode_kit(k);
  auto engine = make_engine("reference");
  const SearchResult a = search(*engine, s, shared), b = search(*engine, s, apart);
  EXPECT_EQ(a.digest.sumA, b.digest.sumA);
  EXPECT_EQ(a.digest.sumB, b.digest.sumB);
  EXPECT_EQ(a.digest.maxZ, b.digest.maxZ);
  EXPECT_EQ(a.digest.trials, b.digest.trials);
}

TEST(BadInput, UnsortedEpochsAreAllowed) {
  KitStack k = tiny();
  std::swap(k.stack.exposures[0], k.stack.exposures[3]);
  std::swap(k.bank.epochs[0], k.bank.epochs[3]);
  std::swap(k.bank.curve_x[0], k.bank.curve_x[3]);
  std::swap(k.bank.curve_y[0], k.bank.curve_y[3]);
  const KitStack sorted = tiny();
  auto engine = make_engine("reference");
  const Digest a = search(*engine, encode_kit(k), k.bank).digest;
  const Digest b = search(*engine, encode_kit(sorted), sorted.bank).digest;
  EXPECT_NEAR(a.sumA, b.sumA, 1e-9 * std::abs(b.sumA));
  EXPECT_EQ(a.maxZ, b.maxZ);
}

TEST(BadInput, BankStackMismatchAndRegion) {
  KitStack k = tiny();
  EncodedStack s = encode_kit(k);
  MotionBank bank = k.bank;
  bank.epochs.pop_back();
  auto engine = make_engine("reference");
  expect_error_containing([&] { search(*engine, s, bank); }, "3 epochs but the stack has 4");
  expect_error_containing([&] { search(*engine, s, k.bank, {}, Region{60, 0, 10, 10}); },
                          "not inside");
}

TEST(BadInput, OutputTooLargeForMemory) {
  KitStack k = tiny();
  EncodedStack s = encode_kit(k);
  OutputPolicy policy;
  policy.top_k = 1 << 30;  // far beyond any machine's memory for 64x64 origins
  auto engine = make_engine("reference");
  expect_error_containing([&] { search(*engine, s, k.bank, policy); }, "memory");
}

TEST(BadInput, CandidateOverflowIsAnError) {
  KitStack k = tiny();
  EncodedStack s = encode_kit(k);
  OutputPolicy policy;
  policy.collect_candidates = true;
  policy.candidate_threshold = -1e30;
  policy.max_candidates = 100;
  auto engine = make_engine("reference");
  expect_error_containing([&] { search(*engine, s, k.bank, policy); }, "max_candidates");
}

TEST(BadInput, FractionalWithoutCovariances) {
  KitStack k = tiny();
  EncodedStack s = encode(compute_likelihood(k.stack, false), Encoding::fp32);
  MotionBank bank = k.bank;
  bank.mode = ShiftMode::fractional;
  auto engine = make_engine("reference");
  expect_error_containing([&] { search(*engine, s, bank); }, "covariance");
}

TEST(BadInput, UnknownNames) {
  expect_error_containing([] { make_engine("warp-drive"); }, "known: reference");
  expect_error_containing([] { parse_encoding("int4"); }, "fp32, fp16 or int8");
  expect_error_containing([] { workload("huge"); }, "dense");
}
