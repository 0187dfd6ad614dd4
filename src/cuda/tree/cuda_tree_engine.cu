// The host side of `cuda-tree`: the plan (cpu-tree's, cached per bank), its levels as device
// tables per band height, bands of origin rows within the free device memory, the screen passes,
// the exact refinement of the screened trials on the device, and the result as cpu-tree builds it.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>

#include "core/engine_registry.hpp"
#include "cuda/common/device_buffer.cuh"
#include "cuda/common/device_stack.hpp"
#include "cuda/tree/cuda_tree.hpp"
#include "cuda/tree/tree_gpu.cuh"
#include "shiftstack/error.hpp"
#include "tree/tree_kernels.hpp"
#include "tree/tree_plan.hpp"
#include "tree/tree_refine.hpp"

namespace shiftstack {
bool cuda_device_available();  // common/device.cu
}

namespace shiftstack::cuda {

using namespace tree_gpu;

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Everything the plan depends on, to reuse it while the bank stays the same.
std::vector<double> bank_key(const MotionBank& b, const TreeOptions& o) {
  std::vector<double> k = {double(b.exposures()), b.t_ref, double(b.vx_axis.size()), double(b.vy_axis.size()),
                           o.oversample, double(o.child_reach)};
  k.insert(k.end(), b.epochs.begin(), b.epochs.end());
  k.insert(k.end(), b.vx_axis.begin(), b.vx_axis.end());
  k.insert(k.end(), b.vy_axis.begin(), b.vy_axis.end());
  for (int e = 0; e < b.exposures(); ++e) {
    k.push_back(b.curve_at_x(e));
    k.push_back(b.curve_at_y(e));
  }
  return k;
}

// A band plan with its device copies.
struct BandTables {
  BandPlan plan;
  struct Level {
    DeviceArray<ParentEntry> parents;
    DeviceArray<LeafEntry> leaves;
    DeviceArray<LeafSample> samples;
  };
  std::vector<Level> level;
  DeviceArray<std::int64_t> x_part, y_part;
  DeviceArray<int> root_order;
  RootTables root;

  BandTables(const tree::Plan& tree_plan, int width, int rows, bool fuse_root, LevelFusion fusion)
      : plan(make_band_plan(tree_plan, width, rows, fuse_root, fusion)) {
    level.resize(plan.level.size());
    for (std::size_t l = 1; l < plan.level.size(); ++l) {
      level[l].parents.upload(plan.level[l].parents);
      level[l].leaves.upload(plan.level[l].leaves);
      level[l].samples.upload(plan.level[l].samples);
    }
    x_part.upload(plan.x_part);
    y_part.upload(plan.y_part);
    root_order.upload(plan.root_order);
    root.order = root_order.get();
    root.x_part = x_part.get();
    root.y_part = y_part.get();
    for (int c = 0; c < 4; ++c) root.stride[c] = plan.stride[c];
    root.sources = plan.sources;
    root.Va = plan.Va;
    root.Vb = plan.Vb;
  }
  // Floats level buffer b takes: a float holds one FP32 element or two BF16 ones.
  std::size_t storage_floats(int b, bool bf16) const {
    return bf16 ? (plan.buffer_floats[b] + 1) / 2 : plan.buffer_floats[b];
  }
  double bytes(bool bf16) const { return 4.0 * double(storage_floats(0, bf16) + storage_floats(1, bf16)); }
};

// Free device memory the level buffers may take (the cube already resident).
double level_budget() {
  std::size_t free_bytes = 0, total = 0;
  SHIFTSTACK_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
  return 0.6 * double(free_bytes) / std::max(1, device_sharing());
}

}  // namespace

double CudaTreeStats::additions_per_trial() const {
  double sum = 0;
  for (std::int64_t a : level_additions) sum += double(a);
  return trials > 0 ? sum / double(trials) : 0.0;
}

struct CudaTreeEngine::State {
  std::vector<double> key;
  tree::Plan plan;
  std::map<std::pair<int, int>, std::unique_ptr<BandTables>> bands;  // by (width, rows)
  DeviceArray<float> buffer[2];
  DeviceArray<Hit> hits;
  DeviceArray<unsigned long long> hit_count;
  DeviceArray<RootPartial> partials;
  // Exact re-scoring: shifts per axis value, trials and their sums.
  DeviceArray<int> ix, iy;
  DeviceArray<double> sx, sy;
  DeviceArray<Trial> trials;  // the refinement's flood: every trial reached, its exact sums
  DeviceArray<ExactSums> sums;
  DeviceArray<Trial> above;  // trials above the floor, round after round (each round's seeds)
  DeviceArray<ExactSums> above_sums;
  DeviceArray<unsigned> seen;  // a bit per trial of the region: reached by the flood
  bool seen_clear = false;     // every bit is 0 (the map is cleared after each search)
  DeviceArray<unsigned long long> flood_count;  // trials reached; trials above the floor so far
  std::vector<double> exact_key;  // the bank and shift mode of ix, iy, sx, sy

  // fuse_root and fusion are the engine's, the same for every call.
  BandTables& tables(int width, int rows, bool fuse_root, LevelFusion fusion) {
    auto& slot = bands[{width, rows}];
    if (!slot) slot = std::make_unique<BandTables>(plan, width, rows, fuse_root, fusion);
    return *slot;
  }
};

CudaTreeEngine::CudaTreeEngine(TreeOptions options, std::string name)
    : options_(options), name_(std::move(name)), state_(std::make_unique<State>()) {
  require(options_.screen_margin >= 0 && std::isfinite(options_.screen_margin),
          name_ + ": screen_margin must be >= 0, got " + std::to_string(options_.screen_margin));
  require(options_.oversample > 0 && options_.child_reach >= 0 && options_.fallback_fraction > 0,
          name_ + ": oversample and fallback_fraction must be > 0, child_reach >= 0");
  require(options_.tile_height >= 0, name_ + ": band rows (tile_height) must be >= 0");
}

CudaTreeEngine::~CudaTreeEngine() = default;

std::string CudaTreeEngine::unsupported_reason(const SearchInput&) const {
  return {};  // what the tree cannot represent runs on the exhaustive cuda-fast engine instead
}

SearchResult CudaTreeEngine::search(const SearchInput& in) {
  const auto t_start = Clock::now();
  const EncodedStack& s = *in.stack;
  const MotionBank& bank = *in.bank;
  const Region r = in.region;
  State& st = *state_;
  stats_ = CudaTreeStats{};
  stats_.trials = r.count() * std::int64_t(bank.size());

  auto fall_back = [&](const std::string& why) {
    stats_.fell_back = true;
    stats_.fallback_reason = why;
    auto exhaustive = make_engine("cuda-fast");
    SearchResult result = exhaustive->search(in);
    result.note = name_ + " ran the exhaustive cuda-fast engine: " + why;
    return result;
  };
  if (!bank.is_cartesian()) return fall_back("the velocity bank is not a Cartesian grid");
  if (in.policy.top_k > 0) return fall_back("top-k per origin needs every trial's exact score");
  if (s.exposures < 2) return fall_back("a single exposure leaves nothing to share");

  std::vector<double> key = bank_key(bank, options_);
  if (key != st.key) {
    st.plan = tree::make_plan(bank, {options_.oversample, options_.child_reach});
    st.key = std::move(key);
    st.bands.clear();
  }
  const tree::Plan& plan = st.plan;
  stats_.depth = plan.depth;
  if (plan.nodes[0].leaf()) return fall_back("the whole bank is one velocity per axis over the span");

  // The cube: the whole image when it fits (then refinement runs on the device too), else each
  // band's window of it.
  const bool fractional = bank.mode == ShiftMode::fractional;
  const PixelRect image{0, 0, s.width, s.height};
  const std::size_t cube_limit =
      memory_budget() > 0 ? memory_budget() : std::size_t(0.5 * double(available_for_cube()));
  const bool resident = cube_bytes(s, image, fractional) <= cube_limit;
  stats_.cube_resident = resident;
  StackView view;
  if (resident) view = acquire_stack(s, image, fractional);
  // The refinement runs on the device when the cube is there and its map of reached trials (a
  // bit each) takes at most a fifth of the free memory; else the screened trials go to the host.
  const std::int64_t region_trials = stats_.trials;
  bool device_refine = false;
  if (options_.refine && resident) {
    const std::size_t words = std::size_t((region_trials + 31) / 32);
    std::size_t free_bytes = 0, total_bytes = 0;
    SHIFTSTACK_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    if (st.seen.size() >= words) {
      device_refine = true;
    } else if (words * sizeof(unsigned) <= free_bytes / 5) {
      st.seen.release();  // never shrunk: a new map is cleared whole before its first use
      st.seen.resize(words);
      st.seen_clear = false;
      device_refine = true;
    }
  }
  const bool host_payload = !(s.fp32.empty() && s.fp16.empty() && s.int8.empty());
  if (options_.refine && !device_refine && !host_payload)
    return fall_back("the refinement would run on the host, and this stack was encoded on the device");

  // Band rows: the whole region if the two level buffers fit, else halved until they do.
  int rows = options_.tile_height > 0 ? std::min(options_.tile_height, r.height) : r.height;
  const double budget = level_budget() + 4.0 * double(st.buffer[0].size() + st.buffer[1].size());
  const bool bf16 = options_.bf16_maps;
  // fuse_root -1 (the engine's choice) fuses: level 1 is the largest level a GPU pass writes and
  // reads back (on `deep` a third of its device-memory traffic); 0 never.
  const bool fuse_root = options_.fuse_root != 0;
  // fuse_levels -1 skips the levels worth skipping (LevelFusion::worthwhile; deep: 83 against
  // 103 ms with BF16 maps, docs/tree-search.md), 1 every level it can, 0 none.
  const LevelFusion fusion = options_.fuse_levels == 0  ? LevelFusion::none
                             : options_.fuse_levels > 0 ? LevelFusion::everywhere
                                                        : LevelFusion::worthwhile;
  while (options_.tile_height == 0 && rows > 8 &&
         st.tables(r.width, rows, fuse_root, fusion).bytes(bf16) > budget)
    rows = (rows + 1) / 2;
  const int band_count = (r.height + rows - 1) / rows;
  stats_.band_rows = rows;
  stats_.bands = band_count;
  {
    BandTables& full = st.tables(r.width, rows, fuse_root, fusion);
    double additions = double(full.plan.root_additions);
    for (const LevelPlan& L : full.plan.level) additions += double(L.additions);
    const double per_trial = additions * band_count / double(stats_.trials);
    if (per_trial > options_.fallback_fraction * s.exposures) {
      char why[200];
      std::snprintf(why, sizeof why, "the tree would need %.3g additions per trial against E = %d exposures",
                    per_trial, s.exposures);
      return fall_back(why);
    }
  }

  const double z_thr = digest_threshold(in);
  const bool collect = in.policy.collect_candidates;
  const double floor = collect ? std::min(z_thr, in.policy.candidate_threshold) : z_thr;
  double z_screen = options_.refine ? floor - options_.screen_margin : floor;

  st.hit_count.resize(1);
  if (st.hits.size() == 0) st.hits.resize(std::size_t(1) << 16);
  int device = 0, sms = 1;
  SHIFTSTACK_CUDA_CHECK(cudaGetDevice(&device));
  SHIFTSTACK_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));

  // One pass of the tree over the region: digest partials and the trials past the screen.
  RootPartial totals{0, 0, 0, 0};
  // The screened trials stay on the device when the refinement runs there too.
  std::vector<Hit> hits;
  std::size_t hit_count = 0;
  auto tree_pass = [&](double screen) {
    for (;;) {
      SHIFTSTACK_CUDA_CHECK(cudaMemset(st.hit_count.get(), 0, sizeof(unsigned long long)));
      stats_.level_additions.assign(plan.depth + 1, 0);
      std::vector<RootPartial> partials;
      for (int band = 0; band < band_count; ++band) {
        if (in.policy.stop_requested()) throw Cancelled(name_ + ": search stopped on request");
        const int y0 = r.y0 + band * rows, h = std::min(rows, r.y0 + r.height - y0);
        BandTables& T = st.tables(r.width, h, fuse_root, fusion);
        for (int b = 0; b < 2; ++b) st.buffer[b].resize(std::max(T.storage_floats(b, bf16), std::size_t(1)));
        const MapBuffer buffer[2] = {{st.buffer[0].get(), bf16}, {st.buffer[1].get(), bf16}};
        stats_.level_bytes = std::max(stats_.level_bytes, T.bytes(bf16));
        stats_.fused_root = T.plan.sources == 4;
        stats_.formed_levels = T.plan.formed_levels;
        StackView band_view = view;
        if (!resident) {
          const int x_lo = std::max(0, r.x0 + T.plan.read_lo[0]), y_lo = std::max(0, y0 + T.plan.read_lo[1]);
          const int x_hi = std::min(s.width, r.x0 + T.plan.read_hi[0]);
          const int y_hi = std::min(s.height, y0 + T.plan.read_hi[1]);
          band_view = acquire_stack(s, PixelRect{x_lo, y_lo, std::max(1, x_hi - x_lo), std::max(1, y_hi - y_lo)});
        }
        for (int l = plan.depth; l >= 1; --l) {
          const LevelPlan& L = T.plan.level[l];
          if (L.buffer < 0) continue;  // fused into the level above
          launch_leaves(band_view, T.level[l].leaves.get(), int(L.leaves.size()), L.leaf_rows,
                        T.level[l].samples.get(), r.x0, y0, buffer[L.buffer], 0);
          if (!L.parents.empty())
            launch_parents(T.level[l].parents.get(), int(L.parents.size()), L.parent_rows, L.sources,
                           buffer[1 - L.buffer], buffer[L.buffer], 0);
          stats_.level_additions[l] += L.additions;
        }
        stats_.level_additions[0] += T.plan.root_additions;
        RootParams p;
        p.x0 = r.x0;
        p.y0 = y0;
        p.width = r.width;
        p.height = h;
        p.screen = tree::z_test(screen).signed_square;
        p.count_test = tree::z_test(z_thr).signed_square;
        const std::int64_t tiles = std::int64_t((r.width + kRootTileX - 1) / kRootTileX) *
                                   ((h + kRootTileY - 1) / kRootTileY);
        const int velocities = T.root.Va * T.root.Vb;
        const std::int64_t groups = std::clamp<std::int64_t>((16 * sms + tiles - 1) / tiles, 1, velocities);
        p.velocities_per_block = int((velocities + groups - 1) / groups);
        // The kernel counts a thread's trials in 32 bits, and nests the count under the screen.
        require(double(p.velocities_per_block) * kRootTileX * kRootTileY / 256.0 < 4.0e9 && p.screen <= p.count_test,
                name_ + ": internal: root pass out of its kernel's range");
        const std::int64_t blocks = tiles * ((velocities + p.velocities_per_block - 1) / p.velocities_per_block);
        st.partials.resize(std::size_t(blocks));
        p.partials = st.partials.get();
        p.hits = st.hits.get();
        p.hit_count = st.hit_count.get();
        p.capacity = st.hits.size();
        const int written = launch_root(T.root, buffer[T.plan.root_buffer], p, 0);
        const std::vector<RootPartial> part = st.partials.download(std::size_t(written));
        partials.insert(partials.end(), part.begin(), part.end());
      }
      const unsigned long long found = st.hit_count.download(1)[0];
      require(std::int64_t(found) <= in.policy.max_candidates,
              name_ + ": " + std::to_string(found) + " trials passed the screen z > " + std::to_string(screen) +
                  ", more than max_candidates (" + std::to_string(in.policy.max_candidates) +
                  "): raise the candidate threshold or the limit");
      if (found > st.hits.size()) {  // the list overflowed: grow it and run the pass again
        st.hits.resize(std::size_t(found));
        continue;
      }
      hit_count = std::size_t(found);
      if (!device_refine) hits = st.hits.download(hit_count);
      totals = RootPartial{0, 0, 0, 0};
      for (const RootPartial& q : partials) {  // block order: the same digest every run
        totals.sumA += q.sumA;
        totals.sumB += q.sumB;
        totals.scored += q.scored;
        totals.count += q.count;
      }
      return;
    }
  };
  tree_pass(z_screen);
  // Nothing passed: lower the screen until something does, so maxZ is an exact score of a trial.
  while (hit_count == 0 && std::isfinite(z_screen)) {
    z_screen = z_screen > -8 ? z_screen - 2 : -std::numeric_limits<double>::infinity();
    ++stats_.screen_passes;
    tree_pass(z_screen);
  }
  stats_.z_screen = z_screen;
  stats_.screened = std::int64_t(hit_count);
  stats_.seconds_tree = since(t_start);

  SearchResult result;
  Digest& d = result.digest;
  d.z_thr = z_thr;
  d.sumA = totals.sumA;
  d.sumB = totals.sumB;
  d.scored = std::int64_t(totals.scored);
  auto finish = [&](const std::string& note) {
    tree::finish_result(result, in.policy, note);
    stats_.seconds_total = since(t_start);
    result.seconds = stats_.seconds_total;
    return result;
  };

  if (!options_.refine) {
    d.count = std::int64_t(totals.count);
    for (const Hit& h : hits) tree::offer_tree_score(h.x, h.y, h.velocity, h.A, h.B, bank, in.policy, result);
    return finish(name_ + ": unrefined tree scores");
  }

  const auto t_refine = Clock::now();
  const std::int64_t limit = tree::refine_limit(in.policy);
  std::vector<tree::ExactScore> exact;
  std::int64_t rescored = 0;  // device refinement: trials re-scored (only those above the floor return)
  if (!device_refine) {
    // A cube beyond device memory (bands of it), or no room for the map: cpu-tree's own
    // refinement on the host.
    std::vector<tree::TrialRef> seeds;
    for (const Hit& h : hits) seeds.push_back({h.x, h.y, h.velocity});
    exact = tree::refine(s, bank, r, seeds, floor, limit);
  } else {
    exact = [&] {
      // tree::refine's shifts per axis value, flattened (value * E + exposure), uploaded once per
      // bank.
      const int E = s.exposures, Va = int(bank.vx_count()), Vb = int(bank.vy_count());
      std::vector<double> ekey = st.key;
      ekey.push_back(fractional ? 1 : 0);
      if (ekey != st.exact_key) {
        const tree::AxisShifts shifts = tree::axis_shifts(bank);
        std::vector<double> sx, sy;
        for (const auto& row : shifts.x) sx.insert(sx.end(), row.begin(), row.end());
        for (const auto& row : shifts.y) sy.insert(sy.end(), row.begin(), row.end());
        std::vector<int> ix(sx.size()), iy(sy.size());
        for (std::size_t k = 0; k < sx.size(); ++k) ix[k] = round_shift(sx[k]);
        for (std::size_t k = 0; k < sy.size(); ++k) iy[k] = round_shift(sy[k]);
        st.ix.upload(ix);
        st.iy.upload(iy);
        st.sx.upload(sx);
        st.sy.upload(sy);
        st.exact_key = ekey;
      }
      ExactTables tables;
      tables.ix = st.ix.get();
      tables.iy = st.iy.get();
      tables.sx = st.sx.get();
      tables.sy = st.sy.get();
      tables.Va = Va;
      tables.exposures = E;
      tables.bilinear = fractional;
      // tree::refine's flood, on the device: the seeds' neighbourhoods (origin +-1, each velocity
      // index +-1), then the neighbours of every exact score above the floor, until none is new.
      // The set reached does not depend on the order, so neither do count, maxZ or candidates.
      if (!st.seen_clear) {
        SHIFTSTACK_CUDA_CHECK(cudaMemset(st.seen.get(), 0, st.seen.size() * sizeof(unsigned)));
        st.seen_clear = true;
      }
      st.flood_count.resize(2);
      FloodParams flood;
      flood.x0 = r.x0, flood.y0 = r.y0, flood.width = r.width, flood.height = r.height;
      flood.Va = Va, flood.Vb = Vb;
      flood.seen = st.seen.get();
      flood.trial_count = st.flood_count.get();
      unsigned long long* above_count = st.flood_count.get() + 1;
      std::int64_t reached = 0, accepted = 0;
      for (;;) {  // once, or again with room for every trial if the list overflowed
        // Room for every neighbour of every seed, within bounds; beyond, the overflow rule grows it.
        const std::size_t room = std::min<std::size_t>(
            std::clamp<std::size_t>(std::size_t(81) * hit_count, std::size_t(1) << 16, std::size_t(1) << 24),
            std::size_t(region_trials));
        if (st.trials.size() < room) st.trials.resize(room);
        if (st.above.size() < st.trials.size()) {
          st.above.resize(st.trials.size());
          st.above_sums.resize(st.trials.size());
        }
        flood.trials = st.trials.get();
        flood.capacity = st.trials.size();
        SHIFTSTACK_CUDA_CHECK(cudaMemset(st.flood_count.get(), 0, 2 * sizeof(unsigned long long)));
        st.seen_clear = false;
        launch_expand(st.hits.get(), int(hit_count), flood, 0);
        std::int64_t scored = 0;
        accepted = 0;
        bool overflow = false;
        for (int round = 0;; ++round) {
          reached = std::int64_t(st.flood_count.download(1)[0]);
          require(reached <= limit, name_ + ": refinement would re-score more than " + std::to_string(limit) +
                                        " trials: raise the candidate threshold, lower the screen margin or "
                                        "raise max_candidates");
          if (reached > std::int64_t(st.trials.size())) {
            overflow = true;
            break;
          }
          if (reached == scored) break;
          stats_.refine_rounds = round + 1;
          if (st.sums.size() < st.trials.size()) st.sums.resize(st.trials.size());
          launch_exact_flood(view, tables, flood, scored, int(reached - scored), st.sums.get(), floor,
                             st.above.get(), st.above_sums.get(), above_count, 0);
          scored = reached;
          const auto now = std::int64_t(st.flood_count.download(2)[1]);
          launch_expand(st.above.get() + accepted, int(now - accepted), flood, 0);  // this round's seeds
          accepted = now;
        }
        if (!overflow) break;
        // Bits were set for trials the list could not hold: clear the whole map, make room, redo.
        SHIFTSTACK_CUDA_CHECK(cudaMemset(st.seen.get(), 0, st.seen.size() * sizeof(unsigned)));
        st.trials.resize(std::min<std::size_t>(std::size_t(reached) * 2, std::size_t(region_trials)));
        stats_.refine_rounds = 0;
      }
      // The host needs the trials above the floor alone (count, candidates, maxZ); when none
      // passed, maxZ is the best of every re-scored trial, so all of them come back.
      const bool all = accepted == 0;
      const std::size_t n = std::size_t(all ? reached : accepted);
      const std::vector<Trial> trials = (all ? st.trials : st.above).download(n);
      const std::vector<ExactSums> sums = (all ? st.sums : st.above_sums).download(n);
      launch_clear_seen(flood, reached, 0);  // ordered before the next search's use of the map
      st.seen_clear = true;
      rescored = reached;
      std::vector<tree::ExactScore> scores(n);
      for (std::size_t k = 0; k < n; ++k)
        scores[k] = {trials[k].x, trials[k].y, trials[k].velocity, sums[k].A, sums[k].B, sums[k].obs};
      return scores;
    }();
  }
  stats_.refined = device_refine ? rescored : std::int64_t(exact.size());
  stats_.refined_on_device = device_refine;
  for (const tree::ExactScore& e : exact) tree::offer_exact_score(e, bank, in.policy, result);
  stats_.seconds_refine = since(t_refine);
  char note[260];
  std::snprintf(note, sizeof note,
                "%s: %.3g additions per trial, %d band(s), %lld screened above z = %.3f, %lld re-scored exactly%s",
                name_.c_str(), stats_.additions_per_trial(), stats_.bands, (long long)stats_.screened, z_screen,
                (long long)stats_.refined, device_refine ? " on the device" : " on the host");
  return finish(note);
}

namespace {

// One cuda-tree variant: its options and how its digest is compared. Every variant searches the
// cube where acquire_stack() keeps it, a GPU-encoded one included.
void register_variant(const char* name, const char* description, int preference, bool refine, bool bf16_maps) {
  EngineInfo info{name, description, true, preference,
                  [=] {
                    TreeOptions o;
                    o.refine = refine;
                    o.bf16_maps = bf16_maps;
                    return std::make_unique<CudaTreeEngine>(o, name);
                  },
                  cuda_device_available};
  info.digest_kind = refine ? DigestKind::refined : DigestKind::screen;
  info.reads_device_cube = true;
  register_engine(std::move(info));
}

}  // namespace

void register_cuda_tree_engines() {
  // The auto choice (above cuda-fast's 40): its GPU validation shows completeness and false
  // alarms equal to cuda-fast's on every workload studied (bench/validation/cuda-tree-study/),
  // and GpuPipeline.CudaTreeGivesCudaFastsCandidates runs the file pipeline with it; whatever the
  // tree cannot represent it hands to cuda-fast itself (docs/tree-search.md, "cuda-tree").
  register_variant("cuda-tree",
                   "cpu-tree's tree of partial sums on the GPU: levels as batched shift-and-add, the root "
                   "streamed and screened, screened trials re-scored exactly on the device",
                   45, true, false);
  register_variant("cuda-tree-screen",
                   "cuda-tree's unrefined statistic alone (cpu-tree-screen's floats): for sensitivity studies", -1,
                   false, false);
  // BF16 level maps: half the bytes on the tree's memory-bound passes. Not the auto choice: its
  // tree Z differs from cpu-tree's by the rounding (docs/tree-search.md, "cuda-tree").
  register_variant("cuda-tree-bf16",
                   "cuda-tree with its level maps stored as BF16 pairs (sums formed in FP32): half the "
                   "device-memory traffic; screened trials re-scored exactly as cuda-tree's",
                   20, true, true);
  register_variant("cuda-tree-bf16-screen", "cuda-tree-bf16's unrefined statistic alone: for sensitivity studies",
                   -1, false, true);
}

}  // namespace shiftstack::cuda
