// The exposure stack: what a search starts from (SPEC section 1).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "shiftstack/image.hpp"

namespace shiftstack {

struct Exposure {
  Image<float> science;    // background-subtracted counts
  Image<float> variance;   // per-pixel noise variance; must be > 0 and finite where unmasked
  Image<std::uint8_t> mask;  // nonzero = masked (zero weight); may be empty = nothing masked
  Image<float> psf;        // odd-sized kernel centred on its middle pixel, sums to 1
  double epoch = 0;        // days (MJD or any consistent day count)
  double throughput = 1;   // relative throughput a_e, > 0
  std::string label;       // where it came from (file name, "kit exposure 3"), for error messages
};

struct ExposureStack {
  std::vector<Exposure> exposures;

  int width() const { return exposures.empty() ? 0 : exposures.front().science.width; }
  int height() const { return exposures.empty() ? 0 : exposures.front().science.height; }
  int size() const { return int(exposures.size()); }
};

// Checks everything SPEC and DESIGN ask of an input stack and throws Error naming the
// exposure and pixel at fault: empty stack, mismatched shapes, NaN/inf in unmasked science or
// variance, variance <= 0 where unmasked, an exposure with every pixel masked, a PSF that is not
// odd-sized, not finite or does not sum to 1 (within 1e-3), throughput <= 0 or not finite.
// Epochs may be in any order, and several exposures may share one.
void validate(const ExposureStack& stack);

// Name used in error messages: label if set, else "exposure <index>".
std::string exposure_name(const ExposureStack& stack, int index);

}  // namespace shiftstack
