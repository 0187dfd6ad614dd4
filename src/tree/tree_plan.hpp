// The tree's plan (docs/tree-search.md): which exposures each node sums, its velocity axes, and
// how each parent velocity is formed from its children -- all integers and doubles in plain
// arrays, computed once on the host from the motion bank alone, so that any executor (this CPU
// one, a later GPU one) runs the same operator.
//
// Exposures are ordered by epoch and split recursively in two (the split that minimises the sum
// of the children's squared spans: a gap between nights first, else the middle of the span).
// Every node n keeps, per axis, a velocity set U_n about 1/(oversample * span_n) apart; the
// root's are the bank's own axes. A leaf (one exposure, or one velocity per axis) sums its
// exposures directly, each at its own rounding round(u (t_e - t_n) + c_e). A parent velocity u is
// the sum of one velocity of each child, moved by one integer shift per child.
#pragma once
#include <array>
#include <cstdint>
#include <vector>

#include "shiftstack/motion.hpp"

namespace shiftstack::tree {

// One axis (x or y) of one node.
struct NodeAxis {
  std::vector<double> velocity;  // pixels per day
  // Leaves: shift of the node's i-th exposure at velocity j, exposure_shift[j * count + i].
  std::vector<std::int32_t> exposure_shift;
  // Parents: for child c and velocity j, the child's velocity index and the integer shift that
  // moves the child's map onto this node's frame.
  std::array<std::vector<std::int32_t>, 2> child_entry, child_shift;
  int size() const { return int(velocity.size()); }
};

struct Node {
  int first = 0, count = 0;  // Plan::order[first .. first + count): the node's exposures
  int level = 0;             // root 0
  std::array<int, 2> child = {-1, -1};
  double t_node = 0;         // reference time of the node's frame (days); the root's is t_ref
  std::array<NodeAxis, 2> axis;  // 0: x, 1: y
  bool leaf() const { return child[0] < 0; }
  std::int64_t entries() const { return std::int64_t(axis[0].size()) * axis[1].size(); }
};

struct PlanOptions {
  double oversample = 1.0;  // node velocity step = 1 / (oversample * span)
  int child_reach = 1;      // child velocities tried on either side of the nearest one
};

struct Plan {
  int exposures = 0;
  std::vector<int> order;   // exposure indices (stack order) sorted by epoch
  std::vector<Node> nodes;  // preorder: nodes[0] is the root, every parent before its children
  int depth = 0;            // deepest level
};

// Requires a Cartesian bank that passed validate(). Deterministic in the bank and options.
Plan make_plan(const MotionBank& bank, const PlanOptions& options);

// The integer shift the tree applies to every exposure at every value of a root axis:
// [a * E + e], e in stack order. A trial (x0, y0, a, b) sums exposure e at
// (x0 + shifts_x[a * E + e], y0 + shifts_y[b * E + e]).
std::vector<std::int32_t> root_shifts(const Plan& plan, int axis);

}  // namespace shiftstack::tree
