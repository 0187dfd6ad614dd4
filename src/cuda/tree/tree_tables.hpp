// cuda-tree's level tables (docs/tree-search.md, "cuda-tree"): cpu-tree's plan over one band of
// origin rows, flattened into plain arrays the kernels read -- per level, one entry per node
// velocity with where its maps lie and where it reads its children (or, for leaves, the
// exposures and their shifts), and the root's read offsets. Host code without CUDA syntax, built
// in every configuration, so the tables are also tested where no GPU exists.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "tree/tree_plan.hpp"

namespace shiftstack::cuda::tree_gpu {

// Every map holds per pixel its A and then its B (kPixelFloats floats: one aligned 8-byte pair,
// so a kernel moves a pixel's two channels in one load whatever the shift). Offsets and strides
// are in floats; pixel i of a row lies kPixelFloats * i floats after the row's start.
constexpr int kPixelFloats = 2;
constexpr int kRootOrderTile[2] = {8, 4};

// One node velocity of a parent node: per map pixel, A = child0 + child1 and B likewise; or,
// where the level below is fused (LevelPlan::sources 4), A = (g0 + g1) + (g2 + g3) from the four
// grandchildren, the floats the children would hold, added in the same order.
struct ParentEntry {
  std::int64_t out;     // this entry's map in the level buffer
  std::int64_t src[4];  // first pixel read from each source's map (the source level's buffer)
  int width, height;    // in pixels
  int stride[4];        // each source's row length, in floats
};

// One node velocity of a leaf: the sum of its exposures, each at its own shift, in plan order.
struct LeafEntry {
  std::int64_t out;
  int width, height;
  int first, count;  // its samples: LeafSample[first .. first + count)
};
struct LeafSample {
  int exposure;
  int dx, dy;  // image position of map pixel (0, 0), relative to the band's first origin
};

struct LevelPlan {
  // Where the level's maps live: buffer 0 or 1, or -1 for a level never formed (fused into the
  // one above it, or the root's children with the root fused).
  int buffer = 0;
  int sources = 2;  // its parents read 2 children (the level below) or 4 grandchildren (two below)
  std::vector<ParentEntry> parents;
  std::vector<LeafEntry> leaves;
  std::vector<LeafSample> samples;
  int parent_rows = 0, leaf_rows = 0;  // tallest map
  std::size_t floats = 0;              // all of the level's maps
  std::int64_t additions = 0;          // per channel (A or B)
};

// The plan over a band of `rows` origin rows and `width` origins: every node's maps at a fixed
// place in its level's buffer (the levels formed alternate between two buffers, each formed from
// the one below it in the other), and the root's reads: trial (i, r, a, b) sums source s's
// pixel at x_part[s * Va + a] + y_part[s * Vb + b] + r * stride[s] + kPixelFloats * i (A; B next).
// The sources are the root's two children (level 1), or, with the root fused, its four
// grandchildren (level 2: A = (g0 + g1) + (g2 + g3), the floats level 1 would hold, added in the
// same order), and level 1 is never formed. With fused levels, a level whose nodes are all
// parents is likewise never formed: the level above reads its children's children.
struct BandPlan {
  int width = 0, rows = 0;
  std::vector<LevelPlan> level;  // [0 .. depth]; level 0 (the root) keeps no maps
  int sources = 2;               // 2: children, 4: grandchildren (fused root)
  int root_buffer = 1;           // the buffer the root reads: that of its sources' level
  int formed_levels = 0;         // levels with maps (below the root)
  std::vector<std::int64_t> x_part, y_part;
  // The root visits velocities in tiles of kRootOrderTile[0] x [1] (vx, vy) values: neighbouring
  // velocities read the same child maps, so a block finds them still in its L1 cache.
  std::vector<int> root_order;
  int stride[4] = {0, 0, 0, 0};  // floats
  int Va = 0, Vb = 0;
  std::size_t buffer_floats[2] = {0, 0};
  // Samples the leaves read, relative to the band's first origin: [lo, hi) per axis.
  int read_lo[2] = {0, 0}, read_hi[2] = {0, 0};
  std::int64_t root_additions = 0;
  double bytes() const { return 4.0 * double(buffer_floats[0] + buffer_floats[1]); }
  // Fewest bytes the levels move through device memory: every map written once and read once
  // per entry reading it (parents read 2 floats per channel per pixel, the root 4 per trial);
  // leaves counted as reading each sample (8 bytes per pair).
  double traffic_bytes() const;
};

// Which levels below the root's children are formed from two levels down (the level between
// never stored; the maps' floats are the same). Only a level of parents only can be skipped, and
// never two in a row; from the top, the largest levels first.
enum class LevelFusion {
  none,
  // where the level skipped holds at least half the floats of the level above: skipping it saves
  // writing and reading it back, and costs the level above twice the reads of the level below
  // it, which the caches serve in part. Measured on the H200 (docs/tree-search.md): skipping
  // levels of 0.56 to 1.8 times the size of the one above was faster (deep, dense, kbmod), a
  // level of 0.27 times (nights) no faster (2-5% slower, near the run-to-run variation).
  worthwhile,
  everywhere,
};
constexpr double kFusionMinRatio = 0.5;

// fuse_root: form the root from its grandchildren when both its children are parents.
BandPlan make_band_plan(const tree::Plan& plan, int width, int rows, bool fuse_root = false,
                        LevelFusion fusion = LevelFusion::none);

}  // namespace shiftstack::cuda::tree_gpu
