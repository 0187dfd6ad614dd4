// The tiled bilinear gather (gather_tiled_bilinear.cu): cuda-tiled's kernel for fractional shifts
// of a Cartesian bank. cuda-fast runs it too for fractional banks: cuda-fast has no fractional
// kernel of its own.
#pragma once
#include <string>

#include "shiftstack/search.hpp"

namespace shiftstack::cuda {

struct GatherWorkspace;  // gather_driver.cuh

// Empty when the input can run (fractional mode, Cartesian bank); otherwise why not.
std::string tiled_bilinear_problem(const SearchInput& input);

// Runs the whole search (the driver's tiles, outputs and obs_count pass) with the bilinear kernel.
SearchResult run_tiled_bilinear(const SearchInput& input, GatherWorkspace& workspace);

// The name under which cuda-fast reports a fractional search it handed to this kernel.
inline const char* tiled_bilinear_name() { return "tiled-bilinear"; }

}  // namespace shiftstack::cuda
