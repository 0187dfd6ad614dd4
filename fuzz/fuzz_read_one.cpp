// libFuzzer target: one FITS file through the reader (structure guard, layout detection, planes,
// masks, epochs, PSF, WCS). The only acceptable failure is a shiftstack::Error; anything else
// (a signal, a sanitizer report, another exception, a hang) is a finding.
#include <cstdint>

#include "fuzz_support.hpp"
#include "shiftstack/error.hpp"
#include "shiftstack/io/fits.hpp"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  shiftstack::fuzz::set_fuzz_budget();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = shiftstack::fuzz::write_input("one.fits", data, size);
  shiftstack::io::ReadOptions options;
  options.threads = 1;
  try {
    shiftstack::io::read_exposures({path}, options);
  } catch (const shiftstack::Error&) {
  }
  return 0;
}
