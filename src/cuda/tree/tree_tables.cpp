#include "cuda/tree/tree_tables.hpp"

#include <algorithm>

#include "tree/tree_exec.hpp"

namespace shiftstack::cuda::tree_gpu {

BandPlan make_band_plan(const tree::Plan& plan, int width, int rows, bool fuse_root) {
  // cpu-tree's geometry over the whole band: each node's used velocities, map starts and lengths,
  // and for parents the rank and offset of the child map each velocity reads.
  const tree::Geometry geo = tree::make_geometry(plan, width, rows);
  const std::size_t N = plan.nodes.size();
  BandPlan band;
  band.width = width;
  band.rows = rows;
  band.level.resize(plan.depth + 1);
  std::vector<std::int64_t> offset(N, 0);
  for (std::size_t n = 1; n < N; ++n) {
    // Every node's maps, leaves of one exposure included (cpu-tree reads those in place from its
    // band copy and gives them no maps; here the leaf kernel forms them from the cube).
    const tree::AxisGeometry &gx = geo.node[n][0], &gy = geo.node[n][1];
    LevelPlan& L = band.level[plan.nodes[n].level];
    offset[n] = std::int64_t(L.floats);
    L.floats += kPixelFloats * gx.used.size() * gy.used.size() * std::size_t(gx.length) * std::size_t(gy.length);
  }
  bool reads = false;
  for (std::size_t n = 1; n < N; ++n) {
    const tree::Node& node = plan.nodes[n];
    LevelPlan& L = band.level[node.level];
    const tree::AxisGeometry &gx = geo.node[n][0], &gy = geo.node[n][1];
    const int W = gx.length, H = gy.length;
    const std::int64_t plane = std::int64_t(W) * H, nux = std::int64_t(gx.used.size());
    for (int jy : gy.used)
      for (int jx : gx.used) {
        // Maps in cpu-tree's order: velocity-y rank major, then x rank; A plane, then B.
        const std::int64_t out = offset[n] + kPixelFloats * plane * (gy.rank[jy] * nux + gx.rank[jx]);
        if (node.leaf()) {
          L.leaves.push_back({out, W, H, int(L.samples.size()), node.count});
          for (int i = 0; i < node.count; ++i) {
            const int dx = gx.base[jx] + node.axis[0].exposure_shift[std::size_t(jx) * node.count + i];
            const int dy = gy.base[jy] + node.axis[1].exposure_shift[std::size_t(jy) * node.count + i];
            L.samples.push_back({plan.order[node.first + i], dx, dy});
            if (!reads) {
              band.read_lo[0] = dx, band.read_lo[1] = dy, band.read_hi[0] = dx + W, band.read_hi[1] = dy + H;
              reads = true;
            }
            band.read_lo[0] = std::min(band.read_lo[0], dx);
            band.read_lo[1] = std::min(band.read_lo[1], dy);
            band.read_hi[0] = std::max(band.read_hi[0], dx + W);
            band.read_hi[1] = std::max(band.read_hi[1], dy + H);
          }
          L.leaf_rows = std::max(L.leaf_rows, H);
          L.additions += plane * (node.count - 1);
          continue;
        }
        ParentEntry e{};
        e.out = out;
        e.width = W;
        e.height = H;
        for (int ci = 0; ci < 2; ++ci) {
          const int child = node.child[ci];
          const tree::AxisGeometry &cx = geo.node[child][0], &cy = geo.node[child][1];
          const std::int64_t cplane = std::int64_t(cx.length) * cy.length;
          e.src[ci] = offset[child] +
                      kPixelFloats * cplane *
                          (std::int64_t(gy.child_rank[ci][jy]) * std::int64_t(cx.used.size()) + gx.child_rank[ci][jx]) +
                      kPixelFloats * (std::int64_t(gy.child_offset[ci][jy]) * cx.length + gx.child_offset[ci][jx]);
          e.stride[ci] = kPixelFloats * cx.length;
        }
        L.parents.push_back(e);
        L.parent_rows = std::max(L.parent_rows, H);
        L.additions += plane;
      }
  }
  const tree::Node& top = plan.nodes[0];
  const bool fused = fuse_root && !plan.nodes[top.child[0]].leaf() && !plan.nodes[top.child[1]].leaf();
  if (fused) {
    // Level 1 is the root's two children alone; the root forms their sums itself.
    band.level[1] = LevelPlan{};
    band.sources = 4;
    band.root_buffer = 0;
  }
  for (int l = 1; l <= plan.depth; ++l)
    band.buffer_floats[l % 2] = std::max(band.buffer_floats[l % 2], band.level[l].floats);

  band.Va = top.axis[0].size();
  band.Vb = top.axis[1].size();
  const tree::AxisGeometry &px = geo.node[0][0], &py = geo.node[0][1];
  band.x_part.resize(std::size_t(band.sources) * band.Va);
  band.y_part.resize(std::size_t(band.sources) * band.Vb);
  for (int c = 0; c < 2; ++c) {
    const int child = top.child[c];
    const tree::AxisGeometry &cx = geo.node[child][0], &cy = geo.node[child][1];
    if (!fused) {
      const std::int64_t cplane = std::int64_t(cx.length) * cy.length;
      for (int a = 0; a < band.Va; ++a)
        band.x_part[c * band.Va + a] = kPixelFloats * (cplane * px.child_rank[c][a] + px.child_offset[c][a]);
      for (int b = 0; b < band.Vb; ++b)
        band.y_part[c * band.Vb + b] =
            offset[child] + kPixelFloats * (cplane * std::int64_t(cx.used.size()) * py.child_rank[c][b] +
                                            std::int64_t(py.child_offset[c][b]) * cx.length);
      band.stride[c] = kPixelFloats * cx.length;
      continue;
    }
    // Where the child's map pixel the root reads would read each grandchild: the child
    // velocity's own reads (its ParentEntry) moved by the root's offset into the child's map.
    const tree::Node& node = plan.nodes[child];
    for (int k = 0; k < 2; ++k) {
      const int s = 2 * c + k, grand = node.child[k];
      const tree::AxisGeometry &gx = geo.node[grand][0], &gy = geo.node[grand][1];
      const std::int64_t gplane = std::int64_t(gx.length) * gy.length;
      for (int a = 0; a < band.Va; ++a) {
        const int jx = top.axis[0].child_entry[c][a];
        band.x_part[s * band.Va + a] =
            kPixelFloats * (gplane * cx.child_rank[k][jx] + px.child_offset[c][a] + cx.child_offset[k][jx]);
      }
      for (int b = 0; b < band.Vb; ++b) {
        const int jy = top.axis[1].child_entry[c][b];
        band.y_part[s * band.Vb + b] =
            offset[grand] + kPixelFloats * (gplane * std::int64_t(gx.used.size()) * cy.child_rank[k][jy] +
                                            std::int64_t(py.child_offset[c][b] + cy.child_offset[k][jy]) * gx.length);
      }
      band.stride[s] = kPixelFloats * gx.length;
    }
  }
  for (int tb = 0; tb < band.Vb; tb += kRootOrderTile[1])
    for (int ta = 0; ta < band.Va; ta += kRootOrderTile[0])
      for (int b = tb; b < std::min(band.Vb, tb + kRootOrderTile[1]); ++b)
        for (int a = ta; a < std::min(band.Va, ta + kRootOrderTile[0]); ++a) band.root_order.push_back(b * band.Va + a);
  // Per channel: a0 + a1, or (g0 + g1) + (g2 + g3).
  band.root_additions = std::int64_t(band.sources - 1) * band.Va * band.Vb * width * rows;
  return band;
}

double BandPlan::traffic_bytes() const {
  // The root: 2 floats per source per trial, nothing stored.
  double bytes = 8.0 * sources * double(root_additions) / double(sources - 1);
  for (std::size_t l = 1; l < level.size(); ++l) {
    const LevelPlan& L = level[l];
    for (const ParentEntry& e : L.parents) bytes += 24.0 * double(e.width) * e.height;  // 4 read, 2 written
    for (const LeafEntry& e : L.leaves) bytes += (8.0 * e.count + 8.0) * double(e.width) * e.height;
  }
  return bytes;
}

}  // namespace shiftstack::cuda::tree_gpu
