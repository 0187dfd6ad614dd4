// `shiftstack search`, `shiftstack dump-config` and `shiftstack write-kit`: the real-data
// pipeline (src/io) behind a thin command line.
#include <chrono>
#include <cstdlib>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <sstream>

#include "commands.hpp"
#include "shiftstack/digest.hpp"
#include "shiftstack/error.hpp"
#include "shiftstack/io/config.hpp"
#include "shiftstack/io/fits.hpp"
#include "shiftstack/io/results.hpp"
#include "shiftstack/run.hpp"
#include "shiftstack/io/wcs.hpp"
#include "shiftstack/limits.hpp"
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
  std::string output = "results.ecsv";
  std::string engine;
  std::string encoding;
  std::string gpus;  // non-empty: the config key gpus
  std::vector<std::string> overrides;
  std::string memory_budget;
  bool json = false, quiet = false, no_fits = false, no_stamps = false;
};

void run_search_command(const SearchArgs& a) {
  const auto start = std::chrono::steady_clock::now();
  // The budget every up-front check uses (limits.hpp reads it from the environment).
  if (!a.memory_budget.empty()) {
    parse_byte_size(a.memory_budget, "--memory-budget");
    ::setenv("SHIFTSTACK_MEMORY_BUDGET", a.memory_budget.c_str(), 1);
  }
  std::vector<std::string> overrides = a.overrides;
  if (!a.gpus.empty()) overrides.push_back("gpus=" + a.gpus);
  io::SearchConfig config = a.config_path.empty() ? io::parse_config("", "defaults", overrides)
                                                  : io::load_config(a.config_path, overrides);
  io::RunOptions options;
  options.inputs = a.inputs;
  options.engine = a.engine;
  if (!a.encoding.empty()) options.encoding = parse_encoding(a.encoding);
  if (!a.quiet) options.progress = print_stage;

  io::OutputPaths paths = io::OutputPaths::from(a.output);
  if (a.no_fits) paths.fits.clear();
  if (a.no_stamps) paths.stamps.clear();
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
  run.warnings.insert(run.warnings.end(), notes.begin(), notes.end());  // printed at the end, kept in the summary
  io::write_outputs(run, config, paths, a.quiet ? std::function<void(const io::StageTime&)>() : print_stage);
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
       // The family-wise threshold of SPEC 4 for this bank (alpha 0.05 over every trial), rounded
       // up: noise alone then crosses it in 5% of kits, and the kit's SNR 8 source usually does.
       << "lh_level: " << std::ceil(10 * bonferroni_threshold(0.05, double(kit.stack.width()) * kit.stack.height() *
                                                                       double(kit.bank.size()))) / 10
       << "\n";
  io::write_text_file((fs::path(a.directory) / "search.yaml").string(), yaml.str());
  const nlohmann::json truth = {{"workload", options.name},
                                {"seed", options.seed},
                                {"injected", kit.truth.injected},
                                {"x", kit.truth.x},
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
  search->add_option("--config,-c", args->config_path, "YAML configuration (defaults: shiftstack dump-config)")
      ->check(CLI::ExistingFile);
  search->add_option("inputs", args->inputs, "FITS files, directories, glob patterns or @list files")->required();
  search->add_option("--output,-o", args->output,
                     "results table (.ecsv); NAME.fits, NAME.stamps.fits and NAME.summary.json are written beside it")
      ->capture_default_str();
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
  search->callback([args] { run_search_command(*args); });

  // ---- dump-config ----
  CLI::App* dump = app.add_subcommand("dump-config", "Print the default search configuration (commented YAML)");
  dump->callback([] { std::cout << io::default_config_text(); });

  // ---- write-kit ----
  auto kit = std::make_shared<KitArgs>();
  CLI::App* write = app.add_subcommand(
      "write-kit", "Write a benchmark kit (SPEC 3) as FITS files, with a matching search.yaml and truth.json");
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
