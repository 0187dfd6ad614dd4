// The tree search engine `cpu-tree` (docs/tree-search.md): signed partial sums of psi and phi
// over groups of exposures, combined up a binary tree whose velocity sets are only as fine as
// each group's time span needs, so that a whole bank costs a few additions per trial instead of
// E. Every trial still sums each exposure exactly once (Var(A) = B, the null stays N(0,1)); what
// it can lose is signal, since its positions may differ from the exhaustive rounding by a pixel.
// Trials whose tree Z passes a screen are re-scored exactly (integer or fractional shifts) with
// the reference engine's arithmetic; candidates, maxZ and the count above z_thr come from those.
//
// Engines: `cpu-tree` (screen + exact refinement) and `cpu-tree-screen` (the unrefined tree
// statistic alone, for sensitivity studies).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "shiftstack/search.hpp"
#include "shiftstack/synth.hpp"

namespace shiftstack {

struct TreeOptions {
  // Node velocity step along each axis: 1 / (oversample * span) pixels/day, span = the node's
  // epoch span; the root keeps the bank's axes.
  double oversample = 1.0;
  // Child velocities tried on either side of the nearest one when a parent velocity is formed.
  int child_reach = 1;
  // Screen: trials with tree Z > z_screen = min(z_thr, candidate threshold) - screen_margin are
  // re-scored exactly with their neighbours (docs/tree-search.md: the default comes from the
  // measured loss curve).
  double screen_margin = 1.5;
  bool refine = true;  // false: digest and candidates from the tree's own scores (unrefined)
  // Origins per tile and the level from which nodes are formed band-wide (0: chosen by the
  // engine from the additions they cost, within the budgets below).
  int tile_width = 0, tile_height = 0, cut_level = 0;
  // Form the root from its grandchildren, so that its children are never stored (-1: chosen by
  // the engine, 0: never, 1: whenever the root's children are formed per tile).
  int fuse_root = -1;
  double tile_budget_bytes = 16.0 * 1024 * 1024;
  // Largest padded, cleaned copy of the stack held at once (bands of origin rows beyond it).
  double band_budget_bytes = 1024.0 * 1024 * 1024;
  // The exhaustive `cpu` engine runs instead (and the result says so) when the tree would need
  // more than this fraction of E additions per trial.
  double fallback_fraction = 0.5;
  // cuda-tree only: level maps stored as BF16 (A, B) pairs, half the bytes of FP32 maps; each
  // map pixel is still formed in FP32 and rounded once when stored, so the tree Z moves by the
  // rounding (measured in docs/tree-search.md) while refined scores stay exact.
  bool bf16_maps = false;
  // cuda-tree only: form a level from two levels down where the level between holds parents
  // only, so that level is never stored (the same floats; -1: the engine's choice, 0 never, 1
  // wherever it can).
  int fuse_levels = -1;
};

// What one tree level cost in one search, counted by the executor (margins included).
struct TreeLevelStats {
  int level = 0;
  std::int64_t nodes = 0;      // nodes at this level
  std::int64_t entries = 0;    // node velocities computed (summed over tiles)
  std::int64_t additions = 0;  // per channel (A or B), summed over tiles
};

struct TreeStats {
  bool fell_back = false;
  std::string fallback_reason;
  std::int64_t trials = 0;  // origins x velocities
  std::vector<TreeLevelStats> levels;
  double additions_per_trial() const;  // per channel, all levels
  double z_screen = 0;
  std::int64_t screened = 0;  // trials whose tree Z passed the screen
  std::int64_t refined = 0;   // trials re-scored exactly (screened, neighbours, flood fill)
  int tile_width = 0, tile_height = 0, bands = 0;
  int cut_level = 0;      // levels from here down are formed band-wide (stage A)
  bool fused_root = false;  // the root was formed from its grandchildren
  int screen_passes = 0;  // extra passes with a lower screen when nothing passed the first
  double tile_bytes = 0;  // largest per-thread working set of one tile
  double band_bytes = 0;  // padded copy of the stack plus the band-wide maps (largest band)
  // The schedule's modelled cost per trial, in the cost model's units (one 16-pixel map vector
  // formed from two sources; docs/tree-search.md section 5).
  double modelled_cost_per_trial = 0;
  double seconds_fill = 0, seconds_tree = 0, seconds_refine = 0;
  double seconds_stage_a = 0;  // the band-wide part of seconds_tree (last pass)
  int depth = 0;
  std::int64_t nodes = 0;
};

class TreeEngine final : public Engine {
 public:
  explicit TreeEngine(TreeOptions options = {}, std::string name = "cpu-tree");
  ~TreeEngine() override;
  std::string name() const override { return name_; }
  std::string unsupported_reason(const SearchInput& input) const override;
  // The schedule's modelled cost against the exhaustive `cpu` engine's (docs/tree-search.md
  // section 9): small images and few exposures can make the tree the slower of the two.
  std::string slower_reason(const SearchInput& input) const override;
  SearchResult search(const SearchInput& input) override;
  const TreeStats& last_stats() const { return stats_; }
  const TreeOptions& options() const { return options_; }

 private:
  struct Cache;
  struct Planned;
  // The plan and schedule for this input (made once for consecutive calls on the same input).
  const Planned& planned(const SearchInput& input, int threads) const;
  TreeOptions options_;
  std::string name_;
  TreeStats stats_;
  std::unique_ptr<Cache> cache_;
};

// The integer shifts the tree applies, per root axis value and exposure: a trial (x0, y0, a, b)
// sums exposure e at (x0 + x[a * E + e], y0 + y[b * E + e]). Throws for non-Cartesian banks.
struct TreeShiftTables {
  int exposures = 0;
  std::vector<std::int32_t> x, y;
};
TreeShiftTables tree_shift_tables(const MotionBank& bank, const TreeOptions& options = {});

// The tree's positions against the exhaustive rounding round_shift(s_{v,e}) over every
// (velocity, exposure) pair of the bank.
struct TreePositionError {
  std::int64_t pairs = 0;                   // velocities x exposures
  std::vector<double> axis_fraction;        // [|d|]: share of (axis value, exposure), both axes
  double exact_fraction = 0;                // share of (v, e) with d = (0, 0)
  double one_pixel_fraction = 0;            // max(|dx|, |dy|) == 1
  int max_abs = 0;                          // largest |d| on either axis
  double rms_tree = 0, rms_exhaustive = 0;  // per axis, about the real shift s_{v,e}
  double max_tree = 0;                      // largest |tree - s| on either axis
  int depth = 0;
  std::int64_t nodes = 0;
};
TreePositionError tree_position_error(const MotionBank& bank, const TreeOptions& options = {});

// Bounds on how far the tree's sumA, sumB may lie from the exhaustive engines' over a region:
// moving a w x h rectangle of samples by d pixels changes its sum only through the pixels it
// gains and loses, at most |dx| h + |dy| w each, so |d sum| <= sum_{v,e} 2 (|dx| h + |dy| w)
// max_p |value_e(p)| (value = weighted psi for sumA, phi for sumB).
struct TreeDigestBounds {
  double sumA = 0, sumB = 0;
};
TreeDigestBounds tree_digest_bounds(const EncodedStack& stack, const MotionBank& bank, const Region& region,
                                    const TreeOptions& options = {});

// ---- sensitivity study of the tree (SPEC 7; docs/tree-search.md) -----------------------------
// Sources injected at random sub-pixel origins and random velocities inside the bank's range.
struct TreeStudyOptions {
  KitOptions kit = workload("ci");
  std::uint64_t seed = 5000;
  int retention_injections = 64;             // noise-free injections (SNR 8): retention of tree Z
  int null_cubes = 8;                        // null variance (near / away from masks), false alarms
  int null_window = 64;                      // null variance over a window this wide (0: whole image)
  std::vector<double> completeness_snr = {5, 6, 7, 8, 9, 10};
  int injections_per_snr = 30;               // noisy injections per SNR, same cubes for every method
  std::vector<double> margins = {0.5, 1.0, 1.5, 2.5};  // cpu-tree screen margins tried
  // The GPU study: cuda-tree (and cuda-tree-screen) against cuda-fast, in place of cpu-tree
  // against cpu (needs a build with CUDA and a device).
  bool gpu = false;
  bool bf16 = false;  // with gpu: cuda-tree-bf16 (BF16 level maps)
  bool verbose = false;
  // The tree engine studied: cpu-tree, cuda-tree or cuda-tree-bf16.
  std::string tree_name() const { return gpu ? (bf16 ? "cuda-tree-bf16" : "cuda-tree") : "cpu-tree"; }
};

struct TreeStudyMethod {
  std::string name;    // the exhaustive engine ("cpu", "cuda-fast") or "<tree engine> margin m"
  double margin = -1;  // -1 for the exhaustive engine
  std::vector<int> detected;  // per completeness SNR
  std::int64_t false_alarms = 0;  // null-cube trials above z_thr, all null cubes
  double seconds_per_scan = 0;    // median over the completeness cubes
};

struct TreeStudyReport {
  TreeStudyOptions options;
  double z_thr = 0;
  // Retention: per injection, tree Z / exact Z at the exact best trial of the neighbourhood
  // (origin +-1 px, velocity +-1 step around the nearest bank trial), and best / best.
  std::vector<double> retention_at_trial, retention_best;
  double retention_mean = 0, retention_p01 = 0, retention_best_mean = 0, retention_best_p01 = 0;
  // Null variance of the unrefined tree Z and of the exhaustive Z, near and away from masks,
  // with jackknife errors over cubes.
  double tree_var_near = 0, tree_var_near_se = 0, tree_var_away = 0, tree_var_away_se = 0;
  double exact_var_near = 0, exact_var_near_se = 0, exact_var_away = 0, exact_var_away_se = 0;
  std::int64_t null_trials_near = 0, null_trials_away = 0;
  std::vector<TreeStudyMethod> methods;  // methods[0] is the exhaustive cpu engine
  double seconds = 0;
};

TreeStudyReport run_tree_study(const TreeStudyOptions& options);
struct Provenance;  // shiftstack/validation.hpp
std::string to_json(const TreeStudyReport& report, const Provenance& provenance);
std::string format_table(const TreeStudyReport& report);
// completeness.svg, time_vs_completeness.svg, retention.svg, loss_curve.svg in folder.
std::vector<std::string> write_tree_study_plots(const TreeStudyReport& report, const std::string& folder,
                                                const std::string& footnote);

}  // namespace shiftstack
