// psi/phi and the neighbour covariances against brute-force sums written straight from SPEC 1-2.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "shiftstack/likelihood.hpp"
#include "shiftstack/synth.hpp"

using namespace shiftstack;

namespace {

ExposureStack tiny_stack(bool separable_psf, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> unit(0, 1);
  ExposureStack s;
  for (int e = 0; e < 2; ++e) {
    Exposure x;
    x.science = Image<float>(9, 7);
    x.variance = Image<float>(9, 7);
    x.mask = Image<std::uint8_t>(9, 7);
    for (std::size_t p = 0; p < x.science.size(); ++p) {
      x.science.pixels[p] = unit(rng) * 10 - 5;
      x.variance.pixels[p] = 0.5f + unit(rng);
      x.mask.pixels[p] = unit(rng) < 0.15f;
    }
    if (separable_psf) {
      x.psf = gaussian_psf(0.9 + 0.3 * e);
    } else {
      x.psf = Image<float>(3, 5);
      double sum = 0;
      for (float& v : x.psf.pixels) sum += (v = unit(rng) + 0.1f);
      for (float& v : x.psf.pixels) v = float(v / sum);
    }
    x.epoch = 10 + e;
    s.exposures.push_back(x);
  }
  return s;
}

double weight(const Exposure& x, int px, int py) {
  if (!x.science.contains(px, py) || x.mask(px, py)) return 0;
  return 1.0 / x.variance(px, py);
}
double psf_at(const Image<float>& psf, int dx, int dy) {
  const int rx = psf.width / 2, ry = psf.height / 2;
  return (std::abs(dx) <= rx && std::abs(dy) <= ry) ? psf(dx + rx, dy + ry) : 0.0;
}

// Cov(psi(a), psi(b)) = sum_r P(r-a) P(r-b) w(r), brute force over the whole image.
double brute_cov(const Exposure& x, int ax, int ay, int bx, int by) {
  double sum = 0;
  for (int ry = 0; ry < x.science.height; ++ry)
    for (int rx = 0; rx < x.science.width; ++rx)
      sum += psf_at(x.psf, rx - ax, ry - ay) * psf_at(x.psf, rx - bx, ry - by) * weight(x, rx, ry);
  return sum;
}

void check_against_brute_force(bool separable) {
  const ExposureStack s = tiny_stack(separable, separable ? 3 : 4);
  const LikelihoodStack L = compute_likelihood(s, true);
  for (int e = 0; e < s.size(); ++e) {
    const Exposure& x = s.exposures[e];
    for (int y = 0; y < L.height; ++y)
      for (int xx = 0; xx < L.width; ++xx) {
        double psi = 0;
        for (int ry = 0; ry < L.height; ++ry)
          for (int rx = 0; rx < L.width; ++rx)
            if (weight(x, rx, ry) > 0)
              psi += psf_at(x.psf, rx - xx, ry - y) * x.science(rx, ry) * weight(x, rx, ry);
        const std::size_t i = L.index(e, xx, y);
        EXPECT_NEAR(L.psi[i], psi, 1e-5 * (1 + std::abs(psi))) << "psi e=" << e << " x=" << xx << " y=" << y;
        const double phi = brute_cov(x, xx, y, xx, y);
        EXPECT_NEAR(L.phi[i], phi, 1e-6 * (1 + phi)) << "phi e=" << e << " x=" << xx << " y=" << y;
        EXPECT_NEAR(L.cov_right[i], brute_cov(x, xx, y, xx + 1, y), 1e-6);
        EXPECT_NEAR(L.cov_down[i], brute_cov(x, xx, y, xx, y + 1), 1e-6);
        EXPECT_NEAR(L.cov_diag[i], brute_cov(x, xx, y, xx + 1, y + 1), 1e-6);
        EXPECT_NEAR(L.cov_antidiag[i], brute_cov(x, xx + 1, y, xx, y + 1), 1e-6);
      }
  }
}

}  // namespace

TEST(Likelihood, SeparablePsfMatchesBruteForce) { check_against_brute_force(true); }
TEST(Likelihood, GeneralPsfMatchesBruteForce) { check_against_brute_force(false); }

TEST(Likelihood, MaskedNanScienceIsIgnored) {
  ExposureStack s = tiny_stack(true, 5);
  const LikelihoodStack before = compute_likelihood(s);
  for (auto& x : s.exposures)
    for (std::size_t p = 0; p < x.science.size(); ++p)
      if (x.mask.pixels[p]) x.science.pixels[p] = std::nanf("");
  const LikelihoodStack after = compute_likelihood(s);
  EXPECT_EQ(before.psi, after.psi);
  EXPECT_EQ(before.phi, after.phi);
}

TEST(Likelihood, GaussianPsfIsNormalizedAndOdd) {
  for (double sigma : {0.55, 1.0, 1.65}) {
    const Image<float> psf = gaussian_psf(sigma);
    EXPECT_EQ(psf.width % 2, 1);
    double sum = 0;
    for (float v : psf.pixels) sum += v;
    EXPECT_NEAR(sum, 1.0, 1e-6);
  }
}
