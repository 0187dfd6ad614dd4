// `shiftstack search`, `shiftstack dump-config` and `shiftstack write-kit`: the real-data
// pipeline (src/io) behind a thin command line.
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <sstream>

#include "commands.hpp"
#include "progress.hpp"
#include "shiftstack/digest.hpp"
#include "shiftstack/error.hpp"
#include "shiftstack/io/config.hpp"
#include "shiftstack/io/fits.hpp"
#include "shiftstack/io/results.hpp"
#include "shiftstack/run.hpp"
#include "shiftstack/io/wcs.hpp"
#include "shiftstack/limits.hpp"
#include "shiftstack/pipeline.hpp"
#include "shiftstack/synth.hpp"

namespace shiftstack::cli {

namespace {

void print_stage(const io::StageTime& s) {
  std::fprintf(stderr, "shiftstack: %-10s %8.3f s  %s\n", s.name.c_str(), s.seconds, s.detail.c_str());
  std::fflush(stderr);
}

struct SearchArgs {
  std::string config_path;
  std::vector<std::string> inputs;
  std::string output;  // empty: the config's result_filename, else results.ecsv
  std::string engine;
  std::string encoding;
  std::string gpus;  // non-empty: the config key gpus
  std::vector<std::string> overrides;
  std::string memory_budget;
  bool json = false, quiet = false, no_fits = false, no_stamps = false, unclustered = false;
};

// On a terminal: the running stage with its fraction done, rate and time left, on one line,
// redrawn twice a second so that a stage whose engine reports nothing still shows its time.
class StageMeter {
 public:
  explicit StageMeter(Progress& line) : line_(line), ticker_([this] { tick(); }) {}
  ~StageMeter() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    ticker_.join();
  }
  StageMeter(const StageMeter&) = delete;
  StageMeter& operator=(const StageMeter&) = delete;

  void update(const std::string& stage, double done, double total) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stage != stage_ || !active_) {
      stage_ = stage;
      start_ = std::chrono::steady_clock::now();
    }
    active_ = done < total;
    done_ = done;
    total_ = total;
    draw();
  }
  // A stage ended (its summary line follows).
  void finish() {
    std::lock_guard<std::mutex> lock(mutex_);
    active_ = false;
    line_.clear();
  }

 private:
  void draw() {
    if (!active_) {
      line_.clear();
      return;
    }
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    char text[160];
    if (stage_ == "read") {
      std::snprintf(text, sizeof text, "shiftstack: read      %.0f of %.0f files", done_, total_);
    } else if (elapsed > 0 && done_ > 0) {
      const double rate = done_ / elapsed, left = (total_ - done_) / rate;
      std::snprintf(text, sizeof text, "shiftstack: %-9s %5.1f%%  %.3g trials/s  %.0f s left", stage_.c_str(),
                    100 * done_ / total_, rate, left);
    } else {
      std::snprintf(text, sizeof text, "shiftstack: %-9s running, %.0f s", stage_.c_str(), elapsed);
    }
    line_.show(text);
  }
  void tick() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stopping_) {
      wake_.wait_for(lock, std::chrono::milliseconds(500));
      if (active_ && !stopping_) draw();
    }
  }

  Progress& line_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool active_ = false, stopping_ = false;
  std::string stage_;
  double done_ = 0, total_ = 0;
  std::chrono::steady_clock::time_point start_;
  std::thread ticker_;  // last: starts after the members it reads
};

void run_search_command(const SearchArgs& a) {
  const auto start = std::chrono::steady_clock::now();
  // The budget every up-front check uses (limits.hpp reads it from the environment).
  if (!a.memory_budget.empty()) {
    parse_byte_size(a.memory_budget, "--memory-budget");
    ::setenv("SHIFTSTACK_MEMORY_BUDGET", a.memory_budget.c_str(), 1);
  }
  // Layers, later ones winning: defaults, a WorkUnit's embedded configuration, --config, --set.
  std::vector<std::string> overrides = a.overrides;
  if (!a.gpus.empty()) overrides.push_back("gpus=" + a.gpus);
  std::vector<std::string> early_warnings;
  const std::vector<std::string> files = io::expand_inputs(a.inputs);
  std::vector<io::ConfigLayer> layers = io::embedded_config_layers(files, early_warnings);
  if (!a.config_path.empty()) layers.push_back(io::config_file_layer(a.config_path));
  io::SearchConfig config = io::parse_config(layers, overrides);
  if (!a.quiet) {
    for (const auto& n : config.notices) std::fprintf(stderr, "shiftstack: note: %s\n", n.c_str());
    for (const auto& w : early_warnings) std::fprintf(stderr, "shiftstack: warning: %s\n", w.c_str());
  }
  io::RunOptions options;
  options.engine = a.engine;
  if (!a.encoding.empty()) options.encoding = parse_encoding(a.encoding);
  Progress line;
  StageMeter meter(line);
  if (!a.quiet) {
    options.progress = [&](const io::StageTime& s) {
      meter.finish();
      print_stage(s);
    };
    options.stage_progress = [&](const std::string& stage, double done, double total) { meter.update(stage, done, total); };
  }
  options.keep_unclustered = a.unclustered;

  // -o wins over the configuration's result_filename (KBMOD's key).
  const std::string output = !a.output.empty() ? a.output : config.result_filename.value_or("results.ecsv");
  io::OutputPaths paths = io::OutputPaths::from(output);
  if (a.no_fits) paths.fits.clear();
  if (a.no_stamps) paths.stamps.clear();
  if (a.unclustered) paths.unclustered = paths.base + ".unclustered.ecsv";
  // Fail before hours of work if the results cannot be written, or would replace an input:
  // every output against every input file, the config and the @list files.
  std::vector<std::string> notes;
  options.inputs = io::expand_inputs(a.inputs, &notes);
  std::vector<std::string> protected_files = options.inputs;
  if (!a.config_path.empty()) protected_files.push_back(a.config_path);
  for (const auto& input : a.inputs)
    if (!input.empty() && input[0] == '@') protected_files.push_back(input.substr(1));
  const std::vector<std::string> prepared = io::prepare_outputs(paths, protected_files);
  notes.insert(notes.end(), prepared.begin(), prepared.end());

  io::RunOutput run = io::run_search(config, options);
  run.warnings.insert(run.warnings.begin(), early_warnings.begin(), early_warnings.end());
  run.warnings.insert(run.warnings.end(), notes.begin(), notes.end());  // printed at the end, kept in the summary
  io::write_outputs(run, config, paths, options.progress);
  meter.finish();
  const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!a.quiet) {
    for (const auto& w : run.warnings) std::fprintf(stderr, "shiftstack: warning: %s\n", w.c_str());
    std::fprintf(stderr, "shiftstack: %zu candidate(s) in %s (%.3f s in all; summary in %s)\n", run.detections.size(),
                 paths.ecsv.c_str(), total, paths.summary.c_str());
  }
  if (a.json) {
    nlohmann::json summary = io::run_summary(run, config, paths);
    summary["wall_seconds"] = total;
    std::cout << io::summary_text(summary);
  }
}

struct KitArgs {
  std::string workload = "ci";
  std::uint64_t seed = 1;
  std::string directory;
  bool workunit = false, compress = false, no_wcs = false;
};

void write_kit_command(const KitArgs& a) {
  namespace fs = std::filesystem;
  KitOptions options = workload(a.workload);
  options.seed = a.seed;
  const auto start = std::chrono::steady_clock::now();
  const KitStack kit = make_kit(options);
  fs::create_directories(a.directory);
  const int E = kit.stack.size();
  const std::string cards = a.no_wcs ? std::string() : io::synthetic_tan_wcs_cards(kit.stack.width(), kit.stack.height());
  if (a.workunit) {
    if (!kit.bank.curve_x.empty())
      std::fprintf(stderr, "shiftstack: note: a WorkUnit has no common-curve keywords; the kit's curve is lost\n");
    io::write_workunit_fits((fs::path(a.directory) / "workunit.fits").string(), kit.stack, a.compress);
  } else {
    std::vector<std::string> errors(E);
#pragma omp parallel for schedule(dynamic, 1)
    for (int e = 0; e < E; ++e) {
      io::WriteOptions w;
      w.curve_x = kit.bank.curve_at_x(e);
      w.curve_y = kit.bank.curve_at_y(e);
      w.extra_cards = cards;
      char name[64];
      std::snprintf(name, sizeof name, "exposure_%04d.fits", e);
      try {
        io::write_exposure_fits((fs::path(a.directory) / name).string(), kit.stack.exposures[e], w);
      } catch (const std::exception& ex) {
        errors[e] = ex.what();
      }
    }
    for (const auto& e : errors)
      if (!e.empty()) throw Error(e);
  }
  // A configuration whose velocity grid is the kit's own (ends printed exactly).
  auto exact = [](double v) {
    char text[40];
    std::snprintf(text, sizeof text, "%.17g", v);
    return std::string(text);
  };
  std::ostringstream yaml;
  yaml << "# Search configuration for the '" << options.name << "' kit written by shiftstack write-kit.\n"
       << "generator_config:\n  name: VelocityGridSearch\n"
       << "  vx_steps: " << kit.bank.vx_axis.size() << "\n  min_vx: " << exact(kit.bank.vx_axis.front())
       << "\n  max_vx: " << exact(kit.bank.vx_axis.back()) << "\n"
       << "  vy_steps: " << kit.bank.vy_axis.size() << "\n  min_vy: " << exact(kit.bank.vy_axis.front())
       << "\n  max_vy: " << exact(kit.bank.vy_axis.back()) << "\n"
       << "shift_mode: " << (kit.bank.mode == ShiftMode::integer ? "integer" : "fractional") << "\n"
       // The kit's trials (and its injected source) are anchored at mid-span.
       << "reference_time: mid\n"
       // The family-wise threshold of SPEC 4 for this bank (alpha 0.05 over every trial), rounded
       // up: noise alone then crosses it in 5% of kits, and the kit's SNR 8 source usually does.
       << "lh_level: " << std::ceil(10 * bonferroni_threshold(0.05, double(kit.stack.width()) * kit.stack.height() *
                                                                       double(kit.bank.size()))) / 10
       << "\n";
  io::write_text_file((fs::path(a.directory) / "search.yaml").string(), yaml.str());
  // The results table's x, y: the pixel the injected trajectory samples at the first epoch.
  int first_index = 0;
  for (int e = 1; e < E; ++e)
    if (kit.bank.epochs[std::size_t(e)] < kit.bank.epochs[std::size_t(first_index)]) first_index = e;
  const PixelIndex first = sampled_pixel(kit.bank, kit.truth.x, kit.truth.y, std::size_t(kit.truth.velocity), first_index);
  const nlohmann::json truth = {{"workload", options.name},
                                {"seed", options.seed},
                                {"injected", kit.truth.injected},
                                {"x", kit.truth.x},
                                {"x_first", first.x},
                                {"y_first", first.y},
                                {"y", kit.truth.y},
                                {"vx", kit.truth.vx},
                                {"vy", kit.truth.vy},
                                {"velocity_index", kit.truth.velocity},
                                {"flux", kit.truth.flux},
                                {"snr", kit.truth.snr},
                                {"t_ref", kit.bank.t_ref}};
  io::write_text_file((fs::path(a.directory) / "truth.json").string(), truth.dump(2) + "\n");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::fprintf(stderr, "shiftstack: wrote the '%s' kit (%d exposures of %dx%d) to %s in %.2f s\n", options.name.c_str(),
               E, kit.stack.width(), kit.stack.height(), a.directory.c_str(), seconds);
  std::fprintf(stderr, "shiftstack: search it with: shiftstack search --config %s %s -o results.ecsv\n",
               (fs::path(a.directory) / "search.yaml").string().c_str(), a.directory.c_str());
}

}  // namespace

void add_search_commands(CLI::App& app) {
  // ---- search ----
  auto args = std::make_shared<SearchArgs>();
  CLI::App* search = app.add_subcommand(
      "search", "Search FITS exposures (files, directories, globs, @lists) for moving objects");
  search->footer("Configuration: defaults < a WorkUnit's embedded configuration < --config FILE < --set KEY=VALUE.\n"
                 "Results: docs/user-guide.md (columns, KBMOD keys, formats).");
  search->add_option("--config,-c", args->config_path, "YAML configuration (defaults: shiftstack dump-config)")
      ->check(CLI::ExistingFile);
  search->add_option("inputs", args->inputs, "FITS files, directories, glob patterns or @list files")->required();
  search->add_option("--output,-o", args->output,
                     "results table NAME.ecsv (or NAME.fits); NAME.ecsv, NAME.fits, NAME.stamps.fits and "
                     "NAME.summary.json are all written (default: the config's result_filename, else results.ecsv)");
  search->add_option("--engine", args->engine, "search engine (overrides the config's `engine`)");
  search->add_option("--encoding", args->encoding, "psi/phi storage: fp32, fp16 or int8 (overrides encode_num_bytes)")
      ->check(CLI::IsMember({"fp32", "fp16", "int8"}));
  search->add_option("--gpus", args->gpus,
                     "split the search over GPUs: all, N (the first N) or a list 0,1 (the config's `gpus`)");
  // One value per --set, so that inputs after it are not taken as more overrides.
  search->add_option("--set", args->overrides, "override a config key: --set lh_level=8 --set generator_config.vx_steps=33")
      ->allow_extra_args(false);
  search->add_option("--memory-budget", args->memory_budget,
                     "memory the run may plan to use, e.g. 16G (default: SHIFTSTACK_MEMORY_BUDGET, else half the "
                     "machine's memory); larger searches or images are refused up front");
  search->add_flag("--json", args->json, "print the run summary as JSON on stdout");
  search->add_flag("--quiet,-q", args->quiet, "no progress on stderr");
  search->add_flag("--no-fits", args->no_fits, "do not write the FITS results table");
  search->add_flag("--no-stamps", args->no_stamps, "do not write the stamps FITS file");
  search->add_flag("--unclustered", args->unclustered,
                   "also write NAME.unclustered.ecsv: every filtered detection before clustering, with the row it "
                   "was merged into (cluster_row)");
  search->callback([args] { run_search_command(*args); });

  // ---- dump-config ----
  CLI::App* dump = app.add_subcommand("dump-config", "Print the default search configuration (commented YAML)");
  dump->callback([] { std::cout << io::default_config_text(); });

  // ---- write-kit ----
  auto kit = std::make_shared<KitArgs>();
  CLI::App* write = app.add_subcommand(
      "write-kit", "Write a benchmark kit (docs/specification.md section 3) as FITS files, with a matching search.yaml and truth.json");
  write->add_option("--workload,-w", kit->workload, "ci, kbmod, dense or deep")
      ->check(CLI::IsMember(workload_names()))
      ->capture_default_str();
  write->add_option("--seed", kit->seed, "kit seed")->capture_default_str();
  write->add_option("--out,-o", kit->directory, "folder to write into (created)")->required();
  write->add_flag("--workunit", kit->workunit, "one KBMOD WorkUnit file instead of one file per exposure");
  write->add_flag("--compress", kit->compress, "tile-compress the WorkUnit's planes (lossless)");
  write->add_flag("--no-wcs", kit->no_wcs, "write no WCS keywords");
  write->callback([kit] { write_kit_command(*kit); });
}

}  // namespace shiftstack::cli
