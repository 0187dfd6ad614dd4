// The search pipeline with psi/phi computed and encoded on the GPU (likelihood_device) against
// the same pipeline on the CPU: same digest within SPEC 4's fp32 tolerance, the same candidates,
// and the injected source as the one candidate at its true origin. Skipped without a CUDA device.
#include <gtest/gtest.h>

#include <cmath>

#include "cuda/common/likelihood_gpu.hpp"
#include "shiftstack/error.hpp"
#include "shiftstack/io/config.hpp"
#include "shiftstack/run.hpp"
#include "shiftstack/synth.hpp"
#include "../test_io_support.hpp"

namespace shiftstack::io {
namespace {

using testing_support::kit_in_memory;

#define SKIP_WITHOUT_DEVICE() \
  if (!cuda::likelihood_gpu_available()) GTEST_SKIP() << "no CUDA device"

SearchConfig config_for(const KitStack& kit, const std::string& likelihood_device, const std::string& engine) {
  SearchConfig c = testing_support::kit_search_config(kit);
  c.likelihood_device = likelihood_device;
  c.engine = engine;
  c.filter.lh_level = 5.5;  // noise crossings and a crowd around the source to filter and merge
  c.stamp_radius = 3;
  return c;
}

// The same detections, trial by trial; light curves come from float planes that agree to float
// rounding (test_gpu_likelihood).
void expect_same_detections(const RunOutput& a, const RunOutput& b, const std::string& what) {
  EXPECT_EQ(a.threshold_crossings, b.threshold_crossings) << what;
  EXPECT_EQ(a.filter.kept, b.filter.kept) << what;
  EXPECT_EQ(a.filter.below_likelihood, b.filter.below_likelihood) << what;
  ASSERT_EQ(a.detections.size(), b.detections.size()) << what;
  for (std::size_t i = 0; i < a.detections.size(); ++i) {
    const Detection& g = a.detections[i];
    const Detection& c = b.detections[i];
    EXPECT_EQ(g.candidate.x, c.candidate.x) << what << " " << i;
    EXPECT_EQ(g.candidate.y, c.candidate.y) << what << " " << i;
    EXPECT_EQ(g.candidate.velocity, c.candidate.velocity) << what << " " << i;
    EXPECT_EQ(g.obs_valid, c.obs_valid) << what << " " << i;
    EXPECT_NEAR(g.likelihood, c.likelihood, 1e-5 * std::abs(c.likelihood)) << what << " " << i;
    EXPECT_EQ(g.cluster_size, c.cluster_size) << what << " " << i;
  }
}

void expect_same_run(const RunOutput& gpu, const RunOutput& cpu, const std::string& what) {
  const DigestComparison cmp = compare(cpu.digest, gpu.digest, DigestTolerance::fp32());
  EXPECT_TRUE(cmp.agrees) << what << ": " << (cmp.failures.empty() ? "" : cmp.failures.front());
  expect_same_detections(gpu, cpu, what);
}

TEST(GpuPipeline, SameCandidatesAsTheCpuLikelihood) {
  SKIP_WITHOUT_DEVICE();
  KitOptions o = workload("ci");
  o.seed = 12;
  const KitStack kit = make_kit(o);
  ASSERT_TRUE(kit.truth.injected);
  for (Encoding encoding : all_encodings())
    for (const std::string engine : {"cuda-fast", "cpu"}) {
      const std::string what = to_string(encoding) + " " + engine;
      RunOptions options;
      options.encoding = encoding;
      const RunOutput cpu = run_search(config_for(kit, "cpu", engine), kit_in_memory(kit), options);
      const RunOutput gpu = run_search(config_for(kit, "gpu", engine), kit_in_memory(kit), options);
      EXPECT_EQ(cpu.likelihood_device, "cpu") << what;
      EXPECT_EQ(gpu.likelihood_device, "gpu") << what;
      EXPECT_EQ(gpu.engine, engine) << what;
      expect_same_run(gpu, cpu, what);
      ASSERT_GE(gpu.detections.size(), 1u) << what;
      const Detection& best = gpu.detections.front();
      EXPECT_LE(std::abs(best.candidate.x - kit.truth.x), 1) << what;
      EXPECT_LE(std::abs(best.candidate.y - kit.truth.y), 1) << what;
    }
  // auto picks the GPU here (a device is present, integer shifts, not cpu_only).
  const RunOutput automatic = run_search(config_for(kit, "auto", "auto"), kit_in_memory(kit), RunOptions{});
  EXPECT_EQ(automatic.likelihood_device, "gpu");
  SearchConfig cpu_only = config_for(kit, "auto", "auto");
  cpu_only.cpu_only = true;
  EXPECT_EQ(run_search(cpu_only, kit_in_memory(kit), RunOptions{}).likelihood_device, "cpu");
}

// cuda-tree through the whole file pipeline, cubes encoded on the device: the candidates after
// the filter and the merge, their light-curve likelihoods and the crossings are cuda-fast's (its
// refined scores are exact, so only the digest's unrefined sums may differ); and auto picks it.
TEST(GpuPipeline, CudaTreeGivesCudaFastsCandidates) {
  SKIP_WITHOUT_DEVICE();
  KitOptions o = workload("ci");
  o.seed = 12;
  const KitStack kit = make_kit(o);
  ASSERT_TRUE(kit.truth.injected);
  for (Encoding encoding : all_encodings()) {
    const std::string what = to_string(encoding);
    RunOptions options;
    options.encoding = encoding;
    const RunOutput fast = run_search(config_for(kit, "gpu", "cuda-fast"), kit_in_memory(kit), options);
    const RunOutput tree = run_search(config_for(kit, "gpu", "cuda-tree"), kit_in_memory(kit), options);
    EXPECT_EQ(tree.engine, "cuda-tree") << what;
    EXPECT_EQ(tree.likelihood_device, "gpu") << what;
    // It searched the cube where the GPU encoded it: no copy to the host and back.
    for (const StageTime& stage : tree.stages)
      EXPECT_EQ(stage.detail.find("fetched from the GPU"), std::string::npos) << what << ": " << stage.detail;
    EXPECT_EQ(tree.digest.count, fast.digest.count) << what;
    EXPECT_NEAR(tree.digest.maxZ, fast.digest.maxZ, 1e-4) << what;
    EXPECT_EQ(tree.digest.argmax_x, fast.digest.argmax_x) << what;
    EXPECT_EQ(tree.digest.argmax_y, fast.digest.argmax_y) << what;
    EXPECT_EQ(tree.digest.argmax_velocity, fast.digest.argmax_velocity) << what;
    expect_same_detections(tree, fast, what);
    ASSERT_GE(tree.detections.size(), 1u) << what;
    EXPECT_LE(std::abs(tree.detections.front().candidate.x - kit.truth.x), 1) << what;
    EXPECT_LE(std::abs(tree.detections.front().candidate.y - kit.truth.y), 1) << what;
  }
  EXPECT_EQ(run_search(config_for(kit, "auto", "auto"), kit_in_memory(kit), RunOptions{}).engine, "cuda-tree");
}

TEST(GpuPipeline, FractionalShiftsStayOnTheCpu) {
  SKIP_WITHOUT_DEVICE();
  KitOptions o = workload("ci");
  o.exposures = 8;
  o.width = o.height = 40;
  o.vx_count = o.vy_count = 5;
  o.velocity_displacement = 4;
  o.shift_mode = ShiftMode::fractional;
  const KitStack kit = make_kit(o);
  SearchConfig gpu = config_for(kit, "gpu", "reference");
  EXPECT_THROW(run_search(gpu, kit_in_memory(kit), RunOptions{}), Error);
  const RunOutput automatic = run_search(config_for(kit, "auto", "reference"), kit_in_memory(kit), RunOptions{});
  EXPECT_EQ(automatic.likelihood_device, "cpu");
}

}  // namespace
}  // namespace shiftstack::io
