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
  void record(const std::string& name, Clock::time_point start, const std::string& detail) {
    StageTime s{name, seconds_since(start), detail};
    out.stages.push_back(s);
    if (progress) progress(s);
    if (stop && stop->load()) throw Cancelled("run stopped on request after the " + name + " stage");
  }
};

// A deterministic 128-bit identifier per candidate (same inputs and trajectory, same uuid),
// printed as 32 hexadecimal digits like KBMOD's uuid4().hex.
std::uint64_t mix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
std::uint64_t hash_text(std::uint64_t h, const std::string& s) {
  for (unsigned char c : s) h = mix64(h ^ c);
  return h;
}
std::uint64_t hash_double(std::uint64_t h, double v) {
  std::uint64_t bits = 0;
  static_assert(sizeof bits == sizeof v);
  std::memcpy(&bits, &v, sizeof v);
  return mix64(h ^ bits);
}

void run_from_loaded(const SearchConfig& config, RunOutput& out, const RunOptions& options,
                     std::future<void>* device_warm_up = nullptr, const SharedInputs* shared = nullptr) {
  StageRecorder stage{out, options.progress, options.stop};
  // With SharedInputs the exposures are read in place; out.loaded holds their metadata only.
  const LoadedStack& loaded = shared ? *shared->loaded : out.loaded;
  const ExposureStack& stack = loaded.stack;

  auto start = Clock::now();
  BankStage bank = build_bank(config, loaded);
  out.bank = std::move(bank.bank);
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
  SearchStage searched =
      search_stage(config, options.engine, std::move(encoded), out.bank, maps.on_gpu(), options.stop);
  out.engine = searched.result.engine;
  out.devices = searched.devices;
  out.digest = searched.result.digest;
  out.threshold_crossings = std::int64_t(searched.result.candidates.size());
  stage.record("search", start, searched.detail);

  start = Clock::now();
  FilterStage filtered = filter_stage(std::move(searched.result.candidates), maps, out.bank, config.filter);
  maps = LikelihoodMaps{};  // the planes are not needed past the light curves
  out.filter = filtered.stats;
  stage.record("filter", start, filtered.detail);

  start = Clock::now();
  out.before_clustering = std::int64_t(filtered.detections.size());
  ClusterStage clustered = cluster_stage(std::move(filtered.detections), out.bank, config);
  out.warnings.insert(out.warnings.end(), clustered.warnings.begin(), clustered.warnings.end());
  stage.record("cluster", start, clustered.detail);

  start = Clock::now();
  StampStage stamps = stamp_stage(stack, out.bank, clustered.detections, config);
  out.coadd_types = std::move(stamps.coadd_types);
  out.stamps = std::move(stamps.stamps);
  stage.record("stamps", start, stamps.detail);

  start = Clock::now();
  SkyStage sky = sky_stage(out.loaded.wcs, out.bank, clustered.detections, config);
  out.have_sky = sky.have_sky;
  out.sky_first = std::move(sky.first);
  out.sky_last = std::move(sky.last);
  out.warnings.insert(out.warnings.end(), sky.warnings.begin(), sky.warnings.end());
  stage.record("wcs", start, sky.detail);
  out.detections = std::move(clustered.detections);
}

}  // namespace

RunOutput run_search(const SearchConfig& config, const RunOptions& options) {
  RunOutput out;
  StageRecorder stage{out, options.progress, options.stop};
  // The CUDA context takes a while to create: make it on a thread while the files are read.
  std::future<void> device_warm_up;
#ifdef SHIFTSTACK_HAVE_CUDA
  if (gpu_likelihood_wanted(config)) device_warm_up = std::async(std::launch::async, [] { cuda::warm_up_device(); });
#endif
  auto start = Clock::now();
  out.files = expand_inputs(options.inputs);
  stage.record("discover", start, std::to_string(out.files.size()) + " files");

  start = Clock::now();
  out.loaded = read_exposures(out.files, config.read);
  {
    const auto& s = out.loaded.stack;
    stage.record("read", start, std::to_string(s.size()) + " exposures of " + std::to_string(s.width()) + "x" +
                                    std::to_string(s.height()) + " from " + std::to_string(out.files.size()) +
                                    " files");
  }
  out.warnings = out.loaded.warnings;
  run_from_loaded(config, out, options, &device_warm_up);
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

// ---- the table ----------------------------------------------------------------------------

ResultTable make_result_table(const RunOutput& run, const SearchConfig& config) {
  ResultTable t;
  const std::size_t n = run.detections.size();
  const int E = run.bank.exposures();
  t.rows = n;
  using T = Column::Type;
  auto add = [&](const std::string& name, T type, const std::string& unit, const std::string& description,
                 std::vector<int> shape = {}) -> Column& {
    Column c;
    c.name = name;
    c.type = type;
    c.unit = unit;
    c.description = description;
    c.shape = std::move(shape);
    t.columns.push_back(std::move(c));
    return t.columns.back();
  };
  {
    Column& c = add("x", T::int32, "pix", "origin x at t_ref (0-based pixel)");
    for (const auto& d : run.detections) c.integers.push_back(d.candidate.x);
  }
  {
    Column& c = add("y", T::int32, "pix", "origin y at t_ref (0-based pixel)");
    for (const auto& d : run.detections) c.integers.push_back(d.candidate.y);
  }
  {
    Column& c = add("vx", T::float64, "pix / d", "velocity in x");
    for (const auto& d : run.detections) c.reals.push_back(run.bank.velocity(std::size_t(d.candidate.velocity)).vx);
  }
  {
    Column& c = add("vy", T::float64, "pix / d", "velocity in y");
    for (const auto& d : run.detections) c.reals.push_back(run.bank.velocity(std::size_t(d.candidate.velocity)).vy);
  }
  {
    Column& c = add("likelihood", T::float64, "", "sum(psi)/sqrt(sum(phi)) over valid epochs");
    for (const auto& d : run.detections) c.reals.push_back(d.likelihood);
  }
  {
    Column& c = add("flux", T::float64, "", "sum(psi)/sum(phi) over valid epochs (science units)");
    for (const auto& d : run.detections) c.reals.push_back(d.flux);
  }
  {
    Column& c = add("obs_count", T::int32, "", "valid epochs after sigma-G clipping");
    for (const auto& d : run.detections) c.integers.push_back(d.obs_count);
  }
  // Inputs fingerprint, so the same trajectory on the same data keeps its uuid.
  std::uint64_t base = 0x5eedull;
  for (const auto& info : run.loaded.info) base = hash_double(hash_text(base, info.file), info.epoch);
  {
    Column& c = add("uuid", T::string, "", "identifier (deterministic hash of inputs and trajectory)");
    for (const auto& d : run.detections) {
      std::uint64_t h1 = hash_double(hash_double(base, d.candidate.x), d.candidate.y);
      h1 = hash_double(h1, double(d.candidate.velocity));
      const std::uint64_t h2 = mix64(h1 ^ 0xa5a5a5a5a5a5a5a5ull);
      char text[33];
      std::snprintf(text, sizeof text, "%016llx%016llx", (unsigned long long)h1, (unsigned long long)h2);
      c.strings.emplace_back(text);
    }
  }
  {
    Column& c = add("search_likelihood", T::float64, "", "score the search engine reported (all epochs)");
    for (const auto& d : run.detections) c.reals.push_back(d.candidate.Z);
  }
  {
    Column& c = add("cluster_size", T::int32, "", "filtered candidates merged into this one");
    for (const auto& d : run.detections) c.integers.push_back(d.cluster_size);
  }
  {
    // add() may reallocate the column list: fill each column before adding the next.
    Column& psi = add("psi_curve", T::float64, "", "a_e psi_e along the trajectory, per epoch", {E});
    for (const auto& d : run.detections) psi.reals.insert(psi.reals.end(), d.curve.psi.begin(), d.curve.psi.end());
    Column& phi = add("phi_curve", T::float64, "", "a_e^2 phi_e along the trajectory, per epoch", {E});
    for (const auto& d : run.detections) phi.reals.insert(phi.reals.end(), d.curve.phi.begin(), d.curve.phi.end());
    Column& valid = add("obs_valid", T::boolean, "", "epoch used (has data and survived sigma-G)", {E});
    for (const auto& d : run.detections) valid.integers.insert(valid.integers.end(), d.obs_valid.begin(), d.obs_valid.end());
  }
  if (config.compute_ra_dec) {
    const char* names[4] = {"ra_first", "dec_first", "ra_last", "dec_last"};
    const char* text[4] = {"RA at the first epoch", "Dec at the first epoch", "RA at the last epoch",
                           "Dec at the last epoch"};
    for (int k = 0; k < 4; ++k) {
      Column& c = add(names[k], T::float64, "deg", text[k]);
      for (std::size_t i = 0; i < n; ++i) {
        const SkyPosition& p = k < 2 ? run.sky_first[i] : run.sky_last[i];
        c.reals.push_back(k % 2 == 0 ? p.ra : p.dec);
      }
    }
  }
  const int side = 2 * config.stamp_radius + 1;
  for (std::size_t k = 0; k < run.coadd_types.size(); ++k) {
    const CoaddType type = run.coadd_types[k];
    std::vector<std::string> names;
    if (type == config.stamp_type) names.push_back("stamp");
    if (std::find(config.coadds.begin(), config.coadds.end(), type) != config.coadds.end())
      names.push_back("coadd_" + to_string(type));
    for (const auto& name : names) {
      Column& c = add(name, T::float32, "", to_string(type) + " coadd along the trajectory (valid epochs)", {side, side});
      for (const auto& stamp : run.stamps[k]) c.reals.insert(c.reals.end(), stamp.pixels.begin(), stamp.pixels.end());
    }
  }

  t.meta = {{"shiftstack_version", SHIFTSTACK_VERSION},
            {"t_ref", run.bank.t_ref},
            {"mjd_mid", run.bank.epochs},
            {"pixel_origin", "0-based; x, y are the positions at t_ref"},
            {"shift_mode", run.bank.mode == ShiftMode::integer ? "integer" : "fractional"},
            {"engine", run.engine},
            {"encoding", to_string(run.encoding)},
            {"lh_level", config.filter.lh_level},
            {"exposures", E}};
  return t;
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
                         {"has_wcs", info.has_wcs}});
  nlohmann::json stages = nlohmann::json::array();
  double total = 0;
  for (const auto& s : run.stages) {
    stages.push_back({{"stage", s.name}, {"seconds", s.seconds}, {"detail", s.detail}});
    total += s.seconds;
  }
  const auto& stack = run.loaded.stack;
  return {{"shiftstack_version", SHIFTSTACK_VERSION},
          {"inputs", {{"files", run.files}, {"exposures", exposures}}},
          {"image", {{"width", stack.width()}, {"height", stack.height()}, {"exposures", stack.size()}}},
          {"config", config.effective},
          {"engine", run.engine},
          {"encoding", to_string(run.encoding)},
          {"likelihood_device", run.likelihood_device},
          {"devices", run.devices},
          {"bank",
           {{"velocities", run.bank.size()},
            {"t_ref", run.bank.t_ref},
            {"shift_mode", run.bank.mode == ShiftMode::integer ? "integer" : "fractional"},
            {"common_curve", !run.bank.curve_x.empty()}}},
          {"stages", stages},
          {"total_seconds", total},
          {"digest", nlohmann::json::parse(to_json(run.digest))},
          {"counts",
           {{"threshold_crossings", run.threshold_crossings},
            {"below_lh_level_after_clipping", run.filter.below_likelihood},
            {"too_few_observations", run.filter.too_few_observations},
            {"after_filtering", run.filter.kept},
            {"after_clustering", run.detections.size()}}},
          {"warnings", run.warnings},
          {"outputs", {{"ecsv", paths.ecsv}, {"fits", paths.fits}, {"stamps", paths.stamps}, {"summary", paths.summary}}}};
}

}  // namespace shiftstack::io
