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
  void record(const std::string& name, Clock::time_point start, const std::string& detail) {
    StageTime s{name, seconds_since(start), detail};
    out.stages.push_back(s);
    if (progress) progress(s);
  }
};

std::string format(const char* pattern, double value) {
  char text[64];
  std::snprintf(text, sizeof text, pattern, value);
  return text;
}

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

std::unique_ptr<Engine> choose_engine(const std::string& requested, bool cpu_only, const SearchInput& input) {
  if (requested != "auto") return make_engine(requested);
  std::vector<const EngineInfo*> order;
  for (const auto& e : engines())
    if (e.available() && !(cpu_only && e.gpu)) order.push_back(&e);
  std::stable_sort(order.begin(), order.end(),
                   [](const EngineInfo* a, const EngineInfo* b) { return a->preference > b->preference; });
  std::string reasons;
  for (const EngineInfo* e : order) {
    auto engine = e->make();
    const std::string why = engine->unsupported_reason(input);
    if (why.empty()) return engine;
    reasons += "; " + e->name + ": " + why;
  }
  throw Error("no available engine can run this search" + reasons);
}

// Whether psi/phi may go to the GPU at all (before looking for a device): not with
// likelihood_device cpu, and with auto not for cpu_only runs nor fractional shifts (the GPU
// path computes no covariance planes).
bool gpu_likelihood_wanted(const SearchConfig& config) {
  if (config.likelihood_device == "cpu") return false;
  if (config.likelihood_device == "gpu") return true;
  return !config.cpu_only && config.shift_mode == ShiftMode::integer;
}

// The final choice; likelihood_device gpu fails loudly where the GPU path cannot run.
bool gpu_likelihood(const SearchConfig& config) {
  if (!gpu_likelihood_wanted(config)) return false;
  const bool required = config.likelihood_device == "gpu";
  if (required)
    require(config.shift_mode == ShiftMode::integer,
            "likelihood_device gpu: fractional shifts need the covariance planes, which only the CPU "
            "computes; use likelihood_device auto or cpu");
#ifdef SHIFTSTACK_HAVE_CUDA
  const bool present = cuda::likelihood_gpu_available();
  if (required) require(present, "likelihood_device gpu: no CUDA device found");
  return present;
#else
  if (required) throw Error("likelihood_device gpu: this build has no CUDA support");
  return false;
#endif
}

// psi/phi of candidates' trajectories, from the host planes or, in batches, from the device.
constexpr std::size_t light_curve_batch = 1 << 16;

void run_from_loaded(const SearchConfig& config, RunOutput& out, const RunOptions& options,
                     std::future<void>* device_warm_up = nullptr) {
  StageRecorder stage{out, options.progress};
  const ExposureStack& stack = out.loaded.stack;
  const int E = stack.size(), W = stack.width(), H = stack.height();

  // ---- motion bank ----
  auto start = Clock::now();
  MotionBank& bank = out.bank;
  for (const auto& x : stack.exposures) bank.epochs.push_back(x.epoch);
  if (config.reference_time == "mid") {
    bank.t_ref = mid_span(bank.epochs);
  } else if (config.reference_time == "first") {
    bank.t_ref = *std::min_element(bank.epochs.begin(), bank.epochs.end());
  } else {
    bank.t_ref = std::stod(config.reference_time);
  }
  bank.mode = config.shift_mode;
  const auto& cx = out.loaded.curve_x;
  const auto& cy = out.loaded.curve_y;
  const bool has_curve = std::any_of(cx.begin(), cx.end(), [](double v) { return v != 0; }) ||
                         std::any_of(cy.begin(), cy.end(), [](double v) { return v != 0; });
  if (has_curve) {
    require(int(cx.size()) == E && int(cy.size()) == E, "common-curve offsets do not match the exposures");
    bank.curve_x = cx;
    bank.curve_y = cy;
  }
  std::optional<double> ecliptic;
  for (const auto& w : out.loaded.wcs)
    if (w) {
      try {
        ecliptic = ecliptic_angle(*w, 0.5 * W, 0.5 * H);
      } catch (const Error&) {
      }
      break;
    }
  fill_velocities(config.generator, bank, ecliptic);
  validate(bank, E);
  {
    std::ostringstream d;
    d << bank.size() << " velocities (" << config.generator.name << "), t_ref MJD " << std::fixed;
    d.precision(5);
    d << bank.t_ref << (has_curve ? ", common curve from headers" : "");
    stage.record("bank", start, d.str());
  }

  // ---- likelihood maps and encoding ----
  // On the GPU (when chosen) the planes stay on the device: the cube the gather engines search is
  // encoded there, and light curves are sampled from there; on the CPU as before.
  start = Clock::now();
  if (device_warm_up && device_warm_up->valid()) device_warm_up->get();
  LikelihoodStack likelihood;
  std::string likelihood_detail = "psi/phi for " + std::to_string(E) + " exposures";
#ifdef SHIFTSTACK_HAVE_CUDA
  std::unique_ptr<cuda::DeviceLikelihood> device_likelihood;
  if (gpu_likelihood(config)) {
    try {
      // run_search() validated the stack already (read_exposures, or the in-memory entry).
      device_likelihood = std::make_unique<cuda::DeviceLikelihood>(stack, true);
      likelihood_detail += " on the GPU (staging " + format("%.2f s", device_likelihood->times().staging) + ")";
    } catch (const Error& e) {
      if (config.likelihood_device == "gpu") throw;
      out.warnings.push_back(std::string("psi/phi computed on the CPU: the GPU path failed: ") + e.what());
    }
  }
  const bool on_gpu = device_likelihood != nullptr;
#else
  gpu_likelihood(config);  // throws for likelihood_device gpu
  const bool on_gpu = false;
#endif
  if (!on_gpu) likelihood = compute_likelihood(stack, bank.mode == ShiftMode::fractional);
  out.likelihood_device = on_gpu ? "gpu" : "cpu";
  stage.record("likelihood", start, likelihood_detail);

  start = Clock::now();
  out.encoding = options.encoding.value_or(config.encoding);
  std::unique_ptr<EncodedStack> encoded;
#ifdef SHIFTSTACK_HAVE_CUDA
  if (on_gpu) encoded = std::make_unique<EncodedStack>(device_likelihood->encode(out.encoding));
#endif
  if (!on_gpu) encoded = std::make_unique<EncodedStack>(encode(likelihood, out.encoding));
  stage.record("encode", start, to_string(out.encoding) + ", " + format("%.3g GB", double(encoded->plane_size()) * E *
                                                                                   double(encoded->bytes_per_pair()) / 1e9) +
                                    (on_gpu ? " on the GPU" : ""));

  // ---- search ----
  start = Clock::now();
  OutputPolicy policy;
  policy.collect_candidates = true;
  policy.candidate_threshold = config.filter.lh_level;
  policy.max_candidates = config.max_candidates;
  Region region;
  if (config.x_bounds) {
    region.x0 = (*config.x_bounds)[0];
    region.width = (*config.x_bounds)[1] - (*config.x_bounds)[0];
  }
  if (config.y_bounds) {
    region.y0 = (*config.y_bounds)[0];
    region.height = (*config.y_bounds)[1] - (*config.y_bounds)[0];
  }
  const SearchInput probe{encoded.get(), &bank, resolve(region, W, H), policy};
  auto engine = choose_engine(options.engine.empty() ? config.engine : options.engine, config.cpu_only, probe);
  std::string search_note;
#ifdef SHIFTSTACK_HAVE_CUDA
  // Engines other than the CUDA gathers read the host payload: fetch the device cube for them.
  if (on_gpu && !cuda::reads_device_cube(engine->name())) {
    cuda::download_device_cube(*encoded);
    search_note = " (cube fetched from the GPU)";
  }
#endif
  SearchResult result = search(*engine, *encoded, bank, policy, region);
  encoded.reset();
#ifdef SHIFTSTACK_HAVE_CUDA
  if (on_gpu) cuda::release_device_cube();
#endif
  out.engine = result.engine;
  out.digest = result.digest;
  out.threshold_crossings = std::int64_t(result.candidates.size());
  {
    std::ostringstream d;
    d << result.engine << ": " << double(result.digest.trials) << " trials x " << E << " exposures, maxZ "
      << format("%.2f", result.digest.maxZ) << ", " << out.threshold_crossings << " above lh_level "
      << config.filter.lh_level << search_note << (result.note.empty() ? "" : "; " + result.note);
    stage.record("search", start, d.str());
  }

  // ---- filtering ----
  start = Clock::now();
  std::vector<Detection> detections;
  if (!on_gpu) {
    detections = filter_candidates(result.candidates, likelihood, bank, config.filter, &out.filter);
  } else {
#ifdef SHIFTSTACK_HAVE_CUDA
    // Batches of candidates keep the sampled curves small whatever the number of crossings.
    for (std::size_t begin = 0; begin < result.candidates.size(); begin += light_curve_batch) {
      const std::size_t end = std::min(result.candidates.size(), begin + light_curve_batch);
      const std::vector<Candidate> batch(result.candidates.begin() + std::ptrdiff_t(begin),
                                         result.candidates.begin() + std::ptrdiff_t(end));
      FilterStats stats;
      std::vector<Detection> kept = filter_candidates(
          batch, device_likelihood->light_curves(bank, result.candidates, begin, end), E, config.filter, &stats);
      out.filter.input += stats.input;
      out.filter.below_likelihood += stats.below_likelihood;
      out.filter.too_few_observations += stats.too_few_observations;
      out.filter.kept += stats.kept;
      detections.insert(detections.end(), std::make_move_iterator(kept.begin()), std::make_move_iterator(kept.end()));
    }
#endif
  }
  result.candidates = {};
  likelihood = LikelihoodStack{};
#ifdef SHIFTSTACK_HAVE_CUDA
  device_likelihood.reset();
#endif
  stage.record("filter", start,
               std::to_string(out.filter.kept) + " kept; " + std::to_string(out.filter.below_likelihood) +
                   " below lh_level after clipping, " + std::to_string(out.filter.too_few_observations) +
                   " with too few observations");

  // ---- clustering ----
  start = Clock::now();
  out.before_clustering = std::int64_t(detections.size());
  if (config.do_clustering) {
    detections = cluster_detections(std::move(detections), bank, config.cluster);
  } else {
    std::stable_sort(detections.begin(), detections.end(),
                     [](const Detection& a, const Detection& b) { return a.likelihood > b.likelihood; });
  }
  if (config.max_results > 0 && std::int64_t(detections.size()) > config.max_results) {
    out.warnings.push_back("kept the best " + std::to_string(config.max_results) + " of " +
                           std::to_string(detections.size()) + " candidates (max_results)");
    detections.resize(std::size_t(config.max_results));
  }
  stage.record("cluster", start,
               config.do_clustering ? std::to_string(out.before_clustering) + " -> " +
                                          std::to_string(detections.size()) + " candidates (" +
                                          to_string(config.cluster.space) + ", eps " +
                                          format("%g", config.cluster.eps) + " px)"
                                    : "off");

  // ---- stamps ----
  start = Clock::now();
  out.coadd_types = {config.stamp_type};
  for (CoaddType t : config.coadds)
    if (std::find(out.coadd_types.begin(), out.coadd_types.end(), t) == out.coadd_types.end()) out.coadd_types.push_back(t);
  const int n = int(detections.size());
  out.stamps.assign(out.coadd_types.size(), std::vector<Image<float>>(n));
#pragma omp parallel for schedule(dynamic, 4)
  for (int i = 0; i < n; ++i) {
    auto coadds = coadd_stamps(stack, bank, detections[i].candidate, detections[i].obs_valid,
                               config.stamp_radius, out.coadd_types);
    for (std::size_t k = 0; k < coadds.size(); ++k) out.stamps[k][i] = std::move(coadds[k]);
  }
  stage.record("stamps", start, std::to_string(n) + " candidates x " + std::to_string(out.coadd_types.size()) +
                                    " coadds, radius " + std::to_string(config.stamp_radius));

  // ---- sky positions ----
  start = Clock::now();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  out.sky_first.assign(n, {nan, nan});
  out.sky_last.assign(n, {nan, nan});
  const auto& wcs = out.loaded.wcs;
  out.have_sky = config.compute_ra_dec && !wcs.empty() && wcs.front() && wcs.back();
  if (out.have_sky) {
    for (int i = 0; i < n; ++i) {
      const Candidate& c = detections[i].candidate;
      const PixelPosition a = predicted_position(bank, c.x, c.y, std::size_t(c.velocity), 0);
      const PixelPosition b = predicted_position(bank, c.x, c.y, std::size_t(c.velocity), E - 1);
      try {
        out.sky_first[i] = wcs.front()->pixel_to_sky(a.x, a.y);
        out.sky_last[i] = wcs.back()->pixel_to_sky(b.x, b.y);
      } catch (const Error& e) {
        out.warnings.push_back(e.what());
      }
    }
  } else if (config.compute_ra_dec) {
    out.warnings.push_back("no WCS on the first or last exposure: RA/Dec columns are NaN");
  }
  stage.record("wcs", start, out.have_sky ? "RA/Dec at the first and last epoch for " + std::to_string(n)
                                          : std::string("skipped"));
  out.detections = std::move(detections);
}

}  // namespace

RunOutput run_search(const SearchConfig& config, const RunOptions& options) {
  RunOutput out;
  StageRecorder stage{out, options.progress};
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

OutputPaths OutputPaths::from(const std::string& output) {
  require(!output.empty(), "no output path (-o)");
  std::string base = output;
  for (const char* suffix : {".ecsv", ".fits"}) {
    const std::string s = suffix;
    if (base.size() > s.size() && base.compare(base.size() - s.size(), s.size(), s) == 0) {
      base.resize(base.size() - s.size());
      break;
    }
  }
  return {base + ".ecsv", base + ".fits", base + ".stamps.fits", base + ".summary.json"};
}

void write_outputs(RunOutput& run, const SearchConfig& config, const OutputPaths& paths,
                   const std::function<void(const StageTime&)>& progress) {
  const auto start = Clock::now();
  const ResultTable table = make_result_table(run, config);
  std::string written;
  if (!paths.ecsv.empty()) {
    write_ecsv(table, paths.ecsv);
    written += paths.ecsv;
  }
  if (!paths.fits.empty()) {
    write_fits_table(table, paths.fits);
    written += (written.empty() ? "" : ", ") + paths.fits;
  }
  if (!paths.stamps.empty()) {
    std::vector<StampSet> sets;
    for (std::size_t k = 0; k < run.coadd_types.size(); ++k) sets.push_back({to_string(run.coadd_types[k]), run.stamps[k]});
    write_stamps_fits(paths.stamps, sets, table, table.meta);
    written += (written.empty() ? "" : ", ") + paths.stamps;
  }
  StageTime s{"write", seconds_since(start), std::to_string(table.rows) + " candidates to " + written};
  run.stages.push_back(s);
  if (progress) progress(s);
  if (!paths.summary.empty()) write_text_file(paths.summary, run_summary(run, config, paths).dump(2) + "\n");
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
