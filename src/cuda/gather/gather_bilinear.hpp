// The bilinear gathers for fractional shifts of a Cartesian bank: cuda-tiled's kernel
// (gather_tiled_bilinear.cu), per-origin FP64 positions, and cuda-fast's (gather_fast_bilinear.cu),
// shared fractions and separable interpolation. cuda-fast falls back to cuda-tiled's kernel when
// none of its own variants fits a bank.
#pragma once
#include <string>
#include <vector>

#include "shiftstack/search.hpp"

namespace shiftstack::cuda {

struct GatherWorkspace;  // gather_driver.cuh

// Empty when the input can run (fractional mode, Cartesian bank); otherwise why not.
std::string tiled_bilinear_problem(const SearchInput& input);

// Runs the whole search (the driver's tiles, outputs and obs_count pass) with the bilinear kernel.
SearchResult run_tiled_bilinear(const SearchInput& input, GatherWorkspace& workspace);

// The name under which cuda-fast reports a fractional search it handed to this kernel.
inline const char* tiled_bilinear_name() { return "tiled-bilinear"; }

// cuda-fast's bilinear variants, in the automatic choice's order.
std::vector<std::string> fast_bilinear_variant_names();

// Empty when cuda-fast's bilinear kernel can run the input (the named variant, or any when
// `variant` is empty); otherwise why not.
std::string fast_bilinear_problem(const SearchInput& input, const std::string& variant);

// The whole search with cuda-fast's bilinear kernel, the named variant or the first that fits;
// with no name and no variant fitting, cuda-tiled's kernel. `ran` receives the kernel's name.
SearchResult run_fast_bilinear(const SearchInput& input, GatherWorkspace& workspace, const std::string& variant,
                               std::string* ran);

}  // namespace shiftstack::cuda
