// What the tree's positions are: its shift tables, their error against the exhaustive rounding,
// and the bounds that error puts on the digest's sums.
#include <algorithm>
#include <cmath>

#include "shiftstack/error.hpp"
#include "shiftstack/tree.hpp"
#include "tree/tree_plan.hpp"

namespace shiftstack {

namespace {
tree::Plan plan_for(const MotionBank& bank, const TreeOptions& o) {
  return tree::make_plan(bank, {o.oversample, o.child_reach});
}
const std::vector<double>& axis_values(const MotionBank& bank, int a) { return a == 0 ? bank.vx_axis : bank.vy_axis; }
double curve(const MotionBank& bank, int a, int e) { return a == 0 ? bank.curve_at_x(e) : bank.curve_at_y(e); }
}  // namespace

TreeShiftTables tree_shift_tables(const MotionBank& bank, const TreeOptions& options) {
  require(bank.is_cartesian(), "tree_shift_tables: needs a Cartesian velocity grid");
  validate(bank, bank.exposures());
  const tree::Plan plan = plan_for(bank, options);
  return {bank.exposures(), tree::root_shifts(plan, 0), tree::root_shifts(plan, 1)};
}

TreePositionError tree_position_error(const MotionBank& bank, const TreeOptions& options) {
  require(bank.is_cartesian(), "tree_position_error: needs a Cartesian velocity grid");
  validate(bank, bank.exposures());
  const tree::Plan plan = plan_for(bank, options);
  const int E = bank.exposures();
  TreePositionError out;
  out.depth = plan.depth;
  out.nodes = std::int64_t(plan.nodes.size());
  out.pairs = std::int64_t(bank.size()) * E;
  // Per axis and exposure, how many axis values have |d| = 0 and |d| = 1 (the joint counts over
  // the grid are products, since x depends on vx alone and y on vy alone).
  std::array<std::vector<std::int64_t>, 2> zero, one;
  std::vector<std::int64_t> histogram;
  double sum2_tree = 0, sum2_exh = 0, n_axis = 0;
  for (int a = 0; a < 2; ++a) {
    const std::vector<std::int32_t> shifts = tree::root_shifts(plan, a);
    const auto& axis = axis_values(bank, a);
    zero[a].assign(E, 0);
    one[a].assign(E, 0);
    for (std::size_t j = 0; j < axis.size(); ++j)
      for (int e = 0; e < E; ++e) {
        const double s = axis[j] * bank.dt(e) + curve(bank, a, e);
        const int tree_shift = shifts[j * E + e];
        const int d = std::abs(tree_shift - round_shift(s));
        if (int(histogram.size()) <= d) histogram.resize(d + 1, 0);
        ++histogram[d];
        zero[a][e] += d == 0;
        one[a][e] += d <= 1;
        out.max_abs = std::max(out.max_abs, d);
        sum2_tree += (tree_shift - s) * (tree_shift - s);
        sum2_exh += (round_shift(s) - s) * (round_shift(s) - s);
        out.max_tree = std::max(out.max_tree, std::abs(tree_shift - s));
        n_axis += 1;
      }
  }
  std::int64_t total = 0;
  for (std::int64_t h : histogram) total += h;
  for (std::int64_t h : histogram) out.axis_fraction.push_back(double(h) / double(total));
  out.rms_tree = std::sqrt(sum2_tree / n_axis);
  out.rms_exhaustive = std::sqrt(sum2_exh / n_axis);
  double exact = 0, within_one = 0;
  for (int e = 0; e < E; ++e) {
    exact += double(zero[0][e]) * double(zero[1][e]);
    within_one += double(one[0][e]) * double(one[1][e]);
  }
  out.exact_fraction = exact / double(out.pairs);
  out.one_pixel_fraction = (within_one - exact) / double(out.pairs);
  return out;
}

TreeDigestBounds tree_digest_bounds(const EncodedStack& stack, const MotionBank& bank, const Region& region,
                                    const TreeOptions& options) {
  require(bank.is_cartesian(), "tree_digest_bounds: needs a Cartesian velocity grid");
  validate(bank, stack.exposures);
  const Region r = resolve(region, stack.width, stack.height);
  const tree::Plan plan = plan_for(bank, options);
  const int E = stack.exposures;
  // Largest |weighted psi| and phi per exposure, as decode() returns them.
  std::vector<double> max_psi(E, 0), max_phi(E, 0);
#pragma omp parallel for schedule(static)
  for (int e = 0; e < E; ++e)
    for (std::size_t p = 0; p < stack.plane_size(); ++p) {
      const DecodedSample d = decode(stack, e, p);
      if (!d.valid) continue;
      max_psi[e] = std::max(max_psi[e], double(std::abs(d.psi)));
      max_phi[e] = std::max(max_phi[e], double(d.phi));
    }
  // Per exposure: summed over the grid, |dx| contributes for every vy and |dy| for every vx.
  std::array<std::vector<double>, 2> moved;
  for (int a = 0; a < 2; ++a) {
    const std::vector<std::int32_t> shifts = tree::root_shifts(plan, a);
    const auto& axis = axis_values(bank, a);
    moved[a].assign(E, 0);
    for (std::size_t j = 0; j < axis.size(); ++j)
      for (int e = 0; e < E; ++e)
        moved[a][e] += std::abs(shifts[j * E + e] - round_shift(axis[j] * bank.dt(e) + curve(bank, a, e)));
  }
  TreeDigestBounds b;
  const double Va = double(bank.vx_count()), Vb = double(bank.vy_count());
  for (int e = 0; e < E; ++e) {
    const double strips = moved[0][e] * Vb * r.height + moved[1][e] * Va * r.width;
    b.sumA += 2 * strips * max_psi[e];
    b.sumB += 2 * strips * max_phi[e];
  }
  return b;
}

}  // namespace shiftstack
