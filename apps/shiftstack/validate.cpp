// `shiftstack validate`: sensitivity validation of one engine x encoding against the FP32 exact
// gather (SPEC 7), the quantization table (SPEC 5), the fractional-shift normalization study
// (SPEC 2) and a summary across saved reports.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>

#include "commands.hpp"
#include "validation/run_info.hpp"
#include "shiftstack/error.hpp"
#include "shiftstack/search.hpp"
#include "shiftstack/tree.hpp"
#include "shiftstack/validation.hpp"

namespace shiftstack::cli {

namespace {

struct ValidateArgs {
  std::vector<std::string> engines = {"reference"};
  std::vector<std::string> encodings = {"fp32"};
  std::string baseline = "reference";
  std::string workload = "ci";
  std::string shift_mode = "integer";
  int pairs = 16;
  std::uint64_t seed = 1;
  int bootstrap = 2000;
  std::vector<double> snr_grid = {3, 4, 4.5, 5, 5.5, 6, 7, 8};
  double matched_z = 5;
  double near_fwhm = 1;
  int null_window = 0;
  std::string placement = "random";
  std::string kit_masks = "standard";
  int first_pair = 0;
  bool no_completeness = false;
  bool sequential = false;
  std::string save_records;
  std::vector<std::string> merge;
  std::string out;
  std::string card, commit;
  std::size_t quantization_samples = 1 << 20;
  bool skip_quantization = false;
  bool verbose = false;
  bool list_engines = false;
  // fractional study
  bool fractional_study = false;
  std::vector<double> sigmas = {0.55, 0.65, 0.85};
  int cubes = 8;
  bool fourier = false;
  int width = 0, height = 0, exposures = 0, velocities = 0;  // workload overrides (0 = keep)
  // summary
  std::vector<std::string> summarize;
  // tree study
  bool tree_study = false;
  int injections = 30;
  std::vector<double> margins = {0.5, 1.0, 1.5, 2.5};
};

Provenance provenance(const ValidateArgs& a, const std::string& command) {
  Provenance p;
  bool gpu = false;
  for (const auto& e : engines())
    for (const auto& name : a.engines) gpu |= e.name == name && e.gpu;
  p.card = !a.card.empty() ? a.card : machine_name(gpu);
  p.commit = !a.commit.empty() ? a.commit : commit_id();
  p.date = utc_now();
  p.command = command;
  return p;
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  require(bool(out), "cannot write '" + path + "'");
  out << text;
  require(bool(out), "error while writing '" + path + "'");
}

std::string join(const std::vector<double>& values) {
  std::ostringstream s;
  for (std::size_t i = 0; i < values.size(); ++i) s << (i ? "," : "") << values[i];
  return s.str();
}

void ensure_folder(const std::string& folder) {
  std::error_code ec;
  std::filesystem::create_directories(folder, ec);
  require(!ec && std::filesystem::is_directory(folder), "cannot create output folder '" + folder + "'");
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  require(bool(in), "cannot read '" + path + "'");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Reports of one run (collected here or merged from records) into <out>/<engine>-<encoding>...
void write_reports(const std::vector<ValidationReport>& reports, const std::vector<QuantizationRow>& quantization,
                   const Provenance& p, const std::string& out, const std::vector<std::string>& skipped) {
  for (const auto& report : reports) {
    std::cout << format_table(report) << "\n";
    if (out.empty()) continue;
    // Fractional runs get their own folders beside the integer ones.
    const KitOptions& kit = report.options.kit;
    const std::string folder = out + "/" + report.options.engine + "-" + to_string(report.options.encoding) +
                               (kit.shift_mode == ShiftMode::fractional ? "-fractional" : "");
    ensure_folder(folder);
    write_text(folder + "/report.json", to_json(report, quantization, p));
    write_text(folder + "/report.txt", format_table(report) + (quantization.empty() ? "" : format_table(quantization)));
    write_plots(report, p, folder);
    std::cerr << "wrote " << folder << "/report.json, report.txt and plots\n";
  }
  if (!quantization.empty()) std::cout << format_table(quantization);
  for (const auto& line : skipped) std::cout << "not supported, skipped: " << line << "\n";
}

// Merged records carry the provenance of their parts: one card and commit, the latest date, and
// every part's command.
Provenance merged_provenance(const std::vector<Provenance>& parts, const std::string& merge_command) {
  Provenance p = parts.front();
  for (const auto& q : parts) {
    require(q.card == p.card && q.commit == p.commit,
            "merge: the records come from different machines or commits ('" + p.card + "' " + p.commit + " vs '" +
                q.card + "' " + q.commit + ")");
    p.date = std::max(p.date, q.date);
  }
  p.command = merge_command;
  for (const auto& q : parts) p.command += " ; part: " + q.command;
  return p;
}

void run(const ValidateArgs& a) {
  if (a.list_engines) {
    for (const auto& info : engines())
      std::cout << info.name << (info.gpu ? "  gpu" : "  cpu") << (info.available() ? "  available" : "  unavailable")
                << "  " << info.description << "\n";
    return;
  }
  if (!a.summarize.empty()) {
    const std::string folder = a.out.empty() ? "." : a.out;
    const std::string table = summarize_reports(a.summarize, folder);
    std::cout << table;
    write_text(folder + "/summary.txt", table);
    std::cerr << "wrote " << folder << "/summary.txt, summary_retention.svg, summary_null_variance.svg\n";
    return;
  }
  if (!a.merge.empty()) {
    std::vector<ValidationRecords> parts;
    std::vector<Provenance> provenances;
    std::vector<QuantizationRow> quantization;
    std::string command = "shiftstack validate --merge";
    for (const auto& file : a.merge) {
      std::vector<QuantizationRow> q;
      Provenance p;
      parts.push_back(records_from_json(read_text(file), &q, &p));
      provenances.push_back(p);
      if (quantization.empty()) quantization = q;
      command += " " + std::filesystem::path(file).filename().string();
    }
    const ValidationRecords merged = merge_validation_records(parts);
    const Provenance p = merged_provenance(provenances, command);
    if (!a.save_records.empty()) {
      write_text(a.save_records, to_json(merged, quantization, p));
      std::cerr << "wrote " << a.save_records << " (merged records of pairs " << merged.options.first_pair << ".."
                << merged.options.first_pair + merged.options.pairs - 1 << ")\n";
    }
    write_reports(validation_reports(merged), quantization, p, a.out, merged.skipped);
    return;
  }
  require(a.shift_mode == "integer" || a.shift_mode == "fractional",
          "--shift-mode must be integer or fractional, got '" + a.shift_mode + "'");
  KitOptions kit = workload(a.workload);
  if (a.width > 0) kit.width = a.width;
  if (a.height > 0) kit.height = a.height;
  if (a.exposures > 0) kit.exposures = a.exposures;
  if (a.velocities > 0) kit.vx_count = kit.vy_count = a.velocities;
  // Mask layouts: SPEC 3's (holes and a bad column that moves every exposure, which leaves few
  // trials away from masks), holes only (sparse: many trials away from masks), or none.
  require(a.kit_masks == "standard" || a.kit_masks == "sparse" || a.kit_masks == "none",
          "--kit-masks must be standard, sparse or none, got '" + a.kit_masks + "'");
  kit.masked_holes = a.kit_masks != "none";
  kit.bad_column = a.kit_masks == "standard";
  kit.shift_mode = a.shift_mode == "integer" ? ShiftMode::integer : ShiftMode::fractional;

  if (a.fractional_study) {
    FractionalOptions f;
    require(a.engines.size() == 1, "--fractional-study takes one engine");
    f.engine = a.engines.front();
    f.kit = kit;
    f.psf_sigmas = a.sigmas;
    f.cubes = a.cubes;
    f.seed = a.seed;
    f.near_mask_fwhm = a.near_fwhm;
    f.fourier = a.fourier;
    f.verbose = a.verbose;
    const std::string command = "shiftstack validate --fractional-study --engine " + a.engines.front() + " --workload " +
                                a.workload + " --sigmas " + join(a.sigmas) + " --cubes " + std::to_string(a.cubes) +
                                " --seed " + std::to_string(a.seed) + (a.fourier ? " --fourier" : "") +
                                " --width " + std::to_string(kit.width) + " --height " + std::to_string(kit.height) +
                                " --exposures " + std::to_string(kit.exposures) + " --velocities " +
                                std::to_string(kit.vx_count);
    const FractionalReport report = run_fractional_study(f);
    std::cout << format_table(report);
    if (!a.out.empty()) {
      ensure_folder(a.out);
      const Provenance p = provenance(a, command);
      write_text(a.out + "/fractional.json", to_json(report, p));
      write_plots(report, p, a.out);
      std::cerr << "wrote " << a.out << "/fractional.json and fractional_variance.svg\n";
    }
    return;
  }

  if (a.tree_study) {
    TreeStudyOptions t;
    t.kit = kit;
    t.seed = a.seed;
    t.null_cubes = a.cubes;
    t.injections_per_snr = a.injections;
    t.retention_injections = std::max(a.pairs, 1);
    if (a.snr_grid != ValidateArgs{}.snr_grid) t.completeness_snr = a.snr_grid;
    t.margins = a.margins;
    t.verbose = a.verbose;
    const auto named = [&](const char* n) { return std::find(a.engines.begin(), a.engines.end(), n) != a.engines.end(); };
    t.bf16 = named("cuda-tree-bf16");
    t.gpu = t.bf16 || named("cuda-tree");
    if (a.null_window > 0) t.null_window = a.null_window;
    std::string snr;
    for (std::size_t i = 0; i < t.completeness_snr.size(); ++i) snr += (i ? "," : "") + std::to_string(t.completeness_snr[i]);
    const std::string command = "shiftstack validate --tree-study " + (t.gpu ? "--engine " + t.tree_name() + " " : "") +
                                "--workload " + a.workload + " --pairs " +
                                std::to_string(t.retention_injections) + " --cubes " + std::to_string(a.cubes) +
                                " --injections " + std::to_string(a.injections) + " --margins " + join(a.margins) +
                                " --snr-grid " + join(t.completeness_snr) + " --seed " + std::to_string(a.seed) +
                                " --null-window " + std::to_string(t.null_window) +
                                (a.width > 0 ? " --width " + std::to_string(a.width) : "") +
                                (a.height > 0 ? " --height " + std::to_string(a.height) : "");
    const TreeStudyReport report = run_tree_study(t);
    std::cout << format_table(report);
    if (!a.out.empty()) {
      ensure_folder(a.out);
      const Provenance p = provenance(a, command);  // the GPU's name when the engine studied is a GPU engine
      write_text(a.out + "/tree_study.json", to_json(report, p));
      write_text(a.out + "/tree_study.txt", format_table(report));
      write_tree_study_plots(report, a.out, p.card + ", " + p.commit + ", " + p.date);
      std::cerr << "wrote " << a.out << "/tree_study.json, tree_study.txt and the plots\n";
    }
    return;
  }

  ValidationOptions o;
  o.baseline_engine = a.baseline;
  o.kit = kit;
  o.pairs = a.pairs;
  o.seed = a.seed;
  o.bootstrap_resamples = a.bootstrap;
  o.completeness_snr = a.snr_grid;
  o.matched_z = a.matched_z;
  o.near_mask_fwhm = a.near_fwhm;
  o.null_window = a.null_window;
  require(a.placement == "random" || a.placement == "away",
          "--null-window-placement must be random or away, got '" + a.placement + "'");
  o.null_window_placement = a.placement == "away" ? NullWindowPlacement::away : NullWindowPlacement::random;
  o.first_pair = a.first_pair;
  if (a.no_completeness) o.completeness_snr.clear();
  o.concurrent = !a.sequential;
  o.verbose = a.verbose;
  validate(o);
  // "gpu" and "all" stand for every available GPU engine / every available engine.
  std::vector<std::string> engine_list;
  for (const auto& name : a.engines) {
    if (name != "gpu" && name != "all") {
      engine_list.push_back(name);
      continue;
    }
    for (const auto& info : engines())
      if ((name == "all" || info.gpu) && info.available()) engine_list.push_back(info.name);
  }
  require(!engine_list.empty(), "validate: no engine selected (no GPU engine available here?)");
  // Fail on an unknown or unavailable engine or encoding before any cube is made.
  std::vector<MethodSpec> methods;
  for (const auto& engine : engine_list) {
    make_engine(engine);
    for (const auto& encoding : a.encodings) methods.push_back({engine, parse_encoding(encoding)});
  }
  make_engine(o.baseline_engine);
  std::string listed_engines, listed_encodings;
  for (const auto& e : engine_list) listed_engines += (listed_engines.empty() ? "" : ",") + e;
  for (const auto& e : a.encodings) listed_encodings += (listed_encodings.empty() ? "" : ",") + e;
  const std::string command = "shiftstack validate --engine " + listed_engines + " --encoding " + listed_encodings +
                              " --baseline " + a.baseline + " --workload " + a.workload + " --shift-mode " +
                              a.shift_mode + " --pairs " + std::to_string(a.pairs) + " --seed " +
                              std::to_string(a.seed) +
                              (a.null_window > 0 ? " --null-window " + std::to_string(a.null_window) : "") +
                              (a.placement != "random" ? " --null-window-placement " + a.placement : "") +
                              (a.kit_masks != "standard" ? " --kit-masks " + a.kit_masks : "") +
                              (a.first_pair > 0 ? " --first-pair " + std::to_string(a.first_pair) : "") +
                              (a.no_completeness ? " --no-completeness" : "") +
                              (a.width > 0 ? " --width " + std::to_string(a.width) : "") +
                              (a.height > 0 ? " --height " + std::to_string(a.height) : "") +
                              (a.exposures > 0 ? " --exposures " + std::to_string(a.exposures) : "") +
                              (a.velocities > 0 ? " --velocities " + std::to_string(a.velocities) : "");

  const ValidationRecords records = collect_validation_records(o, methods);
  std::vector<QuantizationRow> quantization;
  if (!a.skip_quantization) quantization = quantization_table(a.quantization_samples, 8, a.seed, kit);
  const Provenance p = provenance(a, command);
  if (!a.save_records.empty()) {
    const std::filesystem::path folder = std::filesystem::path(a.save_records).parent_path();
    if (!folder.empty()) ensure_folder(folder.string());
    write_text(a.save_records, to_json(records, quantization, p));
    std::cerr << "wrote " << a.save_records << " (raw records of pairs " << o.first_pair << ".."
              << o.first_pair + o.pairs - 1 << ")\n";
    if (a.out.empty()) {
      for (const auto& line : records.skipped) std::cout << "not supported, skipped: " << line << "\n";
      return;
    }
  }
  write_reports(validation_reports(records), quantization, p, a.out, records.skipped);
}

}  // namespace

void add_validate_command(CLI::App& app) {
  auto args = std::make_shared<ValidateArgs>();
  CLI::App* cmd = app.add_subcommand(
      "validate",
      "Sensitivity validation (docs/specification.md section 7): SNR retention vs the FP32 exact gather on paired null/injection cubes, "
      "null variance and excursions near/away from masks, completeness at matched false alarms, the quantization "
      "table; or --fractional-study, or --summarize saved reports");
  cmd->add_option("--engine", args->engines,
                  "engine(s) under test, comma-separated (gpu = every available GPU engine, all = every "
                  "available engine); all run on the same cubes against one baseline run")
      ->delimiter(',');
  cmd->add_option("--encoding", args->encodings, "storage encoding(s): fp32, fp16, int8, comma-separated")
      ->delimiter(',');
  cmd->add_option("--baseline", args->baseline,
                  "the FP32 exact gather to compare with, on fp32 storage (reference, cpu, or a GPU gather)")
      ->capture_default_str();
  cmd->add_option("--pairs", args->pairs, "paired null/injection cubes")->capture_default_str();
  cmd->add_option("--workload", args->workload, "named workload (dense, kbmod, deep, ci)")->capture_default_str();
  cmd->add_option("--shift-mode", args->shift_mode, "integer or fractional")->capture_default_str();
  cmd->add_option("--seed", args->seed, "first kit seed (pair j uses seed + j)")->capture_default_str();
  cmd->add_option("--bootstrap", args->bootstrap, "bootstrap resamples for the retention interval")
      ->capture_default_str();
  cmd->add_option("--snr-grid", args->snr_grid, "injected SNRs of the completeness curve")->delimiter(',');
  cmd->add_option("--matched-z", args->matched_z,
                  "false-alarm budget: baseline null trials above this z; every method gets the same count")
      ->capture_default_str();
  cmd->add_option("--near-fwhm", args->near_fwhm,
                  "a trial is near a mask when a sample is within this many PSF FWHM of a masked pixel or the edge")
      ->capture_default_str();
  cmd->add_option("--out", args->out,
                  "folder; each method's report.json, report.txt and SVG plots go to <out>/<engine>-<encoding>/ "
                  "(-fractional appended for fractional shifts); the fractional study writes fractional.json and "
                  "fractional_variance.svg into <out>");
  cmd->add_option("--null-window", args->null_window,
                  "null bank = origins in a random square of this side per cube (0 = whole image)")
      ->capture_default_str();
  cmd->add_option("--null-window-placement", args->placement,
                  "random, or away: each cube's window where the most trials lie away from masks (chosen from the "
                  "masks alone, not the noise)")
      ->capture_default_str();
  cmd->add_option("--kit-masks", args->kit_masks,
                  "standard (specification section 3: holes and a moving bad column), sparse (holes only), or none")
      ->capture_default_str();
  cmd->add_option("--first-pair", args->first_pair,
                  "index of the first pair (kit seed = --seed + index): runs over pair ranges merge exactly")
      ->capture_default_str();
  cmd->add_flag("--no-completeness", args->no_completeness, "skip the completeness cubes (null calibration runs)");
  cmd->add_flag("--sequential", args->sequential,
                "one method at a time, no overlap of cube making and searches (same numbers, slower)");
  cmd->add_option("--save-records", args->save_records,
                  "write the raw per-pair observations to this JSON file (reports too if --out is given); with "
                  "--merge, the merged records");
  cmd->add_option("--merge", args->merge,
                  "instead: merge records files of the same set-up over adjoining pair ranges into reports (--out)");
  cmd->add_option("--card", args->card, "hardware name for the report (default: the CPU model for CPU engines)");
  cmd->add_option("--commit", args->commit, "source revision for the report (default: git describe)");
  cmd->add_option("--quantization-samples", args->quantization_samples,
                  "unit-normal draws per batch (8 batches) for the quantization table")
      ->capture_default_str();
  cmd->add_flag("--no-quantization", args->skip_quantization, "skip the quantization table");
  cmd->add_flag("--fractional-study", args->fractional_study,
                "instead: null variance of fractional shifts, exact vs naive normalization, per PSF sigma");
  cmd->add_flag("--tree-study", args->tree_study,
                "instead: cpu-tree's study: retention of the unrefined tree Z (--pairs noise-free injections at "
                "random sub-pixel origins and velocities), its null variance near/away from masks (--cubes null "
                "cubes), and completeness of cpu-tree at each --margins against cpu (--injections per SNR); with "
                "--engine cuda-tree (or cuda-tree-bf16), the same study of that engine against cuda-fast on the GPU");
  cmd->add_option("--injections", args->injections, "tree study: noisy injections per SNR")->capture_default_str();
  cmd->add_option("--margins", args->margins, "tree study: screen margins of cpu-tree")->delimiter(',');
  cmd->add_option("--sigmas", args->sigmas, "PSF sigmas of the fractional study (px)")->delimiter(',');
  cmd->add_option("--cubes", args->cubes, "null cubes per PSF sigma in the fractional study")->capture_default_str();
  cmd->add_flag("--fourier", args->fourier,
                "fractional study: also the band-limited (Fourier-shift) route, exact and naive (small cubes)");
  cmd->add_option("--width", args->width, "override the workload's image width");
  cmd->add_option("--height", args->height, "override the workload's image height");
  cmd->add_option("--exposures", args->exposures, "override the workload's exposure count");
  cmd->add_option("--velocities", args->velocities, "override the workload's velocity grid (n x n)");
  cmd->add_option("--summarize", args->summarize, "instead: summarize these report.json files (plots into --out)");
  cmd->add_flag("-v,--verbose", args->verbose, "progress on stderr");
  cmd->add_flag("--list-engines", args->list_engines, "list the registered engines and exit");
  cmd->callback([args] { run(*args); });
}

}  // namespace shiftstack::cli
