// Internal helpers shared by the pipeline's translation units.
#pragma once
#include <cstdint>
#include <vector>

#include "shiftstack/pipeline.hpp"

namespace shiftstack {

// sigma_g_clip with the coefficient computed once per run (it costs two normal quantiles).
std::vector<std::uint8_t> sigma_g_clip_with(const std::vector<double>& lh, const SigmaGOptions& options,
                                            double coefficient, std::vector<double>& scratch);

}  // namespace shiftstack
