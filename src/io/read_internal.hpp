// Internal pieces of the FITS reader shared between its translation units.
#pragma once
#include <string>

#include "io/fits_util.hpp"

namespace shiftstack::io::detail {

struct EpochReading {
  double mjd = 0;       // UTC
  std::string keyword;  // what gave it, e.g. "DATE-AVG (TAI -> UTC)"
};

// The observation epoch from the image HDU's header, then the primary header (see
// ReadOptions::epoch_keyword). Throws Error naming `label` when none is found.
EpochReading read_epoch(const Header& hdu, const Header& primary, const std::string& keyword,
                        const std::string& label);

}  // namespace shiftstack::io::detail
