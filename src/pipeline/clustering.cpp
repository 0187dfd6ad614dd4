// Friends-of-friends clustering of duplicate detections: one source produces many neighbouring
// threshold crossings (nearby origins, nearby velocities); they link into one cluster and the
// best member represents it.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <unordered_map>

#include "shiftstack/error.hpp"
#include "shiftstack/pipeline.hpp"

namespace shiftstack {

ClusterSpace parse_cluster_space(const std::string& name) {
  if (name == "all" || name == "pos_vel") return ClusterSpace::all;
  if (name == "position" || name == "start_position") return ClusterSpace::position;
  if (name == "mid_position") return ClusterSpace::mid_position;
  if (name == "start_end_position") return ClusterSpace::start_end_position;
  throw Error("unknown cluster_type '" + name +
              "' (known: all, position, mid_position, start_end_position)");
}

std::string to_string(ClusterSpace space) {
  switch (space) {
    case ClusterSpace::all: return "all";
    case ClusterSpace::position: return "position";
    case ClusterSpace::mid_position: return "mid_position";
    case ClusterSpace::start_end_position: return "start_end_position";
  }
  return "?";
}

namespace {

struct DisjointSets {
  std::vector<int> parent;
  explicit DisjointSets(int n) : parent(n) { std::iota(parent.begin(), parent.end(), 0); }
  int find(int i) {
    while (parent[i] != i) {
      parent[i] = parent[parent[i]];  // path halving
      i = parent[i];
    }
    return i;
  }
  void unite(int a, int b) {
    a = find(a);
    b = find(b);
    if (a != b) parent[std::max(a, b)] = std::min(a, b);
  }
};

// Cell coordinates packed into one key; 16 bits per axis is plenty once the offset below makes
// them non-negative (a run spans far fewer than 65536 cells of size eps per axis), and a
// collision would only cost extra distance checks, never a wrong link.
std::uint64_t cell_key(const std::array<std::int64_t, 4>& c) {
  std::uint64_t key = 0;
  for (int d = 0; d < 4; ++d) key = (key << 16) | (std::uint64_t(c[d]) & 0xffff);
  return key;
}

}  // namespace

std::vector<int> friends_of_friends(const std::vector<std::array<double, 4>>& points, int dims,
                                    double eps) {
  require(dims == 2 || dims == 4, "friends_of_friends: dims must be 2 or 4");
  require(std::isfinite(eps) && eps > 0, "cluster_eps must be > 0, got " + std::to_string(eps));
  const int n = int(points.size());
  for (const auto& p : points)
    for (int d = 0; d < dims; ++d)
      require(std::isfinite(p[d]), "friends_of_friends: a point has a non-finite coordinate");
  std::array<double, 4> lo{0, 0, 0, 0};
  if (n > 0)
    for (int d = 0; d < dims; ++d) {
      lo[d] = points[0][d];
      for (const auto& p : points) lo[d] = std::min(lo[d], p[d]);
    }
  auto cell_of = [&](const std::array<double, 4>& p) {
    std::array<std::int64_t, 4> c{0, 0, 0, 0};
    for (int d = 0; d < dims; ++d) c[d] = std::int64_t(std::floor((p[d] - lo[d]) / eps)) + 1;
    return c;
  };
  std::unordered_map<std::uint64_t, std::vector<int>> grid;
  grid.reserve(std::size_t(n));
  std::vector<std::array<std::int64_t, 4>> cells(n);
  for (int i = 0; i < n; ++i) {
    cells[i] = cell_of(points[i]);
    grid[cell_key(cells[i])].push_back(i);
  }
  DisjointSets sets(n);
  const double eps2 = eps * eps;
  const int neighbours = dims == 2 ? 9 : 81;  // 3^dims cells around a point
  for (int i = 0; i < n; ++i) {
    for (int k = 0; k < neighbours; ++k) {
      std::array<std::int64_t, 4> c = cells[i];
      int code = k;
      for (int d = 0; d < dims; ++d) {
        c[d] += code % 3 - 1;
        code /= 3;
      }
      const auto it = grid.find(cell_key(c));
      if (it == grid.end()) continue;
      for (int j : it->second) {
        if (j <= i) continue;  // each pair once
        double d2 = 0;
        for (int d = 0; d < dims; ++d) {
          const double diff = points[i][d] - points[j][d];
          d2 += diff * diff;
        }
        if (d2 <= eps2) sets.unite(i, j);
      }
    }
  }
  std::vector<int> labels(n, -1), label_of_root(n, -1);
  int next = 0;
  for (int i = 0; i < n; ++i) {
    const int root = sets.find(i);
    if (label_of_root[root] < 0) label_of_root[root] = next++;
    labels[i] = label_of_root[root];
  }
  return labels;
}

std::vector<Detection> cluster_detections(std::vector<Detection> detections, const MotionBank& bank,
                                          const ClusterOptions& options) {
  if (detections.empty()) return detections;
  const int E = bank.exposures();
  require(E > 0, "clustering needs the motion bank's epochs");
  int first = 0, last = 0;
  for (int e = 1; e < E; ++e) {
    if (bank.epochs[e] < bank.epochs[first]) first = e;
    if (bank.epochs[e] > bank.epochs[last]) last = e;
  }
  const double span = bank.epochs[last] - bank.epochs[first];
  const double v_scale = options.v_scale < 0 ? 0.5 * span : options.v_scale;
  require(std::isfinite(v_scale), "cluster_v_scale must be finite");
  const double t_mid = bank.epochs[first] + 0.5 * span;

  // Continuous position at any time t (velocity times (t - t_ref); the common curve at epochs).
  auto position_at_epoch = [&](const Candidate& c, int e) {
    return predicted_position(bank, c.x, c.y, std::size_t(c.velocity), e);
  };
  std::vector<std::array<double, 4>> points(detections.size());
  int dims = 4;
  for (std::size_t i = 0; i < detections.size(); ++i) {
    const Candidate& c = detections[i].candidate;
    const Velocity v = bank.velocity(std::size_t(c.velocity));
    switch (options.space) {
      case ClusterSpace::all:
        points[i] = {double(c.x), double(c.y), v.vx * v_scale, v.vy * v_scale};
        break;
      case ClusterSpace::position: {
        const PixelPosition p = position_at_epoch(c, first);
        points[i] = {p.x, p.y, 0, 0};
        dims = 2;
        break;
      }
      case ClusterSpace::mid_position: {
        // The common curve is only known at epochs; between them the linear motion is used.
        points[i] = {c.x + v.vx * (t_mid - bank.t_ref), c.y + v.vy * (t_mid - bank.t_ref), 0, 0};
        dims = 2;
        break;
      }
      case ClusterSpace::start_end_position: {
        const PixelPosition a = position_at_epoch(c, first), b = position_at_epoch(c, last);
        points[i] = {a.x, a.y, b.x, b.y};
        break;
      }
    }
  }
  const std::vector<int> labels = friends_of_friends(points, dims, options.eps);
  const int clusters = labels.empty() ? 0 : *std::max_element(labels.begin(), labels.end()) + 1;
  std::vector<int> best(clusters, -1), size(clusters, 0);
  for (std::size_t i = 0; i < detections.size(); ++i) {
    const int l = labels[i];
    ++size[l];
    if (best[l] < 0 || detections[i].likelihood > detections[best[l]].likelihood) best[l] = int(i);
  }
  std::vector<Detection> out;
  out.reserve(clusters);
  for (int l = 0; l < clusters; ++l) {
    out.push_back(std::move(detections[best[l]]));
    out.back().cluster_size = size[l];
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const Detection& a, const Detection& b) { return a.likelihood > b.likelihood; });
  return out;
}

}  // namespace shiftstack
