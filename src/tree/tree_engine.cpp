// The `cpu-tree` and `cpu-tree-screen` engines: plan, tiles and bands, the executor over all
// cores, then (cpu-tree) the exact refinement of the screened trials.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <optional>

#include "core/engine_registry.hpp"
#include "shiftstack/error.hpp"
#include "shiftstack/tree.hpp"
#include "tree/tree_exec.hpp"
#include "tree/tree_refine.hpp"

namespace shiftstack {

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Tile lengths tried (origins): widths in whole 16-float vectors, heights from 8; the region's
// own length is added.
constexpr int kTileWidths[] = {16, 32, 48, 64, 96, 128, 192, 256};
constexpr int kTileHeights[] = {8, 16, 24, 32, 48, 64, 96, 128, 192, 256};

template <std::size_t N>
std::vector<int> tile_lengths(const int (&choices)[N], int region_length, int fixed) {
  if (fixed > 0) return {std::min(fixed, region_length)};
  std::vector<int> out;
  for (int n : choices)
    if (n < region_length) out.push_back(n);
  out.push_back(region_length);
  return out;
}

// The schedule cost model, in units of one 16-pixel vector of a map formed in a tile from two
// sources (both channels, about 4-5 ns on the development machine, an AMD EPYC Zen 4 with 2
// cores, when the tile's maps stay in the L2 cache). Measured with the tree's own kernels there
// (docs/tree-search.md section 5): scoring 16 root trials from two sources costs about 0.9
// units, from four (the fused root) 1.5; a map vector formed band-wide (streamed from main
// memory) 3.6, and a tile's read of one from stage A's maps 2 more; copying 16 pixels of one
// exposure into the band about 6. A map formed in a tile whose per-thread working set outgrows
// 512 KB costs about a third more per fourfold growth (1.36 at 2 MB, 1.72 at 8 MB).
constexpr double kRootTwoSources = 0.9, kRootFourSources = 1.5;
constexpr double kBandWide = 3.6, kKeptRead = 2.0, kCopy = 6.0;
// The exhaustive cpu engine's cost per paired sample in the same units, and the modelled gain
// the automatic choice asks of the tree before preferring it (the model leaves out a search's
// fixed costs, which decide small searches). Measured on a Zen 3 VM (AVX2, 2 threads):
// 0.030-0.049 units per sample (`ci` at 512 x 512, `deep`, `dense`); the lower is taken, which
// favours cpu. Modelled against measured gains: docs/tree-search.md section 9.
constexpr double kCpuPairedSample = 0.030, kAutoGain = 1.5;
double cache_factor(double bytes) {
  constexpr double kResident = 512.0 * 1024;
  return bytes <= kResident ? 1.0 : 1.0 + 0.18 * std::log2(bytes / kResident);
}

// How a search runs: the cut between the band-wide stage A and the per-tile stage B, the tile,
// and how many origin rows a band holds.
struct Schedule {
  int cut_level = 1;
  std::vector<char> cut;
  bool fuse_root = false;
  int tile_width = 0, tile_height = 0, band_rows = 0;
  double additions_per_origin = 0;  // both stages, margins included
  double shared_additions_per_origin = 0;  // the same with the root's children formed and shared
  double cost = 0;                  // modelled cost per origin (units above)
  std::size_t tile_floats = 0;
  double band_bytes = 0;  // exposure copy plus kept maps of one band
};

double sum(const std::vector<std::int64_t>& v) {
  double s = 0;
  for (std::int64_t x : v) s += double(x);
  return s;
}

// The schedule of least modelled cost per origin whose per-thread tile fits the tile budget and
// whose band (exposure copy plus kept maps) fits the band budget, preferring enough tiles to
// keep every thread busy.
Schedule choose_schedule(const tree::Plan& plan, const Region& r, const TreeOptions& o, int exposures, int threads) {
  const double tile_budget = o.tile_budget_bytes / sizeof(float);
  const tree::PlanShapes shapes = tree::plan_shapes(plan);
  std::vector<tree::Geometry> tiles;
  for (int w : tile_lengths(kTileWidths, r.width, o.tile_width))
    for (int h : tile_lengths(kTileHeights, r.height, o.tile_height))
      tiles.push_back(tree::make_geometry(plan, shapes, w, h, true));
  // A band's cost depends on its rows (and, for stage A, the cut level) only: many tiles share
  // one, so each is computed once.
  struct BandCost {
    int rows = 0;
    double bytes = 0, a_additions = 0, a_vectors = 0, copy_vectors = 0;
  };
  // A band of `held` rows: its lengths-only geometry and the exposure pixels its copy holds.
  struct BandShape {
    int held = 0;
    tree::Geometry geometry;
    double pixels = 0;
  };
  std::vector<BandShape> band_shapes;
  std::vector<BandCost> level_bands;  // this level's, by rows
  auto band_cost = [&](int rows, const std::vector<char>& cut) -> BandCost {
    for (const BandCost& b : level_bands)
      if (b.rows == rows) return b;
    const int held = std::min(rows, r.height);
    const BandShape* shape = nullptr;
    for (const BandShape& b : band_shapes)
      if (b.held == held) shape = &b;
    if (!shape) {
      const tree::ReadRange reads = tree::band_reads(plan, tree::make_geometry(plan, shapes, r.width, held, false));
      band_shapes.push_back({held, tree::make_geometry(plan, shapes, r.width, held, true),
                             double(reads.hi[0] - reads.lo[0]) * double(reads.hi[1] - reads.lo[1])});
      shape = &band_shapes.back();
    }
    const double pixels = shape->pixels;
    const tree::StageCost a = tree::stage_a_cost(plan, shape->geometry, cut);
    const double origins = double(r.width) * held;
    BandCost b;
    b.rows = rows;
    b.bytes = 8.0 * exposures * pixels + 4.0 * double(a.kept_floats);
    b.a_additions = sum(a.additions) / origins;
    b.a_vectors = double(a.vectors) / origins;
    b.copy_vectors = exposures * pixels / 16.0 / origins;
    level_bands.push_back(b);
    return b;
  };
  Schedule best;
  bool have = false, best_busy = false;
  Schedule fallback;  // smallest working set, when nothing fits
  const int first_level = o.cut_level > 0 ? std::min(o.cut_level, plan.depth + 1) : 1;
  const int last_level = o.cut_level > 0 ? first_level : plan.depth + 1;
  for (int level = first_level; level <= last_level; ++level) {
    const std::vector<char> cut = tree::cut_nodes(plan, level);
    level_bands.clear();
    const bool fusable = tree::root_fusable(plan, cut);
    for (const tree::Geometry& t : tiles) {
      // Bands: whole tile rows; halve until the copy and the kept maps fit.
      int rows = (r.height + t.height - 1) / t.height * t.height;
      BandCost band;
      for (;;) {
        band = band_cost(rows, cut);
        if (band.bytes <= o.band_budget_bytes || rows <= t.height) break;
        rows = std::max(t.height, (rows / 2) / t.height * t.height);
      }
      const double origins = double(t.width) * t.height;
      // The unfused stage B: a schedule of its own, and the fallback rule's measure of the tree's
      // own sums, each made once, for the fused one too.
      const tree::StageCost unfused = tree::stage_b_cost(plan, t, cut, false);
      const double shared = sum(unfused.additions) / origins + band.a_additions;
      for (const bool fuse : {false, true}) {
        if (fuse && (o.fuse_root == 0 || !fusable)) continue;
        if (!fuse && o.fuse_root == 1 && fusable) continue;
        const tree::StageCost b = fuse ? tree::stage_b_cost(plan, t, cut, true) : unfused;
        const double b_additions = sum(b.additions) / origins;
        // Root trials are scored (the fused root's level-1 sums among them); the rest are formed.
        const double root = double(b.root_vectors) / origins;
        // The root only reads (in streams the prefetcher follows): measured, its cost hardly
        // depends on the working set, while forming maps does.
        const double cost = root * (fuse ? kRootFourSources : kRootTwoSources) +
                            double(b.vectors) / origins * cache_factor(4.0 * double(b.arena_floats)) +
                            double(b.kept_reads) / origins * kKeptRead + band.a_vectors * kBandWide +
                            band.copy_vectors * kCopy;
        Schedule s{level, cut, fuse, t.width, t.height, rows, b_additions + band.a_additions, shared, cost,
                   b.arena_floats, band.bytes};
        if (fallback.tile_width == 0 || s.tile_floats < fallback.tile_floats) fallback = s;
        if (double(s.tile_floats) > tile_budget || band.bytes > o.band_budget_bytes) continue;
        const std::int64_t count =
            std::int64_t((r.width + t.width - 1) / t.width) * ((r.height + t.height - 1) / t.height);
        const bool busy = count >= 2 * threads;
        const bool better = !have || (busy && !best_busy) || (busy == best_busy && s.cost < best.cost * (1 - 1e-9));
        if (better) best = s, have = true, best_busy = busy;
      }
    }
  }
  return have ? best : fallback;
}

}  // namespace

double TreeStats::additions_per_trial() const {
  double sum = 0;
  for (const auto& l : levels) sum += double(l.additions);
  return trials > 0 ? sum / double(trials) : 0.0;
}

// The last plan and schedule, and what they were made for: the automatic choice's
// slower_reason() and the search that follows it plan the same input once.
struct TreeEngine::Planned {
  MotionBank bank;
  Region region;
  int exposures = 0, threads = 0;
  tree::Plan plan;
  Schedule schedule;  // none when the root is a leaf
};

// The exposure copy of the last search, kept when one band covered the whole region (as the cpu
// engine keeps its padded copy): repeated searches of the same stack skip the copy, never the tree.
struct TreeEngine::Cache {
  std::uint64_t stack_id = 0;
  bool valid = false;
  tree::Band copy;
  tree::Kept kept;  // stage A's maps of the current band (storage reused between bands)
  std::vector<LargeBuffer<float>> arenas;  // stage B's, one per thread (kept: no fresh pages per search)
  std::optional<Planned> planned;
};

namespace {
// What a plan and schedule depend on: the bank, the region, E, the threads.
bool same_input(const MotionBank& a, const Region& ra, int ea, const MotionBank& b, const Region& rb, int eb) {
  return a == b && ra.x0 == rb.x0 &&
         ra.y0 == rb.y0 && ra.width == rb.width && ra.height == rb.height && ea == eb;
}
}  // namespace

const TreeEngine::Planned& TreeEngine::planned(const SearchInput& in, int threads) const {
  std::optional<Planned>& p = cache_->planned;
  const int E = in.stack->exposures;
  if (!p || p->threads != threads || !same_input(p->bank, p->region, p->exposures, *in.bank, in.region, E)) {
    Planned fresh{*in.bank, in.region, E, threads,
                  tree::make_plan(*in.bank, {options_.oversample, options_.child_reach}), {}};
    if (!fresh.plan.nodes[0].leaf()) fresh.schedule = choose_schedule(fresh.plan, in.region, options_, E, threads);
    p = std::move(fresh);
  }
  return *p;
}

TreeEngine::TreeEngine(TreeOptions options, std::string name)
    : options_(options), name_(std::move(name)), cache_(std::make_unique<Cache>()) {
  require(options_.screen_margin >= 0 && std::isfinite(options_.screen_margin),
          "cpu-tree: screen_margin must be >= 0, got " + std::to_string(options_.screen_margin));
  require(options_.tile_width >= 0 && options_.tile_height >= 0 && options_.cut_level >= 0,
          "cpu-tree: tile sizes and the cut level must be >= 0");
  require(!options_.bf16_maps, "cpu-tree: BF16 level maps are cuda-tree's (cuda-tree-bf16); cpu-tree keeps FP32 maps");
  require(options_.fuse_levels <= 0, "cpu-tree: fused levels are cuda-tree's (its level tables); cpu-tree forms "
                                     "the levels above its cut per tile");
  require(options_.oversample > 0 && options_.child_reach >= 0 && options_.fallback_fraction > 0,
          "cpu-tree: oversample and fallback_fraction must be > 0, child_reach >= 0");
  require(options_.tile_budget_bytes > 0 && options_.band_budget_bytes > 0, "cpu-tree: budgets must be > 0");
}

TreeEngine::~TreeEngine() = default;

std::string TreeEngine::unsupported_reason(const SearchInput&) const {
  return {};  // what the tree cannot represent runs on the exhaustive `cpu` engine instead
}

std::string TreeEngine::slower_reason(const SearchInput& in) const {
  const EncodedStack& s = *in.stack;
  const MotionBank& bank = *in.bank;
  // Inputs the tree cannot represent run the cpu engine anyway, and the search says why.
  if (!bank.is_cartesian() || in.policy.top_k > 0 || s.exposures < 2) return {};
  const Planned& planned_input = planned(in, omp_get_max_threads());
  if (planned_input.plan.nodes[0].leaf()) return {};
  const Schedule& run = planned_input.schedule;
  const double tree_per_trial = run.cost / double(bank.size());
  const double cpu_per_trial = kCpuPairedSample * s.exposures;
  const double gain = cpu_per_trial / tree_per_trial;
  if (gain >= kAutoGain) return {};
  char why[200];
  std::snprintf(why, sizeof why,
                "modelled %.2g times as fast as the cpu engine here (E = %d, %lld origins), below %.2g", gain,
                s.exposures, static_cast<long long>(in.region.count()), kAutoGain);
  return why;
}

SearchResult TreeEngine::search(const SearchInput& in) {
  const EncodedStack& s = *in.stack;
  const MotionBank& bank = *in.bank;
  const Region r = in.region;
  stats_ = TreeStats{};
  stats_.trials = r.count() * std::int64_t(bank.size());
  const int threads = omp_get_max_threads();

  auto fall_back = [&](const std::string& why) {
    stats_.fell_back = true;
    stats_.fallback_reason = why;
    auto exhaustive = make_engine("cpu");
    SearchResult result = exhaustive->search(in);
    result.note = name_ + " ran the exhaustive cpu engine: " + why;
    return result;
  };
  if (!bank.is_cartesian()) return fall_back("the velocity bank is not a Cartesian grid");
  if (in.policy.top_k > 0) return fall_back("top-k per origin needs every trial's exact score");
  if (s.exposures < 2) return fall_back("a single exposure leaves nothing to share");

  const auto t_start = Clock::now();
  const Planned& planned_input = planned(in, threads);
  const tree::Plan& plan = planned_input.plan;
  stats_.depth = plan.depth;
  stats_.nodes = std::int64_t(plan.nodes.size());
  if (plan.nodes[0].leaf()) return fall_back("the whole bank is one velocity per axis over the span");
  const Schedule& run = planned_input.schedule;
  const double per_trial = run.shared_additions_per_origin / double(bank.size());
  if (per_trial > options_.fallback_fraction * s.exposures) {
    char why[200];
    std::snprintf(why, sizeof why, "the tree would need %.3g additions per trial against E = %d exposures", per_trial,
                  s.exposures);
    return fall_back(why);
  }
  const std::vector<char>& cut = run.cut;
  stats_.tile_width = run.tile_width;
  stats_.tile_height = run.tile_height;
  stats_.cut_level = run.cut_level;
  stats_.fused_root = run.fuse_root;
  stats_.modelled_cost_per_trial = run.cost / double(bank.size());

  // Thresholds. The flood floor is the lowest score anything is reported at; the screen lies
  // screen_margin below it (docs/tree-search.md). Unrefined, the screen lists the trials the
  // result reports (candidates, or those above z_thr for maxZ).
  const double z_thr = digest_threshold(in);
  const bool collect = in.policy.collect_candidates;
  const double floor = collect ? std::min(z_thr, in.policy.candidate_threshold) : z_thr;
  double z_screen = options_.refine ? floor - options_.screen_margin : floor;

  // Tiles: at most two shapes per axis (full and edge); bands of whole tile rows.
  const int tw = run.tile_width, th = run.tile_height;
  const int nx = (r.width + tw - 1) / tw, ny = (r.height + th - 1) / th;
  const int tile_rows_per_band = std::max(1, run.band_rows / th);
  auto length_of = [](int i, int n, int full, int total) { return i + 1 < n ? full : total - full * (n - 1); };
  std::vector<tree::Geometry> geometries;
  auto geometry_index = [&](int w, int h) {
    for (std::size_t i = 0; i < geometries.size(); ++i)
      if (geometries[i].width == w && geometries[i].height == h) return int(i);
    geometries.push_back(tree::make_geometry(plan, w, h));
    return int(geometries.size()) - 1;
  };
  struct Tile {
    int x0, y0, geometry;
  };
  std::vector<Tile> tiles;
  for (int j = 0; j < ny; ++j)
    for (int i = 0; i < nx; ++i)
      tiles.push_back(
          {r.x0 + i * tw, r.y0 + j * th, geometry_index(length_of(i, nx, tw, r.width), length_of(j, ny, th, r.height))});
  std::size_t arena_floats = 0;
  for (const auto& g : geometries)
    arena_floats = std::max(arena_floats, tree::stage_b_cost(plan, g, cut, run.fuse_root).arena_floats);
  stats_.tile_bytes = double(arena_floats) * sizeof(float);

  // Progress counts the first pass's trials (a pass with a lowered screen, rare, repeats them).
  ProgressCounter progress(in.policy.progress, stats_.trials);
  const int velocities = int(bank.size());
  // A stop request skips the remaining tiles and ends the search between passes and before the
  // refinement (a pass with skipped tiles finds no hits, which must not lower the screen).
  auto stop_if_requested = [&] {
    if (in.policy.stop_requested()) throw Cancelled(name_ + ": search stopped on request");
  };

  // One pass of the tree over the region with a given screen.
  double fill_seconds = 0;
  std::vector<std::int64_t> a_additions, a_entries;
  auto tree_pass = [&](double screen) {
    tree::StreamParams params;
    params.screen = tree::z_test(screen);
    params.count = tree::z_test(z_thr);
    params.want_count = !options_.refine;
    a_additions.assign(plan.depth + 1, 0);
    a_entries.assign(plan.depth + 1, 0);
    stats_.bands = 0;
    stats_.seconds_stage_a = 0;
    std::vector<tree::TileOutput> outputs(tiles.size());
    for (int first_row = 0; first_row < ny; first_row += tile_rows_per_band) {
      const int last_row = std::min(ny, first_row + tile_rows_per_band) - 1;
      ++stats_.bands;
      const int band_y0 = r.y0 + first_row * th;
      const int band_rows = std::min(r.y0 + r.height, r.y0 + (last_row + 1) * th) - band_y0;
      // Stage A over the band's origins, from the exposure copy that both stages read.
      const tree::Geometry band_geometry = tree::make_geometry(plan, r.width, band_rows);
      const tree::StageCost a = tree::stage_a_cost(plan, band_geometry, cut);
      const tree::ReadRange reads = tree::band_reads(plan, band_geometry);
      Cache& c = *cache_;
      const int cx0 = r.x0 + reads.lo[0], cy0 = band_y0 + reads.lo[1];
      const int cols = reads.hi[0] - reads.lo[0], rows = reads.hi[1] - reads.lo[1];
      if (!(c.valid && c.stack_id == s.id && c.copy.x0 == cx0 && c.copy.y0 == cy0 && c.copy.cols == cols &&
            c.copy.rows == rows)) {
        // The storage is reused from band to band (fill_band writes every sample).
        const auto t_fill = Clock::now();
        c.valid = false;
        c.copy.x0 = cx0, c.copy.y0 = cy0, c.copy.cols = cols, c.copy.rows = rows;
        tree::fill_band(s, c.copy);
        c.stack_id = s.id;
        c.valid = true;
        fill_seconds += since(t_fill);
      }
      stats_.band_bytes = std::max(stats_.band_bytes, 4.0 * double(c.copy.data.size() + a.kept_floats));
      tree::Kept& kept = c.kept;
      kept.geometry = &band_geometry;
      kept.x0 = r.x0;
      kept.y0 = band_y0;
      const auto t_a = Clock::now();
      tree::run_stage_a(plan, cut, c.copy, kept, a_additions, a_entries);
      stats_.seconds_stage_a += since(t_a);
      // Stage B: the tiles of this band over all threads.
      const int first = first_row * nx, last = (last_row + 1) * nx;
      if (int(c.arenas.size()) < threads) c.arenas.resize(std::size_t(threads));
#pragma omp parallel num_threads(threads)
      {
        LargeBuffer<float>& arena = c.arenas[std::size_t(omp_get_thread_num())];
        arena.resize_uninitialised(arena_floats);  // every map is written before it is read
#pragma omp for schedule(dynamic, 1)
        for (int t = first; t < last; ++t) {
          if (in.policy.stop_requested()) continue;
          const tree::Geometry& tile = geometries[tiles[t].geometry];
          tree::run_tile(plan, cut, run.fuse_root, tile, kept, c.copy, params, tiles[t].x0, tiles[t].y0, arena.data(),
                         outputs[t]);
          progress.add(std::int64_t(tile.width) * tile.height * velocities);
        }
      }
      stop_if_requested();
    }
    // Only a copy covering the whole region stays valid for the next search (the storage of both
    // stays, as the cpu engine keeps its band: a search of the next stack reuses it).
    if (stats_.bands > 1) cache_->valid = false;
    cache_->kept.geometry = nullptr;
    return outputs;
  };
  std::vector<tree::TileOutput> outputs = tree_pass(z_screen);
  auto hits_in = [](const std::vector<tree::TileOutput>& o) {
    std::int64_t n = 0;
    for (const auto& t : o) n += std::int64_t(t.hits.size());
    return n;
  };
  // Nothing passed: lower the screen until something does, so maxZ is an exact score of some
  // trial (rare: tiny searches or large margins; every pass computes the same tree).
  while (hits_in(outputs) == 0 && std::isfinite(z_screen)) {
    z_screen = z_screen > -8 ? z_screen - 2 : -std::numeric_limits<double>::infinity();
    ++stats_.screen_passes;
    outputs = tree_pass(z_screen);
  }
  stats_.z_screen = z_screen;
  stats_.seconds_fill = fill_seconds;

  // Merge in tile order: the same digest on any thread count.
  SearchResult result;
  Digest& d = result.digest;
  d.z_thr = z_thr;
  stats_.levels.resize(plan.depth + 1);
  for (int l = 0; l <= plan.depth; ++l) {
    stats_.levels[l].level = l;
    stats_.levels[l].additions = a_additions[l];
    stats_.levels[l].entries = a_entries[l];
  }
  for (const auto& node : plan.nodes) ++stats_.levels[node.level].nodes;
  std::int64_t tree_count = 0;
  for (const tree::TileOutput& o : outputs) {
    d.sumA += o.score.sumA;
    d.sumB += o.score.sumB;
    d.scored += o.score.scored;
    tree_count += o.score.count;
    for (int l = 0; l <= plan.depth; ++l) {
      stats_.levels[l].additions += o.additions[l];
      stats_.levels[l].entries += o.entries[l];
    }
  }
  stats_.screened = hits_in(outputs);
  require(stats_.screened <= in.policy.max_candidates,
          name_ + ": " + std::to_string(stats_.screened) + " trials passed the screen z > " + std::to_string(z_screen) +
              ", more than max_candidates (" + std::to_string(in.policy.max_candidates) +
              "): raise the candidate threshold or the limit");
  stats_.seconds_tree = since(t_start) - fill_seconds;

  auto finish = [&](const std::string& note) {
    tree::finish_result(result, in.policy, note);
    progress.finish();
    return result;
  };

  if (!options_.refine) {
    // The tree's own statistic throughout (obs_count is not tracked: 0).
    d.count = tree_count;
    for (const tree::TileOutput& o : outputs)
      for (const tree::Hit& h : o.hits) tree::offer_tree_score(h.x, h.y, h.velocity, h.A, h.B, bank, in.policy, result);
    return finish(name_ + ": unrefined tree scores");
  }

  const auto t_refine = Clock::now();
  std::vector<tree::TrialRef> seeds;
  seeds.reserve(std::size_t(stats_.screened));
  for (const tree::TileOutput& o : outputs)
    for (const tree::Hit& h : o.hits) seeds.push_back({h.x, h.y, h.velocity});
  const std::int64_t limit = tree::refine_limit(in.policy);
  stop_if_requested();
  const std::vector<tree::ExactScore> exact = tree::refine(s, bank, r, seeds, floor, limit);
  stats_.refined = std::int64_t(exact.size());
  for (const tree::ExactScore& e : exact) tree::offer_exact_score(e, bank, in.policy, result);
  stats_.seconds_refine = since(t_refine);
  char note[240];
  std::snprintf(note, sizeof note, "%s: %.3g additions per trial, %lld screened above z = %.3f, %lld re-scored exactly",
                name_.c_str(), stats_.additions_per_trial(), (long long)stats_.screened, z_screen,
                (long long)stats_.refined);
  return finish(note);
}

void register_tree_engines() {
  EngineInfo tree{"cpu-tree",
                  "tree of signed partial sums over time segments (FDMT-like), a few additions per trial; "
                  "trials above a screen re-scored exactly (docs/tree-search.md)",
                  // The automatic CPU choice (above `cpu`'s 10, as `cuda-tree` is on GPUs): equal
                  // completeness and false alarms in its studies, 6.5-56x `cpu` on realistic stacks,
                  // and `cpu` itself where the tree cannot represent the search or would not pay.
                  false, 15, [] { return std::make_unique<TreeEngine>(); }, nullptr};
  tree.digest_kind = DigestKind::refined;
  register_engine(std::move(tree));
  EngineInfo screen{"cpu-tree-screen",
                    "the tree's unrefined statistic alone (positions within a pixel of the exhaustive rounding): "
                    "for sensitivity studies",
                    false, -1,
                    [] {
                      TreeOptions o;
                      o.refine = false;
                      return std::make_unique<TreeEngine>(o, "cpu-tree-screen");
                    },
                    nullptr};
  screen.digest_kind = DigestKind::screen;
  register_engine(std::move(screen));
}

}  // namespace shiftstack
