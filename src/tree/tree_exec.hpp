// The CPU executor of a tree plan, in two stages per band of origin rows.
//
// Stage A (band-wide): the nodes at the cut level (and leaves above it) are formed over the
// whole band at once, each from its subtree, and kept. These lower nodes have few velocities but
// their maps must reach as far as any root velocity moves them, so small tiles would recompute
// that margin many times; over a band it is paid once.
// Stage B (per tile): above the cut, every node's maps are formed depth first in a per-thread
// arena over a small tile of origins (its velocities are many, so its working set must stay
// small), reading the cut nodes' maps where they lie in the band. The root is never stored:
// each root velocity is formed, scored and thresholded as it is made; with `fuse_root` it is
// formed from its grandchildren, (g00 + g01) + (g10 + g11), so its children are never stored
// either (the same floats: the children's maps would be those two sums).
// Leaves of one exposure are never formed: their parents read the band's exposure copy in place.
#pragma once
#include <array>
#include <cstdint>
#include <vector>

#include "core/large_buffer.hpp"
#include "shiftstack/encoding.hpp"
#include "tree/tree_kernels.hpp"
#include "tree/tree_plan.hpp"

namespace shiftstack::tree {

// One axis of one node's maps over an area of origins of a given length: the velocities needed,
// where each one's map starts (relative to the area's first origin) and their common length.
// Starts do not depend on the length, so a tile's maps are windows of the band's.
struct AxisGeometry {
  std::vector<int> used;  // needed velocity indices, ascending
  std::vector<int> rank;  // position in `used`, or -1
  std::vector<int> base;  // map start per velocity (valid where used)
  int length = 0;
  // Parents: for child c and velocity j, the rank of the child velocity it reads and where that
  // read starts in the child's map (the parent's start plus its shift, less the child's start).
  std::array<std::vector<int>, 2> child_rank, child_offset;
};

// A leaf of one exposure (not the root): its maps would be that exposure moved, so parents read
// the band's copy of it in place instead.
bool read_in_place(const Plan& plan, int index);

// Per-node map shapes over a width x height area of origins (a node read in place has none).
struct Geometry {
  int width = 0, height = 0;
  std::vector<std::array<AxisGeometry, 2>> node;  // per plan node
  std::vector<std::array<int, 2>> node_length;    // the maps' lengths along x, y (node[i][a].length)
  std::vector<std::int64_t> node_entries;         // a node's velocities (both axes' `used`)
  std::vector<std::size_t> node_floats;           // all of a node's maps (A and B planes)
  // Only the lengths, entries and floats (the schedule search's cost functions, never the
  // executor): `node` is left empty.
  bool lengths_only = false;
};
// Every node's axis shapes over an area of length 0: an area's are these with its length added
// to each `length` (the velocities used and their starts do not depend on it).
struct PlanShapes {
  std::array<std::vector<AxisGeometry>, 2> axis;
};
PlanShapes plan_shapes(const Plan& plan);
Geometry make_geometry(const Plan& plan, int width, int height);
// `lengths_only`: a geometry for stage_a_cost and stage_b_cost alone (not band_reads, not the
// executor); the schedule search builds one per candidate tile, from shapes computed once.
Geometry make_geometry(const Plan& plan, const PlanShapes& shapes, int width, int height, bool lengths_only);

// Which nodes stage A forms: those at `cut_level` >= 1 and the leaves above it (never the root,
// never a leaf read in place); cut_level > plan.depth leaves stage A the leaves of several
// exposures alone.
std::vector<char> cut_nodes(const Plan& plan, int cut_level);

// What one stage costs over one area: additions per level (per channel), node velocities
// formed per level, the largest working set (floats), for stage A the kept maps (floats), and
// (band_reads) the samples the leaves read relative to the area's first origin.
struct StageCost {
  std::vector<std::int64_t> additions, entries;
  // 16-float vector operations per channel, the last partial block of each row counted whole
  // (copies into leaves included; the root's counted once per trial block): what the schedule
  // cost model weighs.
  std::int64_t vectors = 0, root_vectors = 0;
  std::int64_t kept_reads = 0;  // stage B: vectors read from stage A's maps (main memory)
  std::size_t arena_floats = 0;  // stage B: per tile; stage A: per thread, below a cut node
  std::size_t kept_floats = 0;   // stage A: the cut nodes' maps
  std::array<int, 2> read_lo{0, 0}, read_hi{0, 0};
  bool reads = false;            // the leaves read exposures (tracked only where asked)
  bool track_reads = false;      // band_reads: the walk visits every leaf's shifts for read_lo/hi
};
StageCost stage_b_cost(const Plan& plan, const Geometry& tile, const std::vector<char>& cut, bool fuse_root);
// Whether `fuse_root` changes anything: some child of the root is formed per tile (not a leaf,
// not cut).
bool root_fusable(const Plan& plan, const std::vector<char>& cut);
StageCost stage_a_cost(const Plan& plan, const Geometry& band, const std::vector<char>& cut);
// The samples every leaf reads over an area (both stages), relative to its first origin:
// [lo, hi) per axis.
struct ReadRange {
  std::array<int, 2> lo{0, 0}, hi{0, 0};
};
ReadRange band_reads(const Plan& plan, const Geometry& band);

// A padded, cleaned and weighted copy of every exposure over a rectangle of pixels (zeros
// outside the image and where decode() reports no valid sample).
struct Band {
  int x0 = 0, y0 = 0, cols = 0, rows = 0;
  int exposures = 0;
  LargeBuffer<float> data;  // per exposure: psi plane, then phi plane (reused between bands)
  std::size_t plane() const { return std::size_t(cols) * rows; }
  const float* psi(int e) const { return data.data() + 2 * std::size_t(e) * plane(); }
  const float* phi(int e) const { return psi(e) + plane(); }
};
// Writes every sample of the band (its x0, y0, cols, rows set), reusing its storage.
void fill_band(const EncodedStack& stack, Band& band);

// Stage A's output for one band: the cut nodes' maps over the band's origins.
struct Kept {
  const Geometry* geometry = nullptr;  // the band-wide geometry
  int x0 = 0, y0 = 0;                  // the band's first origin
  std::vector<std::size_t> offset;     // per node: start of its maps in `data` (cut nodes)
  LargeBuffer<float> data;             // reused between bands
};

// Forms every cut node's maps over the band (all threads), reading leaves from `exposures`.
// Counts into additions/entries.
void run_stage_a(const Plan& plan, const std::vector<char>& cut, const Band& exposures, Kept& kept,
                 std::vector<std::int64_t>& additions, std::vector<std::int64_t>& entries);

// A trial whose tree score passed the screen.
struct Hit {
  int x = 0, y = 0;
  std::int32_t velocity = 0;
  float A = 0, B = 0;
};

struct TileOutput {
  TileScore score;
  std::vector<Hit> hits;
  std::vector<std::int64_t> additions, entries;  // per level
};

struct StreamParams {
  ZTest screen, count;
  bool want_count = true;
};

// Runs stage B over the tile whose first origin is (x0, y0); `arena` holds the tile's
// stage_b_cost().arena_floats.
void run_tile(const Plan& plan, const std::vector<char>& cut, bool fuse_root, const Geometry& tile, const Kept& kept,
              const Band& exposures, const StreamParams& params, int x0, int y0, float* arena, TileOutput& out);

}  // namespace shiftstack::tree
