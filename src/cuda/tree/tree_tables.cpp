#include "cuda/tree/tree_tables.hpp"

#include <algorithm>

#include "tree/tree_exec.hpp"

namespace shiftstack::cuda::tree_gpu {

BandPlan make_band_plan(const tree::Plan& plan, int width, int rows, bool fuse_root, LevelFusion fusion) {
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
  // entry[n][rank_y * used_x + rank_x]: node n's ParentEntry of that velocity in its level's list.
  std::vector<std::vector<int>> entry(N);
  for (std::size_t n = 1; n < N; ++n) {
    const tree::Node& node = plan.nodes[n];
    LevelPlan& L = band.level[node.level];
    const tree::AxisGeometry &gx = geo.node[n][0], &gy = geo.node[n][1];
    const int W = gx.length, H = gy.length;
    const std::int64_t plane = std::int64_t(W) * H, nux = std::int64_t(gx.used.size());
    if (!node.leaf()) entry[n].assign(gx.used.size() * gy.used.size(), -1);
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
        entry[n][std::size_t(gy.rank[jy] * nux + gx.rank[jx])] = int(L.parents.size());
        L.parents.push_back(e);
        L.parent_rows = std::max(L.parent_rows, H);
        L.additions += plane;
      }
  }
  const tree::Node& top = plan.nodes[0];
  const bool fused = fuse_root && !plan.nodes[top.child[0]].leaf() && !plan.nodes[top.child[1]].leaf();
  // Which levels are formed: a level of parents only may be skipped, the level above then
  // reading two levels down; never two levels in a row, so every read is of a formed level.
  std::vector<char> formed(std::size_t(plan.depth) + 1, 1);
  formed[0] = 0;  // the root is streamed
  if (fused) formed[1] = 0;
  if (fusion != LevelFusion::none) {
    std::vector<char> parents_only(formed.size(), 1), has_parents(formed.size(), 0);
    for (std::size_t n = 1; n < N; ++n) {
      const int l = plan.nodes[n].level;
      if (plan.nodes[n].leaf())
        parents_only[l] = 0;
      else
        has_parents[l] = 1;
    }
    for (int l = fused ? 2 : 1; l + 1 <= plan.depth;) {
      const bool worth = fusion == LevelFusion::everywhere ||
                         double(band.level[l + 1].floats) >= kFusionMinRatio * double(band.level[l].floats);
      if (has_parents[l] && parents_only[l + 1] && worth) {
        formed[l + 1] = 0;
        l += 2;
      } else {
        l += 1;
      }
    }
  }
  // A parent whose children are not formed reads where each child velocity would read its own
  // children, moved by the parent's offset into the child's map.
  for (std::size_t n = 1; n < N; ++n) {
    const tree::Node& node = plan.nodes[n];
    if (node.leaf() || formed[node.level + 1]) continue;
    std::vector<ParentEntry>& list = band.level[node.level].parents;
    const std::vector<ParentEntry>& below = band.level[node.level + 1].parents;
    const tree::AxisGeometry &gx = geo.node[n][0], &gy = geo.node[n][1];
    const std::size_t nux = gx.used.size();
    for (int jy : gy.used)
      for (int jx : gx.used) {
        ParentEntry& e = list[std::size_t(entry[n][std::size_t(gy.rank[jy]) * nux + gx.rank[jx]])];
        ParentEntry composed = e;
        for (int ci = 0; ci < 2; ++ci) {
          const int child = node.child[ci];
          const std::size_t cux = geo.node[child][0].used.size();
          const ParentEntry& c =
              below[std::size_t(entry[std::size_t(child)][std::size_t(gy.child_rank[ci][jy]) * cux + gx.child_rank[ci][jx]])];
          for (int k = 0; k < 2; ++k) {
            composed.src[2 * ci + k] = c.src[k] + std::int64_t(gy.child_offset[ci][jy]) * c.stride[k] +
                                       kPixelFloats * std::int64_t(gx.child_offset[ci][jx]);
            composed.stride[2 * ci + k] = c.stride[k];
          }
        }
        e = composed;
      }
  }
  for (int l = 1; l <= plan.depth; ++l) {
    LevelPlan& L = band.level[l];
    if (!formed[l]) {
      L = LevelPlan{};
      L.buffer = -1;
    } else if (l < plan.depth && !formed[l + 1]) {
      L.sources = 4;
      L.additions *= 3;  // (g0 + g1) + (g2 + g3) per pixel and channel
    }
  }
  // The formed levels alternate between the two buffers, from the deepest up.
  for (int l = plan.depth, b = 0; l >= 1; --l) {
    if (!formed[l]) continue;
    band.level[l].buffer = b;
    band.buffer_floats[b] = std::max(band.buffer_floats[b], band.level[l].floats);
    ++band.formed_levels;
    b ^= 1;
  }
  if (fused) band.sources = 4;
  band.root_buffer = band.level[fused ? 2 : 1].buffer;

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
    for (const ParentEntry& e : L.parents)  // 2 floats read per source, 2 written
      bytes += (8.0 * L.sources + 8.0) * double(e.width) * e.height;
    for (const LeafEntry& e : L.leaves) bytes += (8.0 * e.count + 8.0) * double(e.width) * e.height;
  }
  return bytes;
}

}  // namespace shiftstack::cuda::tree_gpu
