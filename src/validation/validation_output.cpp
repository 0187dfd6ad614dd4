// Validation reports as JSON, text tables and SVG plots.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "shiftstack/error.hpp"
#include "shiftstack/svg_plot.hpp"
#include "shiftstack/validation.hpp"
#include "validation/validation_internal.hpp"

namespace shiftstack {

using nlohmann::json;

// ---- shared with validation_records.cpp (validation_internal.hpp) ----

namespace validation_detail {

std::string shift_mode_name(ShiftMode m) { return m == ShiftMode::integer ? "integer" : "fractional"; }
std::string placement_name(NullWindowPlacement p) { return p == NullWindowPlacement::away ? "away" : "random"; }

// Every kit option, so that saved records can rebuild the kits (kit_from_json).
json full_kit_json(const KitOptions& k) {
  return {{"name", k.name},
          {"exposures", k.exposures},
          {"width", k.width},
          {"height", k.height},
          {"vx_count", k.vx_count},
          {"vy_count", k.vy_count},
          {"velocity_displacement", k.velocity_displacement},
          {"curve_amplitude", k.curve_amplitude},
          {"span_days", k.span_days},
          {"seed", k.seed},
          {"shift_mode", shift_mode_name(k.shift_mode)},
          {"varying_variance", k.varying_variance},
          {"masked_holes", k.masked_holes},
          {"bad_column", k.bad_column},
          {"variable_seeing", k.variable_seeing},
          {"irregular_epochs", k.irregular_epochs},
          {"common_curve", k.common_curve},
          {"inject", k.inject},
          {"noise", k.noise},
          {"psf_sigma_min", k.psf_sigma_min},
          {"psf_sigma_max", k.psf_sigma_max},
          {"injected_snr", k.injected_snr}};
}

// The options of a run, as both the report and the saved records give them; `kit` is the kit's
// JSON in the form each needs.
json run_options_json(const ValidationOptions& o, json kit) {
  return {{"baseline_engine", o.baseline_engine},
          {"kit", std::move(kit)},
          {"pairs", o.pairs},
          {"first_pair", o.first_pair},
          {"seed", o.seed},
          {"alpha", o.alpha},
          {"excursion_z", o.excursion_z},
          {"near_mask_fwhm", o.near_mask_fwhm},
          {"bootstrap_resamples", o.bootstrap_resamples},
          {"bootstrap_seed", o.bootstrap_seed},
          {"completeness_snr", o.completeness_snr},
          {"matched_z", o.matched_z},
          {"neighbourhood", o.neighbourhood},
          {"null_window", o.null_window},
          {"null_window_placement", placement_name(o.null_window_placement)}};
}

json provenance_json(const Provenance& p) {
  return {{"card", p.card}, {"commit", p.commit}, {"date", p.date}, {"command", p.command}};
}

Provenance provenance_of(const json& j) {
  Provenance p;
  if (j.contains("provenance")) {
    const json& q = j["provenance"];
    p.card = q.value("card", "");
    p.commit = q.value("commit", "");
    p.date = q.value("date", "");
    p.command = q.value("command", "");
  }
  return p;
}

}  // namespace validation_detail

namespace {

using namespace validation_detail;

// NaN and infinities are not JSON numbers: write them as null.
json number(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

std::string format(const char* pattern, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, pattern, v);
  return buf;
}

// The kit's mask layout in words: SPEC 3's holes plus moving bad column, or a variant.
std::string mask_layout(const KitOptions& k) {
  if (k.masked_holes && k.bad_column) return "holes + moving bad column";
  if (k.masked_holes) return "holes only (sparse)";
  if (k.bad_column) return "moving bad column only";
  return "none";
}

json timings_json(const ValidationTimings& t) {
  return {{"wall", t.wall},
          {"host_cube_making_summed_over_pairs",
           {{"kits", t.kits}, {"likelihood_maps", t.likelihood}, {"near_mask_flags", t.near_flags}, {"encodings", t.encode}}}};
}

// The report's kit: every option, under the workload's name, with the mask layout in words.
json kit_json(const KitOptions& k) {
  json j = full_kit_json(k);
  j["workload"] = k.name;
  j["mask_layout"] = mask_layout(k);
  return j;
}

// The report's options: the run's, plus the method under test.
json report_options_json(const ValidationOptions& o) {
  json j = run_options_json(o, kit_json(o.kit));
  j["engine"] = o.engine;
  j["encoding"] = to_string(o.encoding);
  j["baseline_encoding"] = "fp32";
  return j;
}

json class_json(const NullClass& c) {
  json excursions = json::array();
  for (const auto& x : c.excursions)
    excursions.push_back({{"z", x.z},
                          {"label", x.label},
                          {"observed", x.observed},
                          {"expected", x.expected},
                          {"poisson_p_two_sided", number(x.poisson_p)},
                          {"count_se_jackknife", number(x.count_se)}});
  return {{"trials", c.trials},
          {"mean_z", number(c.mean_z)},
          {"mean_z_se_jackknife", number(c.mean_se)},
          {"variance", number(c.variance)},
          {"variance_se_jackknife", number(c.variance_se)},
          {"excursions", excursions}};
}

json method_json(const MethodResult& m) {
  json points = json::array();
  for (const auto& p : m.completeness)
    points.push_back({{"snr", p.snr},
                      {"detected", p.detected},
                      {"injected", p.injected},
                      {"fraction", p.fraction},
                      {"wilson_95", {p.interval.low, p.interval.high}}});
  return {{"engine", m.engine},
          {"encoding", to_string(m.encoding)},
          {"mean_d", number(m.mean_d)},
          {"sd_null", number(m.sd_null)},
          {"effective_snr", number(m.effective_snr)},
          {"near_fraction", number(m.near_fraction)},
          {"null", {{"near_masks", class_json(m.near)}, {"away_from_masks", class_json(m.away)}, {"all", class_json(m.all)}}},
          {"completeness",
           {{"threshold", number(m.matched_threshold)}, {"null_false_alarms", m.matched_false_alarms}, {"points", points}}},
          {"per_pair", {{"z_null_at_truth", m.z_null_truth}, {"z_inj_at_truth", m.z_inj_truth}}},
          {"seconds", m.seconds}};
}

std::string footnote(const Provenance& p) {
  std::string s;
  for (const std::string& part : {p.card, p.commit.empty() ? std::string() : "commit " + p.commit, p.date})
    if (!part.empty()) s += (s.empty() ? "" : "  |  ") + part;
  return s;
}

double value_or_nan(const json& j) { return j.is_number() ? j.get<double>() : std::nan(""); }

}  // namespace

std::string to_json(const ValidationReport& r, const std::vector<QuantizationRow>& quantization,
                    const Provenance& provenance) {
  const ValidationOptions& o = r.options;
  json quant = json::array();
  for (const auto& q : quantization)
    quant.push_back({{"name", q.name},
                     {"formula", q.formula},
                     {"step_sigmas", q.step_sigmas},
                     {"predicted", q.predicted},
                     {"measured", q.measured},
                     {"measured_se", q.measured_se}});
  json j = {
      {"kind", "shiftstack validation report"},
      {"provenance", provenance_json(provenance)},
      {"options", report_options_json(o)},
      {"definitions",
       {{"effective_snr", "mean over pairs of (Z_inj - Z_null) at the injected trajectory / sd of Z over the null bank"},
        {"retention", "effective SNR of the method / that of the baseline (FP32 exact gather) on the same cubes"},
        {"retention_interval", "paired bootstrap over pairs, percentile 95%"},
        {"near_masks", "some sample within near_mask_fwhm PSF FWHM of a masked pixel, the image edge, or outside"},
        {"variance_se", "jackknife over cubes (delete one cube)"},
        {"completeness", "detected when the max Z over origin +-neighbourhood px and velocity +-neighbourhood grid "
                         "steps around the truth exceeds the method's threshold; thresholds give every method the "
                         "baseline's count of null trials above matched_z"}}},
      {"trials_per_cube", r.trials_per_cube},
      {"null_bank_trials_per_cube", r.null_trials_per_cube},
      {"bonferroni_z", r.bonferroni_z},
      {"retention",
       {{"value", number(r.retention)},
        {"interval_95", {number(r.retention_interval.low), number(r.retention_interval.high)}},
        {"same_as_baseline", r.same_as_baseline}}},
      {"method", method_json(r.method)},
      {"baseline", method_json(r.baseline)},
      {"quantization", quant},
      {"seconds", r.seconds},
      {"timings", timings_json(r.timings)}};
  return j.dump(2) + "\n";
}

std::string to_json(const FractionalReport& r, const Provenance& provenance) {
  json points = json::array();
  auto var = [](const FractionalVariance& v) {
    return json{{"variance", number(v.variance)}, {"se_jackknife", number(v.se)}, {"trials", v.trials}};
  };
  for (const auto& p : r.points) {
    json point = {{"psf_sigma", p.psf_sigma},
                  {"gather_exact", {{"near_masks", var(p.gather_near)}, {"away_from_masks", var(p.gather_away)}}},
                  {"naive_bilinear_phi", {{"near_masks", var(p.naive_near)}, {"away_from_masks", var(p.naive_away)}}},
                  {"max_relative_b_difference_engine_vs_recomputed", p.max_relative_b_difference}};
    if (p.fourier_done)
      point["band_limited"] = {
          {"grid", {p.fourier_grid_x, p.fourier_grid_y}},
          {"exact", {{"near_masks", var(p.fourier_near)}, {"away_from_masks", var(p.fourier_away)}}},
          {"naive_phi_shifted", {{"near_masks", var(p.fourier_naive_near)}, {"away_from_masks", var(p.fourier_naive_away)}}},
          {"naive_unscored_trials", p.fourier_naive_unscored},
          {"fourier_route_max_difference_from_direct", p.fourier_spectral_difference},
          {"mask_edge_samples", {{"count", p.fourier_edge_samples},
                                 {"mean_exact_over_naive_B", p.fourier_edge_ratio_mean},
                                 {"max_exact_over_naive_B", p.fourier_edge_ratio_max}}}};
    points.push_back(point);
  }
  const bool fourier = !r.points.empty() && r.points.front().fourier_done;
  json j = {{"kind", "shiftstack fractional normalization study"},
            {"provenance", provenance_json(provenance)},
            {"options",
             {{"engine", r.options.engine},
              {"kit", kit_json(r.options.kit)},
              {"cubes_per_sigma", r.options.cubes},
              {"seed", r.options.seed},
              {"near_mask_fwhm", r.options.near_mask_fwhm}}},
            {"definitions",
             {{"gather_exact", "bilinear A, B = sum_ij w_i w_j Cov(psi_i, psi_j) from the covariance planes (SPEC 2)"},
              {"naive_bilinear_phi", "the same A over B = sum_i w_i phi_i (phi interpolated with the psi weights)"},
              {"band_limited",
               fourier ? "CPU band-limited route: psi zero-padded to an odd periodic grid and sampled through its "
                         "trigonometric (Dirichlet-kernel) interpolant, as a Fourier shift does; exact B = "
                         "sum_r w(r) [sum_p h(x - p) P(r - p)]^2, the variance of that interpolant (whose "
                         "spectrum spans twice the bandwidth of psi), computed as a separable quadratic form; naive B "
                         "= phi interpolated with the same kernel. Not the GPU Fourier engine."
                       : "not run (FractionalOptions::fourier off)"},
              {"fourier_route_max_difference_from_direct",
               "the same planes computed as a Fourier route would (spectrum of psi on the band |k| <= (n-1)/2, "
               "information spectrum sum_r w(r) g2x[rx](kx) g2y[ry](ky) on the doubled band |k| <= n-1 from the "
               "squared shifted PSF factors sampled at half pixels, per-exposure phase tables exp(2 pi i k s / n), "
               "fold of the doubled band onto the grid, inverse transform), first cube of each sigma: max over "
               "trials of |dA|/sqrt(B), |dB|/B and |d naive B|/B against the direct evaluation"},
              {"chapter_naive_fourier_reference", {{"0.55", 1.31}, {"0.65", 1.17}, {"0.85", 1.04}}}}},
            {"points", points},
            {"seconds", r.seconds}};
  return j.dump(2) + "\n";
}

std::string format_table(const ValidationReport& r) {
  const ValidationOptions& o = r.options;
  std::ostringstream s;
  char line[512];
  std::snprintf(line, sizeof line,
                "validate: engine %s, encoding %s vs baseline %s fp32; workload %s (%d exposures, %dx%d, %dx%d "
                "velocities, %s shifts); %d pairs, M = %lld trials per cube (null bank %lld per cube)\n",
                o.engine.c_str(), to_string(o.encoding).c_str(), o.baseline_engine.c_str(), o.kit.name.c_str(),
                o.kit.exposures, o.kit.width, o.kit.height, o.kit.vx_count, o.kit.vy_count,
                shift_mode_name(o.kit.shift_mode).c_str(), o.pairs, (long long)r.trials_per_cube,
                (long long)r.null_trials_per_cube);
  s << line;
  std::snprintf(line, sizeof line, "  masks: %s; null window: %s; pairs %d..%d (kit seeds %llu..%llu)\n",
                mask_layout(o.kit).c_str(),
                o.null_window > 0 ? (std::to_string(o.null_window) + " px, placed " + placement_name(o.null_window_placement)).c_str()
                                  : "whole image",
                o.first_pair, o.first_pair + o.pairs - 1, (unsigned long long)(o.seed + o.first_pair),
                (unsigned long long)(o.seed + o.first_pair + o.pairs - 1));
  s << line;
  std::snprintf(line, sizeof line, "  effective SNR     method %.5f (mean d %.5f / sd %.5f)   baseline %.5f\n",
                r.method.effective_snr, r.method.mean_d, r.method.sd_null, r.baseline.effective_snr);
  s << line;
  std::snprintf(line, sizeof line, "  retention         %.6f   95%% bootstrap interval [%.6f, %.6f] (%d resamples)%s\n",
                r.retention, r.retention_interval.low, r.retention_interval.high, o.bootstrap_resamples,
                r.same_as_baseline ? "  (method is the baseline)" : "");
  s << line;
  s << "  null bank (all cubes; +- is the jackknife standard error over cubes)\n";
  s << "    method               class   trials        mean Z     var Z      +-se\n";
  auto classes = [&](const MethodResult& m, const char* who) {
    for (const auto& [name, c] : {std::pair<const char*, const NullClass*>{"near", &m.near},
                                  {"away", &m.away}, {"all", &m.all}}) {
      std::snprintf(line, sizeof line, "    %-20s %-6s %12lld  %+9.5f  %8.5f  %7.5f\n", who, name,
                    (long long)c->trials, c->mean_z, c->variance, c->variance_se);
      s << line;
    }
  };
  const std::string method_name = o.engine + " " + to_string(o.encoding);
  const std::string base_name = o.baseline_engine + " fp32";
  classes(r.method, method_name.c_str());
  if (!r.same_as_baseline) classes(r.baseline, base_name.c_str());
  s << "  null excursions above z against trials * Phi_bar(z) (method)\n";
  s << "    class  z           observed    expected   Poisson p   jackknife se\n";
  for (const auto& [name, c] : {std::pair<const char*, const NullClass*>{"near", &r.method.near},
                                {"away", &r.method.away}, {"all", &r.method.all}})
    for (const auto& x : c->excursions) {
      std::snprintf(line, sizeof line, "    %-6s %-10s %9lld  %10.2f   %9.3g   %9.2f\n", name,
                    (x.label == "bonferroni" ? format("%.3f(B)", x.z) : format("%.2f", x.z)).c_str(),
                    (long long)x.observed, x.expected, x.poisson_p, x.count_se);
      s << line;
    }
  std::snprintf(line, sizeof line,
                "  completeness at matched false alarms: %lld baseline null trials above z = %.2f; thresholds "
                "method %.5f, baseline %.5f\n",
                (long long)r.baseline.matched_false_alarms, o.matched_z, r.method.matched_threshold,
                r.baseline.matched_threshold);
  s << line;
  s << "    SNR    method              baseline\n";
  for (std::size_t i = 0; i < r.method.completeness.size(); ++i) {
    const auto& m = r.method.completeness[i];
    const auto& b = r.baseline.completeness[i];
    std::snprintf(line, sizeof line, "    %-5.2f  %3d/%-3d %.3f       %3d/%-3d %.3f\n", m.snr, m.detected, m.injected,
                  m.fraction, b.detected, b.injected, b.fraction);
    s << line;
  }
  std::snprintf(line, sizeof line,
                "  time %.1f s (method searches %.1f s; cube making, host threads summed: kits %.1f s, maps %.1f s, "
                "near flags %.1f s, encodings %.1f s)\n",
                r.seconds, r.method.seconds, r.timings.kits, r.timings.likelihood, r.timings.near_flags, r.timings.encode);
  s << line;
  return s.str();
}

std::string format_table(const std::vector<QuantizationRow>& rows) {
  std::ostringstream s;
  char line[512];
  s << "quantization efficiency eta (SPEC 5): measured vs formula\n";
  s << "  storage                                                             step/sigma  formula    measured   "
       "1-eta formula  1-eta measured +-se\n";
  for (const auto& q : rows) {
    std::snprintf(line, sizeof line, "  %-68s %8.4f  %9.6f  %9.6f  %.3e      %.3e +- %.1e\n", q.name.c_str(),
                  q.step_sigmas, q.predicted, q.measured, 1 - q.predicted, 1 - q.measured, q.measured_se);
    s << line;
  }
  return s.str();
}

std::string format_table(const FractionalReport& r) {
  std::ostringstream s;
  char line[512];
  std::snprintf(line, sizeof line,
                "fractional shifts, null variance of Z (engine %s, %d cubes per sigma, %dx%d, %d exposures, %dx%d "
                "velocities; +- jackknife se)\n",
                r.options.engine.c_str(), r.options.cubes, r.options.kit.width, r.options.kit.height,
                r.options.kit.exposures, r.options.kit.vx_count, r.options.kit.vy_count);
  s << line;
  s << "  PSF sigma  gather near         gather away         naive near          naive away          max|dB/B|\n";
  for (const auto& p : r.points) {
    std::snprintf(line, sizeof line, "  %-9.2f  %.4f +- %.4f   %.4f +- %.4f   %.4f +- %.4f   %.4f +- %.4f   %.1e\n",
                  p.psf_sigma, p.gather_near.variance, p.gather_near.se, p.gather_away.variance, p.gather_away.se,
                  p.naive_near.variance, p.naive_near.se, p.naive_away.variance, p.naive_away.se,
                  p.max_relative_b_difference);
    s << line;
  }
  s << "  naive = bilinear phi interpolation\n";
  if (!r.points.empty() && r.points.front().fourier_done) {
    s << "band-limited (Fourier-shift) route on the same cubes: exact B (variance of the interpolated psi) vs naive "
         "(phi shifted with the same kernel)\n";
    s << "  PSF sigma  exact near          exact away          naive near          naive away          grid     "
         "naive B<=0  mask-edge samples: mean (max) B_exact/B_naive\n";
    for (const auto& p : r.points) {
      std::snprintf(line, sizeof line,
                    "  %-9.2f  %.4f +- %.4f   %.4f +- %.4f   %.4f +- %.4f   %.4f +- %.4f   %3dx%-3d  %-10lld  "
                    "%.3f (%.3f) over %lld\n",
                    p.psf_sigma, p.fourier_near.variance, p.fourier_near.se, p.fourier_away.variance,
                    p.fourier_away.se, p.fourier_naive_near.variance, p.fourier_naive_near.se,
                    p.fourier_naive_away.variance, p.fourier_naive_away.se, p.fourier_grid_x, p.fourier_grid_y,
                    (long long)p.fourier_naive_unscored, p.fourier_edge_ratio_mean, p.fourier_edge_ratio_max,
                    (long long)p.fourier_edge_samples);
      s << line;
    }
    s << "  (the chapter's naive Fourier figures at a mask boundary: 1.31, 1.17, 1.04 at sigma 0.55, 0.65, 0.85)\n";
    s << "  Fourier route (band spectrum of psi, exact information spectrum on the doubled band, separable phase\n"
         "  tables, fold onto the grid) against the direct evaluation, first cube of each sigma, max of |dA|/sqrt(B),\n"
         "  |dB|/B, |d naive B|/B:";
    for (const auto& p : r.points) s << format(" %.1e", p.fourier_spectral_difference);
    s << "\n";
  } else {
    s << "  band-limited (Fourier-shift) route: not run\n";
  }
  return s.str();
}

std::vector<std::string> write_plots(const ValidationReport& r, const Provenance& provenance,
                                     const std::string& folder) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(folder, ec);
  require(!ec && fs::is_directory(folder), "cannot create output folder '" + folder + "'");
  std::vector<std::string> written;
  const std::string note = footnote(provenance);
  const std::string method = r.options.engine + " " + to_string(r.options.encoding);
  const std::string base = r.options.baseline_engine + " fp32";
  const std::string blue = "#1f77b4", orange = "#ff7f0e", green = "#2ca02c", grey = "#7f7f7f";

  {
    svg::Plot p;
    p.title = "SNR retention vs FP32 exact gather (" + std::to_string(r.options.pairs) + " pairs, " +
              r.options.kit.name + ")";
    p.y_label = "effective SNR / baseline's";
    p.categories = {method};
    svg::Series s{method + " (95% paired bootstrap)", blue, {0}, {r.retention}, {r.retention_interval.low},
                  {r.retention_interval.high}, false, true, false, 0};
    p.series.push_back(s);
    p.lines.push_back({1.0, "#444444", "1 (no loss)", false});
    p.lines.push_back({0.999, orange, "0.999 (fp16 / tensor-core bar)", true});
    p.lines.push_back({0.998, "#d62728", "0.998 (int8 bar)", true});
    p.y_min = std::min(0.997, r.retention_interval.low - 0.0005);
    p.y_max = std::max(1.001, r.retention_interval.high + 0.0005);
    p.footnote = note;
    p.width = 520;
    svg::write(p, folder + "/retention.svg");
    written.push_back(folder + "/retention.svg");
  }
  {
    svg::Plot p;
    p.title = "Null variance of Z, near masks and away (+-2 jackknife se)";
    p.y_label = "Var(Z) over the null bank";
    p.categories = {"near masks", "away from masks", "all"};
    auto series = [&](const MethodResult& m, const std::string& label, const std::string& color, double offset) {
      svg::Series s;
      s.label = label, s.color = color, s.line = false, s.x_offset = offset;
      int i = 0;
      for (const NullClass* c : {&m.near, &m.away, &m.all}) {
        s.x.push_back(i++);
        s.y.push_back(c->variance);
        s.y_low.push_back(c->variance - 2 * c->variance_se);
        s.y_high.push_back(c->variance + 2 * c->variance_se);
      }
      return s;
    };
    p.series.push_back(series(r.method, method, blue, r.same_as_baseline ? 0 : -0.08));
    if (!r.same_as_baseline) p.series.push_back(series(r.baseline, base, orange, 0.08));
    p.bands.push_back({0.99, 1.01, green, "1 +- 0.01"});
    p.lines.push_back({1.0, "#444444", "", false});
    p.footnote = note;
    svg::write(p, folder + "/null_variance.svg");
    written.push_back(folder + "/null_variance.svg");
  }
  {
    svg::Plot p;
    p.title = "Null excursions above z: observed (+-2 jackknife se) vs trials x Phi_bar(z)";
    p.x_label = "z";
    p.y_label = "trials above z (all null cubes)";
    p.log_y = true;
    auto add = [&](const NullClass& c, const std::string& name, const std::string& color) {
      svg::Series expected{name + " expected", color, {}, {}, {}, {}, true, false, true, 0};
      svg::Series observed{name + " observed", color, {}, {}, {}, {}, false, true, false, 0};
      for (const auto& x : c.excursions) {
        expected.x.push_back(x.z);
        expected.y.push_back(x.expected > 0 ? x.expected : std::nan(""));
        observed.x.push_back(x.z);
        observed.y.push_back(x.observed > 0 ? double(x.observed) : std::nan(""));
        // No bar for an empty count: its jackknife error is 0 and a log axis cannot show 0.
        observed.y_low.push_back(x.observed > 0 ? std::max(0.3, double(x.observed) - 2 * x.count_se) : std::nan(""));
        observed.y_high.push_back(x.observed > 0 ? double(x.observed) + 2 * x.count_se : std::nan(""));
      }
      // Sorted by z so the expectation line runs left to right.
      std::vector<std::size_t> order(expected.x.size());
      for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
      std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return expected.x[a] < expected.x[b]; });
      svg::Series e2 = expected;
      for (std::size_t i = 0; i < order.size(); ++i) e2.x[i] = expected.x[order[i]], e2.y[i] = expected.y[order[i]];
      p.series.push_back(e2);
      p.series.push_back(observed);
    };
    add(r.method.near, "near", blue);
    add(r.method.away, "away", orange);
    p.y_min = 0.3;
    p.footnote = note + "  |  " + method + "  |  counts of 0 are not drawn";
    svg::write(p, folder + "/excursions.svg");
    written.push_back(folder + "/excursions.svg");
  }
  if (!r.method.completeness.empty()) {
    svg::Plot p;
    p.title = "Completeness at matched false-alarm rate (" + std::to_string(r.baseline.matched_false_alarms) +
              " null trials above threshold)";
    p.x_label = "injected SNR";
    p.y_label = "fraction detected (Wilson 95%)";
    auto series = [&](const MethodResult& m, const std::string& label, const std::string& color, double offset) {
      svg::Series s;
      s.label = label + format(" (z > %.3f)", m.matched_threshold), s.color = color, s.x_offset = offset;
      for (const auto& c : m.completeness) {
        s.x.push_back(c.snr);
        s.y.push_back(c.fraction);
        s.y_low.push_back(c.interval.low);
        s.y_high.push_back(c.interval.high);
      }
      return s;
    };
    p.series.push_back(series(r.method, method, blue, r.same_as_baseline ? 0 : -0.03));
    if (!r.same_as_baseline) p.series.push_back(series(r.baseline, base, orange, 0.03));
    p.y_min = -0.02, p.y_max = 1.02;
    p.footnote = note;
    svg::write(p, folder + "/completeness.svg");
    written.push_back(folder + "/completeness.svg");
  }
  return written;
}

std::vector<std::string> write_plots(const FractionalReport& r, const Provenance& provenance,
                                     const std::string& folder) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(folder, ec);
  require(!ec && fs::is_directory(folder), "cannot create output folder '" + folder + "'");
  svg::Plot p;
  p.title = "Fractional shifts: null variance of Z vs PSF width (+-2 jackknife se)";
  p.x_label = "PSF sigma (px)";
  p.y_label = "Var(Z) over the null bank";
  auto series = [&](const std::string& label, const std::string& color, bool dashed, auto pick) {
    svg::Series s;
    s.label = label, s.color = color, s.dashed = dashed;
    for (const auto& pt : r.points) {
      const FractionalVariance& v = pick(pt);
      s.x.push_back(pt.psf_sigma);
      s.y.push_back(v.variance);
      s.y_low.push_back(v.variance - 2 * v.se);
      s.y_high.push_back(v.variance + 2 * v.se);
    }
    return s;
  };
  p.series.push_back(series("gather exact B, near masks", "#1f77b4", false, [](const FractionalPoint& x) -> const FractionalVariance& { return x.gather_near; }));
  p.series.push_back(series("gather exact B, away", "#1f77b4", true, [](const FractionalPoint& x) -> const FractionalVariance& { return x.gather_away; }));
  p.series.push_back(series("naive bilinear phi, near", "#d62728", false, [](const FractionalPoint& x) -> const FractionalVariance& { return x.naive_near; }));
  p.series.push_back(series("naive bilinear phi, away", "#d62728", true, [](const FractionalPoint& x) -> const FractionalVariance& { return x.naive_away; }));
  if (!r.points.empty() && r.points.front().fourier_done) {
    p.series.push_back(series("band-limited exact B, near", "#9467bd", false, [](const FractionalPoint& x) -> const FractionalVariance& { return x.fourier_near; }));
    p.series.push_back(series("band-limited naive phi, near", "#ff7f0e", false, [](const FractionalPoint& x) -> const FractionalVariance& { return x.fourier_naive_near; }));
    svg::Series edge;
    edge.label = "band-limited naive, single samples at a mask edge (B_exact/B_naive)", edge.color = "#e377c2";
    for (const auto& pt : r.points) edge.x.push_back(pt.psf_sigma), edge.y.push_back(pt.fourier_edge_ratio_mean);
    p.series.push_back(edge);
    svg::Series chapter;
    chapter.label = "chapter: naive Fourier at a mask edge", chapter.color = "#8c564b", chapter.line = false;
    chapter.x = {0.55, 0.65, 0.85}, chapter.y = {1.31, 1.17, 1.04};
    p.series.push_back(chapter);
  }
  p.bands.push_back({0.99, 1.01, "#2ca02c", "1 +- 0.01"});
  p.lines.push_back({1.0, "#444444", "", false});
  p.footnote = footnote(provenance);
  p.width = 900;
  p.height = 560;
  const std::string path = folder + "/fractional_variance.svg";
  svg::write(p, path);
  return {path};
}

std::string summarize_reports(const std::vector<std::string>& files, const std::string& folder) {
  require(!files.empty(), "summarize: no report files given");
  struct Row {
    std::string name;
    double retention, low, high, near, near_se, away, away_se, snr;
    int pairs;
    Provenance provenance;
  };
  std::vector<Row> rows;
  for (const auto& f : files) {
    std::ifstream in(f);
    require(bool(in), "summarize: cannot read '" + f + "'");
    json j;
    try {
      in >> j;
    } catch (const std::exception& e) {
      throw Error("summarize: '" + f + "' is not JSON: " + e.what());
    }
    require(j.value("kind", "") == "shiftstack validation report", "summarize: '" + f + "' is not a validation report");
    const json& m = j["method"];
    Row r;
    r.name = m["engine"].get<std::string>() + " " + m["encoding"].get<std::string>();
    if (j["options"]["kit"].value("shift_mode", "integer") == "fractional") r.name += " frac";
    if (!j["options"]["kit"].value("bad_column", true)) r.name += " sparse";
    if (j["options"].value("null_window_placement", "random") == "away") r.name += " away-win";
    r.retention = value_or_nan(j["retention"]["value"]);
    r.low = value_or_nan(j["retention"]["interval_95"][0]);
    r.high = value_or_nan(j["retention"]["interval_95"][1]);
    r.near = value_or_nan(m["null"]["near_masks"]["variance"]);
    r.near_se = value_or_nan(m["null"]["near_masks"]["variance_se_jackknife"]);
    r.away = value_or_nan(m["null"]["away_from_masks"]["variance"]);
    r.away_se = value_or_nan(m["null"]["away_from_masks"]["variance_se_jackknife"]);
    r.snr = value_or_nan(m["effective_snr"]);
    r.pairs = j["options"]["pairs"].get<int>();
    r.provenance = provenance_of(j);
    rows.push_back(r);
  }
  std::ostringstream s;
  char line[512];
  s << "method                               pairs  eff. SNR   retention [95% interval]          var Z near        var Z away        card / commit / date\n";
  for (const auto& r : rows) {
    std::snprintf(line, sizeof line, "%-36s %5d  %8.5f  %.6f [%.6f, %.6f]  %.4f +- %.4f  %.4f +- %.4f  %s / %s / %s\n",
                  r.name.c_str(), r.pairs, r.snr, r.retention, r.low, r.high, r.near, r.near_se, r.away, r.away_se,
                  r.provenance.card.c_str(), r.provenance.commit.c_str(), r.provenance.date.c_str());
    s << line;
  }
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(folder, ec);
  require(!ec && fs::is_directory(folder), "cannot create output folder '" + folder + "'");
  std::vector<std::string> names;
  for (const auto& r : rows) names.push_back(r.name);
  // One footnote for the plot: the shared provenance, or a pointer to the table when runs differ.
  Provenance shared = rows.front().provenance;
  for (const auto& r : rows)
    if (r.provenance.card != shared.card || r.provenance.commit != shared.commit) {
      shared = {"reports from several runs: card, commit and date per report in summary.txt", "", "", ""};
      break;
    }
  {
    svg::Plot p;
    p.title = "SNR retention vs the FP32 exact gather (95% paired bootstrap)";
    p.y_label = "effective SNR / baseline's";
    p.categories = names;
    svg::Series series;
    series.label = "retention", series.line = false;
    double lo = 0.997, hi = 1.001;
    for (std::size_t i = 0; i < rows.size(); ++i) {
      series.x.push_back(double(i));
      series.y.push_back(rows[i].retention);
      series.y_low.push_back(rows[i].low);
      series.y_high.push_back(rows[i].high);
      if (std::isfinite(rows[i].low)) lo = std::min(lo, rows[i].low - 0.0005);
      if (std::isfinite(rows[i].high)) hi = std::max(hi, rows[i].high + 0.0005);
    }
    p.series.push_back(series);
    p.lines.push_back({1.0, "#444444", "1", false});
    p.lines.push_back({0.999, "#ff7f0e", "0.999 (fp16 / tensor-core bar)", true});
    p.lines.push_back({0.998, "#d62728", "0.998 (int8 bar)", true});
    p.y_min = lo, p.y_max = hi;
    p.width = std::max(560.0, 130.0 * double(rows.size()) + 120);
    p.footnote = footnote(shared);
    svg::write(p, folder + "/summary_retention.svg");
  }
  {
    svg::Plot p;
    p.title = "Null variance of Z near masks and away (+-2 jackknife se)";
    p.y_label = "Var(Z)";
    p.categories = names;
    svg::Series near, away;
    near.label = "near masks", near.color = "#1f77b4", near.line = false, near.x_offset = -0.1;
    away.label = "away from masks", away.color = "#ff7f0e", away.line = false, away.x_offset = 0.1;
    for (std::size_t i = 0; i < rows.size(); ++i) {
      near.x.push_back(double(i)), near.y.push_back(rows[i].near);
      near.y_low.push_back(rows[i].near - 2 * rows[i].near_se), near.y_high.push_back(rows[i].near + 2 * rows[i].near_se);
      away.x.push_back(double(i)), away.y.push_back(rows[i].away);
      away.y_low.push_back(rows[i].away - 2 * rows[i].away_se), away.y_high.push_back(rows[i].away + 2 * rows[i].away_se);
    }
    p.series = {near, away};
    p.bands.push_back({0.99, 1.01, "#2ca02c", "1 +- 0.01"});
    p.lines.push_back({1.0, "#444444", "", false});
    p.width = std::max(560.0, 130.0 * double(rows.size()) + 120);
    p.footnote = footnote(shared);
    svg::write(p, folder + "/summary_null_variance.svg");
  }
  return s.str();
}

}  // namespace shiftstack
