// The search pipeline, stage by stage, with a wall-clock time per stage.
#include "shiftstack/run.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <future>
#include <limits>
#include <sstream>

#include "shiftstack/encoding.hpp"
#include "shiftstack/error.hpp"
#include "shiftstack/likelihood.hpp"
#include "pipeline/stages.hpp"
#ifdef SHIFTSTACK_HAVE_CUDA
#include "cuda/common/likelihood_gpu.hpp"
#endif

namespace shiftstack::io {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

struct StageRecorder {
  RunOutput& out;
  const std::function<void(const StageTime&)>& progress;
  const std::atomic<bool>* stop = nullptr;
  std::optional<double> timeout_hours;
  Clock::time_point run_start = Clock::now();
  void record(const std::string& name, Clock::time_point start, const std::string& detail) {
    StageTime s{name, seconds_since(start), detail};
    out.stages.push_back(s);
    if (progress) progress(s);
    if (stop && stop->load()) throw Cancelled("run stopped on request after the " + name + " stage");
    // KBMOD's timeout_hours: a soft limit, checked between stages.
    if (timeout_hours && seconds_since(run_start) > *timeout_hours * 3600)
      throw Error("the run exceeded timeout_hours = " + std::to_string(*timeout_hours) + " after the " + name + " stage");
  }
};

void run_from_loaded(const SearchConfig& config, RunOutput& out, const RunOptions& options,
                     std::future<void>* device_warm_up = nullptr, const SharedInputs* shared = nullptr,
                     Clock::time_point run_start = Clock::now()) {
  StageRecorder stage{out, options.progress, options.stop, config.timeout_hours, run_start};
  // With SharedInputs the exposures are read in place; out.loaded holds their metadata only.
  const LoadedStack& loaded = shared ? *shared->loaded : out.loaded;
  const ExposureStack& stack = loaded.stack;

  auto start = Clock::now();
  out.width = stack.width();
  out.height = stack.height();
  BankStage bank = build_bank(config, loaded);
  out.bank = std::move(bank.bank);
  out.reference_time = bank.reference_time;
  stage.record("bank", start, bank.detail);

  // The host's maps and cube, when it keeps them (SharedInputs); checked against this run.
  const bool reuse = shared && shared->likelihood && shared->encoded && config.likelihood_device != "gpu";
  start = Clock::now();
  if (device_warm_up && device_warm_up->valid()) device_warm_up->get();
  LikelihoodMaps maps = reuse ? kept_maps(*shared->likelihood, stack, out.bank.mode)
                              : compute_maps(config, stack, out.bank.mode);
  out.likelihood_device = maps.on_gpu() ? "gpu" : "cpu";
  out.warnings.insert(out.warnings.end(), maps.warnings.begin(), maps.warnings.end());
  stage.record("likelihood", start, maps.detail);

  start = Clock::now();
  out.encoding = options.encoding.value_or(config.encoding);
  EncodeStage encoded = reuse ? kept_cube(*shared->encoded, out.encoding, stack.size()) : encode_maps(maps, out.encoding);
  stage.record("encode", start, encoded.detail);

  start = Clock::now();
  ProgressCallback search_progress;
  if (options.stage_progress)
    search_progress = [&](std::int64_t done, std::int64_t total) { options.stage_progress("search", double(done), double(total)); };
  SearchStage searched = search_stage(config, options.engine, std::move(encoded), out.bank, maps.on_gpu(), options.stop,
                                      search_progress);
  out.warnings.insert(out.warnings.end(), searched.warnings.begin(), searched.warnings.end());
  out.engine = searched.result.engine;
  out.devices = searched.devices;
  out.digest = searched.result.digest;
  out.threshold_crossings = std::int64_t(searched.result.candidates.size());
  stage.record("search", start, searched.detail);

  start = Clock::now();
  ThinStage thinned = thin_stage(std::move(searched.result.candidates), maps, out.bank, config);
  out.thinned = thinned.input - std::int64_t(thinned.candidates.size());
  stage.record("thin", start, thinned.detail);

  start = Clock::now();
  FilterStage filtered = filter_stage(std::move(thinned.candidates), maps, out.bank, config.filter);
  maps = LikelihoodMaps{};  // the planes are not needed past the light curves
  out.filter = filtered.stats;
  stage.record("filter", start, filtered.detail);

  start = Clock::now();
  out.before_clustering = std::int64_t(filtered.detections.size());
  ClusterStage clustered =
      cluster_stage(std::move(filtered.detections), out.bank, config, stack, options.keep_unclustered);
  out.warnings.insert(out.warnings.end(), clustered.warnings.begin(), clustered.warnings.end());
  out.unclustered = std::move(clustered.unclustered);
  out.unclustered_row = std::move(clustered.unclustered_row);
  stage.record("cluster", start, clustered.detail);

  start = Clock::now();
  StampStage stamps = stamp_stage(stack, out.bank, clustered.detections, config);
  out.coadd_types = std::move(stamps.coadd_types);
  out.stamps = std::move(stamps.stamps);
  out.all_stamps = std::move(stamps.all_stamps);
  stage.record("stamps", start, stamps.detail);

  start = Clock::now();
  SkyStage sky = sky_stage(loaded, out.bank, clustered.detections, config);
  out.have_sky = sky.have_sky;
  out.have_global = sky.have_global;
  out.sky_image = std::move(sky.image);
  out.sky_global = std::move(sky.global);
  out.sky_first = std::move(sky.first);
  out.sky_last = std::move(sky.last);
  out.warnings.insert(out.warnings.end(), sky.warnings.begin(), sky.warnings.end());
  stage.record("wcs", start, sky.detail);
  out.detections = std::move(clustered.detections);
}

}  // namespace

RunOutput run_search(const SearchConfig& config, const RunOptions& options) {
  RunOutput out;
  StageRecorder stage{out, options.progress, options.stop, config.timeout_hours};
  // The CUDA context takes a while to create: make it on a thread while the files are read.
  std::future<void> device_warm_up;
#ifdef SHIFTSTACK_HAVE_CUDA
  if (gpu_likelihood_wanted(config)) device_warm_up = std::async(std::launch::async, [] { cuda::warm_up_device(); });
#endif
  auto start = Clock::now();
  out.files = expand_inputs(options.inputs);
  stage.record("discover", start, std::to_string(out.files.size()) + " files");

  start = Clock::now();
  ReadOptions read = config.read;
  if (options.stage_progress) read.progress = [&](int done, int total) { options.stage_progress("read", done, total); };
  out.loaded = read_exposures(out.files, read);
  {
    const auto& s = out.loaded.stack;
    stage.record("read", start, std::to_string(s.size()) + " exposures of " + std::to_string(s.width()) + "x" +
                                    std::to_string(s.height()) + " from " + std::to_string(out.files.size()) +
                                    " files");
  }
  out.warnings = out.loaded.warnings;
  run_from_loaded(config, out, options, &device_warm_up, nullptr, stage.run_start);
  return out;
}

RunOutput run_search(const SearchConfig& config, const SharedInputs& inputs, const RunOptions& options) {
  require(inputs.loaded != nullptr, "run_search: no exposures");
  const LoadedStack& loaded = *inputs.loaded;
  const std::size_t E = loaded.stack.exposures.size();
  require(E > 0 && loaded.curve_x.size() == E && loaded.curve_y.size() == E && loaded.wcs.size() == E &&
              loaded.info.size() == E,
          "run_search: per-exposure metadata does not match the shared stack");
  RunOutput out;
  out.loaded.curve_x = loaded.curve_x;
  out.loaded.curve_y = loaded.curve_y;
  out.loaded.info = loaded.info;
  out.loaded.wcs = loaded.wcs;
  out.loaded.frame = loaded.frame;
  out.loaded.warnings = loaded.warnings;
  out.warnings = loaded.warnings;
  run_from_loaded(config, out, options, nullptr, &inputs);
  return out;
}

RunOutput run_search(const SearchConfig& config, LoadedStack loaded, const RunOptions& options) {
  RunOutput out;
  validate(loaded.stack);
  const int E = loaded.stack.size();
  if (loaded.curve_x.empty()) loaded.curve_x.assign(E, 0.0);
  if (loaded.curve_y.empty()) loaded.curve_y.assign(E, 0.0);
  if (loaded.wcs.empty()) loaded.wcs.resize(E);
  if (loaded.info.empty()) {
    loaded.info.resize(E);
    for (int e = 0; e < E; ++e) {
      loaded.info[e].file = loaded.stack.exposures[e].label;
      loaded.info[e].epoch = loaded.stack.exposures[e].epoch;
      loaded.info[e].epoch_keyword = "(in memory)";
      loaded.info[e].throughput = loaded.stack.exposures[e].throughput;
    }
  }
  require(int(loaded.curve_x.size()) == E && int(loaded.curve_y.size()) == E && int(loaded.wcs.size()) == E &&
              int(loaded.info.size()) == E,
          "run_search: per-exposure metadata does not match the stack");
  out.loaded = std::move(loaded);
  out.warnings = out.loaded.warnings;
  run_from_loaded(config, out, options);
  return out;
}

nlohmann::json run_summary(const RunOutput& run, const SearchConfig& config, const OutputPaths& paths) {
  nlohmann::json exposures = nlohmann::json::array();
  for (const auto& info : run.loaded.info)
    exposures.push_back({{"file", info.file},
                         {"hdus", info.hdus},
                         {"mjd", info.epoch},
                         {"epoch_keyword", info.epoch_keyword},
                         {"throughput", info.throughput},
                         {"psf", info.psf},
                         {"mask", info.mask},
                         {"masked_pixels", info.masked_pixels},
                         {"nonfinite_pixels", info.nonfinite_pixels},
                         {"has_wcs", info.has_wcs},
                         {"variance", info.variance}});
  nlohmann::json stages = nlohmann::json::array();
  double total = 0;
  for (const auto& s : run.stages) {
    stages.push_back({{"stage", s.name}, {"seconds", s.seconds}, {"detail", s.detail}});
    total += s.seconds;
  }
  return {{"shiftstack_version", SHIFTSTACK_VERSION},
          {"inputs", {{"files", run.files}, {"exposures", exposures}}},
          {"image", {{"width", run.width}, {"height", run.height}, {"exposures", run.bank.exposures()}}},
          {"config", config.effective},
          {"config_sources", config.sources},
          {"notices", config.notices},
          {"frame",
           {{"reprojected", run.loaded.frame.reprojected},
            {"frame", run.loaded.frame.frame},
            {"barycentric_distance", run.loaded.frame.barycentric_distance ? nlohmann::json(*run.loaded.frame.barycentric_distance)
                                                                          : nlohmann::json(nullptr)},
            {"global_wcs", run.loaded.frame.global.has_value()}}},
          {"engine", run.engine},
          {"encoding", to_string(run.encoding)},
          {"likelihood_device", run.likelihood_device},
          {"devices", run.devices},
          {"bank",
           {{"velocities", run.bank.size()},
            {"t_ref", run.bank.t_ref},
            {"reference_time", run.reference_time},
            {"shift_mode", run.bank.mode == ShiftMode::integer ? "integer" : "fractional"},
            {"common_curve", !run.bank.curve_x.empty()}}},
          {"stages", stages},
          {"total_seconds", total},
          {"digest", nlohmann::json::parse(to_json(run.digest))},
          {"counts",
           {{"threshold_crossings", run.threshold_crossings},
            {"after_thinning", run.threshold_crossings - run.thinned},
            {"below_lh_level_after_clipping", run.filter.below_likelihood},
            {"too_few_observations", run.filter.too_few_observations},
            {"after_filtering", run.filter.kept},
            {"removed_by_thinning", run.thinned},
            {"after_clustering", run.detections.size()}}},
          {"warnings", run.warnings},
          {"outputs",
           {{"ecsv", paths.ecsv},
            {"fits", paths.fits},
            {"stamps", paths.stamps},
            {"summary", paths.summary},
            {"unclustered", paths.unclustered}}}};
}

}  // namespace shiftstack::io
