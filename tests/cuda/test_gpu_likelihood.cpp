// psi/phi on the GPU (cuda/likelihood_gpu.hpp) against the CPU: the planes against
// compute_likelihood within float rounding, the device encoder against encode() code for code,
// searches of the device-encoded cube against searches of the host-encoded one, and light curves
// against light_curve(). Skipped where no CUDA device exists.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <random>

#include "../test_support.hpp"
#include "cuda/common/likelihood_gpu.hpp"
#include "shiftstack/error.hpp"
#include "shiftstack/pipeline.hpp"

using namespace shiftstack;
using namespace shiftstack::testing;

namespace {

bool device_present() { return cuda::likelihood_gpu_available(); }

#define SKIP_WITHOUT_DEVICE() \
  if (!device_present()) GTEST_SKIP() << "no CUDA device"

// Random planes with masks, and a PSF that is either a Gaussian (separable) or random positive
// taps (not an outer product), so that both GPU kernels run; width/height small enough that the
// PSF overlaps every edge.
ExposureStack random_stack(int width, int height, bool separable, bool with_mask, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> unit(0, 1);
  ExposureStack s;
  for (int e = 0; e < 3; ++e) {
    Exposure x;
    x.science = Image<float>(width, height);
    x.variance = Image<float>(width, height);
    if (with_mask) x.mask = Image<std::uint8_t>(width, height);
    for (std::size_t p = 0; p < x.science.size(); ++p) {
      x.science.pixels[p] = unit(rng) * 40 - 20;
      x.variance.pixels[p] = 0.2f + 3 * unit(rng);
      if (with_mask && unit(rng) < 0.1f) {
        x.mask.pixels[p] = 1;
        x.science.pixels[p] = std::numeric_limits<float>::quiet_NaN();  // masked: never read
      }
    }
    if (separable) {
      x.psf = gaussian_psf(0.8 + 0.4 * e);
    } else {
      x.psf = Image<float>(5, 3 + 2 * e);
      double sum = 0;
      for (float& v : x.psf.pixels) sum += (v = unit(rng) + 0.05f);
      for (float& v : x.psf.pixels) v = float(v / sum);
    }
    x.epoch = 100 + 0.7 * e;
    x.throughput = 0.8 + 0.2 * e;
    s.exposures.push_back(std::move(x));
  }
  return s;
}

// Both sides sum the same double terms in the same order and round once to float, so they should
// agree exactly; the bound allows one float rounding step of the value (|x| FLT_EPSILON) plus the
// double sums' own rounding, far below float resolution of the plane's largest value.
void expect_planes_match(const LikelihoodStack& gpu, const LikelihoodStack& cpu, const std::string& what) {
  ASSERT_EQ(gpu.width, cpu.width) << what;
  ASSERT_EQ(gpu.height, cpu.height) << what;
  ASSERT_EQ(gpu.exposures, cpu.exposures) << what;
  ASSERT_EQ(gpu.psi.size(), cpu.psi.size()) << what;
  EXPECT_EQ(gpu.throughput, cpu.throughput) << what;
  EXPECT_EQ(gpu.epochs, cpu.epochs) << what;
  for (const auto& [name, g, c] : {std::tuple{"psi", &gpu.psi, &cpu.psi}, std::tuple{"phi", &gpu.phi, &cpu.phi}}) {
    double scale = 0;
    for (float v : *c) scale = std::max(scale, double(std::abs(v)));
    std::size_t exact = 0, worst_index = 0;
    double worst = 0;
    for (std::size_t i = 0; i < c->size(); ++i) {
      const double cv = (*c)[i], gv = (*g)[i];
      ASSERT_TRUE(std::isfinite(gv)) << what << " " << name << " index " << i;
      const double tolerance = FLT_EPSILON * std::abs(cv) + 1e-12 * scale;
      const double difference = std::abs(gv - cv);
      exact += difference == 0;
      if (difference / (tolerance > 0 ? tolerance : 1) > worst) {
        worst = difference / (tolerance > 0 ? tolerance : 1);
        worst_index = i;
      }
      ASSERT_LE(difference, tolerance) << what << " " << name << " index " << i << ": gpu " << gv << " cpu " << cv;
    }
    std::printf("[ info ] %s %s: %zu of %zu values bit-identical, worst |d|/tolerance %.3g at %zu\n", what.c_str(),
                name, exact, c->size(), worst, worst_index);
  }
}

TEST(GpuLikelihood, MatchesTheCpuWithinFloatRounding) {
  SKIP_WITHOUT_DEVICE();
  expect_planes_match(cuda::compute_likelihood_gpu(random_stack(37, 23, true, true, 1)),
                      compute_likelihood(random_stack(37, 23, true, true, 1)), "separable, masked");
  expect_planes_match(cuda::compute_likelihood_gpu(random_stack(41, 19, false, true, 2)),
                      compute_likelihood(random_stack(41, 19, false, true, 2)), "general, masked");
  expect_planes_match(cuda::compute_likelihood_gpu(random_stack(29, 31, true, false, 3)),
                      compute_likelihood(random_stack(29, 31, true, false, 3)), "separable, no mask");
  // Images narrower and shorter than the PSF: every tap range is clipped at both ends.
  expect_planes_match(cuda::compute_likelihood_gpu(random_stack(3, 2, true, true, 4)),
                      compute_likelihood(random_stack(3, 2, true, true, 4)), "tiny, separable");
  expect_planes_match(cuda::compute_likelihood_gpu(random_stack(2, 3, false, false, 5)),
                      compute_likelihood(random_stack(2, 3, false, false, 5)), "tiny, general");
  const KitStack kit = make_kit(small_kit(7));
  expect_planes_match(cuda::compute_likelihood_gpu(kit.stack), compute_likelihood(kit.stack), "ci kit");
}

TEST(GpuLikelihood, RejectsWhatComputeLikelihoodRejects) {
  SKIP_WITHOUT_DEVICE();
  ExposureStack bad = random_stack(16, 12, true, false, 8);
  bad.exposures[1].variance(3, 4) = -1.0f;
  std::string cpu_message, gpu_message;
  try {
    compute_likelihood(bad);
  } catch (const Error& e) {
    cpu_message = e.what();
  }
  try {
    cuda::DeviceLikelihood device(bad);
  } catch (const Error& e) {
    gpu_message = e.what();
  }
  EXPECT_FALSE(cpu_message.empty());
  EXPECT_EQ(gpu_message, cpu_message);
}

// encode()'s payload with acquire_stack()'s cleaning applied: fp32/fp16 pairs whose phi does not
// decode as > 0 become (0, 0). The device encoder stores exactly that.
EncodedStack cleaned(EncodedStack s) {
  const std::size_t pairs = s.plane_size() * std::size_t(s.exposures);
  for (std::size_t i = 0; i < pairs; ++i) {
    if (s.encoding == Encoding::fp32 && !(s.fp32[2 * i + 1] > 0.0f)) s.fp32[2 * i] = s.fp32[2 * i + 1] = 0.0f;
    if (s.encoding == Encoding::fp16 && !(half_to_float(s.fp16[2 * i + 1]) > 0.0f)) s.fp16[2 * i] = s.fp16[2 * i + 1] = 0;
  }
  return s;
}

KitStack bright_kit() {
  // A source far above int8's +-10.5 sigma range, so that the exception path is exercised.
  KitOptions o = small_kit(11);
  o.injected_snr = 3000;
  return make_kit(o);
}

TEST(GpuLikelihood, DeviceEncodingMatchesTheCpuEncoder) {
  SKIP_WITHOUT_DEVICE();
  const KitStack kit = bright_kit();
  const cuda::DeviceLikelihood device(kit.stack);
  const LikelihoodStack planes = device.download();
  for (Encoding encoding : all_encodings()) {
    SCOPED_TRACE(to_string(encoding));
    const EncodedStack reference = cleaned(encode(planes, encoding));
    EncodedStack shell = device.encode(encoding);
    EXPECT_TRUE(shell.fp32.empty() && shell.fp16.empty() && shell.int8.empty()) << "no host payload expected";
    EXPECT_EQ(shell.width, reference.width);
    EXPECT_EQ(shell.height, reference.height);
    EXPECT_EQ(shell.exposures, reference.exposures);
    EXPECT_NE(shell.id, reference.id);
    EXPECT_EQ(shell.psi_weight, reference.psi_weight);
    EXPECT_EQ(shell.phi_weight, reference.phi_weight);
    EXPECT_EQ(shell.throughput, reference.throughput);
    EXPECT_EQ(shell.saturated, reference.saturated);
    ASSERT_EQ(shell.exceptions.size(), reference.exceptions.size());
    for (std::size_t i = 0; i < shell.exceptions.size(); ++i) {
      EXPECT_EQ(shell.exceptions[i].exposure, reference.exceptions[i].exposure);
      EXPECT_EQ(shell.exceptions[i].pixel, reference.exceptions[i].pixel);
      EXPECT_EQ(shell.exceptions[i].psi, reference.exceptions[i].psi);
    }
    if (encoding == Encoding::int8) {
      EXPECT_GT(reference.exceptions.size(), 0u) << "the bright source should saturate";
    }
    cuda::download_device_cube(shell);
    EXPECT_EQ(shell.fp32, reference.fp32);
    EXPECT_EQ(shell.fp16, reference.fp16);
    EXPECT_EQ(shell.int8, reference.int8);
    cuda::release_device_cube();
  }
}

OutputPolicy listing(double threshold) {
  OutputPolicy p;
  p.collect_candidates = true;
  p.candidate_threshold = threshold;
  return p;
}

void expect_same_search(const SearchResult& a, const SearchResult& b, const std::string& what) {
  EXPECT_EQ(a.digest.sumA, b.digest.sumA) << what;
  EXPECT_EQ(a.digest.sumB, b.digest.sumB) << what;
  EXPECT_EQ(a.digest.maxZ, b.digest.maxZ) << what;
  EXPECT_EQ(a.digest.argmax_x, b.digest.argmax_x) << what;
  EXPECT_EQ(a.digest.argmax_y, b.digest.argmax_y) << what;
  EXPECT_EQ(a.digest.argmax_velocity, b.digest.argmax_velocity) << what;
  EXPECT_EQ(a.digest.count, b.digest.count) << what;
  ASSERT_EQ(a.candidates.size(), b.candidates.size()) << what;
  for (std::size_t i = 0; i < a.candidates.size(); ++i) {
    EXPECT_EQ(a.candidates[i].x, b.candidates[i].x) << what;
    EXPECT_EQ(a.candidates[i].y, b.candidates[i].y) << what;
    EXPECT_EQ(a.candidates[i].velocity, b.candidates[i].velocity) << what;
    EXPECT_EQ(a.candidates[i].Z, b.candidates[i].Z) << what;
  }
}

TEST(GpuLikelihood, SearchOfTheDeviceCubeEqualsTheHostCube) {
  SKIP_WITHOUT_DEVICE();
  const KitStack kit = bright_kit();
  const cuda::DeviceLikelihood device(kit.stack);
  const LikelihoodStack planes = device.download();
  // A region away from the edges makes the driver ask for a rectangle smaller than the image,
  // which is cut out of the device-encoded cube on the device.
  const Region whole{}, inner{30, 25, 50, 60};
  for (Encoding encoding : all_encodings())
    for (const std::string engine_name : {"cuda-fast", "cuda-serial"})
      for (const Region& region : {whole, inner}) {
        const std::string what = to_string(encoding) + " " + engine_name + (region.width ? " inner" : " whole");
        auto engine = make_engine(engine_name);
        const EncodedStack host = encode(planes, encoding);
        const SearchResult from_host = search(*engine, host, kit.bank, listing(4.0), region);
        const EncodedStack shell = device.encode(encoding);
        const SearchResult from_device = search(*engine, shell, kit.bank, listing(4.0), region);
        expect_same_search(from_device, from_host, what);
        EXPECT_GT(from_device.candidates.size(), 0u) << what;
        cuda::release_device_cube();
      }
}

TEST(GpuLikelihood, DeviceEncodedSearchAgreesWithTheReferenceEngine) {
  SKIP_WITHOUT_DEVICE();
  // An SNR 8 kit: SPEC 4's absolute maxZ tolerance (1e-4) is meant for scores of that size (at
  // the bright kit's Z ~ 3000 FP32 sums alone differ by more).
  const KitStack kit = make_kit(small_kit(11));
  auto reference = make_engine("reference");
  const SearchResult expected = search(*reference, encode(compute_likelihood(kit.stack), Encoding::fp32), kit.bank);
  const cuda::DeviceLikelihood device(kit.stack);
  auto fast = make_engine("cuda-fast");
  const EncodedStack shell = device.encode(Encoding::fp32);
  const DigestComparison cmp = compare(expected.digest, search(*fast, shell, kit.bank).digest, DigestTolerance::fp32());
  EXPECT_TRUE(cmp.agrees) << (cmp.failures.empty() ? "" : cmp.failures.front());
  cuda::release_device_cube();
}

TEST(GpuLikelihood, ReleasedDeviceCubeIsAnErrorNotAZeroCube) {
  SKIP_WITHOUT_DEVICE();
  const KitStack kit = make_kit(small_kit(5));
  const cuda::DeviceLikelihood device(kit.stack);
  const EncodedStack shell = device.encode(Encoding::fp16);
  cuda::release_device_cube();
  auto engine = make_engine("cuda-fast");
  EXPECT_THROW(search(*engine, shell, kit.bank), Error);
}

TEST(GpuLikelihood, LightCurvesEqualTheCpuLightCurves) {
  SKIP_WITHOUT_DEVICE();
  const KitStack kit = make_kit(small_kit(13));
  const cuda::DeviceLikelihood device(kit.stack);
  const LikelihoodStack planes = device.download();
  // Trajectories that leave the image too: origins at the corners and every velocity.
  std::vector<Candidate> candidates;
  for (int velocity = 0; velocity < int(kit.bank.size()); velocity += 7)
    for (const auto& [x, y] : {std::pair{0, 0}, std::pair{kit.stack.width() - 1, 5}, std::pair{60, 64},
                               std::pair{kit.truth.x, kit.truth.y}}) {
      Candidate c{};
      c.x = x;
      c.y = y;
      c.velocity = velocity;
      candidates.push_back(c);
    }
  const std::vector<LightCurve> curves = device.light_curves(kit.bank, candidates, 3, candidates.size());
  ASSERT_EQ(curves.size(), candidates.size() - 3);
  std::size_t invalid = 0;
  for (std::size_t i = 0; i < curves.size(); ++i) {
    const Candidate& c = candidates[3 + i];
    const LightCurve expected = light_curve(planes, kit.bank, c.x, c.y, std::size_t(c.velocity));
    EXPECT_EQ(curves[i].psi, expected.psi) << i;
    EXPECT_EQ(curves[i].phi, expected.phi) << i;
    EXPECT_EQ(curves[i].valid, expected.valid) << i;
    for (auto v : expected.valid) invalid += !v;
  }
  EXPECT_GT(invalid, 0u) << "some samples should fall outside the image or on masks";
}

}  // namespace
