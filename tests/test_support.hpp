// Small helpers shared by the tests: encode a kit, run an engine with every trial listed.
#pragma once
#include <functional>
#include <limits>

#include "shiftstack/error.hpp"

#include "shiftstack/encoding.hpp"
#include "shiftstack/likelihood.hpp"
#include "shiftstack/search.hpp"
#include "shiftstack/synth.hpp"

namespace shiftstack::testing {

inline EncodedStack encode_kit(const KitStack& kit, Encoding encoding = Encoding::fp32) {
  return encode(compute_likelihood(kit.stack, kit.bank.mode == ShiftMode::fractional), encoding);
}

// Every scored trial as a candidate (threshold -inf), sorted by (velocity, y, x).
inline SearchResult all_trials(const std::string& engine_name, const EncodedStack& stack,
                               const MotionBank& bank) {
  auto engine = make_engine(engine_name);
  OutputPolicy policy;
  policy.collect_candidates = true;
  policy.candidate_threshold = -std::numeric_limits<double>::infinity();
  return search(*engine, stack, bank, policy);
}

inline KitOptions small_kit(std::uint64_t seed) {
  KitOptions o = workload("ci");
  o.seed = seed;
  return o;
}

}  // namespace shiftstack::testing
