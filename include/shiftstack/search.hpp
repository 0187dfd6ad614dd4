// One engine interface, selected by name (DESIGN: Engine::search).
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "shiftstack/digest.hpp"
#include "shiftstack/encoding.hpp"
#include "shiftstack/limits.hpp"
#include "shiftstack/motion.hpp"

namespace shiftstack {

// Origins searched: a rectangle of pixels (default: the whole image).
struct Region {
  int x0 = 0, y0 = 0, width = 0, height = 0;  // width/height 0 = to the image edge
  std::int64_t count() const { return std::int64_t(width) * height; }
};
Region resolve(const Region& region, int image_width, int image_height);  // validates, fills 0s

// Progress of a scan: `done` of `total` trials (origins x velocities) scored so far. Engines
// report between blocks of work (rows, tiles, velocity blocks); the callback is never entered
// by two threads at once and is called at most about ten times a second, the last time with
// done == total.
using ProgressCallback = std::function<void(std::int64_t done, std::int64_t total)>;

struct OutputPolicy {
  double alpha = 0.05;            // digest threshold z_thr = Phi_bar^{-1}(alpha / M)
  bool collect_candidates = false;
  double candidate_threshold = 5;  // compact list: every trial with Z > this
  std::int64_t max_candidates = std::int64_t(1) << 26;  // beyond this: Error, never truncation
  int top_k = 0;                  // best k trials per origin (KBMOD's results_per_pixel); 0 = off
  ProgressCallback progress;      // optional
  // Cooperative stop (a host's Ctrl-C): engines poll it between work items (rows, bands, tiles)
  // and search() throws Cancelled once it is true. Null: never stopped.
  const std::atomic<bool>* stop = nullptr;
  bool stop_requested() const { return stop && stop->load(std::memory_order_relaxed); }
  // Trials the Bonferroni threshold counts; 0 = this search's (region x bank). One part of a
  // split search passes the whole search's count, so every part tests against the same z_thr.
  double bonferroni_trials = 0;
  SearchLimits limits;            // trial count, shift range and memory, checked by search()
};

struct Candidate {
  int x = 0, y = 0;               // origin pixel at t_ref
  std::int32_t velocity = 0;      // index into the bank
  float vx = 0, vy = 0;           // pixels / day
  float A = 0, B = 0, Z = 0;
  float flux = 0;                 // A / B
  std::int32_t obs_count = 0;     // exposures with a valid sample
};

struct SearchInput {
  const EncodedStack* stack = nullptr;
  const MotionBank* bank = nullptr;
  Region region;                  // resolved by search()
  OutputPolicy policy;
};

struct SearchResult {
  Digest digest;
  std::vector<Candidate> candidates;  // Z > candidate_threshold, sorted by (velocity, y, x)
  // top_k per origin, origin-major in region order, best first; entries with B <= 0 have Z = -inf
  std::vector<Candidate> top_k;
  std::string engine;
  double seconds = 0;                 // engine-reported time of the scan
  std::string note;                   // engine remarks, e.g. a fallback and its reason
  // Where the engine's wall time went, in its own named stages (milliseconds, in order), for
  // benchmarks; empty where the engine does not time its stages.
  std::vector<std::pair<std::string, double>> stages_ms;
};

class Engine {
 public:
  virtual ~Engine() = default;
  virtual std::string name() const = 0;
  // Empty when the engine computes this input exactly; otherwise why it cannot.
  virtual std::string unsupported_reason(const SearchInput& input) const = 0;
  // Empty unless the engine, though it can run this input, expects an engine of lower
  // preference to be faster on it (its cost model); then why. The automatic choice passes such
  // an engine over; a search that names it runs it.
  virtual std::string slower_reason(const SearchInput&) const { return {}; }
  virtual SearchResult search(const SearchInput& input) = 0;
};

// How an engine's digest relates to the exhaustive engines' (parity tests, bench checks).
enum class DigestKind {
  exhaustive,  // every trial scored exactly: SPEC 4's tolerances
  // An approximate screen, then exact re-scoring (cpu-tree): maxZ, argmax, count and the
  // candidates above z_thr are exact; sumA, sumB come from the screen, within stated bounds.
  refined,
  screen,  // an approximate operator's own scores (cpu-tree-screen): sums within stated bounds
};

struct EngineInfo {
  std::string name, description;
  bool gpu = false;
  int preference = 0;  // higher = faster; "best available" picks the highest that is available
  std::function<std::unique_ptr<Engine>()> make;
  std::function<bool()> available;  // e.g. a CUDA device is present
  // Arithmetic below FP32 (tensor-core FP16 operands): compared with SPEC 4's reduced tolerances.
  bool reduced_arithmetic = false;
  DigestKind digest_kind = DigestKind::exhaustive;
  // Searches a stack encoded on the device where it lies (through acquire_stack()); the
  // pipeline copies a GPU-encoded cube to the host for the other engines.
  bool reads_device_cube = false;
};

void register_engine(EngineInfo info);
const std::vector<EngineInfo>& engines();  // registers the built-in engines on first use
const EngineInfo* find_engine(const std::string& name);  // nullptr for an unknown name
std::unique_ptr<Engine> make_engine(const std::string& name);  // Error lists the known names
std::string best_available_engine();

// Resolves the region, computes z_thr, checks support and runs the engine. Errors: empty bank,
// bank/stack exposure mismatch, region outside the image, unsupported input (with the reason).
SearchResult search(Engine& engine, const EncodedStack& stack, const MotionBank& bank,
                    const OutputPolicy& policy = {}, Region region = {});

// The engines' side of OutputPolicy::progress: add() from any thread after each block of work.
class ProgressCounter {
 public:
  ProgressCounter(const ProgressCallback& callback, std::int64_t total) : callback_(callback), total_(total) {}
  void add(std::int64_t trials);
  void finish();  // reports done == total (once) if anything was added

 private:
  const ProgressCallback& callback_;
  std::int64_t total_;
  std::atomic<std::int64_t> done_{0};
  std::atomic<std::int64_t> last_report_ns_{0};
  std::mutex report_;
  bool finished_ = false;
};

// Shared by engines: z_thr for an input, and the per-origin top-k merge order.
double digest_threshold(const SearchInput& input);
bool better_candidate(const Candidate& a, const Candidate& b);  // higher Z, then (velocity,y,x)

}  // namespace shiftstack
