// The search pipeline end to end: files -> ExposureStack -> likelihood -> encoding -> engine
// -> filtering -> clustering -> stamps and sky positions -> result files. `shiftstack search`
// is a thin layer over run_search() and write_outputs().
#pragma once
#include <atomic>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "shiftstack/io/config.hpp"
#include "shiftstack/io/fits.hpp"
#include "shiftstack/io/results.hpp"
#include "shiftstack/pipeline.hpp"
#include "shiftstack/search.hpp"

namespace shiftstack::io {

struct StageTime {
  std::string name;
  double seconds = 0;
  std::string detail;
};

struct RunOptions {
  std::vector<std::string> inputs;          // files, directories, globs, @lists
  std::string engine;                       // non-empty: overrides the config's engine
  std::optional<Encoding> encoding;         // overrides encode_num_bytes
  // Called after each stage (the CLI prints to stderr); may be empty.
  std::function<void(const StageTime&)> progress;
  // Called during long stages (read: files, search: trials) with work done and total; may be empty.
  std::function<void(const std::string& stage, double done, double total)> stage_progress;
  bool keep_unclustered = false;  // keep the detections before clustering (RunOutput::unclustered)
  // Cooperative stop (a host's Ctrl-C): checked after every stage and passed to the engine;
  // once true the run throws Cancelled. Null: never stopped.
  const std::atomic<bool>* stop = nullptr;
};

struct RunOutput {
  std::vector<std::string> files;
  LoadedStack loaded;        // the exposures (sorted by epoch), their metadata and WCS
  MotionBank bank;
  int width = 0, height = 0;   // of the images searched
  std::string reference_time;  // what bank.t_ref is: "mid", "first" or "MJD <value>"
  std::string engine;
  Encoding encoding = Encoding::fp32;
  std::string likelihood_device = "cpu";  // where psi/phi were computed and encoded: cpu or gpu
  std::vector<int> devices;  // the search's device bands (config gpus); {0}: one search, as always
  Digest digest;             // of the whole search (SPEC 4)
  std::int64_t threshold_crossings = 0;  // candidates the engine returned (Z > lh_level)
  FilterStats filter;
  std::int64_t before_clustering = 0;
  std::int64_t thinned = 0;              // removed by gpu_filter, results_per_pixel, near_dup_thresh
  std::vector<Detection> detections;     // best first
  // With RunOptions::keep_unclustered: the detections clustering saw, each with the row of
  // `detections` it was merged into (-1: none).
  std::vector<Detection> unclustered;
  std::vector<int> unclustered_row;
  // stamps[k][i]: coadd k (in coadd_types order) of detection i.
  std::vector<CoaddType> coadd_types;
  std::vector<std::vector<Image<float>>> stamps;
  std::vector<std::vector<Image<float>>> all_stamps;  // [detection][epoch] when save_all_stamps
  bool have_sky = false, have_global = false;
  std::vector<std::vector<SkyPosition>> sky_image, sky_global;  // [detection][epoch]; NaN where no WCS
  std::vector<SkyPosition> sky_first, sky_last;  // per detection; NaN where no WCS
  std::vector<StageTime> stages;
  std::vector<std::string> warnings;
};

// Reads the inputs and runs everything up to the results (no files written).
RunOutput run_search(const SearchConfig& config, const RunOptions& options);
// The same from exposures already in memory (curve offsets and WCS may be empty).
RunOutput run_search(const SearchConfig& config, LoadedStack loaded, const RunOptions& options);

// Inputs a host keeps between runs of one in-memory stack (the Python module's Stack). The run
// reads the exposures in place (RunOutput::loaded gets their metadata, not their pixels) and takes
// the likelihood maps and encoded cube from here when both are given, so repeated runs neither
// recompute them nor upload the cube again (device caches key on EncodedStack::id). Unused for
// likelihood_device gpu, which always computes the maps on the device.
struct SharedInputs {
  const LoadedStack* loaded = nullptr;          // required; curve offsets, info and WCS filled in
  const LikelihoodStack* likelihood = nullptr;  // with covariances for fractional runs
  const EncodedStack* encoded = nullptr;        // `likelihood` in the run's encoding
};
RunOutput run_search(const SearchConfig& config, const SharedInputs& inputs, const RunOptions& options);

// The results table: KBMOD's columns (x, y: the first-epoch pixel; vx, vy, likelihood, flux,
// obs_count, uuid, psi_curve, phi_curve, obs_valid, stamp, coadd_<type>, all_stamps, pred_x,
// pred_y, img_ra, img_dec, global_ra, global_dec) and shiftstack's (x_ref, y_ref at t_ref,
// search_likelihood, cluster_size, ra/dec at the first and last epoch), with KBMOD's table
// metadata (wcs, mjd_mid, mjd_utc_mid, mjd_tai_mid, num_img, dims). drop_columns and
// generate_psi_phi apply.
ResultTable make_result_table(const RunOutput& run, const SearchConfig& config);
// The detections before clustering (RunOutput::unclustered) with the same scalar and curve
// columns and `cluster_row`, the row of the clustered table each was merged into (-1: none).
ResultTable make_unclustered_table(const RunOutput& run, const SearchConfig& config);

struct OutputPaths {
  std::string ecsv, fits, stamps, summary;  // empty: not written
  std::string unclustered;                  // NAME.unclustered.ecsv when asked for
  std::string base;                         // NAME: separate column files are NAME_<column>.fits
  // From -o NAME.ecsv or NAME.fits (or NAME): NAME.ecsv, NAME.fits, NAME.stamps.fits,
  // NAME.summary.json. Any other extension is an error naming the formats written.
  static OutputPaths from(const std::string& output);
};

// Writes every requested file and appends a "write" stage to run.stages. The files are one set,
// committed all or nothing (docs/reliability.md): a crash at any point leaves the previous set
// or the new one under the final names, never a mix.
void write_outputs(RunOutput& run, const SearchConfig& config, const OutputPaths& paths,
                   const std::function<void(const StageTime&)>& progress = {});

// Error when an output would replace one of `inputs` (same file, links followed).
void check_outputs_against_inputs(const OutputPaths& paths, const std::vector<std::string>& inputs);
// The checks a run makes before any work: no output replaces an input, the output folder exists
// and is writable, no other run writes the same set (its lock is then held until the process
// ends); removes what interrupted runs left. Returns notes for the user.
std::vector<std::string> prepare_outputs(const OutputPaths& paths, const std::vector<std::string>& inputs);
// The summary as text; invalid UTF-8 shown as U+FFFD, with a note added to `warnings`.
std::string summary_text(const nlohmann::json& summary, std::vector<std::string>* warnings = nullptr);

// The run summary: inputs, effective config, engine, per-stage times, digest, counts, outputs.
nlohmann::json run_summary(const RunOutput& run, const SearchConfig& config, const OutputPaths& paths);

}  // namespace shiftstack::io
