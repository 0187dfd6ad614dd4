#include <chrono>

#include "core/engine_registry.hpp"
#include "shiftstack/error.hpp"
#include "shiftstack/search.hpp"

namespace shiftstack {

namespace {
std::vector<EngineInfo>& registry() {
  static std::vector<EngineInfo> list;
  return list;
}
}  // namespace

void register_engine(EngineInfo info) {
  for (const auto& e : registry())
    require(e.name != info.name, "engine '" + info.name + "' registered twice");
  if (!info.available) info.available = [] { return true; };
  registry().push_back(std::move(info));
}

const std::vector<EngineInfo>& engines() {
  static const bool registered = [] {
    register_cpu_engines();
    register_tree_engines();
#ifdef SHIFTSTACK_HAVE_CUDA
    register_cuda_engines();
#endif
    return true;
  }();
  (void)registered;
  return registry();
}

const EngineInfo* find_engine(const std::string& name) {
  for (const auto& e : engines())
    if (e.name == name) return &e;
  return nullptr;
}

std::unique_ptr<Engine> make_engine(const std::string& name) {
  std::string known;
  for (const auto& e : engines()) {
    if (e.name == name) {
      require(e.available(), "engine '" + name + "' is not available here (no CUDA device?)");
      return e.make();
    }
    known += (known.empty() ? "" : ", ") + e.name;
  }
  throw Error("unknown engine '" + name + "' (known: " + known + ")");
}

std::string best_available_engine() {
  const EngineInfo* best = nullptr;
  for (const auto& e : engines())
    if (e.available() && (!best || e.preference > best->preference)) best = &e;
  require(best != nullptr, "no engine available");
  return best->name;
}

Region resolve(const Region& region, int image_width, int image_height) {
  Region r = region;
  if (r.width == 0) r.width = image_width - r.x0;
  if (r.height == 0) r.height = image_height - r.y0;
  require(r.x0 >= 0 && r.y0 >= 0 && r.width > 0 && r.height > 0 && r.x0 + r.width <= image_width &&
              r.y0 + r.height <= image_height,
          "search region x0=" + std::to_string(r.x0) + " y0=" + std::to_string(r.y0) +
              " width=" + std::to_string(r.width) + " height=" + std::to_string(r.height) +
              " is not inside the " + std::to_string(image_width) + "x" +
              std::to_string(image_height) + " image");
  return r;
}

double digest_threshold(const SearchInput& input) {
  const double trials = input.policy.bonferroni_trials > 0
                            ? input.policy.bonferroni_trials
                            : double(input.region.count()) * double(input.bank->size());
  return bonferroni_threshold(input.policy.alpha, trials);
}

void ProgressCounter::add(std::int64_t trials) {
  if (!callback_) return;
  const std::int64_t done = done_.fetch_add(trials) + trials;
  constexpr std::int64_t interval_ns = 100'000'000;  // ten reports a second are plenty for a person
  const std::int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                               std::chrono::steady_clock::now().time_since_epoch())
                               .count();
  if (now - last_report_ns_.load() < interval_ns) return;
  std::unique_lock<std::mutex> lock(report_, std::try_to_lock);
  if (!lock.owns_lock() || finished_) return;
  last_report_ns_ = now;
  callback_(std::min(done, total_), total_);
}

void ProgressCounter::finish() {
  if (!callback_) return;
  std::lock_guard<std::mutex> lock(report_);
  if (finished_) return;
  finished_ = true;
  callback_(total_, total_);
}

bool better_candidate(const Candidate& a, const Candidate& b) {
  if (a.Z != b.Z) return a.Z > b.Z;
  if (a.velocity != b.velocity) return a.velocity < b.velocity;
  if (a.y != b.y) return a.y < b.y;
  return a.x < b.x;
}

SearchResult search(Engine& engine, const EncodedStack& stack, const MotionBank& bank,
                    const OutputPolicy& policy, Region region) {
  require(stack.exposures > 0, "search: empty stack");
  validate(bank, stack.exposures);
  require(bank.mode == ShiftMode::integer || !stack.cov_right.empty(),
          "fractional shifts need the covariance planes: compute the likelihood with covariances");
  require(policy.top_k >= 0, "top_k must be >= 0");
  require(policy.max_candidates > 0, "max_candidates must be > 0");
  require(policy.bonferroni_trials >= 0, "bonferroni_trials must be >= 0 (0: the search's own trials)");
  SearchInput input{&stack, &bank, resolve(region, stack.width, stack.height), policy};

  // Trial count, shift range and planned memory before any engine allocates (limits.hpp).
  check_search_limits(bank, input.region.width, input.region.height, input.region.count(), stack.bytes_per_pair(),
                      policy.top_k, policy.limits);

  const std::string reason = engine.unsupported_reason(input);
  require(reason.empty(), "engine '" + engine.name() + "' cannot compute this search: " + reason);
  const auto start = std::chrono::steady_clock::now();
  SearchResult result = engine.search(input);
  if (policy.stop_requested()) throw Cancelled("search stopped on request (engine " + engine.name() + ")");
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  result.engine = engine.name();
  if (result.seconds == 0) result.seconds = elapsed;
  result.digest.trials = input.region.count() * std::int64_t(bank.size());
  result.digest.z_thr = digest_threshold(input);
  return result;
}

}  // namespace shiftstack
