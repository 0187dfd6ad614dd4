// The stages of a search run (stages.hpp); run.cpp strings them together and times them.
#include "pipeline/stages.hpp"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <sstream>

#include "shiftstack/encoding.hpp"
#include "shiftstack/error.hpp"
#include "shiftstack/limits.hpp"
#include "shiftstack/multi_device.hpp"

namespace shiftstack::io {

namespace {

std::string format(const char* pattern, double value) {
  char text[64];
  std::snprintf(text, sizeof text, pattern, value);
  return text;
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

// psi/phi of candidates' trajectories are sampled from the device in batches of this many.
constexpr std::size_t light_curve_batch = 1 << 16;

}  // namespace

// Not with likelihood_device cpu, and with auto not for cpu_only runs nor fractional shifts
// (the GPU path computes no covariance planes).
bool gpu_likelihood_wanted(const SearchConfig& config) {
  if (config.likelihood_device == "cpu") return false;
  if (config.likelihood_device == "gpu") return true;
  return !config.cpu_only && config.shift_mode == ShiftMode::integer;
}

BankStage build_bank(const SearchConfig& config, const LoadedStack& loaded) {
  const ExposureStack& stack = loaded.stack;
  const int E = stack.size(), W = stack.width(), H = stack.height();
  BankStage out;
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
  const auto& cx = loaded.curve_x;
  const auto& cy = loaded.curve_y;
  const bool has_curve = std::any_of(cx.begin(), cx.end(), [](double v) { return v != 0; }) ||
                         std::any_of(cy.begin(), cy.end(), [](double v) { return v != 0; });
  if (has_curve) {
    require(int(cx.size()) == E && int(cy.size()) == E, "common-curve offsets do not match the exposures");
    bank.curve_x = cx;
    bank.curve_y = cy;
  }
  std::optional<double> ecliptic;
  for (const auto& w : loaded.wcs)
    if (w) {
      try {
        ecliptic = ecliptic_angle(*w, 0.5 * W, 0.5 * H);
      } catch (const Error&) {
      }
      break;
    }
  fill_velocities(config.generator, bank, ecliptic);
  validate(bank, E);
  // The search's size, refused or announced before the likelihood is computed; search() checks
  // again with the exact encoding and region (this uses the smallest pair, so it never refuses
  // what search() would accept).
  const int region_w = config.x_bounds ? std::max(1, (*config.x_bounds)[1] - (*config.x_bounds)[0]) : W;
  const int region_h = config.y_bounds ? std::max(1, (*config.y_bounds)[1] - (*config.y_bounds)[0]) : H;
  std::vector<std::string> labels;
  for (const auto& x : stack.exposures) labels.push_back(x.label);
  const SearchEstimate estimate =
      check_search_limits(bank, region_w, region_h, std::int64_t(region_w) * region_h, 2, 0, {}, labels);
  std::ostringstream d;
  d << bank.size() << " velocities (" << config.generator.name << "), t_ref MJD " << std::fixed;
  d.precision(5);
  d << bank.t_ref << (has_curve ? ", common curve from headers" : "");
  d.unsetf(std::ios::floatfield);
  d.precision(3);
  d << "; " << estimate.trials << " trials, " << estimate.paired_samples << " paired samples";
  out.detail = d.str();
  return out;
}

bool LikelihoodMaps::on_gpu() const {
#ifdef SHIFTSTACK_HAVE_CUDA
  return device != nullptr;
#else
  return false;
#endif
}

LikelihoodMaps compute_maps(const SearchConfig& config, const ExposureStack& stack, ShiftMode mode) {
  LikelihoodMaps maps;
  maps.detail = "psi/phi for " + std::to_string(stack.size()) + " exposures";
#ifdef SHIFTSTACK_HAVE_CUDA
  if (gpu_likelihood(config)) {
    try {
      // run_search() validated the stack already (read_exposures, or the in-memory entry).
      maps.device = std::make_unique<cuda::DeviceLikelihood>(stack, true);
      maps.detail += " on the GPU (staging " + format("%.2f s", maps.device->times().staging) + ")";
    } catch (const Error& e) {
      if (config.likelihood_device == "gpu") throw;
      maps.warnings.push_back(std::string("psi/phi computed on the CPU: the GPU path failed: ") + e.what());
    }
  }
#else
  gpu_likelihood(config);  // throws for likelihood_device gpu
#endif
  if (!maps.on_gpu()) maps.host = compute_likelihood(stack, mode == ShiftMode::fractional);
  return maps;
}

LikelihoodMaps kept_maps(const LikelihoodStack& kept, const ExposureStack& stack, ShiftMode mode) {
  require(kept.exposures == stack.size() && (mode == ShiftMode::integer || kept.has_covariances()),
          "run_search: the shared likelihood maps do not match this run");
  LikelihoodMaps maps;
  maps.kept = &kept;
  maps.detail = "psi/phi for " + std::to_string(stack.size()) + " exposures (kept from an earlier run)";
  return maps;
}

EncodeStage kept_cube(const EncodedStack& kept, Encoding encoding, int exposures) {
  require(kept.encoding == encoding && kept.exposures == exposures,
          "run_search: the shared encoded cube does not match this run's encoding");
  EncodeStage out;
  out.kept = &kept;
  const double gigabytes = double(kept.plane_size()) * kept.exposures * double(kept.bytes_per_pair()) / 1e9;
  out.detail = to_string(encoding) + ", " + format("%.3g GB", gigabytes) + " (kept from an earlier run)";
  return out;
}

EncodeStage encode_maps(const LikelihoodMaps& maps, Encoding encoding) {
  EncodeStage out;
#ifdef SHIFTSTACK_HAVE_CUDA
  if (maps.on_gpu()) out.stack = std::make_unique<EncodedStack>(maps.device->encode(encoding));
#endif
  if (!maps.on_gpu()) out.stack = std::make_unique<EncodedStack>(encode(maps.planes(), encoding));
  const double gigabytes = double(out.stack->plane_size()) * out.stack->exposures * double(out.stack->bytes_per_pair()) / 1e9;
  out.detail = to_string(encoding) + ", " + format("%.3g GB", gigabytes) + (maps.on_gpu() ? " on the GPU" : "");
  return out;
}

SearchStage search_stage(const SearchConfig& config, const std::string& requested, EncodeStage encoded,
                         const MotionBank& bank, bool cube_on_gpu, const std::atomic<bool>* stop) {
  const EncodedStack& cube = encoded.cube();
  OutputPolicy policy;
  policy.stop = stop;
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
  const SearchInput probe{&cube, &bank, resolve(region, cube.width, cube.height), policy};
  auto engine = choose_engine(requested.empty() ? config.engine : requested, config.cpu_only, probe);
  std::string note;
#ifdef SHIFTSTACK_HAVE_CUDA
  // Engines other than the CUDA gathers read the host payload: fetch the device cube for them.
  if (cube_on_gpu && !cuda::reads_device_cube(engine->name())) {
    cuda::download_device_cube(*encoded.stack);
    note = " (cube fetched from the GPU)";
  }
#else
  (void)cube_on_gpu;
#endif
  SearchStage out;
  // gpus: one search split over several devices (the same digest; multi_device.hpp). CPU engines
  // have no devices: "all" is one band there, a count or a list gives that many bands in turn.
  const bool gpu_engine = [&] {
    for (const auto& e : engines())
      if (e.name == engine->name()) return e.gpu;
    return false;
  }();
  out.devices = config.gpus == "all" && !gpu_engine
                    ? std::vector<int>{0}
                    : parse_device_list(config.gpus, gpu_engine ? visible_device_count() : std::numeric_limits<int>::max());
  if (out.devices.size() > 1 || out.devices.front() != 0) {
#ifdef SHIFTSTACK_HAVE_CUDA
    // Every device uploads its band from the host copy.
    if (cube_on_gpu && cuda::reads_device_cube(engine->name())) {
      cuda::download_device_cube(*encoded.stack);
      note = " (cube fetched from the GPU)";
    }
#endif
    DeviceSplit split{out.devices, {}, false};
    out.result = search_on_devices(engine->name(), cube, bank, policy, region, split);
    note += " over " + std::to_string(out.devices.size()) + " device band(s) " + config.gpus +
            (split.parallel ? " in parallel" : " in turn");
  } else {
    out.result = search(*engine, cube, bank, policy, region);
  }
  const int E = cube.exposures;
  encoded.stack.reset();
#ifdef SHIFTSTACK_HAVE_CUDA
  if (cube_on_gpu) cuda::release_device_cube();
#endif
  std::ostringstream d;
  d << out.result.engine << ": " << double(out.result.digest.trials) << " trials x " << E << " exposures, maxZ "
    << format("%.2f", out.result.digest.maxZ) << ", " << out.result.candidates.size() << " above lh_level "
    << config.filter.lh_level << note << (out.result.note.empty() ? "" : "; " + out.result.note);
  out.detail = d.str();
  return out;
}

FilterStage filter_stage(std::vector<Candidate> candidates, const LikelihoodMaps& maps, const MotionBank& bank,
                         const FilterOptions& options) {
  FilterStage out;
  if (!maps.on_gpu()) {
    out.detections = filter_candidates(candidates, maps.planes(), bank, options, &out.stats);
  } else {
#ifdef SHIFTSTACK_HAVE_CUDA
    // Batches of candidates keep the sampled curves small whatever the number of crossings.
    const int E = bank.exposures();
    for (std::size_t begin = 0; begin < candidates.size(); begin += light_curve_batch) {
      const std::size_t end = std::min(candidates.size(), begin + light_curve_batch);
      const std::vector<Candidate> batch(candidates.begin() + std::ptrdiff_t(begin),
                                         candidates.begin() + std::ptrdiff_t(end));
      FilterStats stats;
      std::vector<Detection> kept = filter_candidates(
          batch, maps.device->light_curves(bank, candidates, begin, end), E, options, &stats);
      out.stats.input += stats.input;
      out.stats.below_likelihood += stats.below_likelihood;
      out.stats.too_few_observations += stats.too_few_observations;
      out.stats.kept += stats.kept;
      out.detections.insert(out.detections.end(), std::make_move_iterator(kept.begin()),
                            std::make_move_iterator(kept.end()));
    }
#endif
  }
  out.detail = std::to_string(out.stats.kept) + " kept; " + std::to_string(out.stats.below_likelihood) +
               " below lh_level after clipping, " + std::to_string(out.stats.too_few_observations) +
               " with too few observations";
  return out;
}

ClusterStage cluster_stage(std::vector<Detection> detections, const MotionBank& bank, const SearchConfig& config) {
  ClusterStage out;
  const std::size_t before = detections.size();
  if (config.do_clustering) {
    out.detections = cluster_detections(std::move(detections), bank, config.cluster);
  } else {
    out.detections = std::move(detections);
    std::stable_sort(out.detections.begin(), out.detections.end(),
                     [](const Detection& a, const Detection& b) { return a.likelihood > b.likelihood; });
  }
  if (config.max_results > 0 && std::int64_t(out.detections.size()) > config.max_results) {
    out.warnings.push_back("kept the best " + std::to_string(config.max_results) + " of " +
                           std::to_string(out.detections.size()) + " candidates (max_results)");
    out.detections.resize(std::size_t(config.max_results));
  }
  out.detail = config.do_clustering ? std::to_string(before) + " -> " + std::to_string(out.detections.size()) +
                                          " candidates (" + to_string(config.cluster.space) + ", eps " +
                                          format("%g", config.cluster.eps) + " px)"
                                    : "off";
  return out;
}

StampStage stamp_stage(const ExposureStack& stack, const MotionBank& bank, const std::vector<Detection>& detections,
                       const SearchConfig& config) {
  StampStage out;
  out.coadd_types = {config.stamp_type};
  for (CoaddType t : config.coadds)
    if (std::find(out.coadd_types.begin(), out.coadd_types.end(), t) == out.coadd_types.end()) out.coadd_types.push_back(t);
  const int n = int(detections.size());
  out.stamps.assign(out.coadd_types.size(), std::vector<Image<float>>(n));
#pragma omp parallel for schedule(dynamic, 4)
  for (int i = 0; i < n; ++i) {
    auto coadds = coadd_stamps(stack, bank, detections[i].candidate, detections[i].obs_valid, config.stamp_radius,
                               out.coadd_types);
    for (std::size_t k = 0; k < coadds.size(); ++k) out.stamps[k][i] = std::move(coadds[k]);
  }
  out.detail = std::to_string(n) + " candidates x " + std::to_string(out.coadd_types.size()) + " coadds, radius " +
               std::to_string(config.stamp_radius);
  return out;
}

SkyStage sky_stage(const std::vector<std::optional<Wcs>>& wcs, const MotionBank& bank,
                   const std::vector<Detection>& detections, const SearchConfig& config) {
  SkyStage out;
  const int n = int(detections.size()), E = bank.exposures();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  out.first.assign(n, {nan, nan});
  out.last.assign(n, {nan, nan});
  out.have_sky = config.compute_ra_dec && !wcs.empty() && wcs.front() && wcs.back();
  if (out.have_sky) {
    for (int i = 0; i < n; ++i) {
      const Candidate& c = detections[i].candidate;
      const PixelPosition a = predicted_position(bank, c.x, c.y, std::size_t(c.velocity), 0);
      const PixelPosition b = predicted_position(bank, c.x, c.y, std::size_t(c.velocity), E - 1);
      try {
        out.first[i] = wcs.front()->pixel_to_sky(a.x, a.y);
        out.last[i] = wcs.back()->pixel_to_sky(b.x, b.y);
      } catch (const Error& e) {
        out.warnings.push_back(e.what());
      }
    }
  } else if (config.compute_ra_dec) {
    out.warnings.push_back("no WCS on the first or last exposure: RA/Dec columns are NaN");
  }
  out.detail = out.have_sky ? "RA/Dec at the first and last epoch for " + std::to_string(n) : std::string("skipped");
  return out;
}

}  // namespace shiftstack::io
