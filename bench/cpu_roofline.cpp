// Ceilings of one CPU core for the `cpu` engine's inner loop (docs/cpu-engine.md), per SIMD
// target: FMAs on registers, and the engine's own access pattern (one velocity: per exposure a
// broadcast weight and `kVectors` loads + FMAs at an arbitrary pair offset into L1-resident rows),
// with fp32 pairs at arbitrary 8-byte offsets (as real shifts give), the same at 64-byte-aligned
// offsets (what the cache-line splits cost), and IEEE halves (fp16 and int8 storage). Rates are per thread CPU second, so a busy machine slows them less than wall time.
//
//   shiftstack_cpu_roofline [target ...]     (default: every target this processor runs)
#include <time.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "bench/cpu_roofline.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#ifndef SHIFTSTACK_ROOFLINE_ONCE
#define SHIFTSTACK_ROOFLINE_ONCE
namespace roofline {
double thread_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}
// The engine's working set for one strip row and one vy on the KBMOD shape: 20 exposures, rows
// of 64 + 38 pairs; offsets up to 38 pairs.
// Rows are 176 pairs (a multiple of 64 bytes in fp32 and in halves) from a 64-byte boundary.
constexpr int kExposures = 20, kRowPairs = 176, kMaxShift = 38, kVelocities = 41;
constexpr int kVectors = 8;  // accumulators, as the engine's integer strips
// Core clock from a chain of dependent integer adds (one cycle each), in Hz; 0 off x86.
double clock_hz() {
#if defined(__x86_64__)
  const long iterations = 50000000;
  long x = 0;
  const double t0 = thread_seconds();
  for (long i = 0; i < iterations; ++i)
    asm volatile("add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\t"
                 "add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0" : "+r"(x));
  return 8.0 * iterations / (thread_seconds() - t0);
#else
  return 0;
#endif
}
struct Rates {
  const char* target;
  int lanes;
  double fma_per_s, fp32_samples_per_s, fp32_aligned_samples_per_s, fp16_samples_per_s;
};
}  // namespace roofline
#endif

HWY_BEFORE_NAMESPACE();
namespace roofline::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;
constexpr int kLanes = int(hn::MaxLanes(DF()));

HWY_INLINE VF load(const float* p) { return hn::LoadU(DF(), p); }
HWY_INLINE VF load(const std::uint16_t* p) {
  return hn::PromoteTo(DF(), hn::LoadU(hn::Rebind<hwy::float16_t, DF>(), reinterpret_cast<const hwy::float16_t*>(p)));
}

// FMAs per second on 12 independent register accumulators (enough to hide the FMA latency).
double fma_rate() {
  const DF d;
  VF acc[12];
  for (int k = 0; k < 12; ++k) acc[k] = hn::Set(d, float(k));
  const VF m = hn::Set(d, 0.999999f), a = hn::Set(d, 1e-7f);
  const long iterations = 20000000;
  const double t0 = thread_seconds();
  for (long i = 0; i < iterations; ++i) {
#pragma GCC unroll 12
    for (int k = 0; k < 12; ++k) acc[k] = hn::MulAdd(acc[k], m, a);
  }
  const double t = thread_seconds() - t0;
  float sink = 0;
  for (int k = 0; k < 12; ++k) sink += hn::GetLane(acc[k]);
  if (sink == 12345.f) std::puts("");  // keeps the loop
  return 12.0 * iterations / t;
}

// Paired samples per second of the engine's accumulation pattern; `align` rounds each offset
// down to a multiple of that many pairs (1: arbitrary 8-byte offsets).
template <class Code>
double pattern_rate(int align) {
  const DF d;
  std::vector<Code> storage(std::size_t(kExposures) * kRowPairs * 2 + 64, Code(1));
  Code* rows = storage.data();
  while (reinterpret_cast<std::uintptr_t>(rows) % 64) ++rows;
  std::vector<std::int32_t> offset(std::size_t(kVelocities) * kExposures);
  std::mt19937 rng(7);
  for (auto& o : offset) o = int(rng() % kMaxShift) / align * align;
  for (std::size_t i = 0; i < offset.size(); ++i) offset[i] += int(i % kExposures) * kRowPairs;
  float weights[2 * kExposures];
  for (int i = 0; i < 2 * kExposures; ++i) weights[i] = 1e-6f * float(i + 1);
  const long sweeps = 40000;
  VF sink = hn::Zero(d);
  const double t0 = thread_seconds();
  for (long s = 0; s < sweeps; ++s)
    for (int v = 0; v < kVelocities; ++v) {
      VF acc[kVectors];
      for (int k = 0; k < kVectors; ++k) acc[k] = hn::Zero(d);
      const std::int32_t* o = &offset[std::size_t(v) * kExposures];
      for (int e = 0; e < kExposures; ++e) {
        const Code* p = rows + 2 * std::ptrdiff_t(o[e]);
        std::uint64_t bits;
        std::memcpy(&bits, &weights[2 * e], sizeof bits);
        const VF w = kLanes > 1 ? hn::BitCast(d, hn::Set(hn::Repartition<std::uint64_t, DF>(), bits))
                                : hn::Set(d, weights[2 * e]);
#pragma GCC unroll 16
        for (int k = 0; k < kVectors; ++k) acc[k] = hn::MulAdd(w, load(p + kLanes * k), acc[k]);
      }
      for (int k = 0; k < kVectors; ++k) sink = hn::Add(sink, acc[k]);
    }
  const double t = thread_seconds() - t0;
  if (hn::GetLane(sink) == 12345.f) std::puts("");
  const double pairs_per_vector = kLanes > 1 ? kLanes / 2.0 : 0.5;
  return double(sweeps) * kVelocities * kExposures * kVectors * pairs_per_vector / t;
}

// Best of three: other work on the machine only ever lowers a rate.
template <class F>
double best_of_three(F f) {
  return std::max({f(), f(), f()});
}

Rates measure() {
  return {hwy::TargetName(HWY_TARGET), kLanes, best_of_three(fma_rate),
          best_of_three([] { return pattern_rate<float>(1); }),
          best_of_three([] { return pattern_rate<float>(8); }),
          best_of_three([] { return pattern_rate<std::uint16_t>(1); })};
}
}  // namespace roofline::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace roofline {
HWY_EXPORT(measure);
}

int main(int argc, char** argv) {
  std::vector<std::string> wanted(argv + 1, argv + argc);
  const std::int64_t supported = hwy::SupportedTargets();
  double clock = 0;
  for (int i = 0; i < 3; ++i) clock = std::max(clock, roofline::clock_hz());
  std::printf("core clock (dependent integer adds, best of 3): %.3g GHz\n", 1e-9 * clock);
  std::printf("%-8s %5s %14s %18s %18s %18s\n", "target", "lanes", "FMA/s", "fp32 samples/s",
              "aligned samples/s", "fp16 samples/s");
  // A probe (not the library) may steer Highway's dispatch globally: one target at a time.
  for (std::int64_t targets = supported & HWY_TARGETS; targets; targets &= targets - 1) {
    const std::int64_t target = targets & -targets;
    const std::string name = hwy::TargetName(target);
    if (!wanted.empty() && std::find(wanted.begin(), wanted.end(), name) == wanted.end()) continue;
    hwy::SetSupportedTargetsForTest(target);
    const roofline::Rates r = HWY_DYNAMIC_DISPATCH(roofline::measure)();
    std::printf("%-8s %5d %14.4g %18.4g %18.4g %18.4g\n", r.target, r.lanes, r.fma_per_s,
                r.fp32_samples_per_s, r.fp32_aligned_samples_per_s, r.fp16_samples_per_s);
    std::fflush(stdout);
  }
  hwy::SetSupportedTargetsForTest(0);
  return 0;
}
#endif
