#include "tree/tree_plan.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "shiftstack/error.hpp"

namespace shiftstack::tree {

namespace {

struct Builder {
  const MotionBank& bank;
  PlanOptions options;
  Plan plan;
  std::vector<double> t;                 // epochs in tree order
  std::array<std::vector<double>, 2> c;  // common curve in tree order
  std::array<double, 2> v_min{}, v_max{};

  // The node's velocities along one axis: about 1/(oversample * span) apart over the bank's
  // range, never more than its parent has (a child as fine as its parent copies it).
  std::vector<double> child_axis(const std::vector<double>& parent, int a, double span) const {
    const double range = v_max[a] - v_min[a];
    const double cells = range * span * options.oversample;
    const int n = cells > 0 ? int(std::ceil(cells - 1e-9)) + 1 : 1;
    if (n >= int(parent.size())) return parent;
    if (n == 1) return {0.5 * (v_min[a] + v_max[a])};
    std::vector<double> axis(n);
    for (int i = 0; i < n; ++i) axis[i] = v_min[a] + range * i / (n - 1);
    return axis;
  }

  // Where to cut the node's epoch-ordered exposures: the split minimising the sum of the two
  // children's squared spans (child velocity counts grow as span^2), so the widest gap in the
  // cadence (between nights) goes first and an even cadence is halved. Ties: the more even split.
  int split(int first, int count) const {
    int best = 1;
    double best_cost = 1e300;
    for (int k = 1; k < count; ++k) {
      const double left = t[first + k - 1] - t[first], right = t[first + count - 1] - t[first + k];
      const double cost = left * left + right * right;
      const bool tie = std::abs(cost - best_cost) <= 1e-12 * std::max(1.0, best_cost);
      if (cost < best_cost && !tie) {
        best = k, best_cost = cost;
      } else if (tie && std::abs(2 * k - count) < std::abs(2 * best - count)) {
        best = k;
      }
    }
    return best;
  }

  int build(int first, int count, int level, const Node* parent) {
    const int index = int(plan.nodes.size());
    plan.nodes.emplace_back();
    Node node;
    node.first = first;
    node.count = count;
    node.level = level;
    plan.depth = std::max(plan.depth, level);
    const double span = t[first + count - 1] - t[first];
    if (!parent) {
      node.t_node = bank.t_ref;
      node.axis[0].velocity = bank.vx_axis;
      node.axis[1].velocity = bank.vy_axis;
    } else {
      node.t_node = 0.5 * (t[first] + t[first + count - 1]);
      for (int a = 0; a < 2; ++a) node.axis[a].velocity = child_axis(parent->axis[a].velocity, a, span);
    }
    const bool leaf = count == 1 || (node.axis[0].size() == 1 && node.axis[1].size() == 1);
    if (!leaf) {
      const int k = split(first, count);
      node.child[0] = build(first, k, level + 1, &node);
      node.child[1] = build(first + k, count - k, level + 1, &node);
    }
    plan.nodes[index] = std::move(node);
    return index;
  }

  // Target position of tree-ordered exposure i at velocity u in the frame of a node at time
  // t_node: u (t_i - t_node) + c_i. At the root this is the exact shift s_{v,e} of SPEC 2.
  double target(int a, double u, double t_node, int i) const { return u * (t[i] - t_node) + c[a][i]; }

  // Fills the node's axis tables bottom-up and returns its shift pattern along axis a:
  // pattern[j * count + i] = shift of its i-th exposure at velocity j in its own frame.
  std::vector<std::int32_t> patterns(int index, int a) {
    Node& node = plan.nodes[index];
    NodeAxis& axis = node.axis[a];
    const int n = axis.size(), count = node.count;
    if (node.leaf()) {
      axis.exposure_shift.resize(std::size_t(n) * count);
      for (int j = 0; j < n; ++j)
        for (int i = 0; i < count; ++i)
          axis.exposure_shift[std::size_t(j) * count + i] =
              round_shift(target(a, axis.velocity[j], node.t_node, node.first + i));
      return axis.exposure_shift;
    }
    const bool root = index == 0;
    std::array<std::vector<std::int32_t>, 2> child_pattern;
    std::array<const Node*, 2> child{};
    for (int ci = 0; ci < 2; ++ci) {
      child_pattern[ci] = patterns(node.child[ci], a);
      child[ci] = &plan.nodes[node.child[ci]];
    }
    Node& self = plan.nodes[index];  // re-take: the recursion does not resize, but stay explicit
    NodeAxis& ax = self.axis[a];
    for (int ci = 0; ci < 2; ++ci) {
      ax.child_entry[ci].assign(n, 0);
      ax.child_shift[ci].assign(n, 0);
    }
    std::vector<std::int32_t> out(std::size_t(n) * count);

    // Per candidate child velocity: the mean m and squared deviation of the residual
    // target - child pattern over the child's exposures.
    struct Option {
      int entry;
      double mean, deviation;
    };
    for (int j = 0; j < n; ++j) {
      const double u = ax.velocity[j];
      std::array<std::vector<Option>, 2> options_of;
      for (int ci = 0; ci < 2; ++ci) {
        const Node& ch = *child[ci];
        const NodeAxis& cax = ch.axis[a];
        std::vector<int> by_distance(cax.size());
        std::iota(by_distance.begin(), by_distance.end(), 0);
        std::stable_sort(by_distance.begin(), by_distance.end(), [&](int p, int q) {
          return std::abs(cax.velocity[p] - u) < std::abs(cax.velocity[q] - u);
        });
        const int tried = std::min<int>(cax.size(), 1 + 2 * options.child_reach);
        for (int k = 0; k < tried; ++k) {
          const int entry = by_distance[k];
          double sum = 0, sum2 = 0;
          for (int i = 0; i < ch.count; ++i) {
            const double r = target(a, u, self.t_node, ch.first + i) -
                             child_pattern[ci][std::size_t(entry) * ch.count + i];
            sum += r;
            sum2 += r * r;
          }
          const double mean = sum / ch.count;
          options_of[ci].push_back({entry, mean, std::max(0.0, sum2 - sum * mean)});
        }
      }
      const double n0 = child[0]->count, n1 = child[1]->count;
      double best = 1e300;
      for (const Option& o0 : options_of[0])
        for (const Option& o1 : options_of[1]) {
          std::int32_t d0, d1;
          double cost = o0.deviation + o1.deviation;
          if (root) {
            // The root's frame is the origin itself: each child is placed at its own best
            // integer shift.
            d0 = round_shift(o0.mean);
            d1 = round_shift(o1.mean);
            cost += n0 * (o0.mean - d0) * (o0.mean - d0) + n1 * (o1.mean - d1) * (o1.mean - d1);
          } else {
            // Above a node, its pattern moves by a further integer shift that its parent picks:
            // what matters here is the children's relative shift, rounded once; the common part
            // keeps the node's mean residual within half a pixel.
            const std::int32_t k = round_shift(o1.mean - o0.mean);
            const double gap = o1.mean - o0.mean - k;
            d0 = round_shift((n0 * o0.mean + n1 * (o1.mean - k)) / (n0 + n1));
            d1 = d0 + k;
            cost += n0 * n1 / (n0 + n1) * gap * gap;
          }
          if (cost < best - 1e-12) {
            best = cost;
            ax.child_entry[0][j] = o0.entry;
            ax.child_entry[1][j] = o1.entry;
            ax.child_shift[0][j] = d0;
            ax.child_shift[1][j] = d1;
          }
        }
      for (int ci = 0; ci < 2; ++ci) {
        const Node& ch = *child[ci];
        const int entry = ax.child_entry[ci][j];
        const int offset = ch.first - self.first;
        for (int i = 0; i < ch.count; ++i)
          out[std::size_t(j) * count + offset + i] =
              ax.child_shift[ci][j] + child_pattern[ci][std::size_t(entry) * ch.count + i];
      }
    }
    return out;
  }
};

// A node's pattern along axis a recomposed from the plan's tables (what an executor computes).
std::vector<std::int32_t> compose(const Plan& plan, int index, int a) {
  const Node& node = plan.nodes[index];
  const NodeAxis& ax = node.axis[a];
  if (node.leaf()) return ax.exposure_shift;
  std::vector<std::int32_t> out(std::size_t(ax.size()) * node.count);
  for (int ci = 0; ci < 2; ++ci) {
    const Node& ch = plan.nodes[node.child[ci]];
    const std::vector<std::int32_t> p = compose(plan, node.child[ci], a);
    for (int j = 0; j < ax.size(); ++j)
      for (int i = 0; i < ch.count; ++i)
        out[std::size_t(j) * node.count + (ch.first - node.first) + i] =
            ax.child_shift[ci][j] + p[std::size_t(ax.child_entry[ci][j]) * ch.count + i];
  }
  return out;
}

}  // namespace

Plan make_plan(const MotionBank& bank, const PlanOptions& options) {
  require(bank.is_cartesian(), "tree plan: needs a Cartesian velocity grid");
  require(options.oversample > 0 && std::isfinite(options.oversample),
          "tree plan: oversample must be > 0, got " + std::to_string(options.oversample));
  require(options.child_reach >= 0, "tree plan: child_reach must be >= 0");
  const int E = bank.exposures();
  require(E > 0 && !bank.vx_axis.empty() && !bank.vy_axis.empty(), "tree plan: empty bank");
  Builder b{bank, options, {}, {}, {}, {}, {}};
  b.plan.exposures = E;
  b.plan.order.resize(E);
  std::iota(b.plan.order.begin(), b.plan.order.end(), 0);
  std::stable_sort(b.plan.order.begin(), b.plan.order.end(),
                   [&](int p, int q) { return bank.epochs[p] < bank.epochs[q]; });
  b.t.resize(E);
  for (int a = 0; a < 2; ++a) b.c[a].resize(E);
  for (int i = 0; i < E; ++i) {
    const int e = b.plan.order[i];
    b.t[i] = bank.epochs[e];
    b.c[0][i] = bank.curve_at_x(e);
    b.c[1][i] = bank.curve_at_y(e);
  }
  for (int a = 0; a < 2; ++a) {
    const auto& axis = a == 0 ? bank.vx_axis : bank.vy_axis;
    auto [lo, hi] = std::minmax_element(axis.begin(), axis.end());
    b.v_min[a] = *lo;
    b.v_max[a] = *hi;
  }
  b.build(0, E, 0, nullptr);
  for (int a = 0; a < 2; ++a) b.patterns(0, a);
  return std::move(b.plan);
}

std::vector<std::int32_t> root_shifts(const Plan& plan, int axis) {
  require(axis == 0 || axis == 1, "root_shifts: axis must be 0 or 1");
  const int E = plan.exposures;
  const std::vector<std::int32_t> p = compose(plan, 0, axis);
  const int n = plan.nodes[0].axis[axis].size();
  std::vector<std::int32_t> out(std::size_t(n) * E);
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < E; ++i) out[std::size_t(j) * E + plan.order[i]] = p[std::size_t(j) * E + i];
  return out;
}

}  // namespace shiftstack::tree
