// cpu-tree's map geometry (src/tree/tree_exec.*): the schedule search costs its candidate tiles
// with geometries of lengths alone, built from the plan's axis shapes once; the executor runs
// full geometries built from the same shapes. Both must cost the same, and every parent's read
// of a child's map must lie inside that map, for tiles of any size.
#include <gtest/gtest.h>

#include <tuple>

#include "test_support.hpp"
#include "tree/tree_exec.hpp"
#include "tree/tree_plan.hpp"

using namespace shiftstack;
using namespace shiftstack::testing;

namespace {

std::vector<tree::Plan> plans() {
  std::vector<tree::Plan> out;
  // A short cadence with a coarse bank, and five nights with a fine one.
  KitOptions small = workload("ci");
  small.exposures = 20;
  small.width = small.height = 40;
  small.vx_count = 7;
  small.vy_count = 5;
  small.velocity_displacement = 6;
  small.inject = false;
  KitOptions nights = workload("nights");
  nights.width = nights.height = 32;
  nights.inject = false;  // only the bank matters here
  nights.vx_count = nights.vy_count = 21;
  for (const KitOptions& o : {small, nights}) out.push_back(tree::make_plan(make_kit(o).bank, {}));
  return out;
}

void expect_same_cost(const tree::StageCost& a, const tree::StageCost& b, const std::string& what) {
  EXPECT_EQ(a.additions, b.additions) << what;
  EXPECT_EQ(a.entries, b.entries) << what;
  EXPECT_EQ(a.vectors, b.vectors) << what;
  EXPECT_EQ(a.root_vectors, b.root_vectors) << what;
  EXPECT_EQ(a.kept_reads, b.kept_reads) << what;
  EXPECT_EQ(a.arena_floats, b.arena_floats) << what;
  EXPECT_EQ(a.kept_floats, b.kept_floats) << what;
}

}  // namespace

TEST(TreeGeometry, LengthsOnlyGeometriesCostWhatFullOnesCost) {
  for (const tree::Plan& plan : plans()) {
    const tree::PlanShapes shapes = tree::plan_shapes(plan);
    for (auto [w, h] : {std::pair{16, 8}, {48, 24}, {37, 13}, {64, 64}}) {
      const tree::Geometry full = tree::make_geometry(plan, w, h);
      const tree::Geometry light = tree::make_geometry(plan, shapes, w, h, true);
      ASSERT_TRUE(light.lengths_only);
      ASSERT_FALSE(full.lengths_only);
      EXPECT_EQ(full.node_length, light.node_length);
      EXPECT_EQ(full.node_entries, light.node_entries);
      EXPECT_EQ(full.node_floats, light.node_floats);
      for (int level = 1; level <= plan.depth + 1; ++level) {
        const std::vector<char> cut = tree::cut_nodes(plan, level);
        const std::string what = std::to_string(w) + "x" + std::to_string(h) + " cut " + std::to_string(level);
        expect_same_cost(tree::stage_a_cost(plan, full, cut), tree::stage_a_cost(plan, light, cut), what + " stage A");
        for (bool fuse : {false, true})
          expect_same_cost(tree::stage_b_cost(plan, full, cut, fuse), tree::stage_b_cost(plan, light, cut, fuse),
                           what + (fuse ? " fused" : " unfused"));
      }
    }
  }
}

TEST(TreeGeometry, EveryParentReadsInsideItsChildrensMaps) {
  for (const tree::Plan& plan : plans()) {
    for (auto [w, h] : {std::pair{1, 1}, {16, 8}, {37, 13}, {200, 3}}) {
      const tree::Geometry g = tree::make_geometry(plan, w, h);
      EXPECT_EQ(g.node_length[0][0], w);
      EXPECT_EQ(g.node_length[0][1], h);
      std::int64_t reads = 0;
      for (std::size_t i = 0; i < plan.nodes.size(); ++i) {
        const tree::Node& node = plan.nodes[i];
        if (node.leaf()) continue;
        for (int a = 0; a < 2; ++a) {
          const tree::AxisGeometry& parent = g.node[i][a];
          EXPECT_EQ(parent.length, g.node_length[i][a]);
          for (int c = 0; c < 2; ++c) {
            const int child = node.child[c];
            if (tree::read_in_place(plan, child)) continue;  // read from the band's exposure copy
            const int child_length = g.node_length[std::size_t(child)][a];
            for (int j : parent.used) {
              const int offset = parent.child_offset[c][std::size_t(j)];
              ASSERT_GE(parent.child_rank[c][std::size_t(j)], 0);
              EXPECT_GE(offset, 0) << "node " << i << " axis " << a << " child " << c << " velocity " << j;
              EXPECT_LE(offset + parent.length, child_length)
                  << "node " << i << " axis " << a << " child " << c << " velocity " << j;
              ++reads;
            }
          }
        }
      }
      EXPECT_GT(reads, 0);
    }
  }
}
