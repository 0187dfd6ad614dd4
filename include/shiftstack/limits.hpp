// Resource limits checked before work starts, so that a bad epoch, an absurd velocity range or a
// corrupt header gives a clear error instead of an allocation failure, undefined behaviour or an
// hours-long run. docs/reliability.md lists every limit and why it has the value it has.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "shiftstack/motion.hpp"

namespace shiftstack {

// The memory one run may plan to use: SHIFTSTACK_MEMORY_BUDGET when set (bytes, or a number
// with a K, M, G or T suffix, powers of 1024), otherwise half of the machine's physical memory.
// Error when the variable is set but malformed.
std::uint64_t memory_budget_bytes();
// "8G" -> 8 * 2^30; Error naming `what` when malformed or zero.
std::uint64_t parse_byte_size(const std::string& text, const std::string& what);

struct SearchLimits {
  std::uint64_t memory_bytes = 0;   // 0: memory_budget_bytes()
  double max_trials = 1e13;         // origins x velocities (the deep workload is 1.3e10)
  // Largest |shift| (pixels) of any trajectory at any epoch. Far beyond any detector; it keeps
  // every engine's pixel arithmetic inside 32 bits.
  double max_shift_pixels = double(1 << 20);
};

// What a search will cost, from the bank and the stack's shape alone.
struct SearchEstimate {
  double trials = 0, paired_samples = 0;
  double memory_bytes = 0;  // shift tables + the smallest padded band + top-k output
  double max_abs_shift = 0;
  std::string summary;      // one line for progress output
};

// Checks a search of `bank` over `origins` origins of a width x height image against `limits`;
// throws Error naming the exposure (with its label, e.g. its file, when `exposure_labels` has
// one per exposure), epoch and velocity that break a limit.
SearchEstimate check_search_limits(const MotionBank& bank, int width, int height, std::int64_t origins,
                                   std::size_t bytes_per_pair, int top_k, const SearchLimits& limits = {},
                                   const std::vector<std::string>& exposure_labels = {});

}  // namespace shiftstack
