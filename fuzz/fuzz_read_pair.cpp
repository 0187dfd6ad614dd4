// libFuzzer target: two FITS files read as one stack (cross-file checks: one pixel grid, epochs,
// WCS agreement). Input: a 4-byte little-endian length n, then n bytes of the first file, then
// the second file.
#include <cstdint>
#include <cstring>

#include "fuzz_support.hpp"
#include "shiftstack/error.hpp"
#include "shiftstack/io/fits.hpp"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  shiftstack::fuzz::set_fuzz_budget();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 4) return 0;
  std::uint32_t first = 0;
  for (int i = 0; i < 4; ++i) first |= std::uint32_t(data[i]) << (8 * i);
  const std::size_t n = std::min<std::size_t>(first, size - 4);
  const std::string a = shiftstack::fuzz::write_input("a.fits", data + 4, n);
  const std::string b = shiftstack::fuzz::write_input("b.fits", data + 4 + n, size - 4 - n);
  shiftstack::io::ReadOptions options;
  options.threads = 1;
  try {
    shiftstack::io::read_exposures({a, b}, options);
  } catch (const shiftstack::Error&) {
  }
  return 0;
}
