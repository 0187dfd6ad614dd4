// The stages of a search run (stages.hpp); run.cpp strings them together and times them.
#include "pipeline/stages.hpp"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <numeric>
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

// "auto": the most preferred available engine that can run the input, passing over one that
// models itself slower here than a less preferred one (unless none of those can run it).
// `note` says which engines were passed over, and why.
std::unique_ptr<Engine> choose_engine(const std::string& requested, bool cpu_only, const SearchInput& input,
                                      std::string& note) {
  if (requested != "auto") return make_engine(requested);
  std::vector<const EngineInfo*> order;
  for (const auto& e : engines())
    if (e.available() && !(cpu_only && e.gpu)) order.push_back(&e);
  std::stable_sort(order.begin(), order.end(),
                   [](const EngineInfo* a, const EngineInfo* b) { return a->preference > b->preference; });
  std::string reasons;
  std::unique_ptr<Engine> passed_over;
  for (const EngineInfo* e : order) {
    auto engine = e->make();
    const std::string why = engine->unsupported_reason(input);
    if (!why.empty()) {
      reasons += "; " + e->name + ": " + why;
      continue;
    }
    if (!passed_over) {
      const std::string slower = engine->slower_reason(input);
      if (!slower.empty()) {
        note += "; auto passed over " + e->name + ": " + slower;
        passed_over = std::move(engine);
        continue;
      }
    }
    return engine;
  }
  if (passed_over) return passed_over;
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
  std::string when = config.reference_time;
  if (when == "mid") {
    bank.t_ref = mid_span(bank.epochs);
  } else if (when == "first") {
    bank.t_ref = *std::min_element(bank.epochs.begin(), bank.epochs.end());
  } else {
    bank.t_ref = std::stod(when);
    when = "MJD " + when;
  }
  out.reference_time = when;
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
  d << bank.t_ref << " (" << when << ")" << (has_curve ? ", common curve from headers" : "");
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
                         const MotionBank& bank, bool cube_on_gpu, const std::atomic<bool>* stop,
                         const ProgressCallback& progress) {
  const EncodedStack& cube = encoded.cube();
  SearchStage out;
  OutputPolicy policy;
  policy.stop = stop;
  policy.candidate_threshold = config.filter.lh_level;
  policy.max_candidates = config.max_candidates;
  policy.progress = progress;
  policy.collect_candidates = true;
  // The bounds are [start, end) of the first-epoch pixel, which is the origin here (t_ref is
  // the first epoch whenever bounds are given). Origins outside the image are not searched.
  Region region;
  auto clip = [&](const std::optional<std::array<int, 2>>& bounds, int size, const char* name, int& start, int& length) {
    if (!bounds) return;
    const int a = std::min((*bounds)[0], size), b = std::min((*bounds)[1], size);
    if ((*bounds)[1] > size)
      out.warnings.push_back(std::string(name) + " [" + std::to_string((*bounds)[0]) + ", " + std::to_string((*bounds)[1]) +
                             ") reaches beyond the image (" + std::to_string(size) + " pixels): origins outside it are not searched");
    require(b > a, std::string(name) + " [" + std::to_string((*bounds)[0]) + ", " + std::to_string((*bounds)[1]) +
                       ") holds no pixel of the " + std::to_string(size) + "-pixel image");
    start = a;
    length = b - a;
  };
  clip(config.x_bounds, cube.width, "x_pixel_bounds", region.x0, region.width);
  clip(config.y_bounds, cube.height, "y_pixel_bounds", region.y0, region.height);
  const SearchInput probe{&cube, &bank, resolve(region, cube.width, cube.height), policy};
  // The stage has begun (engines that report progress say more as they go).
  if (progress) progress(0, probe.region.count() * std::int64_t(bank.size()));
  std::string note;
  auto engine = choose_engine(requested.empty() ? config.engine : requested, config.cpu_only, probe, note);
  const EngineInfo* info = find_engine(engine->name());
  const bool reads_device_cube = info != nullptr && info->reads_device_cube;
#ifdef SHIFTSTACK_HAVE_CUDA
  // The other engines read the host payload: fetch the device cube for them.
  if (cube_on_gpu && !reads_device_cube) {
    cuda::download_device_cube(*encoded.stack);
    note += " (cube fetched from the GPU)";
  }
#else
  (void)cube_on_gpu;
  (void)reads_device_cube;
#endif
  // gpus: one search split over several devices (the same digest; multi_device.hpp). CPU engines
  // have no devices: "all" is one band there, a count or a list gives that many bands in turn.
  const bool gpu_engine = info != nullptr && info->gpu;
  out.devices = config.gpus == "all" && !gpu_engine
                    ? std::vector<int>{0}
                    : parse_device_list(config.gpus, gpu_engine ? visible_device_count() : std::numeric_limits<int>::max());
  if (out.devices.size() > 1 || out.devices.front() != 0) {
#ifdef SHIFTSTACK_HAVE_CUDA
    // Every device uploads its band from the host copy.
    if (cube_on_gpu && reads_device_cube) {
      cuda::download_device_cube(*encoded.stack);
      note += " (cube fetched from the GPU)";
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

// Light curves of candidates, from the host planes or in batches from the device.
std::vector<LightCurve> sample_curves(const std::vector<Candidate>& candidates, const LikelihoodMaps& maps,
                                      const MotionBank& bank) {
  std::vector<LightCurve> curves(candidates.size());
  if (!maps.on_gpu()) {
#pragma omp parallel for schedule(dynamic, 256)
    for (std::int64_t i = 0; i < std::int64_t(candidates.size()); ++i) {
      const Candidate& c = candidates[std::size_t(i)];
      curves[std::size_t(i)] = light_curve(maps.host, bank, c.x, c.y, std::size_t(c.velocity));
    }
    return curves;
  }
#ifdef SHIFTSTACK_HAVE_CUDA
  for (std::size_t begin = 0; begin < candidates.size(); begin += light_curve_batch) {
    const std::size_t end = std::min(candidates.size(), begin + light_curve_batch);
    std::vector<LightCurve> batch = maps.device->light_curves(bank, candidates, begin, end);
    std::move(batch.begin(), batch.end(), curves.begin() + std::ptrdiff_t(begin));
  }
#endif
  return curves;
}

ThinStage thin_stage(std::vector<Candidate> candidates, const LikelihoodMaps& maps, const MotionBank& bank,
                     const SearchConfig& config) {
  ThinStage out;
  out.input = std::int64_t(candidates.size());
  const int E = bank.exposures();
  const int num_obs = config.filter.num_obs < 0 || config.filter.num_obs > E ? E : config.filter.num_obs;
  std::vector<std::string> steps;
  auto keep_only = [&](const std::vector<std::size_t>& keep, std::vector<double>& key) {
    std::vector<Candidate> c;
    std::vector<double> k;
    c.reserve(keep.size());
    for (std::size_t i : keep) {
      c.push_back(candidates[i]);
      k.push_back(key[i]);
    }
    candidates = std::move(c);
    key = std::move(k);
  };
  std::vector<double> key(candidates.size());
  for (std::size_t i = 0; i < candidates.size(); ++i) key[i] = candidates[i].Z;
  {
    // Trials with fewer samples than num_obs cannot pass the filter; KBMOD's search never lets
    // them into its per-pixel lists either.
    std::vector<std::size_t> keep;
    for (std::size_t i = 0; i < candidates.size(); ++i)
      if (candidates[i].obs_count >= num_obs) keep.push_back(i);
    out.too_few_observations = std::int64_t(candidates.size() - keep.size());
    keep_only(keep, key);
    if (out.too_few_observations) steps.push_back(std::to_string(out.too_few_observations) + " with fewer than num_obs samples");
  }
  if (config.gpu_filter && config.filter.sigma_g) {
    // KBMOD's in-search filter: the crossings are ranked, and cut, by their clipped likelihood.
    const std::vector<LightCurve> curves = sample_curves(candidates, maps, bank);
    std::vector<std::size_t> keep;
    const auto& o = config.filter.sigma_g_options;
    for (std::size_t i = 0; i < candidates.size(); ++i) {
      key[i] = prefilter_likelihood(curves[i], o.low_percentile, o.high_percentile);
      if (key[i] >= config.filter.lh_level) keep.push_back(i);
    }
    out.below_prefilter = std::int64_t(candidates.size() - keep.size());
    keep_only(keep, key);
    steps.push_back(std::to_string(out.below_prefilter) + " below lh_level after the gpu_filter prefilter");
  }
  if (config.results_per_pixel) {
    const std::size_t before = candidates.size();
    keep_only(best_per_pixel(candidates, key, bank, *config.results_per_pixel), key);
    out.per_pixel = std::int64_t(before - candidates.size());
    steps.push_back(std::to_string(out.per_pixel) + " beyond the best " + std::to_string(*config.results_per_pixel) +
                    " per pixel");
  }
  if (config.near_dup_thresh) {
    const std::size_t before = candidates.size();
    keep_only(near_duplicate_survivors(candidates, key, bank, *config.near_dup_thresh), key);
    out.near_duplicates = std::int64_t(before - candidates.size());
    steps.push_back(std::to_string(out.near_duplicates) + " near duplicates (" + format("%g", *config.near_dup_thresh) +
                    " px bins)");
  }
  out.candidates = std::move(candidates);
  std::string list;
  for (const auto& s : steps) list += (list.empty() ? "" : ", ") + s;
  out.detail = std::to_string(out.input) + " -> " + std::to_string(out.candidates.size()) + " candidates" +
               (list.empty() ? " (off)" : " (removed " + list + ")");
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

ClusterStage cluster_stage(std::vector<Detection> detections, const MotionBank& bank, const SearchConfig& config,
                           const ExposureStack& stack, bool keep_unclustered) {
  ClusterStage out;
  const std::size_t before = detections.size();
  if (keep_unclustered) out.unclustered = detections;
  std::vector<int> rows;
  if (config.do_clustering) {
    ClusterOptions options = config.cluster;
    options.lh_level = config.filter.lh_level;
    options.psf_sigma = 0;
    for (const auto& x : stack.exposures) options.psf_sigma = std::max(options.psf_sigma, psf_sigma_of(x.psf));
    // A kept detection needs half the observations the filter asks for, and at least two,
    // away from brighter ones: a trial resting on one or two stray epochs is no new mover.
    const int E = bank.exposures();
    const int num_obs = config.filter.num_obs < 0 || config.filter.num_obs > E ? E : config.filter.num_obs;
    options.num_obs = std::max(2, (num_obs + 1) / 2);
    out.detections = cluster_detections(std::move(detections), bank, options, keep_unclustered ? &rows : nullptr);
  } else {
    std::vector<std::size_t> order(detections.size());
    std::iota(order.begin(), order.end(), std::size_t(0));
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return detections[a].likelihood > detections[b].likelihood; });
    rows.assign(detections.size(), -1);
    for (std::size_t r = 0; r < order.size(); ++r) {
      rows[order[r]] = int(r);
      out.detections.push_back(std::move(detections[order[r]]));
    }
  }
  if (config.max_results > 0 && std::int64_t(out.detections.size()) > config.max_results) {
    out.warnings.push_back("kept the best " + std::to_string(config.max_results) + " of " +
                           std::to_string(out.detections.size()) + " candidates (max_results)");
    out.detections.resize(std::size_t(config.max_results));
    for (int& r : rows)
      if (r >= config.max_results) r = -1;
  }
  if (keep_unclustered) out.unclustered_row = std::move(rows);
  const std::string thinned;
  out.detail = config.do_clustering ? std::to_string(before) + " -> " + std::to_string(out.detections.size()) +
                                          " candidates (" + to_string(config.cluster.space) +
                                          (config.cluster.space == ClusterSpace::peaks ? std::string()
                                                                                       : ", eps " + format("%g", config.cluster.eps) + " px") +
                                          thinned + ")"
                                    : "off" + thinned;
  return out;
}

StampStage stamp_stage(const ExposureStack& stack, const MotionBank& bank, const std::vector<Detection>& detections,
                       const SearchConfig& config) {
  StampStage out;
  out.coadd_types = {config.stamp_type};
  for (CoaddType t : config.coadds)
    if (std::find(out.coadd_types.begin(), out.coadd_types.end(), t) == out.coadd_types.end()) out.coadd_types.push_back(t);
  const int n = int(detections.size()), E = stack.size(), r = config.stamp_radius, side = 2 * config.stamp_radius + 1;
  out.stamps.assign(out.coadd_types.size(), std::vector<Image<float>>(n));
  if (config.save_all_stamps) out.all_stamps.assign(std::size_t(n), std::vector<Image<float>>(std::size_t(E)));
  const float nan = std::numeric_limits<float>::quiet_NaN();
#pragma omp parallel for schedule(dynamic, 4)
  for (int i = 0; i < n; ++i) {
    const Candidate& c = detections[i].candidate;
    auto coadds = coadd_stamps(stack, bank, c, detections[i].obs_valid, config.stamp_radius, out.coadd_types);
    for (std::size_t k = 0; k < coadds.size(); ++k) out.stamps[k][i] = std::move(coadds[k]);
    if (!config.save_all_stamps) continue;
    // KBMOD's all_stamps: the science pixels around the sampled pixel of every epoch; masked
    // pixels and pixels outside the image are NaN.
    for (int e = 0; e < E; ++e) {
      const Exposure& x = stack.exposures[std::size_t(e)];
      const PixelIndex p = sampled_pixel(bank, c.x, c.y, std::size_t(c.velocity), e);
      Image<float> stamp(side, side, nan);
      for (int dy = -r; dy <= r; ++dy)
        for (int dx = -r; dx <= r; ++dx) {
          const int px = p.x + dx, py = p.y + dy;
          if (px < 0 || py < 0 || px >= x.science.width || py >= x.science.height) continue;
          if (!x.mask.empty() && x.mask(px, py)) continue;
          stamp(dx + r, dy + r) = x.science(px, py);
        }
      out.all_stamps[std::size_t(i)][std::size_t(e)] = std::move(stamp);
    }
  }
  out.detail = std::to_string(n) + " candidates x " + std::to_string(out.coadd_types.size()) + " coadds, radius " +
               std::to_string(config.stamp_radius) + (config.save_all_stamps ? ", all_stamps" : "");
  return out;
}

SkyStage sky_stage(const LoadedStack& loaded, const MotionBank& bank, const std::vector<Detection>& detections,
                   const SearchConfig& config) {
  SkyStage out;
  const int n = int(detections.size()), E = bank.exposures();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const SkyPosition none{nan, nan};
  const GridFrame& frame = loaded.frame;
  const bool ebd = frame.frame == "ebd";
  int with_wcs = 0;
  for (const auto& w : loaded.wcs) with_wcs += bool(w);
  out.have_sky = config.compute_ra_dec && (ebd ? !frame.originals.empty() : with_wcs > 0);
  out.have_global = config.compute_ra_dec && frame.global.has_value();
  out.first.assign(std::size_t(n), none);
  out.last.assign(std::size_t(n), none);
  if (!config.compute_ra_dec) {
    out.detail = "skipped (compute_ra_dec false)";
    return out;
  }
  if (!out.have_sky && !out.have_global) {
    out.warnings.push_back("no exposure has a WCS: no sky positions");
    out.detail = "skipped (no WCS)";
    return out;
  }
  if (!ebd && with_wcs < E)
    out.warnings.push_back(std::to_string(E - with_wcs) + " of " + std::to_string(E) +
                           " exposures have no WCS: their img_ra and img_dec are NaN");
  bool missing_originals = false;
  if (ebd)
    for (const auto& list : frame.originals)
      for (const auto& o : list) missing_originals = missing_originals || !o.ebd || !o.original;
  if (missing_originals)
    out.warnings.push_back("the WorkUnit is in the barycentric 'ebd' frame but some of its original images lack an "
                           "ebd_wcs or per_image_wcs: their img_ra and img_dec are NaN (global_ra, global_dec are in the "
                           "ebd frame)");
  out.image.assign(std::size_t(n), std::vector<SkyPosition>(std::size_t(E), none));
  if (out.have_global) out.global.assign(std::size_t(n), std::vector<SkyPosition>(std::size_t(E), none));
  std::vector<std::string> failures(static_cast<std::size_t>(n));
  // Observed position of grid pixel (x, y) of exposure e in the ebd frame: through the original
  // image that holds it (KBMOD keeps the constituents' WCS; the mapping needs no ephemeris).
  auto observed = [&](int e, double x, double y) {
    const SkyPosition in_frame = frame.global->pixel_to_sky(x, y);
    for (const OriginalFrame& o : frame.originals[std::size_t(e)]) {
      if (!o.ebd || !o.original) continue;
      double px = 0, py = 0;
      o.ebd->sky_to_pixel(in_frame.ra, in_frame.dec, px, py);
      // Inside the original image (its pixel edges at -0.5 and size - 0.5).
      if (px >= -0.5 && py >= -0.5 && (o.width <= 0 || px <= o.width - 0.5) && (o.height <= 0 || py <= o.height - 0.5))
        return o.original->pixel_to_sky(px, py);
    }
    return none;
  };
#pragma omp parallel for schedule(dynamic, 16)
  for (int i = 0; i < n; ++i) {
    const Candidate& c = detections[std::size_t(i)].candidate;
    for (int e = 0; e < E; ++e) {
      const PixelPosition p = predicted_position(bank, c.x, c.y, std::size_t(c.velocity), e);
      try {
        if (ebd) {
          out.image[std::size_t(i)][std::size_t(e)] = observed(e, p.x, p.y);
        } else if (loaded.wcs[std::size_t(e)]) {
          out.image[std::size_t(i)][std::size_t(e)] = loaded.wcs[std::size_t(e)]->pixel_to_sky(p.x, p.y);
        }
        if (out.have_global) out.global[std::size_t(i)][std::size_t(e)] = frame.global->pixel_to_sky(p.x, p.y);
      } catch (const Error& err) {
        if (failures[std::size_t(i)].empty()) failures[std::size_t(i)] = err.what();
      }
    }
  }
  for (const auto& f : failures)
    if (!f.empty()) {
      out.warnings.push_back("some sky positions are NaN: " + f);
      break;
    }
  // Epochs in time order: the first and the last are the extreme epochs.
  int first = 0, last = 0;
  for (int e = 1; e < E; ++e) {
    if (bank.epochs[std::size_t(e)] < bank.epochs[std::size_t(first)]) first = e;
    if (bank.epochs[std::size_t(e)] >= bank.epochs[std::size_t(last)]) last = e;
  }
  for (int i = 0; i < n; ++i) {
    out.first[std::size_t(i)] = out.image[std::size_t(i)][std::size_t(first)];
    out.last[std::size_t(i)] = out.image[std::size_t(i)][std::size_t(last)];
  }
  out.detail = std::to_string(n) + " candidates x " + std::to_string(E) + " epochs" +
               (ebd ? " through the original images (ebd frame)" : "") + (out.have_global ? ", global WCS" : "");
  return out;
}

}  // namespace shiftstack::io
