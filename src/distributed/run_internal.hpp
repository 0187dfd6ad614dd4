// Pieces the local (serial, shard) and MPI drivers of search-many share.
#pragma once
#include <chrono>
#include <string>
#include <vector>

#include "shiftstack/search_many.hpp"

namespace shiftstack::many::detail {

// The manifest with the run's command-line settings applied to every unit (before
// fingerprints are taken, so a changed setting reruns the units).
Manifest with_options(const Manifest& manifest, const RunOptions& options);

// Extra environment for a rank's worker: CUDA_VISIBLE_DEVICES pinning its devices (none when no
// GPU is visible).
std::vector<std::string> worker_environment(int local_rank, int per_rank);

// One progress line: "[done/total] unit status seconds (engine, detections | error)".
std::string describe(const Record& record, std::size_t done, std::size_t total);

double unix_seconds();
std::string host_name();

// Writes the summary (atomically) and, when `catalogue` is set, the merged catalogue; fills
// the report's counts from the states of `units`.
RunReport finish(const Manifest& manifest, const std::vector<std::size_t>& units, const std::vector<UnitState>& states,
                 nlohmann::json run_fields, const std::string& summary_name, bool catalogue);

}  // namespace shiftstack::many::detail
