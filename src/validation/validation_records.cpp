// Raw validation records (per-pair sums that reports are made from): saved, read back and merged.
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "shiftstack/error.hpp"
#include "shiftstack/validation.hpp"
#include "validation/validation_internal.hpp"

namespace shiftstack {

using nlohmann::json;
using namespace validation_detail;

// ---- raw records ---------------------------------------------------------------------------

namespace {

KitOptions kit_from_json(const json& j) {
  KitOptions k;
  k.name = j.at("name").get<std::string>();
  k.exposures = j.at("exposures").get<int>();
  k.width = j.at("width").get<int>();
  k.height = j.at("height").get<int>();
  k.vx_count = j.at("vx_count").get<int>();
  k.vy_count = j.at("vy_count").get<int>();
  k.velocity_displacement = j.at("velocity_displacement").get<double>();
  k.curve_amplitude = j.at("curve_amplitude").get<double>();
  k.span_days = j.at("span_days").get<double>();
  k.seed = j.at("seed").get<std::uint64_t>();
  k.shift_mode = j.at("shift_mode").get<std::string>() == "fractional" ? ShiftMode::fractional : ShiftMode::integer;
  k.varying_variance = j.at("varying_variance").get<bool>();
  k.masked_holes = j.at("masked_holes").get<bool>();
  k.bad_column = j.at("bad_column").get<bool>();
  k.variable_seeing = j.at("variable_seeing").get<bool>();
  k.irregular_epochs = j.at("irregular_epochs").get<bool>();
  k.common_curve = j.at("common_curve").get<bool>();
  k.inject = j.at("inject").get<bool>();
  k.noise = j.at("noise").get<bool>();
  k.psf_sigma_min = j.at("psf_sigma_min").get<double>();
  k.psf_sigma_max = j.at("psf_sigma_max").get<double>();
  k.injected_snr = j.at("injected_snr").get<double>();
  return k;
}

json methods_json(const std::vector<MethodSpec>& methods) {
  json a = json::array();
  for (const auto& m : methods) a.push_back({m.engine, to_string(m.encoding)});
  return a;
}

std::vector<MethodSpec> methods_from_json(const json& a) {
  std::vector<MethodSpec> out;
  for (const auto& m : a) out.push_back({m.at(0).get<std::string>(), parse_encoding(m.at(1).get<std::string>())});
  return out;
}

// Doubles that may be +-inf or NaN (a neighbourhood without a scored trial): JSON has no such
// numbers, so they travel as strings.
json exact_number(double v) {
  if (std::isfinite(v)) return v;
  return std::isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf");
}
double exact_number_from(const json& j) {
  if (j.is_number()) return j.get<double>();
  const std::string s = j.get<std::string>();
  if (s == "inf") return std::numeric_limits<double>::infinity();
  if (s == "-inf") return -std::numeric_limits<double>::infinity();
  return std::numeric_limits<double>::quiet_NaN();
}

// One class's sums as [n, sum, sum2, above...].
json sums_json(const ClassSums& c) {
  json a = {c.n, c.sum, c.sum2};
  for (double x : c.above) a.push_back(x);
  return a;
}
ClassSums sums_from_json(const json& a) {
  ClassSums c;
  c.n = a.at(0).get<double>(), c.sum = a.at(1).get<double>(), c.sum2 = a.at(2).get<double>();
  for (std::size_t i = 3; i < a.size(); ++i) c.above.push_back(a[i].get<double>());
  return c;
}

}  // namespace

std::string to_json(const ValidationRecords& r, const std::vector<QuantizationRow>& quantization,
                    const Provenance& provenance) {
  const ValidationOptions& o = r.options;
  json quant = json::array();
  for (const auto& q : quantization)
    quant.push_back({q.name, q.formula, q.step_sigmas, q.predicted, q.measured, q.measured_se});
  json observations = json::array();
  for (const auto& run : r.observations) {
    json pairs = json::array();
    for (const auto& x : run) {
      json levels = json::array();
      for (double v : x.level_max) levels.push_back(exact_number(v));
      pairs.push_back({exact_number(x.z_null), exact_number(x.z_inj), sums_json(x.near), sums_json(x.away),
                       sums_json(x.all), x.high_z, levels});
    }
    observations.push_back(pairs);
  }
  json j = {
      {"kind", "shiftstack validation records"},
      {"provenance", provenance_json(provenance)},
      {"layout", "observations[run][pair] = [z_null, z_inj, near, away, all, high_z, level_max]; near/away/all = "
                 "[n, sum Z, sum Z^2, count above each threshold]"},
      {"options", run_options_json(o, full_kit_json(o.kit))},
      {"runs", methods_json(r.runs)},
      {"methods", methods_json(r.methods)},
      {"method_run", r.method_run},
      {"skipped", r.skipped},
      {"thresholds", r.thresholds},
      {"labels", r.labels},
      {"trials_per_cube", r.trials_per_cube},
      {"bonferroni_z", r.bonferroni_z},
      {"null_origins", r.null_origins},
      {"run_seconds", r.run_seconds},
      {"timings", {r.timings.kits, r.timings.likelihood, r.timings.encode, r.timings.near_flags, r.timings.wall}},
      {"quantization", quant},
      {"observations", observations}};
  return j.dump() + "\n";
}

ValidationRecords records_from_json(const std::string& text, std::vector<QuantizationRow>* quantization,
                                    Provenance* provenance) {
  json j;
  try {
    j = json::parse(text);
  } catch (const std::exception& e) {
    throw Error(std::string("validation records: not JSON: ") + e.what());
  }
  require(j.value("kind", "") == "shiftstack validation records", "validation records: not a records file");
  try {
    ValidationRecords r;
    ValidationOptions& o = r.options;
    const json& jo = j.at("options");
    o.baseline_engine = jo.at("baseline_engine").get<std::string>();
    o.kit = kit_from_json(jo.at("kit"));
    o.pairs = jo.at("pairs").get<int>();
    o.first_pair = jo.at("first_pair").get<int>();
    o.seed = jo.at("seed").get<std::uint64_t>();
    o.alpha = jo.at("alpha").get<double>();
    o.excursion_z = jo.at("excursion_z").get<std::vector<double>>();
    o.near_mask_fwhm = jo.at("near_mask_fwhm").get<double>();
    o.bootstrap_resamples = jo.at("bootstrap_resamples").get<int>();
    o.bootstrap_seed = jo.at("bootstrap_seed").get<std::uint64_t>();
    o.completeness_snr = jo.at("completeness_snr").get<std::vector<double>>();
    o.matched_z = jo.at("matched_z").get<double>();
    o.neighbourhood = jo.at("neighbourhood").get<int>();
    o.null_window = jo.at("null_window").get<int>();
    o.null_window_placement =
        jo.at("null_window_placement").get<std::string>() == "away" ? NullWindowPlacement::away : NullWindowPlacement::random;
    r.runs = methods_from_json(j.at("runs"));
    r.methods = methods_from_json(j.at("methods"));
    r.method_run = j.at("method_run").get<std::vector<std::size_t>>();
    r.skipped = j.at("skipped").get<std::vector<std::string>>();
    r.thresholds = j.at("thresholds").get<std::vector<double>>();
    r.labels = j.at("labels").get<std::vector<std::string>>();
    r.trials_per_cube = j.at("trials_per_cube").get<std::int64_t>();
    r.bonferroni_z = j.at("bonferroni_z").get<double>();
    r.null_origins = j.at("null_origins").get<std::vector<std::int64_t>>();
    r.run_seconds = j.at("run_seconds").get<std::vector<double>>();
    const json& t = j.at("timings");
    r.timings = {t.at(0).get<double>(), t.at(1).get<double>(), t.at(2).get<double>(), t.at(3).get<double>(),
                 t.at(4).get<double>()};
    for (const auto& run : j.at("observations")) {
      std::vector<PairObservation> pairs;
      for (const auto& x : run) {
        PairObservation p;
        p.z_null = exact_number_from(x.at(0));
        p.z_inj = exact_number_from(x.at(1));
        p.near = sums_from_json(x.at(2));
        p.away = sums_from_json(x.at(3));
        p.all = sums_from_json(x.at(4));
        p.high_z = x.at(5).get<std::vector<float>>();
        for (const auto& v : x.at(6)) p.level_max.push_back(exact_number_from(v));
        pairs.push_back(std::move(p));
      }
      r.observations.push_back(std::move(pairs));
    }
    require(r.observations.size() == r.runs.size() && r.run_seconds.size() == r.runs.size() &&
                int(r.null_origins.size()) == o.pairs,
            "validation records: run and pair counts do not match");
    for (const auto& run : r.observations)
      require(int(run.size()) == o.pairs, "validation records: a run holds another number of pairs");
    if (quantization) {
      quantization->clear();
      for (const auto& q : j.at("quantization"))
        quantization->push_back({q.at(0).get<std::string>(), q.at(1).get<std::string>(), q.at(2).get<double>(),
                                 q.at(3).get<double>(), q.at(4).get<double>(), q.at(5).get<double>()});
    }
    if (provenance) *provenance = provenance_of(j);
    return r;
  } catch (const json::exception& e) {
    throw Error(std::string("validation records: missing or malformed field: ") + e.what());
  }
}

}  // namespace shiftstack
