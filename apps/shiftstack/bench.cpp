// `shiftstack bench`: median time per complete scan of chosen engines and encodings on a kit
// workload (or a custom shape), paired samples per second, the digest, and agreement with a
// baseline engine under SPEC 4's tolerances. Optionally writes one JSON record per combination.
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "options.hpp"
#include "progress.hpp"
#include "validation/run_info.hpp"
#include "shiftstack/cpu_engine.hpp"
#include "shiftstack/error.hpp"
#include "shiftstack/likelihood.hpp"
#ifdef SHIFTSTACK_HAVE_CUDA
#include "../../src/cuda/gather/gather_fast.hpp"        // the kernel cuda-fast ran
#include "../../src/cuda/spectral/spectral_engine.hpp"  // stage times of the Fourier-route engines
#include "../../src/cuda/tree/cuda_tree.hpp"             // cuda-tree's counts and stage times
#endif
#include "shiftstack/tree.hpp"

namespace shiftstack::cli {

namespace {

struct BenchOptions {
  std::string workload = "ci";
  std::vector<std::string> engines;    // empty: the best available; "all": every engine
  std::vector<std::string> encodings;  // empty: fp32; "all": every encoding
  std::string shifts = "integer";
  int runs = 5, warmup = 1;
  int top_k = 0;  // KBMOD's results_per_pixel: best k trials per origin, downloaded and timed
  std::string baseline;  // empty: by workload (see default_baseline); "none": no comparison
  std::string json_file;
  std::uint64_t seed = 1;
  // Custom shape: each nonzero value overrides the workload's.
  int exposures = 0, width = 0, height = 0, vx = 0, vy = 0;
  TreeOptions tree;  // cpu-tree and cpu-tree-screen
  int threads = 0;   // threads of the timed searches (0: all); the stack is made with all
};

bool is_custom(const BenchOptions& o) { return o.exposures || o.width || o.height || o.vx || o.vy; }

bool available(const std::string& name) {
  const EngineInfo* info = find_engine(name);
  return info && info->available();
}

// The reference is exact but slow, so it is the default only on the small `ci` workload.
std::string default_baseline(const BenchOptions& o) {
  if (o.workload == "ci" && !is_custom(o)) return "reference";
  if (available("cuda-serial")) return "cuda-serial";
  return "cpu";
}

// Expands "all" and removes repeats, keeping the order given.
std::vector<std::string> expand(const std::vector<std::string>& given, const std::vector<std::string>& every,
                                const std::string& fallback) {
  std::vector<std::string> out;
  auto push = [&](const std::string& name) {
    if (std::find(out.begin(), out.end(), name) == out.end()) out.push_back(name);
  };
  if (given.empty()) push(fallback);
  for (const auto& name : given) {
    if (name == "all")
      for (const auto& each : every) push(each);
    else
      push(name);
  }
  return out;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

// The Fourier-route engines time their stages with device events: median of each over the timed
// runs, and the contraction's useful rate (SPEC 6), for the JSON record.
struct StageRecorder {
#ifdef SHIFTSTACK_HAVE_CUDA
  const cuda::SpectralEngine* spectral = nullptr;
  std::vector<cuda::SpectralStageTimes> runs;
  explicit StageRecorder(const Engine& engine) : spectral(dynamic_cast<const cuda::SpectralEngine*>(&engine)) {}
  void after_run() {
    if (spectral) runs.push_back(spectral->diagnostics().times);
  }
  void write(nlohmann::json& record) const {
    if (!spectral || runs.empty()) return;
    auto stage = [&](double cuda::SpectralStageTimes::*field) {
      std::vector<double> v;
      for (const auto& t : runs) v.push_back(t.*field);
      return median(v);
    };
    const double contraction = stage(&cuda::SpectralStageTimes::contraction_ms);
    const double inverse = stage(&cuda::SpectralStageTimes::inverse_ms), scoring = stage(&cuda::SpectralStageTimes::scoring_ms);
    const auto& d = spectral->diagnostics();
    record["stages_ms"] = {{"forward", stage(&cuda::SpectralStageTimes::forward_ms)},
                           {"tables", stage(&cuda::SpectralStageTimes::tables_ms)},
                           {"contraction", contraction},
                           {"inverse", inverse},
                           {"scoring", scoring},
                           {"post_processing", inverse + scoring},
                           {"total", stage(&cuda::SpectralStageTimes::total_ms)},
                           {"note", "device events inside each timed scan; median of each stage over the runs"}};
    record["useful_flops"] = d.useful_flops;
    record["contraction_tflops"] = contraction > 0 ? d.useful_flops / (contraction * 1e-3) / 1e12 : 0.0;
    record["padded_transform"] = {d.geometry.nx, d.geometry.ny};
    record["contraction_route"] = d.row_route ? "rows: transforms along x only, y shifts as row offsets"
                                              : "planes: 2-D transforms, y shifts as phases";
    record["post_processing_route"] = d.row_route       ? "inverse along x fused with the scoring"
                                      : d.fused_scoring ? "inverse along y (cuFFT), inverse along x fused with the scoring"
                                                        : "2-D inverse (cuFFT), then scoring";
    record["recomputed_trials"] = d.recomputed_trials;
    record["clamped_trials"] = d.clamped_trials;
  }
  void print() const {
    if (!spectral || runs.empty()) return;
    nlohmann::json r;
    write(r);
    const auto& st = r["stages_ms"];
    std::printf("%-14s %-8s stages (ms): forward %.3g, tables %.3g, contraction %.4g (%.1f TFLOP/s, %s route), inverse %.4g, "
                "scoring %.4g, total %.4g\n",
                "", "", st["forward"].get<double>(), st["tables"].get<double>(), st["contraction"].get<double>(),
                r["contraction_tflops"].get<double>(), spectral->diagnostics().row_route ? "row" : "planar",
                st["inverse"].get<double>(), st["scoring"].get<double>(),
                st["total"].get<double>());
  }
#else
  explicit StageRecorder(const Engine&) {}
  void after_run() {}
  void write(nlohmann::json&) const {}
  void print() const {}
#endif
};

// The stages an engine times itself (SearchResult::stages_ms; the gathers' host and device
// parts): the median of each over the timed runs, in the engine's order.
struct EngineStageRecorder {
  std::vector<std::string> order;
  std::map<std::string, std::vector<double>> values;
  void after_run(const SearchResult& r) {
    for (const auto& [name, ms] : r.stages_ms) {
      if (!values.count(name)) order.push_back(name);
      values[name].push_back(ms);
    }
  }
  void write(nlohmann::json& record) const {
    if (order.empty()) return;
    nlohmann::json stages = nlohmann::json::object();
    for (const std::string& name : order) stages[name] = median(values.at(name));
    stages["note"] = "engine-reported; host wall clock except 'device' (device events); median over the runs";
    record["engine_stages_ms"] = stages;
  }
  void print() const {
    if (order.empty()) return;
    std::string line;
    for (const std::string& name : order) {
      char part[96];
      std::snprintf(part, sizeof part, "%s%s %.3g", line.empty() ? "" : ", ", name.c_str(), median(values.at(name)));
      line += part;
    }
    std::printf("%-14s %-8s engine stages (ms): %s\n", "", "", line.c_str());
  }
};

// User + system time of the whole process (every thread), in seconds.
double process_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

bool same_digest(const Digest& a, const Digest& b) {
  return a.sumA == b.sumA && a.sumB == b.sumB && a.maxZ == b.maxZ && a.count == b.count &&
         a.scored == b.scored && a.argmax_x == b.argmax_x && a.argmax_y == b.argmax_y &&
         a.argmax_velocity == b.argmax_velocity;
}

// Writes the file whole or not at all: a temporary file in the same folder, then a rename.
class AtomicFile {
 public:
  explicit AtomicFile(std::string path) : path_(std::move(path)), temp_(path_ + ".tmp." + std::to_string(getpid())) {
    std::ofstream probe(temp_);
    require(bool(probe), "--json " + path_ + ": cannot create a file there (" + std::strerror(errno) + ")");
  }
  ~AtomicFile() {
    if (!committed_) std::remove(temp_.c_str());
  }
  void commit(const std::string& text) {
    {
      std::ofstream out(temp_, std::ios::trunc);
      out << text;
      out.flush();
      require(bool(out), "--json " + path_ + ": write failed");
    }
    require(std::rename(temp_.c_str(), path_.c_str()) == 0,
            "--json " + path_ + ": cannot replace the file (" + std::strerror(errno) + ")");
    committed_ = true;
  }

 private:
  std::string path_, temp_;
  bool committed_ = false;
};

struct Baseline {
  std::string engine;
  Digest digest;
  std::int64_t near_threshold = 0;  // trials within the fp32 count band of z_thr
};

Baseline run_baseline(const std::string& name, const EncodedStack& stack, const MotionBank& bank,
                      Progress& progress) {
  progress.show("bench: baseline " + name + " on fp32");
  auto engine = make_engine(name);
  OutputPolicy policy;
  const double z_thr = bonferroni_threshold(policy.alpha, double(stack.width) * stack.height * bank.size());
  const double band = DigestTolerance::fp32().count_band;
  policy.collect_candidates = true;
  policy.candidate_threshold = z_thr - band;
  const SearchResult r = search(*engine, stack, bank, policy);
  Baseline b{name, r.digest, 0};
  for (const Candidate& c : r.candidates)
    if (std::abs(double(c.Z) - r.digest.z_thr) <= band) ++b.near_threshold;
  return b;
}

// The tree engines' own counts from the last run: additions per trial per level (counted by the
// executor), the screen and the refinement.
nlohmann::json tree_record(const TreeEngine& engine) {
  const TreeStats& t = engine.last_stats();
  nlohmann::json levels = nlohmann::json::array();
  for (const auto& l : t.levels)
    levels.push_back({{"level", l.level},
                      {"nodes", l.nodes},
                      {"entries", l.entries},
                      {"additions", l.additions},
                      {"additions_per_trial", t.trials ? double(l.additions) / double(t.trials) : 0.0}});
  return {{"fell_back", t.fell_back},
          {"fallback_reason", t.fallback_reason},
          {"additions_per_trial", t.additions_per_trial()},
          {"levels", levels},
          {"depth", t.depth},
          {"cut_level", t.cut_level},
          {"fused_root", t.fused_root},
          {"nodes", t.nodes},
          {"z_screen", t.z_screen},
          {"screen_margin", engine.options().screen_margin},
          {"screened", t.screened},
          {"refined", t.refined},
          {"tile", {t.tile_width, t.tile_height}},
          {"tile_bytes", t.tile_bytes},
          {"bands", t.bands},
          {"band_bytes", t.band_bytes},
          {"modelled_cost_per_trial", t.modelled_cost_per_trial},
          {"seconds_fill", t.seconds_fill},
          {"seconds_tree", t.seconds_tree},
          {"seconds_stage_a", t.seconds_stage_a},
          {"seconds_refine", t.seconds_refine}};
}

void print_tree_record(const nlohmann::json& t) {
  if (t["fell_back"].get<bool>()) {
    std::printf("  tree: ran the exhaustive cpu engine: %s\n", t["fallback_reason"].get<std::string>().c_str());
    return;
  }
  std::printf("  tree: %.3f additions per trial per channel (levels:", t["additions_per_trial"].get<double>());
  for (const auto& l : t["levels"]) std::printf(" %.3f", l["additions_per_trial"].get<double>());
  std::printf("), %lld nodes, depth %d, cut at level %d%s, tiles %dx%d (%.1f MB each), %d band(s) of %.0f MB, "
              "modelled cost %.4g per trial\n",
              (long long)t["nodes"].get<std::int64_t>(), t["depth"].get<int>(), t["cut_level"].get<int>(),
              t.value("fused_root", false) ? ", root fused" : "", t["tile"][0].get<int>(),
              t["tile"][1].get<int>(), t["tile_bytes"].get<double>() / 1e6, t["bands"].get<int>(),
              t["band_bytes"].get<double>() / 1e6, t["modelled_cost_per_trial"].get<double>());
  std::printf("  tree: screen z > %.3f: %lld trials, %lld re-scored exactly; last run: copy %.3f s, tree %.3f s "
              "(band-wide part %.3f s), refinement %.3f s\n",
              t["z_screen"].get<double>(), (long long)t["screened"].get<std::int64_t>(),
              (long long)t["refined"].get<std::int64_t>(), t["seconds_fill"].get<double>(),
              t["seconds_tree"].get<double>(), t["seconds_stage_a"].get<double>(), t["seconds_refine"].get<double>());
  if (!t.contains("position_error")) return;
  const auto& p = t["position_error"];
  std::printf("  tree: positions against round_shift over (velocity, exposure): %.4f exact, %.4f one pixel off, "
              "max %d px; rms about the real shift %.3f px (exhaustive %.3f), max %.2f px\n",
              p["exact_fraction"].get<double>(), p["one_pixel_fraction"].get<double>(), p["max_abs"].get<int>(),
              p["rms_tree"].get<double>(), p["rms_exhaustive"].get<double>(), p["max_tree"].get<double>());
}

void run_bench(const BenchOptions& o) {
  Progress progress;
  KitOptions kit_options = workload(o.workload);
  kit_options.seed = o.seed;
  kit_options.shift_mode = shift_modes().at(o.shifts);
  if (o.exposures) kit_options.exposures = o.exposures;
  if (o.width) kit_options.width = o.width;
  if (o.height) kit_options.height = o.height;
  if (o.vx) kit_options.vx_count = o.vx;
  if (o.vy) kit_options.vy_count = o.vy;
  const std::string workload_label = is_custom(o) ? "custom" : o.workload;
  if (is_custom(o)) kit_options.name = "custom";

  const std::vector<std::string> engine_list = expand(o.engines, engine_names(), best_available_engine());
  const std::vector<std::string> encoding_list = expand(o.encodings, encoding_names(), "fp32");
  const std::string baseline_name = o.baseline.empty() ? default_baseline(o) : o.baseline;
  if (baseline_name != "none")
    require(available(baseline_name), "--baseline " + baseline_name + ": engine is not available here");
  std::unique_ptr<AtomicFile> json_out;
  if (!o.json_file.empty()) json_out = std::make_unique<AtomicFile>(o.json_file);

  // The cpu engine's SIMD target (and an error for a bad SHIFTSTACK_CPU_TARGET) before any work.
  std::string cpu_target_line;
  if (std::find(engine_list.begin(), engine_list.end(), "cpu") != engine_list.end()) {
    cpu_target_line = "cpu engine SIMD target: " + cpu_engine_target(*make_cpu_engine()) + " (runnable here:";
    for (const std::string& name : cpu_engine_targets()) cpu_target_line += " " + name;
    cpu_target_line += "; SHIFTSTACK_CPU_TARGET picks one)";
  }

  progress.show("bench: making the " + workload_label + " stack");
  const KitStack kit = make_kit(kit_options);
  progress.show("bench: likelihood maps");
  const LikelihoodStack likelihood =
      compute_likelihood(kit.stack, kit_options.shift_mode == ShiftMode::fractional);
  std::map<std::string, EncodedStack> encoded;
  auto stack_for = [&](const std::string& encoding) -> const EncodedStack& {
    auto it = encoded.find(encoding);
    if (it == encoded.end()) it = encoded.emplace(encoding, encode(likelihood, parse_encoding(encoding))).first;
    return it->second;
  };

  progress.clear();
  if (o.threads > 0) omp_set_num_threads(o.threads);
  const std::size_t V = kit.bank.size();
  const double paired_samples = double(kit_options.width) * kit_options.height * double(V) * kit_options.exposures;
  std::printf("shiftstack bench: workload %s (%d exposures, %dx%d pixels, %dx%d = %zu velocities, "
              "%.4g paired samples per scan), %s shifts, seed %llu, %d threads\n",
              workload_label.c_str(), kit_options.exposures, kit_options.width, kit_options.height,
              kit_options.vx_count, kit_options.vy_count, V, paired_samples, o.shifts.c_str(),
              static_cast<unsigned long long>(o.seed), omp_get_max_threads());
  if (o.top_k > 0)
    std::printf("top-%d per origin (KBMOD's results_per_pixel): times are wall clock around each search, the "
                "lists downloaded and assembled on the host\n",
                o.top_k);

  if (!cpu_target_line.empty()) std::printf("%s\n", cpu_target_line.c_str());

  std::unique_ptr<Baseline> baseline;
  if (baseline_name != "none") {
    baseline = std::make_unique<Baseline>(run_baseline(baseline_name, stack_for("fp32"), kit.bank, progress));
    progress.clear();
    std::printf("baseline %s on fp32: %s\n", baseline_name.c_str(), describe(baseline->digest).c_str());
  }
  std::printf("%-14s %-8s %10s %10s %10s %12s %9s %7s %s\n", "engine", "encoding", "median s", "min s",
              "max s", "samples/s", "maxZ", "count", "agrees");

  const std::string commit = commit_id(), date = utc_now();
  nlohmann::json records = nlohmann::json::array();
  for (const std::string& engine_name : engine_list) {
    const EngineInfo& info = *find_engine(engine_name);
    for (const std::string& encoding : encoding_list) {
      nlohmann::json record = {
          {"engine", engine_name},
          {"workload", workload_label},
          {"base_workload", o.workload},
          {"encoding", encoding},
          {"shifts", o.shifts},
          {"shape",
           {{"exposures", kit_options.exposures},
            {"width", kit_options.width},
            {"height", kit_options.height},
            {"vx", kit_options.vx_count},
            {"vy", kit_options.vy_count},
            {"velocities", V}}},
          {"paired_samples", paired_samples},
          {"seed", o.seed},
          {"runs", o.runs},
          {"warmup", o.warmup},
          {"threads", omp_get_max_threads()},
          {"top_k", o.top_k},
          {"timing", o.top_k > 0 ? "host wall clock around each search (top-k lists downloaded and assembled)"
                                 : "engine-reported scan time (device events for GPU engines)"},
          {"card", machine_name(info.gpu)},
          {"commit", commit},
          {"date", date},
      };
      auto skip = [&](const std::string& reason) {
        record["skipped"] = reason;
        records.push_back(record);
        progress.clear();
        std::printf("%-14s %-8s skipped: %s\n", engine_name.c_str(), encoding.c_str(), reason.c_str());
      };
      if (!info.available()) {
        skip("not available here (no CUDA device?)");
        continue;
      }
      const EncodedStack& stack = stack_for(encoding);
      std::unique_ptr<Engine> engine = info.make();
      if (const auto* cpu_tree = dynamic_cast<const TreeEngine*>(engine.get())) {
        TreeOptions t = o.tree;
        t.refine = cpu_tree->options().refine;  // the variant's own (cpu-tree-screen: unrefined)
        t.fuse_levels = -1;                     // cuda-tree's alone
        engine = std::make_unique<TreeEngine>(t, engine_name);
      }
#ifdef SHIFTSTACK_HAVE_CUDA
      if (const auto* gpu_tree = dynamic_cast<const cuda::CudaTreeEngine*>(engine.get())) {
        // The variant's own options (refine, BF16 maps); of the bench's tree options only
        // fuse_root and fuse_levels mean something on the GPU (its bands are its own).
        TreeOptions t = gpu_tree->options();
        t.fuse_root = o.tree.fuse_root;
        t.fuse_levels = o.tree.fuse_levels;
        engine = std::make_unique<cuda::CudaTreeEngine>(t, engine_name);
      }
#endif
      if (const std::string target = cpu_engine_target(*engine); !target.empty()) record["cpu_target"] = target;
      OutputPolicy policy;
      policy.top_k = o.top_k;
      const SearchInput probe{&stack, &kit.bank, resolve({}, stack.width, stack.height), policy};
      const std::string reason = engine->unsupported_reason(probe);
      if (!reason.empty()) {
        skip(reason);
        continue;
      }

      std::vector<double> seconds, engine_seconds, wall_seconds, cpu_seconds;
      Digest digest;
      bool deterministic = true;
      StageRecorder stages(*engine);
      EngineStageRecorder engine_stages;
      for (int run = 0; run < o.warmup + o.runs; ++run) {
        const bool timed = run >= o.warmup;
        progress.show("bench: " + engine_name + " " + encoding + (timed ? " run " : " warm-up ") +
                      std::to_string(timed ? run - o.warmup + 1 : run + 1) + "/" +
                      std::to_string(timed ? o.runs : o.warmup));
        const double cpu_before = process_cpu_seconds();
        const auto start = std::chrono::steady_clock::now();
        const SearchResult r = search(*engine, stack, kit.bank, policy);
        const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        if (timed) cpu_seconds.push_back(process_cpu_seconds() - cpu_before);
        if (o.top_k > 0 && r.top_k.size() != std::size_t(stack.width) * stack.height * o.top_k)
          throw Error("engine '" + engine_name + "' returned " + std::to_string(r.top_k.size()) +
                      " top-k entries, expected " + std::to_string(o.top_k) + " per origin");
        if (run > 0 && !same_digest(r.digest, digest)) deterministic = false;
        digest = r.digest;
        if (timed) {
          seconds.push_back(o.top_k > 0 ? wall : r.seconds);
          engine_seconds.push_back(r.seconds);
          wall_seconds.push_back(wall);
          stages.after_run();
          engine_stages.after_run(r);
        }
      }
      progress.clear();
      const double t = median(seconds);
      record["seconds_median"] = t;
      record["seconds_min"] = *std::min_element(seconds.begin(), seconds.end());
      record["seconds_max"] = *std::max_element(seconds.begin(), seconds.end());
      record["samples_per_second"] = paired_samples / t;
      if (o.top_k > 0) record["engine_seconds_median"] = median(engine_seconds);
      record["wall_seconds_median"] = median(wall_seconds);  // host clock around search(): setup included
      stages.write(record);
      engine_stages.write(record);
#ifdef SHIFTSTACK_HAVE_CUDA
      if (engine_name == "cuda-fast") record["variant"] = cuda::last_fast_variant();
#endif
      record["cpu_seconds_median"] = median(cpu_seconds);
      record["digest"] = nlohmann::json::parse(to_json(digest));
      record["deterministic"] = deterministic;

      std::string agrees = "-";
      record["agrees"] = nullptr;
      if (baseline) {
        const bool reduced = encoding != "fp32" || info.reduced_arithmetic;
        DigestTolerance tol = reduced ? DigestTolerance::reduced() : DigestTolerance::fp32();
        DigestComparison cmp;
        if (info.digest_kind == DigestKind::exhaustive) {
          cmp = compare(baseline->digest, digest, tol, baseline->near_threshold);
        } else {
          // The tree engines: sums within the bounds their positions put on them (integer
          // shifts; docs/tree-search.md); refined, maxZ, argmax and count as an exact engine's.
          tol.rel_sumA = tol.rel_sumB = -1;
          cmp = compare(baseline->digest, digest, tol, baseline->near_threshold);
          // Trials with B > 0 differ where the tree samples other pixels than the rounding.
          std::erase_if(cmp.failures, [](const std::string& f) { return f.rfind("scored trials", 0) == 0; });
          cmp.agrees = cmp.failures.empty();
          if (info.digest_kind == DigestKind::screen) cmp = DigestComparison{};
          if (kit.bank.mode == ShiftMode::integer) {
            const TreeDigestBounds bound = tree_digest_bounds(stack, kit.bank, {});
            const double dA = std::abs(digest.sumA - baseline->digest.sumA), dB = std::abs(digest.sumB - baseline->digest.sumB);
            cmp.rel_sumA = dA / std::max(1e-300, std::abs(baseline->digest.sumA));
            cmp.rel_sumB = dB / std::max(1e-300, std::abs(baseline->digest.sumB));
            if (dA > bound.sumA || dB > bound.sumB) {
              cmp.agrees = false;
              cmp.failures.push_back("sums beyond the tree's stated bounds");
            }
          }
        }
        if (info.digest_kind != DigestKind::exhaustive) record["tolerance_rule"] = "tree";
        record["agrees"] = cmp.agrees;
        record["baseline"] = baseline->engine;
        record["baseline_encoding"] = "fp32";
        record["tolerance"] = reduced ? "reduced" : "fp32";
        record["comparison"] = {{"rel_sumA", cmp.rel_sumA},
                                {"rel_sumB", cmp.rel_sumB},
                                {"d_maxZ", cmp.d_maxZ},
                                {"d_count", cmp.d_count},
                                {"failures", cmp.failures}};
        agrees = cmp.agrees ? "yes" : "NO: " + cmp.failures.front();
      }
      if (!deterministic) agrees += " (digest changed between runs)";
      if (const auto* tree = dynamic_cast<const TreeEngine*>(engine.get())) {
        record["tree"] = tree_record(*tree);
        if (kit.bank.is_cartesian()) {
          const TreePositionError pe = tree_position_error(kit.bank, tree->options());
          record["tree"]["position_error"] = {{"exact_fraction", pe.exact_fraction},
                                              {"one_pixel_fraction", pe.one_pixel_fraction},
                                              {"axis_fraction", pe.axis_fraction},
                                              {"max_abs", pe.max_abs},
                                              {"rms_tree", pe.rms_tree},
                                              {"rms_exhaustive", pe.rms_exhaustive},
                                              {"max_tree", pe.max_tree}};
        }
      }
#ifdef SHIFTSTACK_HAVE_CUDA
      if (const auto* gpu_tree = dynamic_cast<const cuda::CudaTreeEngine*>(engine.get())) {
        const cuda::CudaTreeStats& t = gpu_tree->last_stats();
        record["cuda_tree"] = {{"fell_back", t.fell_back}, {"fallback_reason", t.fallback_reason},
                               {"additions_per_trial", t.additions_per_trial()}, {"level_additions", t.level_additions},
                               {"bands", t.bands}, {"band_rows", t.band_rows}, {"level_bytes", t.level_bytes},
                               {"fused_root", t.fused_root}, {"formed_levels", t.formed_levels},
                               {"cube_resident", t.cube_resident}, {"refined_on_device", t.refined_on_device},
                               {"z_screen", t.z_screen},
                               {"screened", t.screened}, {"refined", t.refined}, {"refine_rounds", t.refine_rounds},
                               {"seconds_tree", t.seconds_tree}, {"seconds_refine", t.seconds_refine},
                               {"seconds_total", t.seconds_total}};
      }
#endif
      records.push_back(record);
      std::printf("%-14s %-8s %10.4g %10.4g %10.4g %12.4g %9.4f %7lld %s\n", engine_name.c_str(),
                  encoding.c_str(), t, record["seconds_min"].get<double>(),
                  record["seconds_max"].get<double>(), paired_samples / t, digest.maxZ,
                  static_cast<long long>(digest.count), agrees.c_str());
      stages.print();
      engine_stages.print();
      if (record.contains("tree")) print_tree_record(record["tree"]);
      if (record.contains("cuda_tree")) {
        const auto& t = record["cuda_tree"];
        if (t["fell_back"].get<bool>())
          std::printf("  cuda-tree: ran the exhaustive cuda-fast engine: %s\n", t["fallback_reason"].get<std::string>().c_str());
        else
          std::printf("  cuda-tree: %.3f additions per trial per channel, %d band(s) of %d rows, %d levels stored "
                      "(%.1f MB)%s; "
                      "screen z > %.3f: %lld trials, %lld re-scored in %d rounds on the %s; last run: tree %.3f ms, "
                      "refine %.3f ms\n",
                      t["additions_per_trial"].get<double>(), t["bands"].get<int>(), t["band_rows"].get<int>(),
                      t["formed_levels"].get<int>(), t["level_bytes"].get<double>() / 1e6, t["fused_root"].get<bool>() ? ", root fused" : "",
                      t["z_screen"].get<double>(),
                      (long long)t["screened"].get<std::int64_t>(), (long long)t["refined"].get<std::int64_t>(),
                      t["refine_rounds"].get<int>(), t["refined_on_device"].get<bool>() ? "device" : "host",
                      1e3 * t["seconds_tree"].get<double>(),
                      1e3 * t["seconds_refine"].get<double>());
      }
      std::fflush(stdout);
    }
  }
  if (json_out) {
    json_out->commit(records.dump(2) + "\n");
    std::printf("wrote %zu records to %s\n", records.size(), o.json_file.c_str());
  }
}

}  // namespace

void add_bench_command(CLI::App& app) {
  auto o = std::make_shared<BenchOptions>();
  CLI::App* bench = app.add_subcommand(
      "bench", "Time complete scans of engines x encodings on a kit workload; check them against a baseline");
  bench->add_option("--workload", o->workload, "Named workload of the benchmark kit")
      ->check(one_of(workload_names()))
      ->capture_default_str();
  bench->add_option("--engine", o->engines, "Engine to time (repeatable, or 'all'; default: best available)")
      ->check(one_of(engine_names(), {"all"}));
  bench->add_option("--encoding", o->encodings, "Storage encoding (repeatable, or 'all'; default: fp32)")
      ->check(one_of(encoding_names(), {"all"}));
  bench->add_option("--shifts", o->shifts, "Trajectory sampling: nearest pixel or bilinear")
      ->check(one_of(shift_mode_names()))
      ->capture_default_str();
  bench->add_option("--runs", o->runs, "Timed runs per combination (the median is reported)")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  bench->add_option("--warmup", o->warmup, "Untimed runs before the timed ones")
      ->check(CLI::Range(0, 1000000))
      ->capture_default_str();
  bench->add_option("--top-k", o->top_k,
                    "Also keep the best K trials per origin (KBMOD's results_per_pixel); the time then is "
                    "wall clock around each search, the lists downloaded to the host")
      ->check(CLI::Range(0, 1000))
      ->capture_default_str();
  bench->add_option("--baseline", o->baseline,
                    "Engine whose fp32 digest the others must match, or 'none' (default: reference on "
                    "ci, else cuda-serial where available, else cpu)")
      ->check(one_of(engine_names(), {"none"}));
  bench->add_option("--json", o->json_file, "Write the records as a JSON array to this file");
  bench->add_option("--seed", o->seed, "Seed of the synthetic stack")->capture_default_str();
  bench->add_option("--exposures", o->exposures, "Custom shape: number of exposures")->check(CLI::PositiveNumber);
  bench->add_option("--width", o->width, "Custom shape: image width (pixels)")->check(CLI::PositiveNumber);
  bench->add_option("--height", o->height, "Custom shape: image height (pixels)")->check(CLI::PositiveNumber);
  bench->add_option("--vx", o->vx, "Custom shape: velocities along x")->check(CLI::PositiveNumber);
  bench->add_option("--vy", o->vy, "Custom shape: velocities along y")->check(CLI::PositiveNumber);
  bench->add_option("--tree-margin", o->tree.screen_margin,
                    "cpu-tree: screen z_screen = min(z_thr, candidate threshold) - this")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  bench->add_option("--tree-oversample", o->tree.oversample, "cpu-tree: node velocity step 1/(this * span)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  bench->add_option("--tree-cut", o->tree.cut_level, "cpu-tree: level formed band-wide (0: chosen)")
      ->check(CLI::NonNegativeNumber);
  bench->add_option("--tree-tile-width", o->tree.tile_width, "cpu-tree: origins per tile along x (0: chosen)")
      ->check(CLI::NonNegativeNumber);
  bench->add_option("--tree-tile-height", o->tree.tile_height, "cpu-tree: origins per tile along y (0: chosen)")
      ->check(CLI::NonNegativeNumber);
  bench->add_option("--tree-fuse-root", o->tree.fuse_root,
                    "cpu-tree and cuda-tree: form the root from its grandchildren (-1: chosen, 0: never, 1: always)")
      ->check(CLI::Range(-1, 1));
  bench->add_option("--tree-fuse-levels", o->tree.fuse_levels,
                    "cuda-tree: form a level from two levels down where the level between is parents only, "
                    "never storing it (-1: where that level holds at least half the floats of the one above, "
                    "0: never, 1: wherever it can)")
      ->check(CLI::Range(-1, 1));
  bench->add_option("--threads", o->threads,
                    "CPU threads of the searches (default: all; the stack is made with all)")
      ->check(CLI::NonNegativeNumber);
  bench->callback([o] { run_bench(*o); });
}

}  // namespace shiftstack::cli
