// Internal pieces of the FITS reader shared between its translation units.
#pragma once
#include <string>
#include <vector>

#include "io/fits_util.hpp"
#include "shiftstack/io/fits.hpp"

namespace shiftstack::io::detail {

struct EpochReading {
  double mjd = 0;       // UTC
  std::string keyword;  // what gave it, e.g. "DATE-AVG (TAI -> UTC)"
};

// The observation epoch from the image HDU's header, then the primary header (see
// ReadOptions::epoch_keyword). Throws Error naming `label` when none is found.
EpochReading read_epoch(const Header& hdu, const Header& primary, const std::string& keyword,
                        const std::string& label);

// Files holding one image (read_single.cpp). The HDU number (1-based) of a file's only 2-D
// image, or 0 when it has none or several.
int single_image_hdu(FitsFile& file);
// The constant variance of a single image: given, or (1.4826 MAD)^2 over its finite pixels.
// `description` says which; a warning is added when the image does not look background-subtracted.
double single_image_noise(const Image<float>& science, const SingleImageVariance& how, const std::string& label,
                          std::string& description, std::vector<std::string>& warnings);

}  // namespace shiftstack::io::detail
