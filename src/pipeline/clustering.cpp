// Duplicate detections of one mover: one source produces many neighbouring threshold crossings
// (nearby origins, nearby velocities, trials that share some of its epochs). KBMOD's cluster
// types group them by distance; shiftstack's `peaks` rule keeps a detection only when epochs
// that no brighter kept detection explains still make it significant.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <unordered_map>

#include "shiftstack/error.hpp"
#include "shiftstack/pipeline.hpp"

namespace shiftstack {

ClusterSpace parse_cluster_space(const std::string& name) {
  if (name == "peaks") return ClusterSpace::peaks;
  if (name == "all" || name == "pos_vel") return ClusterSpace::all;
  if (name == "position" || name == "start_position") return ClusterSpace::position;
  if (name == "mid_position") return ClusterSpace::mid_position;
  if (name == "start_end_position") return ClusterSpace::start_end_position;
  if (name == "nn_start") return ClusterSpace::nn_start;
  if (name == "nn_start_end") return ClusterSpace::nn_start_end;
  if (name == "grid_start") return ClusterSpace::grid_start;
  if (name == "grid_start_end") return ClusterSpace::grid_start_end;
  throw Error("unknown cluster_type '" + name +
              "' (known: peaks, all, position, mid_position, start_end_position, nn_start, nn_start_end, "
              "grid_start, grid_start_end)");
}

std::string to_string(ClusterSpace space) {
  switch (space) {
    case ClusterSpace::peaks: return "peaks";
    case ClusterSpace::all: return "all";
    case ClusterSpace::position: return "position";
    case ClusterSpace::mid_position: return "mid_position";
    case ClusterSpace::start_end_position: return "start_end_position";
    case ClusterSpace::nn_start: return "nn_start";
    case ClusterSpace::nn_start_end: return "nn_start_end";
    case ClusterSpace::grid_start: return "grid_start";
    case ClusterSpace::grid_start_end: return "grid_start_end";
  }
  return "?";
}

double psf_sigma_of(const Image<float>& psf) {
  const double cx = 0.5 * (psf.width - 1), cy = 0.5 * (psf.height - 1);
  double sum = 0, moment = 0;
  for (int y = 0; y < psf.height; ++y)
    for (int x = 0; x < psf.width; ++x) {
      const double w = psf(x, y);
      sum += w;
      moment += w * ((x - cx) * (x - cx) + (y - cy) * (y - cy));
    }
  require(sum > 0, "psf_sigma_of: the kernel does not sum to a positive value");
  // A 2-D Gaussian has E[r^2] = 2 sigma^2.
  return std::sqrt(std::max(0.0, moment / sum) / 2);
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

// Points hashed into cells of size eps: the neighbours within eps of a point are in the 3^dims
// cells around its own, so a query costs a bounded number of distance checks.
class NeighbourGrid {
 public:
  NeighbourGrid(const std::vector<std::array<double, 4>>& points, int dims, double eps)
      : points_(points), dims_(dims), eps_(eps), cells_(points.size()) {
    require(dims == 2 || dims == 4, "clustering: dims must be 2 or 4");
    require(std::isfinite(eps) && eps > 0, "cluster_eps must be > 0, got " + std::to_string(eps));
    for (const auto& p : points)
      for (int d = 0; d < dims; ++d) require(std::isfinite(p[d]), "clustering: a point has a non-finite coordinate");
    if (!points.empty())
      for (int d = 0; d < dims; ++d) {
        lo_[d] = points[0][d];
        for (const auto& p : points) lo_[d] = std::min(lo_[d], p[d]);
      }
    grid_.reserve(points.size());
    for (std::size_t i = 0; i < points.size(); ++i) {
      for (int d = 0; d < dims; ++d) cells_[i][d] = std::int64_t(std::floor((points[i][d] - lo_[d]) / eps)) + 1;
      grid_[cell_key(cells_[i])].push_back(int(i));
    }
  }
  // Calls visit(j) for every point j within eps of point i (i itself included).
  template <typename Visit>
  void within(int i, Visit visit) const {
    const int neighbours = dims_ == 2 ? 9 : 81;
    const double eps2 = eps_ * eps_;
    for (int k = 0; k < neighbours; ++k) {
      std::array<std::int64_t, 4> c = cells_[std::size_t(i)];
      int code = k;
      for (int d = 0; d < dims_; ++d) {
        c[d] += code % 3 - 1;
        code /= 3;
      }
      const auto it = grid_.find(cell_key(c));
      if (it == grid_.end()) continue;
      for (int j : it->second) {
        double d2 = 0;
        for (int d = 0; d < dims_; ++d) {
          const double diff = points_[std::size_t(i)][d] - points_[std::size_t(j)][d];
          d2 += diff * diff;
        }
        if (d2 <= eps2) visit(j);
      }
    }
  }

 private:
  const std::vector<std::array<double, 4>>& points_;
  int dims_;
  double eps_;
  std::array<double, 4> lo_{0, 0, 0, 0};
  std::vector<std::array<std::int64_t, 4>> cells_;
  std::unordered_map<std::uint64_t, std::vector<int>> grid_;
};

struct EpochSpan {
  int first = 0, last = 0;
  double median = 0;  // of the epochs (KBMOD's mid_position time)
};

EpochSpan epoch_span(const MotionBank& bank) {
  const int E = bank.exposures();
  require(E > 0, "clustering needs the motion bank's epochs");
  EpochSpan s;
  for (int e = 1; e < E; ++e) {
    if (bank.epochs[e] < bank.epochs[s.first]) s.first = e;
    if (bank.epochs[e] > bank.epochs[s.last]) s.last = e;
  }
  std::vector<double> sorted = bank.epochs;
  std::sort(sorted.begin(), sorted.end());
  s.median = sorted.size() % 2 ? sorted[sorted.size() / 2] : 0.5 * (sorted[sorted.size() / 2 - 1] + sorted[sorted.size() / 2]);
  return s;
}

PixelPosition position_at(const MotionBank& bank, const Candidate& c, int e) {
  return predicted_position(bank, c.x, c.y, std::size_t(c.velocity), e);
}

// Valid epochs of a detection for the peaks rule: those kept by sigma-G (obs_valid), else the
// samples with data.
bool epoch_counts(const Detection& d, int e) {
  if (!d.obs_valid.empty()) return d.obs_valid[std::size_t(e)] != 0;
  return d.curve.valid.empty() || d.curve.valid[std::size_t(e)] != 0;
}

std::vector<int> peaks(const std::vector<Detection>& detections, const MotionBank& bank, const ClusterOptions& o,
                       std::vector<int>& representative, std::vector<int>& sizes) {
  const int E = bank.exposures();
  const std::size_t n = detections.size();
  require(std::isfinite(o.psf_sigma) && o.psf_sigma > 0, "peaks clustering: psf_sigma must be > 0");
  require(std::isfinite(o.lh_level) && o.lh_level > 0, "peaks clustering: lh_level must be > 0");
  for (const auto& d : detections)
    require(d.curve.size() == E, "peaks clustering needs every detection's light curve (psi, phi per epoch)");
  // Halo radius of a kept detection of likelihood z (see pipeline.hpp).
  auto radius = [&](double z) {
    const double ratio = 2 * z / o.lh_level;
    return 2 * o.psf_sigma * std::sqrt(std::max(0.0, std::log(std::max(ratio, 1.0)))) + 1;
  };
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return detections[std::size_t(a)].likelihood > detections[std::size_t(b)].likelihood; });
  double largest = 0;
  for (const auto& d : detections) largest = std::max(largest, d.likelihood);
  const double cell = radius(largest);  // no radius exceeds this: 3x3 cells cover every query
  // Per epoch, the kept detections' positions hashed into cells.
  std::vector<std::unordered_map<std::uint64_t, std::vector<int>>> grids(static_cast<std::size_t>(E));
  auto key_of = [&](double x, double y, int dx, int dy) {
    return cell_key({std::int64_t(std::floor(x / cell)) + dx + (1 << 14), std::int64_t(std::floor(y / cell)) + dy + (1 << 14), 0, 0});
  };
  std::vector<int> kept;          // input indices, in order of acceptance
  std::vector<double> kept_radius;  // by position in `kept`
  representative.assign(n, -1);
  for (int i : order) {
    const Detection& d = detections[std::size_t(i)];
    const Candidate& c = d.candidate;
    double A = 0, B = 0;
    int unexplained = 0;
    std::unordered_map<int, int> votes;  // kept slot -> epochs it explains
    for (int e = 0; e < E; ++e) {
      if (!epoch_counts(d, e)) continue;
      const PixelPosition p = position_at(bank, c, e);
      int by = -1;
      for (int dy = -1; dy <= 1 && by < 0; ++dy)
        for (int dx = -1; dx <= 1 && by < 0; ++dx) {
          const auto it = grids[std::size_t(e)].find(key_of(p.x, p.y, dx, dy));
          if (it == grids[std::size_t(e)].end()) continue;
          for (int slot : it->second) {
            const PixelPosition q = position_at(bank, detections[std::size_t(kept[std::size_t(slot)])].candidate, e);
            if (std::hypot(p.x - q.x, p.y - q.y) <= kept_radius[std::size_t(slot)]) {
              by = slot;
              break;
            }
          }
        }
      if (by >= 0) {
        ++votes[by];
        continue;
      }
      A += d.curve.psi[std::size_t(e)];
      B += d.curve.phi[std::size_t(e)];
      ++unexplained;
    }
    const bool significant = B > 0 && A / std::sqrt(B) >= o.lh_level && unexplained >= std::max(1, o.num_obs);
    if (significant) {
      const int slot = int(kept.size());
      kept.push_back(i);
      kept_radius.push_back(radius(d.likelihood));
      for (int e = 0; e < E; ++e) {
        const PixelPosition p = position_at(bank, c, e);
        grids[std::size_t(e)][key_of(p.x, p.y, 0, 0)].push_back(slot);
      }
      representative[std::size_t(i)] = slot;
    } else {
      int best = -1, best_votes = 0;
      for (const auto& [slot, count] : votes)
        if (count > best_votes || (count == best_votes && slot < best)) {
          best = slot;
          best_votes = count;
        }
      representative[std::size_t(i)] = best;
    }
  }
  sizes.assign(kept.size(), 0);
  for (int r : representative)
    if (r >= 0) ++sizes[std::size_t(r)];
  return kept;
}

}  // namespace

std::vector<int> friends_of_friends(const std::vector<std::array<double, 4>>& points, int dims, double eps) {
  const NeighbourGrid grid(points, dims, eps);
  const int n = int(points.size());
  DisjointSets sets(n);
  for (int i = 0; i < n; ++i)
    grid.within(i, [&](int j) {
      if (j > i) sets.unite(i, j);
    });
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
                                          const ClusterOptions& options, std::vector<int>* representative) {
  const std::size_t n = detections.size();
  std::vector<int> rep(n, -1);  // input index -> output slot (before the final sort)
  std::vector<int> chosen;      // input indices of the detections kept
  std::vector<int> sizes;
  if (n > 0) {
    const EpochSpan span = epoch_span(bank);
    const double v_scale = options.v_scale < 0 ? 0.5 * (bank.epochs[span.last] - bank.epochs[span.first]) : options.v_scale;
    require(std::isfinite(v_scale), "cluster_v_scale must be finite");
    const ClusterSpace space = options.space;
    if (space == ClusterSpace::peaks) {
      chosen = peaks(detections, bank, options, rep, sizes);
    } else if (space == ClusterSpace::grid_start || space == ClusterSpace::grid_start_end) {
      // KBMOD's grid: cells of ceil(eps) pixels in first (and last) position; the best per cell.
      const double width = std::ceil(options.eps);
      require(width >= 1, "cluster_eps must be > 0 for the grid cluster types");
      std::unordered_map<std::uint64_t, int> cell_slot;
      for (std::size_t i = 0; i < n; ++i) {
        const Candidate& c = detections[i].candidate;
        const PixelPosition a = position_at(bank, c, span.first);
        const PixelPosition b = space == ClusterSpace::grid_start_end ? position_at(bank, c, span.last) : a;
        auto bin = [&](double v) { return std::int64_t(std::floor(v / width)) + (1 << 14); };
        const std::uint64_t key = cell_key({bin(a.x), bin(a.y), bin(b.x), bin(b.y)});
        auto [it, inserted] = cell_slot.emplace(key, int(chosen.size()));
        if (inserted) {
          chosen.push_back(int(i));
          sizes.push_back(0);
        } else if (detections[i].likelihood > detections[std::size_t(chosen[std::size_t(it->second)])].likelihood) {
          chosen[std::size_t(it->second)] = int(i);
        }
        rep[i] = it->second;
        ++sizes[std::size_t(it->second)];
      }
    } else {
      std::vector<std::array<double, 4>> points(n);
      int dims = 4;
      for (std::size_t i = 0; i < n; ++i) {
        const Candidate& c = detections[i].candidate;
        const Velocity v = bank.velocity(std::size_t(c.velocity));
        const PixelPosition a = position_at(bank, c, span.first);
        switch (space) {
          case ClusterSpace::all: points[i] = {a.x, a.y, v.vx * v_scale, v.vy * v_scale}; break;
          case ClusterSpace::position:
          case ClusterSpace::nn_start:
            points[i] = {a.x, a.y, 0, 0};
            dims = 2;
            break;
          case ClusterSpace::mid_position: {
            // KBMOD predicts linearly from the first epoch to the median epoch.
            const double dt = span.median - bank.epochs[span.first];
            points[i] = {a.x + v.vx * dt, a.y + v.vy * dt, 0, 0};
            dims = 2;
            break;
          }
          default: {
            const PixelPosition b = position_at(bank, c, span.last);
            points[i] = {a.x, a.y, b.x, b.y};
            break;
          }
        }
      }
      if (space == ClusterSpace::nn_start || space == ClusterSpace::nn_start_end) {
        // KBMOD's sweep in input order: a detection at least as good as every one within eps is
        // kept, and everything within eps of it is settled; not transitive.
        const NeighbourGrid grid(points, dims, options.eps);
        std::vector<char> settled(n, 0);
        for (std::size_t i = 0; i < n; ++i) {
          if (settled[i]) continue;
          double best = -std::numeric_limits<double>::infinity();
          grid.within(int(i), [&](int j) { best = std::max(best, detections[std::size_t(j)].likelihood); });
          if (detections[i].likelihood < best) continue;
          const int slot = int(chosen.size());
          chosen.push_back(int(i));
          sizes.push_back(0);
          grid.within(int(i), [&](int j) {
            if (settled[std::size_t(j)]) return;
            settled[std::size_t(j)] = 1;
            rep[std::size_t(j)] = slot;
            ++sizes[std::size_t(slot)];
          });
        }
      } else {
        const std::vector<int> labels = friends_of_friends(points, dims, options.eps);
        const int clusters = *std::max_element(labels.begin(), labels.end()) + 1;
        chosen.assign(std::size_t(clusters), -1);
        sizes.assign(std::size_t(clusters), 0);
        for (std::size_t i = 0; i < n; ++i) {
          const int l = labels[i];
          ++sizes[std::size_t(l)];
          rep[i] = l;
          int& b = chosen[std::size_t(l)];
          if (b < 0 || detections[i].likelihood > detections[std::size_t(b)].likelihood) b = int(i);
        }
      }
    }
  }
  // Output sorted by likelihood (ties: input order); slots renumbered to output rows.
  std::vector<int> slots(chosen.size());
  std::iota(slots.begin(), slots.end(), 0);
  std::stable_sort(slots.begin(), slots.end(), [&](int a, int b) {
    const auto& da = detections[std::size_t(chosen[std::size_t(a)])];
    const auto& db = detections[std::size_t(chosen[std::size_t(b)])];
    if (da.likelihood != db.likelihood) return da.likelihood > db.likelihood;
    return chosen[std::size_t(a)] < chosen[std::size_t(b)];
  });
  std::vector<int> row_of_slot(chosen.size());
  for (std::size_t r = 0; r < slots.size(); ++r) row_of_slot[std::size_t(slots[r])] = int(r);
  if (representative) {
    representative->assign(n, -1);
    for (std::size_t i = 0; i < n; ++i)
      if (rep[i] >= 0) (*representative)[i] = row_of_slot[std::size_t(rep[i])];
  }
  std::vector<Detection> out;
  out.reserve(chosen.size());
  for (int slot : slots) {
    out.push_back(std::move(detections[std::size_t(chosen[std::size_t(slot)])]));
    out.back().cluster_size = sizes[std::size_t(slot)];
  }
  return out;
}

}  // namespace shiftstack
