// Paired null/injection validation of one method against the FP32 exact gather (SPEC 7).
#include <algorithm>
#include <boost/math/special_functions/gamma.hpp>  // within the Boost subset stage-deps.sh copies
#include <chrono>
#include <cmath>
#include <exception>
#include <future>
#include <iostream>
#include <limits>
#include <memory>
#include <random>
#include <thread>

#include "shiftstack/digest.hpp"
#include "shiftstack/error.hpp"
#include "shiftstack/likelihood.hpp"
#include "shiftstack/search.hpp"
#include "shiftstack/validation.hpp"
#include "validation/validation_internal.hpp"

namespace shiftstack {

using namespace validation_detail;

void validate(const ValidationOptions& o) {
  require(o.pairs >= 2, "validate: need at least 2 pairs for a bootstrap interval, got " + std::to_string(o.pairs));
  require(o.bootstrap_resamples >= 100, "validate: bootstrap_resamples must be >= 100");
  require(o.alpha > 0 && o.alpha < 1, "validate: alpha must be in (0, 1)");
  require(std::isfinite(o.near_mask_fwhm) && o.near_mask_fwhm >= 0, "validate: near_mask_fwhm must be >= 0");
  require(o.neighbourhood >= 0, "validate: neighbourhood must be >= 0");
  require(o.null_window >= 0, "validate: null_window must be >= 0 (0 = whole image)");
  require(o.null_window_placement == NullWindowPlacement::random || o.null_window > 0,
          "validate: placing the null window away from masks needs a null window (null_window > 0)");
  require(o.first_pair >= 0, "validate: first_pair must be >= 0");
  require(std::isfinite(o.matched_z), "validate: matched_z must be finite");
  for (double z : o.excursion_z) require(std::isfinite(z), "validate: excursion thresholds must be finite");
  for (double s : o.completeness_snr)
    require(std::isfinite(s) && s >= 0, "validate: completeness SNRs must be finite and >= 0");
  require(o.kit.injected_snr > 0, "validate: the injected SNR must be > 0");
  require(o.kit.noise, "validate: the kit's noise must be on (a null bank without noise is degenerate)");
}

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

OutputPolicy all_trials_policy(double alpha) {
  OutputPolicy policy;
  policy.alpha = alpha;
  policy.collect_candidates = true;
  policy.candidate_threshold = -std::numeric_limits<double>::infinity();
  policy.max_candidates = std::int64_t(1) << 40;  // the whole bank is wanted: no cap
  return policy;
}

struct Neighbourhood {
  Region region;
  int truth_ix = 0, truth_iy = 0, reach = 1;
  std::size_t vx_count = 1;
  bool contains_velocity(std::int64_t v) const {
    const int ix = int(v % std::int64_t(vx_count)), iy = int(v / std::int64_t(vx_count));
    return std::abs(ix - truth_ix) <= reach && std::abs(iy - truth_iy) <= reach;
  }
};

struct TruthScores {
  double z_truth = std::numeric_limits<double>::quiet_NaN();
  double neighbourhood_max = -std::numeric_limits<double>::infinity();
};

TruthScores truth_scores(const SearchResult& result, const Truth& truth, const Neighbourhood& nb) {
  TruthScores s;
  for (const auto& c : result.candidates) {
    if (std::abs(c.x - truth.x) > nb.reach || std::abs(c.y - truth.y) > nb.reach) continue;
    if (!nb.contains_velocity(c.velocity)) continue;
    s.neighbourhood_max = std::max(s.neighbourhood_max, double(c.Z));
    if (c.x == truth.x && c.y == truth.y && c.velocity == truth.velocity) s.z_truth = c.Z;
  }
  return s;
}

// The method's threshold with the baseline's false-alarm count on its own null bank: any value
// in [z_(F+1), z_(F)) of its sorted null Z gives exactly F trials above; take the one nearest
// the baseline's threshold, so the baseline keeps matched_z itself.
double matched_threshold(std::vector<float> high, std::int64_t false_alarms, double matched_z, double floor) {
  std::sort(high.begin(), high.end(), std::greater<float>());
  const double lower = std::size_t(false_alarms) < high.size() ? double(high[false_alarms]) : floor;
  const double upper = false_alarms == 0 ? std::numeric_limits<double>::infinity()
                                         : std::nextafter(double(high[false_alarms - 1]), -1e300);
  return std::clamp(matched_z, lower, std::max(lower, upper));
}

// The cubes of one encoding, made once per pair and shared by every method.
struct EncodedCubes {
  EncodedStack null_cube, inj_cube;
  std::vector<EncodedStack> levels;  // completeness: one per injected SNR
};

// One pair, ready to be searched by every method.
struct PreparedPair {
  int index = 0;  // global pair index j (kit seed = seed + j)
  MotionBank null_bank, inj_bank;
  Truth truth;
  Region null_region;
  Neighbourhood nb;
  std::vector<std::uint8_t> near;  // near-mask flags of null_region's trials
  std::int64_t trials_per_cube = 0;
  std::vector<std::pair<Encoding, EncodedCubes>> encoded;
  ValidationTimings times;
  const EncodedCubes& cubes(Encoding e) const {
    for (const auto& [encoding, c] : encoded)
      if (encoding == e) return c;
    throw Error("validate: internal: the " + to_string(e) + " cubes were not made");
  }
};

PreparedPair prepare_pair(const ValidationOptions& o, int j, const std::vector<Encoding>& encodings) {
  PreparedPair p;
  p.index = j;
  const bool fractional = o.kit.shift_mode == ShiftMode::fractional;
  auto t = Clock::now();
  KitOptions kit_options = o.kit;
  kit_options.seed = o.seed + std::uint64_t(j);
  kit_options.inject = false;
  KitStack null_kit = make_kit(kit_options);
  kit_options.inject = true;
  KitStack inj_kit = make_kit(kit_options);
  p.times.kits = since(t);
  p.truth = inj_kit.truth;
  require(p.truth.injected, "validate: the kit did not inject a source");
  require(null_kit.bank.is_cartesian(), "validate: the detection neighbourhood needs a Cartesian bank");

  t = Clock::now();
  const LikelihoodStack null_maps = compute_likelihood(null_kit.stack, fractional);
  const LikelihoodStack inj_maps = compute_likelihood(inj_kit.stack, fractional);
  p.times.likelihood = since(t);
  const int W = null_maps.width, H = null_maps.height;
  const std::size_t V = null_kit.bank.size();
  p.trials_per_cube = std::int64_t(W) * H * std::int64_t(V);

  // The null bank's origins in this cube, and which of its trials lie near masks.
  t = Clock::now();
  p.null_region = {0, 0, W, H};
  if (o.null_window > 0 && o.null_window_placement == NullWindowPlacement::random) {
    std::mt19937_64 rng(o.seed * 0x9e3779b97f4a7c15ull + std::uint64_t(j));
    const int w = std::min(o.null_window, W), h = std::min(o.null_window, H);
    p.null_region = {std::uniform_int_distribution<int>(0, W - w)(rng),
                     std::uniform_int_distribution<int>(0, H - h)(rng), w, h};
  }
  if (o.null_window > 0 && o.null_window_placement == NullWindowPlacement::away) {
    const std::vector<std::uint8_t> all = near_mask_flags(null_kit.stack, null_kit.bank, o.near_mask_fwhm);
    const Region r = window_away_from_masks(all, W, H, V, o.null_window);
    p.null_region = r;
    p.near.resize(V * std::size_t(r.count()));
    for (std::size_t v = 0; v < V; ++v)
      for (int y = 0; y < r.height; ++y)
        std::copy_n(all.begin() + std::ptrdiff_t((v * H + std::size_t(r.y0 + y)) * W + r.x0), r.width,
                    p.near.begin() + std::ptrdiff_t((v * r.height + std::size_t(y)) * r.width));
  } else {
    p.near = near_mask_flags(null_kit.stack, null_kit.bank, o.near_mask_fwhm, p.null_region);
  }
  p.times.near_flags = since(t);

  Neighbourhood& nb = p.nb;
  nb.reach = o.neighbourhood;
  nb.vx_count = null_kit.bank.vx_count();
  nb.truth_ix = int(p.truth.velocity % std::int64_t(nb.vx_count));
  nb.truth_iy = int(p.truth.velocity / std::int64_t(nb.vx_count));
  const int x0 = std::max(0, p.truth.x - nb.reach), y0 = std::max(0, p.truth.y - nb.reach);
  nb.region = {x0, y0, std::min(W - 1, p.truth.x + nb.reach) - x0 + 1, std::min(H - 1, p.truth.y + nb.reach) - y0 + 1};

  // Encodings, once per pair and encoding, shared by every engine (device caches key on the id).
  // Completeness cubes: psi is linear in the image, so the same noise plus the source at SNR s
  // is psi_null + (s / s_inj) (psi_inj - psi_null); phi (and covariances) do not depend on it.
  t = Clock::now();
  for (Encoding e : encodings) {
    EncodedCubes c;
    c.null_cube = encode(null_maps, e);
    c.inj_cube = encode(inj_maps, e);
    p.encoded.emplace_back(e, std::move(c));
  }
  const double injected = p.truth.snr;
  for (double s : o.completeness_snr) {
    LikelihoodStack maps = null_maps;
    const double k = s / injected;
    for (std::size_t i = 0; i < maps.psi.size(); ++i)
      maps.psi[i] = float(double(null_maps.psi[i]) + k * (double(inj_maps.psi[i]) - double(null_maps.psi[i])));
    for (auto& [e, c] : p.encoded) c.levels.push_back(encode(maps, e));
  }
  p.times.encode = since(t);
  p.null_bank = std::move(null_kit.bank);
  p.inj_bank = std::move(inj_kit.bank);
  return p;
}

// One method's engine and observations.
struct RunState {
  MethodSpec spec;
  std::unique_ptr<Engine> engine;
  std::vector<PairObservation> observations;  // per pair of this run
  double seconds = 0;
};

// Runs task(i) for every i in `items`: each on its own host thread when concurrent (the calling
// thread takes the last), one after the other otherwise. The first exception is rethrown.
template <typename Task>
void run_tasks(const std::vector<std::size_t>& items, Task&& task, bool concurrent) {
  if (!concurrent || items.size() < 2) {
    for (std::size_t i : items) task(i);
    return;
  }
  std::vector<std::exception_ptr> errors(items.size());
  std::vector<std::thread> threads;
  auto guarded = [&](std::size_t k) {
    try {
      task(items[k]);
    } catch (...) {
      errors[k] = std::current_exception();
    }
  };
  for (std::size_t k = 0; k + 1 < items.size(); ++k) threads.emplace_back(guarded, k);
  guarded(items.size() - 1);
  for (auto& t : threads) t.join();
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);
}

// Every method searches every cube of one pair. Cube by cube: all methods of one encoding search
// the same cube at the same time, so the CUDA gathers share one upload of it (their device cache
// holds one cube) and no method's cube is replaced under another's search.
void search_pair(std::vector<RunState>& runs, const PreparedPair& p, std::size_t slot, const ValidationOptions& o,
                 const std::vector<double>& thresholds) {
  const OutputPolicy policy = all_trials_policy(o.alpha);
  const double completeness_floor = o.matched_z - 1.0;  // null Z kept for threshold matching
  std::vector<Encoding> encodings;
  for (auto& run : runs) {
    PairObservation& obs = run.observations[slot];
    for (ClassSums* s : {&obs.near, &obs.away, &obs.all}) s->above.assign(thresholds.size(), 0);
    obs.z_null = obs.z_inj = std::numeric_limits<double>::quiet_NaN();
    obs.level_max.assign(o.completeness_snr.size(), -std::numeric_limits<double>::infinity());
    if (std::find(encodings.begin(), encodings.end(), run.spec.encoding) == encodings.end())
      encodings.push_back(run.spec.encoding);
  }
  for (Encoding encoding : encodings) {
    const EncodedCubes& cubes = p.cubes(encoding);
    std::vector<std::size_t> members;
    for (std::size_t r = 0; r < runs.size(); ++r)
      if (runs[r].spec.encoding == encoding) members.push_back(r);
    // Steps: the null bank, Z at the truth in the null and the injected cube, completeness levels.
    const std::size_t steps = 3 + cubes.levels.size();
    for (std::size_t step = 0; step < steps; ++step) {
      auto task = [&](std::size_t r) {
        RunState& run = runs[r];
        PairObservation& obs = run.observations[slot];
        const auto t0 = Clock::now();
        if (step == 0) {
          const SearchResult result = search(*run.engine, cubes.null_cube, p.null_bank, policy, p.null_region);
          const Region& w = p.null_region;
          for (const auto& c : result.candidates) {
            const double z = c.Z;
            const bool is_near =
                p.near[(std::size_t(c.velocity) * w.height + std::size_t(c.y - w.y0)) * w.width + (c.x - w.x0)] != 0;
            (is_near ? obs.near : obs.away).add(z, thresholds);
            obs.all.add(z, thresholds);
            if (z > completeness_floor) obs.high_z.push_back(c.Z);
          }
        } else if (step == 1) {
          obs.z_null = truth_scores(search(*run.engine, cubes.null_cube, p.null_bank, policy, p.nb.region), p.truth, p.nb)
                           .z_truth;
        } else if (step == 2) {
          obs.z_inj = truth_scores(search(*run.engine, cubes.inj_cube, p.inj_bank, policy, p.nb.region), p.truth, p.nb)
                          .z_truth;
        } else {
          const std::size_t l = step - 3;
          obs.level_max[l] =
              truth_scores(search(*run.engine, cubes.levels[l], p.inj_bank, policy, p.nb.region), p.truth, p.nb)
                  .neighbourhood_max;
        }
        run.seconds += since(t0);
      };
      run_tasks(members, task, o.concurrent);
    }
  }
  for (const auto& run : runs)
    require(std::isfinite(run.observations[slot].z_null) && std::isfinite(run.observations[slot].z_inj),
            "validate: engine '" + run.spec.engine + "' did not score the injected trajectory in pair " +
                std::to_string(p.index));
}

void add_times(ValidationTimings& total, const ValidationTimings& t) {
  total.kits += t.kits, total.likelihood += t.likelihood, total.encode += t.encode, total.near_flags += t.near_flags;
}

MethodResult summarize(const MethodSpec& spec, const std::vector<PairObservation>& obs, double seconds,
                       const std::vector<double>& thresholds, const std::vector<std::string>& labels) {
  MethodResult r;
  r.engine = spec.engine;
  r.encoding = spec.encoding;
  std::vector<ClassSums> near, away, all;
  double d = 0;
  for (const auto& x : obs) {
    r.z_null_truth.push_back(x.z_null);
    r.z_inj_truth.push_back(x.z_inj);
    near.push_back(x.near), away.push_back(x.away), all.push_back(x.all);
    d += x.z_inj - x.z_null;
  }
  r.near = pool_class(near, thresholds, labels);
  r.away = pool_class(away, thresholds, labels);
  r.all = pool_class(all, thresholds, labels);
  r.near_fraction = r.all.trials > 0 ? double(r.near.trials) / double(r.all.trials) : 0.0;
  r.mean_d = d / double(obs.size());
  r.sd_null = std::sqrt(r.all.variance);
  r.effective_snr = r.mean_d / r.sd_null;
  r.seconds = seconds;
  return r;
}

bool same_method(const MethodSpec& a, const MethodSpec& b) { return a.engine == b.engine && a.encoding == b.encoding; }

// The first option (by name) in which two runs' set-ups differ; empty when they agree. The pair
// range and the execution switches (verbose, concurrent) may differ.
std::string setup_difference(const ValidationOptions& a, const ValidationOptions& b) {
  const KitOptions &k = a.kit, &l = b.kit;
  const std::vector<std::pair<const char*, bool>> checks = {
      {"baseline_engine", a.baseline_engine == b.baseline_engine},
      {"seed", a.seed == b.seed},
      {"alpha", a.alpha == b.alpha},
      {"excursion_z", a.excursion_z == b.excursion_z},
      {"near_mask_fwhm", a.near_mask_fwhm == b.near_mask_fwhm},
      {"bootstrap_resamples", a.bootstrap_resamples == b.bootstrap_resamples},
      {"bootstrap_seed", a.bootstrap_seed == b.bootstrap_seed},
      {"completeness_snr", a.completeness_snr == b.completeness_snr},
      {"matched_z", a.matched_z == b.matched_z},
      {"neighbourhood", a.neighbourhood == b.neighbourhood},
      {"null_window", a.null_window == b.null_window},
      {"null_window_placement", a.null_window_placement == b.null_window_placement},
      {"kit.name", k.name == l.name},
      {"kit geometry", k.exposures == l.exposures && k.width == l.width && k.height == l.height &&
                           k.vx_count == l.vx_count && k.vy_count == l.vy_count},
      {"kit motion", k.velocity_displacement == l.velocity_displacement && k.curve_amplitude == l.curve_amplitude &&
                         k.span_days == l.span_days && k.shift_mode == l.shift_mode},
      {"kit features", k.varying_variance == l.varying_variance && k.masked_holes == l.masked_holes &&
                           k.bad_column == l.bad_column && k.variable_seeing == l.variable_seeing &&
                           k.irregular_epochs == l.irregular_epochs && k.common_curve == l.common_curve &&
                           k.noise == l.noise},
      {"kit PSF and injection", k.psf_sigma_min == l.psf_sigma_min && k.psf_sigma_max == l.psf_sigma_max &&
                                    k.injected_snr == l.injected_snr},
  };
  for (const auto& [name, same] : checks)
    if (!same) return name;
  return {};
}

}  // namespace

ValidationRecords collect_validation_records(const ValidationOptions& o, const std::vector<MethodSpec>& methods) {
  validate(o);
  require(!methods.empty(), "validate: no methods given");
  const auto start = Clock::now();
  ValidationRecords records;
  records.options = o;

  // Run 0 is the baseline; a method identical to it reuses it.
  std::vector<RunState> runs;
  auto add_run = [&](const MethodSpec& m) {
    for (std::size_t i = 0; i < runs.size(); ++i)
      if (same_method(runs[i].spec, m)) return i;
    runs.push_back({m, make_engine(m.engine), {}, 0});
    return runs.size() - 1;
  };
  add_run({o.baseline_engine, Encoding::fp32});
  std::vector<Encoding> wanted = {Encoding::fp32};
  for (const auto& m : methods)
    if (std::find(wanted.begin(), wanted.end(), m.encoding) == wanted.end()) wanted.push_back(m.encoding);

  // The first pair decides which methods can run (with the engine's reason for those that cannot).
  PreparedPair current = prepare_pair(o, o.first_pair, wanted);
  const OutputPolicy policy = all_trials_policy(o.alpha);
  for (const auto& m : methods) {
    auto engine = make_engine(m.engine);
    const EncodedStack& cube = current.cubes(m.encoding).null_cube;
    std::string reason = engine->unsupported_reason(SearchInput{&cube, &current.null_bank, current.null_region, policy});
    if (reason.empty())
      reason = engine->unsupported_reason(SearchInput{&cube, &current.null_bank, current.nb.region, policy});
    if (!reason.empty()) {
      records.skipped.push_back(m.engine + " " + to_string(m.encoding) + ": " + reason);
      continue;
    }
    records.methods.push_back(m);
    records.method_run.push_back(add_run(m));
  }
  require(!records.methods.empty(), "validate: no method can compute this input");
  std::vector<Encoding> encodings;
  for (const auto& run : runs)
    if (std::find(encodings.begin(), encodings.end(), run.spec.encoding) == encodings.end())
      encodings.push_back(run.spec.encoding);

  records.trials_per_cube = current.trials_per_cube;
  records.bonferroni_z = bonferroni_threshold(o.alpha, double(records.trials_per_cube));
  for (double z : o.excursion_z) {
    records.thresholds.push_back(z);
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", z);
    records.labels.push_back(buf);
  }
  records.thresholds.push_back(records.bonferroni_z);
  records.labels.push_back("bonferroni");
  for (auto& run : runs) run.observations.resize(std::size_t(o.pairs));

  for (int i = 0; i < o.pairs; ++i) {
    const auto pair_start = Clock::now();
    const int next_index = o.first_pair + i + 1;
    std::future<PreparedPair> next;
    if (o.concurrent && i + 1 < o.pairs)
      next = std::async(std::launch::async, [&o, next_index, &encodings] { return prepare_pair(o, next_index, encodings); });
    search_pair(runs, current, std::size_t(i), o, records.thresholds);
    add_times(records.timings, current.times);
    records.null_origins.push_back(current.null_region.count());
    if (o.verbose) {
      const ValidationTimings& t = current.times;
      std::cerr << "validate: pair " << current.index << " (" << i + 1 << "/" << o.pairs << ", " << since(pair_start)
                << " s; made in " << t.kits + t.likelihood + t.near_flags + t.encode << " s: kits " << t.kits
                << ", maps " << t.likelihood << ", near flags " << t.near_flags << ", encode " << t.encode << "):";
      for (const auto& run : runs)
        std::cerr << "  " << run.spec.engine << " " << to_string(run.spec.encoding) << " Z_null "
                  << run.observations[i].z_null << " Z_inj " << run.observations[i].z_inj;
      std::cerr << "\n";
    }
    if (i + 1 < o.pairs) current = o.concurrent ? next.get() : prepare_pair(o, next_index, encodings);
  }

  for (auto& run : runs) {
    records.runs.push_back(run.spec);
    records.observations.push_back(std::move(run.observations));
    records.run_seconds.push_back(run.seconds);
  }
  records.timings.wall = since(start);
  if (o.verbose) {
    const ValidationTimings& t = records.timings;
    std::cerr << "validate: " << o.pairs << " pairs in " << t.wall << " s; cube making (host threads, summed): kits "
              << t.kits << " s, likelihood maps " << t.likelihood << " s, near flags " << t.near_flags
              << " s, encodings " << t.encode << " s; searches per method (wall, summed over pairs):";
    for (std::size_t r = 0; r < records.runs.size(); ++r)
      std::cerr << "  " << records.runs[r].engine << " " << to_string(records.runs[r].encoding) << " "
                << records.run_seconds[r] << " s";
    std::cerr << "\n";
  }
  return records;
}

std::vector<ValidationReport> validation_reports(const ValidationRecords& rec) {
  const ValidationOptions& o = rec.options;
  require(!rec.runs.empty() && rec.observations.size() == rec.runs.size() && rec.run_seconds.size() == rec.runs.size(),
          "validation records: runs and observations do not match");
  for (const auto& obs : rec.observations)
    require(int(obs.size()) == o.pairs && int(rec.null_origins.size()) == o.pairs,
            "validation records: " + std::to_string(o.pairs) + " pairs announced, other counts held");
  require(o.pairs >= 2, "validation records: need at least 2 pairs for a bootstrap interval");
  const double completeness_floor = o.matched_z - 1.0;

  // Completeness threshold: every method gets the baseline's count of null trials above matched_z.
  auto pooled_high = [](const std::vector<PairObservation>& obs) {
    std::vector<float> high;
    for (const auto& x : obs) high.insert(high.end(), x.high_z.begin(), x.high_z.end());
    return high;
  };
  std::int64_t false_alarms = 0;
  for (float z : pooled_high(rec.observations[0])) false_alarms += z > o.matched_z;
  std::vector<MethodResult> results;
  for (std::size_t r = 0; r < rec.runs.size(); ++r) {
    const auto& obs = rec.observations[r];
    MethodResult m = summarize(rec.runs[r], obs, rec.run_seconds[r], rec.thresholds, rec.labels);
    m.matched_false_alarms = false_alarms;
    m.matched_threshold = matched_threshold(pooled_high(obs), false_alarms, o.matched_z, completeness_floor);
    for (std::size_t l = 0; l < o.completeness_snr.size(); ++l) {
      CompletenessPoint p;
      p.snr = o.completeness_snr[l];
      p.injected = int(obs.size());
      for (const auto& x : obs) p.detected += x.level_max.at(l) > m.matched_threshold;
      p.fraction = double(p.detected) / p.injected;
      p.interval = wilson_interval(p.detected, p.injected);
      m.completeness.push_back(p);
    }
    results.push_back(std::move(m));
  }

  // Retention with a paired bootstrap over pairs: each resample takes whole pairs (the injection
  // difference and that cube's null bank) for the method and the baseline at once.
  auto effective = [&](const std::vector<PairObservation>& obs, const std::vector<int>& sample) {
    double d = 0, n = 0, s = 0, s2 = 0;
    for (int j : sample) {
      d += obs[j].z_inj - obs[j].z_null;
      n += obs[j].all.n, s += obs[j].all.sum, s2 += obs[j].all.sum2;
    }
    return d / double(sample.size()) / std::sqrt(pooled_variance(n, s, s2));
  };
  std::int64_t null_origins = 0;
  for (std::int64_t n : rec.null_origins) null_origins += n;
  std::vector<ValidationReport> reports;
  for (std::size_t m = 0; m < rec.methods.size(); ++m) {
    const std::size_t r = rec.method_run[m];
    ValidationReport report;
    report.options = o;
    report.options.engine = rec.methods[m].engine;
    report.options.encoding = rec.methods[m].encoding;
    report.trials_per_cube = rec.trials_per_cube;
    report.null_trials_per_cube = null_origins / o.pairs * std::int64_t(o.kit.vx_count) * o.kit.vy_count;
    report.bonferroni_z = rec.bonferroni_z;
    report.method = results[r];
    report.baseline = results[0];
    report.same_as_baseline = r == 0;
    report.retention = report.method.effective_snr / report.baseline.effective_snr;
    std::mt19937_64 rng(o.bootstrap_seed);
    std::uniform_int_distribution<int> pick(0, o.pairs - 1);
    std::vector<double> ratios;
    std::vector<int> sample(o.pairs);
    for (int b = 0; b < o.bootstrap_resamples; ++b) {
      for (int& j : sample) j = pick(rng);
      ratios.push_back(effective(rec.observations[r], sample) / effective(rec.observations[0], sample));
    }
    std::sort(ratios.begin(), ratios.end());
    auto quantile = [&](double q) {
      const double at = q * double(ratios.size() - 1);
      const std::size_t i = std::size_t(std::floor(at));
      const double f = at - double(i);
      return i + 1 < ratios.size() ? ratios[i] * (1 - f) + ratios[i + 1] * f : ratios[i];
    };
    report.retention_interval = {quantile(0.025), quantile(0.975)};
    report.seconds = rec.timings.wall;
    report.timings = rec.timings;
    reports.push_back(std::move(report));
  }
  return reports;
}

ValidationRecords merge_validation_records(const std::vector<ValidationRecords>& parts) {
  require(!parts.empty(), "merge: no records given");
  std::vector<const ValidationRecords*> order;
  for (const auto& p : parts) order.push_back(&p);
  std::sort(order.begin(), order.end(), [](const ValidationRecords* a, const ValidationRecords* b) {
    return a->options.first_pair < b->options.first_pair;
  });
  const ValidationRecords& first = *order.front();
  ValidationRecords merged = first;
  for (std::size_t i = 1; i < order.size(); ++i) {
    const ValidationRecords& part = *order[i];
    const std::string range = "pairs " + std::to_string(part.options.first_pair) + ".." +
                              std::to_string(part.options.first_pair + part.options.pairs - 1);
    const std::string difference = setup_difference(first.options, part.options);
    require(difference.empty(), "merge: " + range + " were made with a different " + difference);
    bool same_runs = part.runs.size() == first.runs.size() && part.methods.size() == first.methods.size() &&
                     part.method_run == first.method_run;
    for (std::size_t r = 0; same_runs && r < part.runs.size(); ++r) same_runs = same_method(part.runs[r], first.runs[r]);
    for (std::size_t m = 0; same_runs && m < part.methods.size(); ++m)
      same_runs = same_method(part.methods[m], first.methods[m]);
    require(same_runs, "merge: " + range + " ran other methods");
    require(part.thresholds == first.thresholds && part.trials_per_cube == first.trials_per_cube,
            "merge: " + range + " have other excursion thresholds or cube sizes");
    const int expected = merged.options.first_pair + merged.options.pairs;
    require(part.options.first_pair == expected,
            "merge: " + range + (part.options.first_pair < expected ? " overlap" : " leave a gap after") +
                " pairs up to " + std::to_string(expected - 1));
    merged.options.pairs += part.options.pairs;
    merged.null_origins.insert(merged.null_origins.end(), part.null_origins.begin(), part.null_origins.end());
    for (std::size_t r = 0; r < merged.runs.size(); ++r) {
      merged.observations[r].insert(merged.observations[r].end(), part.observations[r].begin(),
                                    part.observations[r].end());
      merged.run_seconds[r] += part.run_seconds[r];
    }
    add_times(merged.timings, part.timings);
    merged.timings.wall += part.timings.wall;
  }
  return merged;
}

std::vector<ValidationReport> run_validation_set(const ValidationOptions& o, const std::vector<MethodSpec>& methods,
                                                 std::vector<std::string>* skipped) {
  const ValidationRecords records = collect_validation_records(o, methods);
  if (skipped) skipped->insert(skipped->end(), records.skipped.begin(), records.skipped.end());
  return validation_reports(records);
}

ValidationReport run_validation(const ValidationOptions& o) {
  std::vector<std::string> skipped;
  auto reports = run_validation_set(o, {{o.engine, o.encoding}}, &skipped);
  // A single method the engine cannot compute is an error, with the engine's reason.
  require(skipped.empty(), "validate: engine cannot compute this input: " +
                               (skipped.empty() ? std::string() : skipped.front()));
  return std::move(reports.front());
}

}  // namespace shiftstack
