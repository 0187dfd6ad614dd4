#include "tree/tree_exec.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "shiftstack/error.hpp"

namespace shiftstack::tree {

namespace {

// Top-down over the preorder node list: a child velocity's map must hold every parent map that
// reads it, moved by that parent's shift; its start is the smallest such position and all of a
// node's maps share the longest extent (the area plus the spread of the shifts of the parent
// velocities that share a child velocity, accumulated down the tree).
std::vector<AxisGeometry> axis_geometry(const Plan& plan, int a, int area_length) {
  std::vector<AxisGeometry> g(plan.nodes.size());
  {
    const int n = plan.nodes[0].axis[a].size();
    AxisGeometry& root = g[0];
    root.used.resize(n);
    root.rank.resize(n);
    for (int j = 0; j < n; ++j) root.used[j] = root.rank[j] = j;
    root.base.assign(n, 0);
    root.length = area_length;
  }
  for (std::size_t index = 0; index < plan.nodes.size(); ++index) {
    const Node& node = plan.nodes[index];
    if (node.leaf()) continue;
    const AxisGeometry& parent = g[index];
    const NodeAxis& ax = node.axis[a];
    for (int ci = 0; ci < 2; ++ci) {
      const int child = node.child[ci];
      const int n = plan.nodes[child].axis[a].size();
      std::vector<int> lo(n, std::numeric_limits<int>::max()), hi(n, std::numeric_limits<int>::min());
      for (int j : parent.used) {
        const int k = ax.child_entry[ci][j];
        const int pos = parent.base[j] + ax.child_shift[ci][j];
        lo[k] = std::min(lo[k], pos);
        hi[k] = std::max(hi[k], pos);
      }
      AxisGeometry& cg = g[child];
      cg.rank.assign(n, -1);
      cg.base.assign(n, 0);
      int spread = 0;
      for (int k = 0; k < n; ++k) {
        if (lo[k] > hi[k]) continue;
        cg.rank[k] = int(cg.used.size());
        cg.used.push_back(k);
        cg.base[k] = lo[k];
        spread = std::max(spread, hi[k] - lo[k]);
      }
      cg.length = parent.length + spread;
    }
  }
  return g;
}

}  // namespace

bool read_in_place(const Plan& plan, int index) {
  const Node& n = plan.nodes[std::size_t(index)];
  return index != 0 && n.leaf() && n.count == 1;
}

namespace {

// 16-float blocks per row of a map (rows narrower than a block run as one scalar pass).
std::int64_t row_blocks(int length) { return std::max<std::int64_t>(1, (length + 15) / 16); }

std::int64_t entries_of(const Geometry& g, int index) { return g.node_entries[index]; }
std::int64_t area_of(const Geometry& g, int index) {
  return std::int64_t(g.node_length[index][0]) * g.node_length[index][1];
}

// Floats a node's subtree needs from its own maps upward when formed in one area: its maps
// (unless `own` is false), child 0's subtree, then child 0's maps kept while child 1's subtree
// runs. Cut children are read where stage A left them (`stop_at_cut`).
std::size_t subtree_floats(const Plan& plan, const Geometry& g, const std::vector<char>& cut, int index, bool own,
                           bool stop_at_cut) {
  const Node& node = plan.nodes[index];
  const std::size_t mine = own ? g.node_floats[index] : 0;
  if (node.leaf()) return mine;
  std::size_t c[2], kept[2];
  for (int ci = 0; ci < 2; ++ci) {
    const int child = node.child[ci];
    const bool skip = stop_at_cut && cut[child];
    c[ci] = skip ? 0 : subtree_floats(plan, g, cut, child, true, stop_at_cut);
    kept[ci] = skip ? 0 : g.node_floats[child];
  }
  return mine + std::max(c[0], kept[0] + c[1]);
}

// Additions and entries of the nodes a stage forms, and (stage A) the samples its leaves read.
void count_subtree(const Plan& plan, const Geometry& g, const std::vector<char>& cut, int index, bool stop_at_cut,
                   StageCost& cost) {
  const Node& node = plan.nodes[index];
  const std::int64_t entries = index == 0 ? std::int64_t(node.entries()) : entries_of(g, index);
  const std::int64_t area = index == 0 ? std::int64_t(g.width) * g.height : area_of(g, index);
  if (!read_in_place(plan, index)) {
    cost.entries[node.level] += entries;
    cost.additions[node.level] += entries * area * (node.leaf() ? node.count - 1 : 1);
    if (index != 0) {
      const std::int64_t rows = g.node_length[index][1];
      cost.vectors += entries * rows * row_blocks(g.node_length[index][0]) * (node.leaf() ? node.count : 1);
    }
  }
  if (node.leaf()) {
    if (!cost.track_reads) return;
    for (int a = 0; a < 2; ++a) {
      const AxisGeometry& ag = g.node[index][a];
      for (int j : ag.used)
        for (int k = 0; k < node.count; ++k) {
          const int s = node.axis[a].exposure_shift[std::size_t(j) * node.count + k];
          if (!cost.reads) cost.read_lo = {1 << 30, 1 << 30}, cost.read_hi = {-(1 << 30), -(1 << 30)};
          cost.reads = true;
          cost.read_lo[a] = std::min(cost.read_lo[a], ag.base[j] + s);
          cost.read_hi[a] = std::max(cost.read_hi[a], ag.base[j] + s + ag.length);
        }
    }
    return;
  }
  for (int child : node.child) {
    if (!(stop_at_cut && cut[child])) {
      count_subtree(plan, g, cut, child, stop_at_cut, cost);
    } else if (index != 0) {
      cost.kept_reads += entries * g.node_length[index][1] * row_blocks(g.node_length[index][0]);
    }
  }
}

}  // namespace

PlanShapes plan_shapes(const Plan& plan) { return {{axis_geometry(plan, 0, 0), axis_geometry(plan, 1, 0)}}; }

Geometry make_geometry(const Plan& plan, int width, int height) {
  return make_geometry(plan, plan_shapes(plan), width, height, false);
}

Geometry make_geometry(const Plan& plan, const PlanShapes& shapes, int width, int height, bool lengths_only) {
  require(width > 0 && height > 0, "tree: tile size must be positive");
  Geometry geo;
  geo.width = width;
  geo.height = height;
  geo.lengths_only = lengths_only;
  const std::size_t N = plan.nodes.size();
  if (!lengths_only) geo.node.resize(N);
  geo.node_length.resize(N);
  geo.node_entries.resize(N);
  geo.node_floats.assign(N, 0);
  for (std::size_t i = 0; i < N; ++i) {
    const AxisGeometry &x = shapes.axis[0][i], &y = shapes.axis[1][i];
    geo.node_length[i] = {x.length + width, y.length + height};
    if (!lengths_only) {
      geo.node[i] = {x, y};
      geo.node[i][0].length = geo.node_length[i][0];
      geo.node[i][1].length = geo.node_length[i][1];
    }
    geo.node_entries[i] = std::int64_t(x.used.size()) * std::int64_t(y.used.size());
    if (!read_in_place(plan, int(i))) geo.node_floats[i] = std::size_t(2 * entries_of(geo, int(i)) * area_of(geo, int(i)));
  }
  if (lengths_only) return geo;
  for (std::size_t i = 0; i < N; ++i) {
    const Node& node = plan.nodes[i];
    if (node.leaf()) continue;
    for (int a = 0; a < 2; ++a) {
      AxisGeometry& g = geo.node[i][a];
      const NodeAxis& ax = node.axis[a];
      for (int ci = 0; ci < 2; ++ci) {
        const AxisGeometry& c = geo.node[node.child[ci]][a];
        g.child_rank[ci].assign(ax.size(), -1);
        g.child_offset[ci].assign(ax.size(), 0);
        for (int j : g.used) {
          const int k = ax.child_entry[ci][j];
          g.child_rank[ci][j] = c.rank[k];
          g.child_offset[ci][j] = g.base[j] + ax.child_shift[ci][j] - c.base[k];
        }
      }
    }
  }
  return geo;
}

std::vector<char> cut_nodes(const Plan& plan, int cut_level) {
  require(cut_level >= 1, "tree: internal: the cut level must be >= 1");
  std::vector<char> cut(plan.nodes.size(), 0);
  for (std::size_t i = 1; i < plan.nodes.size(); ++i) {
    const Node& n = plan.nodes[i];
    cut[i] = !read_in_place(plan, int(i)) && (n.level == cut_level || (n.leaf() && n.level < cut_level));
  }
  return cut;
}

namespace {

// Whether side c of the root is formed from its two children in the root's own sums.
bool fused_side(const Plan& plan, const std::vector<char>& cut, bool fuse_root, int c) {
  const int child = plan.nodes[0].child[c];
  return fuse_root && !plan.nodes[child].leaf() && !cut[child];
}

// What the root reads: per side, its child, or the child's two children when that side is fused.
std::vector<int> root_inputs(const Plan& plan, const std::vector<char>& cut, bool fuse_root) {
  std::vector<int> inputs;
  for (int c = 0; c < 2; ++c) {
    const Node& child = plan.nodes[plan.nodes[0].child[c]];
    if (fused_side(plan, cut, fuse_root, c)) {
      inputs.push_back(child.child[0]);
      inputs.push_back(child.child[1]);
    } else {
      inputs.push_back(plan.nodes[0].child[c]);
    }
  }
  return inputs;
}

}  // namespace

bool root_fusable(const Plan& plan, const std::vector<char>& cut) {
  return fused_side(plan, cut, true, 0) || fused_side(plan, cut, true, 1);
}

StageCost stage_b_cost(const Plan& plan, const Geometry& tile, const std::vector<char>& cut, bool fuse_root) {
  StageCost c;
  c.additions.assign(plan.depth + 1, 0);
  c.entries.assign(plan.depth + 1, 0);
  const Node& root = plan.nodes[0];
  const std::int64_t trials = std::int64_t(root.entries()) * tile.width * tile.height;
  c.entries[0] += root.entries();
  c.additions[0] += trials;
  c.root_vectors = std::int64_t(root.entries()) * tile.height * row_blocks(tile.width);
  for (int side = 0; side < 2; ++side)
    if (fused_side(plan, cut, fuse_root, side)) c.additions[1] += trials;  // (g0 + g1) per root trial
  // The inputs are formed one after the other in the arena, each above the ones before.
  std::size_t below = 0;
  for (int input : root_inputs(plan, cut, fuse_root)) {
    if (cut[input]) {
      c.kept_reads += c.root_vectors;
      continue;
    }
    count_subtree(plan, tile, cut, input, true, c);
    c.arena_floats = std::max(c.arena_floats, below + subtree_floats(plan, tile, cut, input, true, true));
    below += tile.node_floats[input];
  }
  return c;
}

StageCost stage_a_cost(const Plan& plan, const Geometry& band, const std::vector<char>& cut) {
  StageCost c;
  c.additions.assign(plan.depth + 1, 0);
  c.entries.assign(plan.depth + 1, 0);
  for (std::size_t i = 0; i < plan.nodes.size(); ++i) {
    if (!cut[i]) continue;
    count_subtree(plan, band, cut, int(i), false, c);
    c.kept_floats += band.node_floats[i];
    c.arena_floats = std::max(c.arena_floats, subtree_floats(plan, band, cut, int(i), false, false));
  }
  return c;
}

ReadRange band_reads(const Plan& plan, const Geometry& band) {
  StageCost c;
  c.additions.assign(plan.depth + 1, 0);
  c.entries.assign(plan.depth + 1, 0);
  require(!band.lengths_only, "tree: internal: band_reads needs the axes' shapes");
  c.track_reads = true;
  count_subtree(plan, band, std::vector<char>(plan.nodes.size(), 0), 0, false, c);
  ReadRange r;
  r.lo = c.read_lo;
  r.hi = c.read_hi;
  return r;
}

void fill_band(const EncodedStack& s, Band& band) {
  const int E = s.exposures, W = s.width, H = s.height;
  band.exposures = E;
  band.data.resize_uninitialised(2 * std::size_t(E) * band.plane());  // every sample is written below
  const std::size_t plane = s.plane_size();
  const int c_lo = std::max(0, -band.x0), c_hi = std::min(band.cols, W - band.x0);
  std::int64_t exception_codes = 0;
#pragma omp parallel for schedule(static) reduction(+ : exception_codes)
  for (std::int64_t er = 0; er < std::int64_t(E) * band.rows; ++er) {
    const int e = int(er / band.rows), r = int(er % band.rows), y = band.y0 + r;
    float* psi_row = band.data.data() + 2 * std::size_t(e) * band.plane() + std::size_t(r) * band.cols;
    float* phi_row = psi_row + band.plane();
    if (y < 0 || y >= H || c_hi <= c_lo) {
      std::fill(psi_row, psi_row + band.cols, 0.0f);
      std::fill(phi_row, phi_row + band.cols, 0.0f);
      continue;
    }
    // Zero outside the image.
    std::fill(psi_row, psi_row + c_lo, 0.0f);
    std::fill(phi_row, phi_row + c_lo, 0.0f);
    std::fill(psi_row + c_hi, psi_row + band.cols, 0.0f);
    std::fill(phi_row + c_hi, phi_row + band.cols, 0.0f);
    float* psi = psi_row + c_lo;
    float* phi = phi_row + c_lo;
    const std::size_t first = std::size_t(e) * plane + std::size_t(y) * W + (band.x0 + c_lo);
    const int n = c_hi - c_lo;
    switch (s.encoding) {
      case Encoding::fp32:
        clean_fp32_row(s.fp32.data() + 2 * first, n, s.psi_weight[e], s.phi_weight[e], psi, phi);
        break;
      case Encoding::fp16:
        clean_fp16_row(s.fp16.data() + 2 * first, n, s.psi_weight[e], s.phi_weight[e], psi, phi);
        break;
      case Encoding::int8:
        exception_codes += clean_int8_row(s.int8.data() + 2 * first, n, s.psi_weight[e], s.phi_weight[e], psi, phi);
        break;
    }
  }
  if (s.encoding != Encoding::int8) return;
  // Exception codes carry their exact values in the sorted exception list.
  std::int64_t matched = 0;
  for (const EncodingException& x : s.exceptions) {
    const int px = int(x.pixel % std::uint32_t(W)), py = int(x.pixel / std::uint32_t(W));
    const int col = px - band.x0, row = py - band.y0;
    if (col < 0 || col >= band.cols || row < 0 || row >= band.rows) continue;
    const std::int8_t* pair = s.int8.data() + 2 * (std::size_t(x.exposure) * plane + x.pixel);
    if (pair[0] != int8_codes::psi_exception || std::uint8_t(pair[1]) == 0) continue;  // unused entry
    band.data[2 * std::size_t(x.exposure) * band.plane() + std::size_t(row) * band.cols + col] =
        s.psi_weight[x.exposure] * x.psi;
    ++matched;
  }
  require(matched == exception_codes, "int8 stack has " + std::to_string(exception_codes) +
                                          " exception codes in the searched area but " + std::to_string(matched) +
                                          " exception entries for them");
}

namespace {

// Where a node's maps are during one run: its geometry, the first origin of the area they were
// formed over, and the start of their data; or, for a leaf read in place, nothing (the band).
struct MapsView {
  const Geometry* geometry = nullptr;
  int x0 = 0, y0 = 0;
  const float* data = nullptr;
  bool in_place = false;
};

struct Runner {
  const Plan& plan;
  const std::vector<char>& cut;
  const Geometry& geo;  // of the area this runner forms
  int x0, y0;           // its first origin
  const Band* exposures;
  const Kept* kept;     // stage B: the cut nodes' maps
  std::vector<std::int64_t>& additions;
  std::vector<std::int64_t>& entries;

  static float* entry_map(const Geometry& g, int index, float* maps, int jx, int jy) {
    const AxisGeometry &gx = g.node[index][0], &gy = g.node[index][1];
    const std::size_t plane = std::size_t(gx.length) * gy.length;
    return maps + 2 * plane * (std::size_t(gy.rank[jy]) * gx.used.size() + gx.rank[jx]);
  }

  // Exposure e of the band at origin-relative position (dx, dy) of this area.
  std::size_t band_at(int dx, int dy) const {
    const Band& band = *exposures;
    return std::size_t(y0 + dy - band.y0) * band.cols + std::size_t(x0 + dx - band.x0);
  }

  void leaf(int index, float* maps) {
    const Node& node = plan.nodes[index];
    const AxisGeometry &gx = geo.node[index][0], &gy = geo.node[index][1];
    const int W = gx.length, H = gy.length;
    const std::size_t plane = std::size_t(W) * H;
    const Band& band = *exposures;
    for (int jy : gy.used)
      for (int jx : gx.used) {
        float* A = entry_map(geo, index, maps, jx, jy);
        float* B = A + plane;
        for (int i = 0; i < node.count; ++i) {
          const int e = plan.order[node.first + i];
          const int sx = node.axis[0].exposure_shift[std::size_t(jx) * node.count + i];
          const int sy = node.axis[1].exposure_shift[std::size_t(jy) * node.count + i];
          const std::size_t at = band_at(gx.base[jx] + sx, gy.base[jy] + sy);
          if (i == 0) {
            copy_plane(A, W, band.psi(e) + at, band.cols, W, H);
            copy_plane(B, W, band.phi(e) + at, band.cols, W, H);
          } else {
            accumulate_plane(A, W, band.psi(e) + at, band.cols, W, H);
            accumulate_plane(B, W, band.phi(e) + at, band.cols, W, H);
          }
        }
      }
    const std::int64_t n = entries_of(geo, index);
    entries[node.level] += n;
    additions[node.level] += n * std::int64_t(plane) * (node.count - 1);
  }

  // Child ci's maps for this node's velocity (jx, jy), moved by the parent's shift, and further by
  // (extra_x, extra_y) in the parent's map (a fused root reads its children's maps at an offset).
  PlanePair child_source(int index, int ci, const MapsView& child_maps, int jx, int jy, int extra_x = 0,
                      int extra_y = 0) const {
    const Node& node = plan.nodes[index];
    const int child = node.child[ci];
    const AxisGeometry &px = geo.node[index][0], &py = geo.node[index][1];
    if (child_maps.in_place) {
      // The child is one exposure: read the band where its map would have held it.
      const Node& leaf = plan.nodes[child];
      const int kx = node.axis[0].child_entry[ci][jx], ky = node.axis[1].child_entry[ci][jy];
      const int dx = px.base[jx] + node.axis[0].child_shift[ci][jx] + leaf.axis[0].exposure_shift[kx] + extra_x;
      const int dy = py.base[jy] + node.axis[1].child_shift[ci][jy] + leaf.axis[1].exposure_shift[ky] + extra_y;
      const int e = plan.order[leaf.first];
      const std::size_t at = band_at(dx, dy);
      return {exposures->psi(e) + at, exposures->phi(e) + at, exposures->cols};
    }
    const Geometry& cg = *child_maps.geometry;
    const AxisGeometry &cx = cg.node[child][0], &cy = cg.node[child][1];
    // Positions relative to the child's own area: a cut child's maps cover the whole band.
    const int sx = x0 - child_maps.x0 + px.child_offset[ci][jx] + extra_x;
    const int sy = y0 - child_maps.y0 + py.child_offset[ci][jy] + extra_y;
    const std::size_t plane = std::size_t(cx.length) * cy.length;
    const float* A = child_maps.data +
                     2 * plane * (std::size_t(py.child_rank[ci][jy]) * cx.used.size() + px.child_rank[ci][jx]) +
                     std::size_t(sy) * cx.length + sx;
    return {A, A + plane, cx.length};
  }

  // Where node `index` is read from: in place, kept by stage A, or formed at `at` (advanced past it).
  MapsView place(int index, float*& at, bool stop_at_cut) {
    if (read_in_place(plan, index)) return {nullptr, x0, y0, nullptr, true};
    if (stop_at_cut && cut[index]) return {kept->geometry, kept->x0, kept->y0, kept->data.data() + kept->offset[index]};
    const MapsView view{&geo, x0, y0, at};
    at += geo.node_floats[index];
    return view;
  }

  // Forms the nodes of `inputs` one after the other from `scratch` upward, each above the ones
  // before (so that each one's subtree runs in the space above it).
  template <std::size_t N>
  std::array<MapsView, N> form(const std::array<int, N>& inputs, float* scratch, bool stop_at_cut) {
    std::array<MapsView, N> view;
    float* next = scratch;
    for (std::size_t k = 0; k < N; ++k) {
      view[k] = place(inputs[k], next, stop_at_cut);
      if (view[k].geometry == &geo) {
        float* maps = const_cast<float*>(view[k].data);
        compute(inputs[k], maps, maps + geo.node_floats[inputs[k]], stop_at_cut);
      }
    }
    return view;
  }

  // Forms the node's maps at `maps`; `scratch` is free space above them.
  void compute(int index, float* maps, float* scratch, bool stop_at_cut) {
    const Node& node = plan.nodes[index];
    if (node.leaf()) return leaf(index, maps);
    const std::array<MapsView, 2> view = form(std::array<int, 2>{node.child[0], node.child[1]}, scratch, stop_at_cut);
    const AxisGeometry &gx = geo.node[index][0], &gy = geo.node[index][1];
    const int W = gx.length, H = gy.length;
    const std::size_t plane = std::size_t(W) * H;
    for (int jy : gy.used)
      for (int jx : gx.used) {
        float* A = entry_map(geo, index, maps, jx, jy);
        add_maps(A, A + plane, W, child_source(index, 0, view[0], jx, jy), child_source(index, 1, view[1], jx, jy), W, H);
      }
    const std::int64_t n = entries_of(geo, index);
    entries[node.level] += n;
    additions[node.level] += n * std::int64_t(plane);
  }

  void root(float* arena, bool fuse_root, const StreamParams& params, TileOutput& out) {
    const Node& node = plan.nodes[0];
    const int W = geo.width, H = geo.height;
    const int Va = node.axis[0].size(), Vb = node.axis[1].size();
    require(!node.leaf(), "tree: internal: the root is a leaf (the engine falls back before this)");
    std::array<bool, 2> fused{};
    for (int c = 0; c < 2; ++c) fused[c] = fused_side(plan, cut, fuse_root, c);
    const int count = fused[0] || fused[1] ? 4 : 2;
    // Inputs in the order root_inputs() lists (and stage_b_cost() sizes) them.
    std::array<int, 4> inputs{};
    int n = 0;
    for (int c = 0; c < 2; ++c) {
      const Node& child = plan.nodes[node.child[c]];
      if (fused[c]) {
        inputs[n++] = child.child[0];
        inputs[n++] = child.child[1];
      } else {
        inputs[n++] = node.child[c];
      }
    }
    std::array<MapsView, 4> view{};
    float* next = arena;
    for (int k = 0; k < n; ++k) {
      view[k] = place(inputs[k], next, true);
      if (view[k].geometry == &geo) {
        float* maps = const_cast<float*>(view[k].data);
        compute(inputs[k], maps, maps + geo.node_floats[inputs[k]], true);
      }
    }
    // An unfused side of a four-source root adds a row of zeros (x + 0 = x).
    const std::vector<float> zeros(count == 4 ? std::size_t(W) : 0, 0.0f);
    std::vector<RootSources> sources(Va);
    std::vector<std::uint8_t> hit(Va);
    const AxisGeometry &rx = geo.node[0][0], &ry = geo.node[0][1];
    for (int b = 0; b < Vb; ++b) {
      // One row of root velocities per kernel call (same vy, every vx).
      for (int a = 0; a < Va; ++a) {
        RootSources& src = sources[a];
        int k = 0, slot = 0;
        for (int c = 0; c < 2; ++c) {
          if (fused[c]) {
            // The child's entry for this root velocity, read where the root would read it.
            const int child = node.child[c];
            const int kx = node.axis[0].child_entry[c][a], ky = node.axis[1].child_entry[c][b];
            for (int g = 0; g < 2; ++g, ++k, ++slot) {
              src.source[slot] = child_source(child, g, view[k], kx, ky, rx.child_offset[c][a], ry.child_offset[c][b]);
            }
          } else {
            src.source[slot] = child_source(0, c, view[k++], a, b);
            ++slot;
            if (count == 4) {
              src.source[slot] = {zeros.data(), zeros.data(), 0};
              ++slot;
            }
          }
        }
      }
      score_tile(sources.data(), count, Va, W, H, params.screen, params.count, params.want_count, out.score, hit.data());
      for (int a = 0; a < Va; ++a) {
        if (!hit[a]) continue;
        // Some trial passed the screen (rare): list them, with the kernel's arithmetic.
        const RootSources& src = sources[a];
        const std::int32_t v = std::int32_t(b) * Va + a;
        for (int r = 0; r < H; ++r)
          for (int i = 0; i < W; ++i) {
            const float A = src.A(count, r, i), B = src.B(count, r, i);
            if (B > 0 && passes(A, B, params.screen)) out.hits.push_back({x0 + i, y0 + r, v, A, B});
          }
      }
    }
    const std::int64_t trials = std::int64_t(Va) * Vb * W * H;
    entries[0] += std::int64_t(Va) * Vb;
    additions[0] += trials;
    for (int c = 0; c < 2; ++c)
      if (fused[c]) additions[1] += trials;
  }
};

}  // namespace

void run_stage_a(const Plan& plan, const std::vector<char>& cut, const Band& exposures, Kept& kept,
                 std::vector<std::int64_t>& additions, std::vector<std::int64_t>& entries) {
  const Geometry& g = *kept.geometry;
  require(!g.lengths_only, "tree: internal: stage A needs the full geometry");
  std::vector<int> nodes;
  kept.offset.assign(plan.nodes.size(), 0);
  std::size_t total = 0, arena = 0;
  for (std::size_t i = 0; i < plan.nodes.size(); ++i)
    if (cut[i]) {
      nodes.push_back(int(i));
      kept.offset[i] = total;
      total += g.node_floats[i];
      arena = std::max(arena, subtree_floats(plan, g, cut, int(i), false, false));
    }
  kept.data.resize_uninitialised(total);  // every float is written by its node below
  const int levels = plan.depth + 1;
  std::vector<std::vector<std::int64_t>> add(nodes.size(), std::vector<std::int64_t>(levels, 0)), ent = add;
#pragma omp parallel
  {
    LargeBuffer<float> scratch;  // every map is written before it is read
    scratch.resize_uninitialised(arena);
#pragma omp for schedule(dynamic, 1)
    for (int k = 0; k < int(nodes.size()); ++k) {
      Runner run{plan, cut, g, kept.x0, kept.y0, &exposures, nullptr, add[k], ent[k]};
      run.compute(nodes[k], kept.data.data() + kept.offset[nodes[k]], scratch.data(), false);
    }
  }
  for (std::size_t k = 0; k < nodes.size(); ++k)
    for (int l = 0; l < levels; ++l) {
      additions[l] += add[k][l];
      entries[l] += ent[k][l];
    }
}

void run_tile(const Plan& plan, const std::vector<char>& cut, bool fuse_root, const Geometry& tile, const Kept& kept,
              const Band& exposures, const StreamParams& params, int x0, int y0, float* arena, TileOutput& out) {
  require(!tile.lengths_only, "tree: internal: a tile needs the full geometry");
  out.additions.assign(plan.depth + 1, 0);
  out.entries.assign(plan.depth + 1, 0);
  Runner run{plan, cut, tile, x0, y0, &exposures, &kept, out.additions, out.entries};
  run.root(arena, fuse_root, params, out);
}

}  // namespace shiftstack::tree
