// The tree's sensitivity study (SPEC 7, docs/tree-search.md): SNR retention of the unrefined tree
// statistic on sources at random sub-pixel origins and random velocities, its null variance near
// and away from masks, and completeness of the tree with exact refinement against the exhaustive
// engine on identical injections and bank, at each screen margin, with the run time per scan.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>

#include "shiftstack/error.hpp"
#include "shiftstack/likelihood.hpp"
#include "shiftstack/svg_plot.hpp"
#include "shiftstack/tree.hpp"
#include "validation/validation_internal.hpp"

#ifdef SHIFTSTACK_HAVE_CUDA
#include "cuda/tree/cuda_tree.hpp"  // the GPU study
#endif

namespace shiftstack {

namespace {

using Clock = std::chrono::steady_clock;

EncodedStack encoded(const KitStack& kit) { return encode(compute_likelihood(kit.stack), Encoding::fp32); }

// The trials of the detection neighbourhood: origin +-1 px, velocity index +-1 per axis.
struct Neighbourhood {
  int x = 0, y = 0, ix = 0, iy = 0;
  std::size_t vx_count = 1;
  bool contains(const Candidate& c) const {
    const int cx = int(c.velocity % std::int64_t(vx_count)), cy = int(c.velocity / std::int64_t(vx_count));
    return std::abs(c.x - x) <= 1 && std::abs(c.y - y) <= 1 && std::abs(cx - ix) <= 1 && std::abs(cy - iy) <= 1;
  }
};
Neighbourhood neighbourhood(const KitStack& kit) {
  const std::size_t n = kit.bank.vx_count();
  return {kit.truth.x, kit.truth.y, int(kit.truth.velocity % std::int64_t(n)), int(kit.truth.velocity / std::int64_t(n)), n};
}

TreeOptions tree_options(double margin, bool refine, bool bf16) {
  TreeOptions o;
  o.bf16_maps = bf16;
  o.screen_margin = margin;
  o.refine = refine;
  o.fallback_fraction = 1e9;  // the study measures the tree itself, never the exhaustive fallback
  return o;
}

std::unique_ptr<Engine> make_tree(bool gpu, const TreeOptions& options, const std::string& name) {
  if (!gpu) return std::make_unique<TreeEngine>(options, name);
#ifdef SHIFTSTACK_HAVE_CUDA
  return std::make_unique<cuda::CudaTreeEngine>(options, name);
#else
  throw Error("tree study: the GPU study (cuda-tree) needs a build with CUDA");
#endif
}

SearchResult run(Engine& engine, const EncodedStack& s, const MotionBank& bank, const OutputPolicy& p, Region r = {}) {
  SearchResult result = search(engine, s, bank, p, r);
  if (auto* tree = dynamic_cast<TreeEngine*>(&engine))
    require(!tree->last_stats().fell_back, "tree study: the tree fell back: " + tree->last_stats().fallback_reason);
#ifdef SHIFTSTACK_HAVE_CUDA
  if (auto* tree = dynamic_cast<cuda::CudaTreeEngine*>(&engine))
    require(!tree->last_stats().fell_back, "tree study: the tree fell back: " + tree->last_stats().fallback_reason);
#endif
  return result;
}

OutputPolicy all_trials() {
  OutputPolicy p;
  p.collect_candidates = true;
  p.candidate_threshold = -std::numeric_limits<double>::infinity();
  p.max_candidates = std::int64_t(1) << 40;
  return p;
}

double percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  if (v.empty()) return std::numeric_limits<double>::quiet_NaN();
  const double at = q * double(v.size() - 1);
  const std::size_t i = std::size_t(std::floor(at));
  const double f = at - double(i);
  return i + 1 < v.size() ? v[i] * (1 - f) + v[i + 1] * f : v[i];
}
double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / double(v.size());
}
double median(std::vector<double> v) { return percentile(std::move(v), 0.5); }

// Per-cube sums of Z and Z^2 of one class; pooled variance with a delete-one-cube jackknife.
struct Sums {
  double n = 0, s = 0, s2 = 0;
};
std::pair<double, double> pooled(const std::vector<Sums>& cubes) {
  auto variance = [](const Sums& t) { return (t.s2 - t.s * t.s / t.n) / (t.n - 1); };
  Sums all;
  for (const Sums& c : cubes) all.n += c.n, all.s += c.s, all.s2 += c.s2;
  const double v = variance(all);
  const std::size_t k = cubes.size();
  if (k < 2) return {v, 0.0};
  std::vector<double> leave(k);
  for (std::size_t i = 0; i < k; ++i) leave[i] = variance({all.n - cubes[i].n, all.s - cubes[i].s, all.s2 - cubes[i].s2});
  const double m = mean(leave);
  double ss = 0;
  for (double x : leave) ss += (x - m) * (x - m);
  return {v, std::sqrt(double(k - 1) / double(k) * ss)};
}

}  // namespace

TreeStudyReport run_tree_study(const TreeStudyOptions& o) {
  require(o.retention_injections >= 1 && o.null_cubes >= 2 && o.injections_per_snr >= 1, "tree study: counts must be >= 1 (null cubes >= 2)");
  require(!o.margins.empty(), "tree study: no screen margins");
  const auto start = Clock::now();
  TreeStudyReport rep;
  rep.options = o;
  auto say = [&](const std::string& what) {
    if (o.verbose) std::fprintf(stderr, "tree study: %s\n", what.c_str());
  };
  auto reference = make_engine("reference");
  const std::string exhaustive_name = o.gpu ? "cuda-fast" : "cpu", tree_name = o.tree_name();
  auto exhaustive = make_engine(exhaustive_name);
  const std::unique_ptr<Engine> screen_engine = make_tree(o.gpu, tree_options(0, false, o.bf16), tree_name + "-screen");
  Engine& screen = *screen_engine;

  // Retention: noise-free off-grid sources, so Z is the signal alone.
  say("retention");
  for (int j = 0; j < o.retention_injections; ++j) {
    KitOptions k = o.kit;
    k.seed = o.seed + std::uint64_t(j);
    k.noise = false;
    k.inject_off_grid = true;
    k.injected_snr = 8;
    const KitStack kit = make_kit(k);
    const EncodedStack s = encoded(kit);
    const Neighbourhood nb = neighbourhood(kit);
    const Region r = resolve({nb.x - 1, nb.y - 1, 3, 3}, s.width, s.height);
    const SearchResult exact = run(*reference, s, kit.bank, all_trials(), r);
    const SearchResult tree = run(screen, s, kit.bank, all_trials(), r);
    const Candidate* best = nullptr;
    for (const Candidate& c : exact.candidates)
      if (nb.contains(c) && (!best || c.Z > best->Z)) best = &c;
    float tree_best = -std::numeric_limits<float>::infinity(), tree_at = std::numeric_limits<float>::quiet_NaN();
    for (const Candidate& c : tree.candidates) {
      if (!nb.contains(c)) continue;
      tree_best = std::max(tree_best, c.Z);
      if (best && c.x == best->x && c.y == best->y && c.velocity == best->velocity) tree_at = c.Z;
    }
    require(best && std::isfinite(tree_at), "tree study: the injected neighbourhood was not scored");
    rep.retention_at_trial.push_back(double(tree_at) / best->Z);
    rep.retention_best.push_back(double(tree_best) / best->Z);
  }
  rep.retention_mean = mean(rep.retention_at_trial);
  rep.retention_p01 = percentile(rep.retention_at_trial, 0.01);
  rep.retention_best_mean = mean(rep.retention_best);
  rep.retention_best_p01 = percentile(rep.retention_best, 0.01);

  // Methods: the exhaustive engine, then cpu-tree at each margin.
  rep.methods.push_back({exhaustive_name, -1, std::vector<int>(o.completeness_snr.size(), 0), 0, 0});
  std::vector<std::unique_ptr<Engine>> trees;
  for (double m : o.margins) {
    char name[64];
    std::snprintf(name, sizeof name, "%s margin %.2g", tree_name.c_str(), m);
    rep.methods.push_back({name, m, std::vector<int>(o.completeness_snr.size(), 0), 0, 0});
    trees.push_back(make_tree(o.gpu, tree_options(m, true, o.bf16), tree_name));
  }
  auto engine_of = [&](std::size_t i) -> Engine& { return i == 0 ? *exhaustive : *trees[i - 1]; };
  std::vector<std::vector<double>> seconds(rep.methods.size());

  // Null cubes: variance of the unrefined tree Z and of the exhaustive Z over a window, near
  // and away from masks; false alarms of every method over the whole cube.
  say("null cubes");
  std::vector<Sums> tree_near, tree_away, exact_near, exact_away;
  for (int c = 0; c < o.null_cubes; ++c) {
    KitOptions k = o.kit;
    k.seed = o.seed + 100000 + std::uint64_t(c);
    k.inject = false;
    const KitStack kit = make_kit(k);
    const EncodedStack s = encoded(kit);
    OutputPolicy at_threshold;
    rep.z_thr = digest_threshold({&s, &kit.bank, resolve({}, s.width, s.height), at_threshold});
    for (std::size_t i = 0; i < rep.methods.size(); ++i)
      rep.methods[i].false_alarms += run(engine_of(i), s, kit.bank, at_threshold).digest.count;
    const int w = o.null_window > 0 ? std::min(o.null_window, s.width) : s.width;
    const int h = o.null_window > 0 ? std::min(o.null_window, s.height) : s.height;
    const Region r = resolve({(s.width - w) / 2, (s.height - h) / 2, w, h}, s.width, s.height);
    const std::vector<std::uint8_t> near = validation_detail::near_mask_flags(kit.stack, kit.bank, 1.0, r);
    for (int pass = 0; pass < 2; ++pass) {
      const SearchResult res = pass == 0 ? run(screen, s, kit.bank, all_trials(), r) : run(*exhaustive, s, kit.bank, all_trials(), r);
      Sums n, a;
      for (const Candidate& cand : res.candidates) {
        const bool is_near = near[(std::size_t(cand.velocity) * r.height + std::size_t(cand.y - r.y0)) * r.width + (cand.x - r.x0)] != 0;
        Sums& t = is_near ? n : a;
        t.n += 1, t.s += cand.Z, t.s2 += double(cand.Z) * cand.Z;
      }
      (pass == 0 ? tree_near : exact_near).push_back(n);
      (pass == 0 ? tree_away : exact_away).push_back(a);
    }
  }
  std::tie(rep.tree_var_near, rep.tree_var_near_se) = pooled(tree_near);
  std::tie(rep.tree_var_away, rep.tree_var_away_se) = pooled(tree_away);
  std::tie(rep.exact_var_near, rep.exact_var_near_se) = pooled(exact_near);
  std::tie(rep.exact_var_away, rep.exact_var_away_se) = pooled(exact_away);
  for (const Sums& t : tree_near) rep.null_trials_near += std::int64_t(t.n);
  for (const Sums& t : tree_away) rep.null_trials_away += std::int64_t(t.n);

  // Completeness: noisy off-grid sources; every method searches the same cube at z_thr.
  for (std::size_t l = 0; l < o.completeness_snr.size(); ++l) {
    say("completeness at SNR " + std::to_string(o.completeness_snr[l]));
    for (int j = 0; j < o.injections_per_snr; ++j) {
      KitOptions k = o.kit;
      k.seed = o.seed + 200000 + 1000 * std::uint64_t(l) + std::uint64_t(j);
      k.inject_off_grid = true;
      k.injected_snr = o.completeness_snr[l];
      const KitStack kit = make_kit(k);
      const EncodedStack s = encoded(kit);
      const Neighbourhood nb = neighbourhood(kit);
      OutputPolicy p;
      p.collect_candidates = true;
      p.candidate_threshold = digest_threshold({&s, &kit.bank, resolve({}, s.width, s.height), p});
      for (std::size_t i = 0; i < rep.methods.size(); ++i) {
        const SearchResult res = run(engine_of(i), s, kit.bank, p);
        seconds[i].push_back(res.seconds);
        bool found = false;
        for (const Candidate& c : res.candidates) found |= nb.contains(c);
        rep.methods[i].detected[l] += found;
      }
    }
  }
  for (std::size_t i = 0; i < rep.methods.size(); ++i) rep.methods[i].seconds_per_scan = median(seconds[i]);
  rep.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return rep;
}

std::string to_json(const TreeStudyReport& r, const Provenance& provenance) {
  using nlohmann::json;
  const TreeStudyOptions& o = r.options;
  json methods = json::array();
  for (const auto& m : r.methods)
    methods.push_back({{"name", m.name}, {"margin", m.margin}, {"detected", m.detected},
                       {"false_alarms", m.false_alarms}, {"seconds_per_scan", m.seconds_per_scan}});
  json j = {
      {"kit", {{"name", o.kit.name}, {"exposures", o.kit.exposures}, {"width", o.kit.width}, {"height", o.kit.height},
               {"vx", o.kit.vx_count}, {"vy", o.kit.vy_count}, {"nights", o.kit.nights}}},
      {"seed", o.seed},
      {"z_thr", r.z_thr},
      {"retention", {{"injections", o.retention_injections}, {"at_trial", r.retention_at_trial},
                     {"best", r.retention_best}, {"mean", r.retention_mean}, {"p01", r.retention_p01},
                     {"best_mean", r.retention_best_mean}, {"best_p01", r.retention_best_p01}}},
      {"null", {{"cubes", o.null_cubes}, {"window", o.null_window},
                {"tree", {{"near", r.tree_var_near}, {"near_se", r.tree_var_near_se}, {"away", r.tree_var_away},
                          {"away_se", r.tree_var_away_se}}},
                {"exhaustive", {{"near", r.exact_var_near}, {"near_se", r.exact_var_near_se},
                                {"away", r.exact_var_away}, {"away_se", r.exact_var_away_se}}},
                {"trials_near", r.null_trials_near}, {"trials_away", r.null_trials_away}}},
      {"completeness", {{"snr", o.completeness_snr}, {"injections_per_snr", o.injections_per_snr},
                        {"null_cubes_for_false_alarms", o.null_cubes}, {"methods", methods}}},
      {"engines", {{"exhaustive", r.methods.empty() ? "" : r.methods[0].name},
                   {"tree", o.tree_name()}}},
      {"seconds", r.seconds},
      {"provenance", validation_detail::provenance_json(provenance)},
  };
  return j.dump(2) + "\n";
}

std::string format_table(const TreeStudyReport& r) {
  char line[320];
  std::string out;
  const TreeStudyOptions& o = r.options;
  std::snprintf(line, sizeof line,
                "tree study on %s (%d exposures, %dx%d, %dx%d velocities), sources at random sub-pixel origins and "
                "velocities\n",
                o.kit.name.c_str(), o.kit.exposures, o.kit.width, o.kit.height, o.kit.vx_count, o.kit.vy_count);
  out += line;
  std::snprintf(line, sizeof line,
                "retention of the unrefined tree Z (%d injections): at the exact best trial mean %.4f, 1st "
                "percentile %.4f; best in the neighbourhood mean %.4f, 1st percentile %.4f\n",
                o.retention_injections, r.retention_mean, r.retention_p01, r.retention_best_mean, r.retention_best_p01);
  out += line;
  std::snprintf(line, sizeof line,
                "null variance (%d cubes, %lld near / %lld away trials): tree near %.4f +- %.4f, away %.4f +- %.4f; "
                "exhaustive near %.4f +- %.4f, away %.4f +- %.4f\n",
                o.null_cubes, (long long)r.null_trials_near, (long long)r.null_trials_away, r.tree_var_near,
                r.tree_var_near_se, r.tree_var_away, r.tree_var_away_se, r.exact_var_near, r.exact_var_near_se,
                r.exact_var_away, r.exact_var_away_se);
  out += line;
  std::snprintf(line, sizeof line, "completeness at z_thr = %.4f (%d injections per SNR), false alarms over %d null cubes:\n",
                r.z_thr, o.injections_per_snr, o.null_cubes);
  out += line;
  out += "  method                 ";
  for (double s : o.completeness_snr) {
    std::snprintf(line, sizeof line, " SNR%-5.3g", s);
    out += line;
  }
  out += "  false alarms  s/scan\n";
  for (const auto& m : r.methods) {
    std::snprintf(line, sizeof line, "  %-22s ", m.name.c_str());
    out += line;
    for (int d : m.detected) {
      std::snprintf(line, sizeof line, " %-8.3f", double(d) / o.injections_per_snr);
      out += line;
    }
    std::snprintf(line, sizeof line, "  %12lld  %.4g\n", (long long)m.false_alarms, m.seconds_per_scan);
    out += line;
  }
  return out;
}

std::vector<std::string> write_tree_study_plots(const TreeStudyReport& r, const std::string& folder,
                                                const std::string& footnote) {
  namespace fs = std::filesystem;
  fs::create_directories(folder);
  const std::vector<std::string> colors = {"#444444", "#d62728", "#ff7f0e", "#1f77b4", "#2ca02c", "#9467bd"};
  const TreeStudyOptions& o = r.options;
  std::vector<std::string> files;
  {
    svg::Plot p;
    p.title = "Completeness at z_thr: exhaustive " + r.methods[0].name + " and " +
              o.tree_name() + " (screen + exact refinement)";
    p.x_label = "injected SNR (sub-pixel origin, velocity anywhere in the bank)";
    p.y_label = "completeness";
    p.footnote = footnote;
    for (std::size_t i = 0; i < r.methods.size(); ++i) {
      svg::Series s;
      s.label = r.methods[i].name;
      s.color = colors[i % colors.size()];
      s.dashed = i > 0;
      for (std::size_t l = 0; l < o.completeness_snr.size(); ++l) {
        s.x.push_back(o.completeness_snr[l]);
        s.y.push_back(double(r.methods[i].detected[l]) / o.injections_per_snr);
      }
      p.series.push_back(s);
    }
    files.push_back((fs::path(folder) / "completeness.svg").string());
    svg::write(p, files.back());
  }
  {
    // Run time against completeness, one point per method and SNR level joined per SNR.
    svg::Plot p;
    p.title = "Run time per scan against completeness (same cubes, same bank)";
    p.x_label = "seconds per scan (median)";
    p.y_label = "completeness";
    p.footnote = footnote;
    for (std::size_t l = 0; l < o.completeness_snr.size(); ++l) {
      svg::Series s;
      char label[32];
      std::snprintf(label, sizeof label, "SNR %.3g", o.completeness_snr[l]);
      s.label = label;
      s.color = colors[(l + 1) % colors.size()];
      for (const auto& m : r.methods) {
        s.x.push_back(m.seconds_per_scan);
        s.y.push_back(double(m.detected[l]) / o.injections_per_snr);
      }
      p.series.push_back(s);
    }
    files.push_back((fs::path(folder) / "time_vs_completeness.svg").string());
    svg::write(p, files.back());
  }
  {
    svg::Plot p;
    p.title = "Retention of the unrefined tree Z per injection (sorted)";
    p.x_label = "injection (sorted by retention)";
    p.y_label = "tree Z / exact Z";
    p.footnote = footnote;
    for (int which = 0; which < 2; ++which) {
      std::vector<double> v = which == 0 ? r.retention_at_trial : r.retention_best;
      std::sort(v.begin(), v.end());
      svg::Series s;
      s.label = which == 0 ? "at the exact best trial" : "best tree trial in the neighbourhood";
      s.color = colors[which + 1];
      s.line = false;
      for (std::size_t i = 0; i < v.size(); ++i) s.x.push_back(double(i)), s.y.push_back(v[i]);
      p.series.push_back(s);
    }
    p.lines.push_back({1.0, "#444444", "exact", true});
    files.push_back((fs::path(folder) / "retention.svg").string());
    svg::write(p, files.back());
  }
  {
    // The loss curve behind the default margin: exhaustive detections the tree missed.
    svg::Plot p;
    p.title = "Detections lost by the screen against its margin (all SNRs pooled)";
    p.x_label = "screen margin (z_screen = z_thr - margin)";
    p.y_label = "fraction of exhaustive detections missed";
    p.footnote = footnote;
    svg::Series s;
    s.label = o.tree_name();
    s.color = colors[1];
    int total = 0;
    for (int d : r.methods[0].detected) total += d;
    for (std::size_t i = 1; i < r.methods.size(); ++i) {
      int mine = 0;
      for (int d : r.methods[i].detected) mine += d;
      s.x.push_back(r.methods[i].margin);
      s.y.push_back(total > 0 ? double(total - mine) / total : 0.0);
    }
    p.series.push_back(s);
    p.y_min = 0;
    files.push_back((fs::path(folder) / "loss_curve.svg").string());
    svg::write(p, files.back());
  }
  return files;
}

}  // namespace shiftstack
