// A structural check of a FITS file before cfitsio parses it. cfitsio 4.2 trusts what a header
// declares: a corrupt tile-compressed HDU divides by zero (ZTILEn = 0 or unreadable, a RICE
// block size of 0), a gzip tile cut short makes its inflate loop grow a buffer for ever, and an
// image declared larger than the file is allocated in full before the short read is noticed.
// guard_fits_file() walks every HDU's header and declared data size, and for tile-compressed
// images checks the compression keywords, the tile table, every heap descriptor and (gzip) every
// tile's stream, with bounded work, so that cfitsio only ever sees files whose structure holds.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace shiftstack::io::detail {

struct GuardLimits {
  // Most bytes one file may make the reader allocate for a single image, or decompress to
  // memory (a gzip-compressed file): the memory budget (shiftstack/limits.hpp).
  std::uint64_t max_image_bytes = 0;
};
GuardLimits default_guard_limits();

// A FITS file in memory (gzip-compressed files are inflated here, bounded, instead of inside
// cfitsio); `pointer` and `size` are the stable locations cfitsio's memory driver keeps.
struct MemoryImage {
  std::vector<char> bytes;
  void* pointer = nullptr;
  std::size_t size = 0;
};

// Checks the file at `path` (a regular file, FITS or gzip-compressed FITS); throws Error
// "<path>: ..." naming the HDU and keyword at fault. Returns the inflated image of a gzip file,
// null for a plain one.
std::unique_ptr<MemoryImage> guard_fits_file(const std::string& path, const GuardLimits& limits);

// The same check over bytes already in memory (used by the above, and by the fuzz targets).
void check_fits_bytes(const char* data, std::size_t size, const std::string& label, const GuardLimits& limits);

}  // namespace shiftstack::io::detail
