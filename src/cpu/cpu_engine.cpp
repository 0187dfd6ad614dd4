// The `cpu` engine: the fast CPU search, FP32 accumulation over all cores, SIMD along x on the
// best instruction set the processor has (or the one it is asked for).
//
// A search copies each band of origin rows once into a padded, cleaned buffer (cpu_layout.cpp),
// cuts the origins into strips along x and pairs of rows (work items), and runs the items on all
// cores through the chosen target's kernels (cpu_kernels.cpp). Work items keep their own partial
// digests, merged in item order, so the digest does not depend on the thread count.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <type_traits>

#include "core/engine_registry.hpp"
#include "cpu/cpu_layout.hpp"
#include "shiftstack/cpu_engine.hpp"
#include "shiftstack/error.hpp"

namespace shiftstack {

void register_cpu_fast_engine();

namespace {

using namespace cpu_fast;

// What a band's contents depend on: repeated searches of the same stack over the same region
// and shift extents (a benchmark, a policy change) reuse the padded copy instead of rebuilding it.
struct BandKey {
  std::uint64_t stack_id = 0;
  int x0 = 0, y0 = 0, rows = 0, min_x = 0, max_x = 0, min_y = 0, max_y = 0, padded_width = 0;
  bool fractional = false;
  bool operator==(const BandKey&) const = default;
};

std::string upper(std::string s) {
  for (char& ch : s) ch = char(std::toupper(static_cast<unsigned char>(ch)));
  return s;
}

std::string joined_targets() {
  std::string out;
  for (const std::string& name : cpu_engine_targets()) out += (out.empty() ? "" : ", ") + name;
  return out;
}

const Kernels& kernels_named(const std::string& name) {
  for (const Kernels* k : runnable_kernels())
    if (upper(name) == k->name) return *k;
  throw Error("cpu engine: SIMD target '" + name + "' is not compiled into this binary or not supported by " +
              "this processor; available here: " + joined_targets());
}

void fill_observation_counts(const EncodedStack& s, const MotionBank& bank, std::vector<Candidate>& list) {
#pragma omp parallel for schedule(dynamic, 256)
  for (std::size_t i = 0; i < list.size(); ++i)
    if (list[i].velocity >= 0)
      list[i].obs_count = observation_count(s, bank, list[i].x, list[i].y, std::size_t(list[i].velocity));
}

// One search at a time per engine object: the band cache below is its only state.
class CpuEngine final : public Engine {
 public:
  explicit CpuEngine(const Kernels& kernels) : kernels_(kernels) {}
  std::string name() const override { return "cpu"; }
  std::string unsupported_reason(const SearchInput&) const override { return {}; }
  const char* target() const { return kernels_.name; }

  SearchResult search(const SearchInput& in) override {
    switch (in.stack->encoding) {
      case Encoding::fp32: return run<float, float>(in, kernels_.scan_fp32);
      case Encoding::fp16: return run<std::uint16_t, std::uint16_t>(in, kernels_.scan_fp16);
      case Encoding::int8: return run<std::int8_t, std::uint16_t>(in, kernels_.scan_fp16);
    }
    throw Error("cpu engine: unknown encoding");
  }

 private:
  template <class Source, class Code>
  SearchResult run(const SearchInput& in, ScanItem<Code> scan) {
    const EncodedStack& s = *in.stack;
    Context c{&s, in.bank, in.region, in.policy, digest_threshold(in), make_taps(*in.bank, s), {}, {}};
    const bool fractional = c.taps.fractional;
    const int lanes = kernels_.lanes;
    const std::vector<Strip> strips = make_strips(
        c.region.width, fractional ? kernels_.fractional_vectors : kernels_.integer_vectors, lanes);
    const Strip& last = strips.back();
    const int computed_width = last.lx + strip_origins(last, lanes);
    const std::size_t bytes_per_pair = 2 * sizeof(Code) + (fractional ? 4 * sizeof(float) : 0);
    c.layout = make_layout(c.taps, c.region, computed_width, bytes_per_pair);
    c.exposure_weights.resize(2 * s.exposures);
    for (int e = 0; e < s.exposures; ++e) {
      c.exposure_weights[2 * e] = s.psi_weight[e];
      c.exposure_weights[2 * e + 1] = s.phi_weight[e];
    }

    SearchResult result;
    result.digest.z_thr = c.z_thr;
    const int k = in.policy.top_k;
    if (k > 0) result.top_k.resize(std::size_t(c.region.count()) * k);
    std::atomic<std::int64_t> candidate_total{0};
    const float candidate_threshold = float(in.policy.candidate_threshold);
    ScanShared shared{&c, &candidate_total, float(c.z_thr),
                      candidate_threshold - kFilterSlack * std::max(1.0f, std::abs(candidate_threshold)),
                      &result.top_k};
    if (!std::isfinite(shared.candidate_filter)) shared.candidate_filter = candidate_threshold;

    Band<Code>& band = cached_band<Code>();
    const std::int64_t velocities = std::int64_t(in.bank->size());
    ProgressCounter progress(in.policy.progress, c.region.count() * velocities);
    for (int y0 = 0; y0 < c.region.height; y0 += c.layout.band_rows) {
      const int rows = std::min(c.layout.band_rows, c.region.height - y0);
      const BandKey key{s.id, c.region.x0, c.region.y0 + y0, rows, c.taps.min_x, c.taps.max_x,
                        c.taps.min_y, c.taps.max_y, c.layout.padded_width, fractional};
      if (!(cached_ && key == cached_key_)) {
        cached_ = false;
        band.y0 = key.y0;
        band.rows = rows;
        fill_band<Source>(c, band);
        // Only a band covering the whole region stays valid for the next search.
        cached_ = rows == c.region.height;
        cached_key_ = key;
      }
      const int row_groups = (band.rows + kRowsPerItem - 1) / kRowsPerItem;
      const int items = int(strips.size()) * row_groups;
      std::vector<ItemResult> item_results(items);
#pragma omp parallel
      {
        TopK top;
        top.k = k;
#pragma omp for schedule(dynamic, 1)
        for (int item = 0; item < items; ++item) {
          if (in.policy.stop_requested()) continue;  // a stop request skips the remaining items
          const Strip& strip = strips[item % strips.size()];
          const int ly0 = (item / int(strips.size())) * kRowsPerItem;
          const int ly1 = std::min(band.rows, ly0 + kRowsPerItem);
          ItemResult& out = item_results[item];
          out.best.maxZ = -1e300;
          scan(shared, band, strip, ly0, ly1, out, k > 0 ? &top : nullptr);
          // Strips past the region's right edge compute padding origins: count only real ones.
          const int origins = std::max(0, std::min(strip_origins(strip, lanes), c.region.width - strip.lx));
          progress.add(std::int64_t(ly1 - ly0) * origins * velocities);
        }
      }
      if (in.policy.stop_requested()) throw Cancelled("cpu engine: search stopped on request");
      for (const ItemResult& item : item_results) {
        Digest part;
        part.sumA = part.sumB = 0;
        for (int lane = 0; lane < kMaxLanes; ++lane) {
          part.sumA += item.sumA[lane];
          part.sumB += item.sumB[lane];
        }
        part.scored = item.scored;
        part.count = item.count;
        part.maxZ = item.best.maxZ;
        part.argmax_x = item.best.argmax_x;
        part.argmax_y = item.best.argmax_y;
        part.argmax_velocity = item.best.argmax_velocity;
        result.digest.merge(part);
        result.candidates.insert(result.candidates.end(), item.candidates.begin(), item.candidates.end());
      }
    }
    progress.finish();
    const std::int64_t total = candidate_total.load();
    require(total <= in.policy.max_candidates,
            "candidate list of " + std::to_string(total) + " trials exceeds max_candidates (" +
                std::to_string(in.policy.max_candidates) +
                "): raise the candidate threshold or the limit");
    std::sort(result.candidates.begin(), result.candidates.end(), [](const Candidate& a, const Candidate& b) {
      if (a.velocity != b.velocity) return a.velocity < b.velocity;
      if (a.y != b.y) return a.y < b.y;
      return a.x < b.x;
    });
    fill_observation_counts(s, *in.bank, result.candidates);
    fill_observation_counts(s, *in.bank, result.top_k);
    return result;
  }

  template <class Code>
  Band<Code>& cached_band() {
    if constexpr (std::is_same_v<Code, float>) return band_fp32_;
    else return band_fp16_;
  }

  const Kernels& kernels_;
  BandKey cached_key_;
  bool cached_ = false;
  Band<float> band_fp32_;
  Band<std::uint16_t> band_fp16_;  // fp16 payloads and int8 codes
};

}  // namespace

std::vector<std::string> cpu_engine_targets() {
  std::vector<std::string> names;
  for (const Kernels* k : runnable_kernels()) names.push_back(k->name);
  return names;
}

std::unique_ptr<Engine> make_cpu_engine(const std::string& target) {
  std::string name = target;
  if (name.empty())
    if (const char* env = std::getenv("SHIFTSTACK_CPU_TARGET")) name = env;
  if (name.empty()) return std::make_unique<CpuEngine>(best_kernels());
  try {
    return std::make_unique<CpuEngine>(kernels_named(name));
  } catch (const Error& e) {
    if (!target.empty()) throw;
    throw Error(std::string(e.what()) + " (from SHIFTSTACK_CPU_TARGET)");
  }
}

std::string cpu_engine_target(const Engine& engine) {
  const auto* cpu = dynamic_cast<const CpuEngine*>(&engine);
  return cpu ? cpu->target() : "";
}

void register_cpu_fast_engine() {
  register_engine({"cpu",
                   "fast CPU search: all cores, SIMD along x (best instruction set found at run time), "
                   "padded cleaned payload, FP32 sums",
                   false, 10, [] { return make_cpu_engine(); }, nullptr});
}

}  // namespace shiftstack
