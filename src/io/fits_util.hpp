// Internal cfitsio helpers: an owning file handle that turns status codes into Errors naming
// the file, and a parsed header for keyword look-ups.
#pragma once
#include <fitsio.h>

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "io/atomic_file.hpp"
#include "io/fits_guard.hpp"
#include "shiftstack/error.hpp"
#include "shiftstack/image.hpp"

namespace shiftstack::io::detail {

// `s` with bytes outside printable ASCII written as \xNN: header text from a corrupt file may be
// any bytes, and error messages (and the JSON they end up in) must stay valid text.
std::string printable_text(const std::string& s);

// cfitsio's text for a status, with the messages it left on its error stack.
std::string fits_status_text(int status);

class FitsFile {
 public:
  // Checks the file's structure first (fits_guard.hpp): corrupt files are refused with an Error
  // before cfitsio parses them; gzip-compressed files are inflated there and read from memory.
  static FitsFile open_read(const std::string& path);
  // Creates (replacing) a file at `path`.
  static FitsFile create(const std::string& path);
  FitsFile(FitsFile&& other) noexcept
      : file_(std::exchange(other.file_, nullptr)), path_(std::move(other.path_)), memory_(std::move(other.memory_)) {}
  FitsFile& operator=(FitsFile&&) = delete;
  FitsFile(const FitsFile&) = delete;
  ~FitsFile();

  fitsfile* get() const { return file_; }
  const std::string& path() const { return path_; }
  // Throws Error("<path>: <what>: <cfitsio text>") when status != 0.
  void check(int status, const std::string& what) const;
  void close();  // flushes; throws on failure (the destructor only closes quietly)

  int hdu_count() const;
  void move_to(int hdu_number);                     // 1-based, as cfitsio
  bool move_to_name(const std::string& extname);    // false when no HDU has that EXTNAME
  int current_hdu() const;

 private:
  FitsFile(fitsfile* f, std::string path);
  fitsfile* file_ = nullptr;
  std::string path_;
  std::unique_ptr<MemoryImage> memory_;  // the bytes cfitsio reads, for an inflated file
};

// The keywords of one header, in order, values as written (strings unquoted).
struct Header {
  std::vector<std::pair<std::string, std::string>> cards;  // keyword, value text
  std::vector<bool> is_string;
  std::string raw;   // all 80-character cards, for wcslib
  int card_count = 0;

  static Header read(const FitsFile& file);  // the current HDU's header
  const std::string* find(const std::string& key) const;
  std::optional<double> number(const std::string& key) const;  // Error if present but not numeric
  // An integral number in [lo, hi]; Error naming the keyword when it is not (NaN, 1e20, 2.5).
  std::optional<long long> integer(const std::string& key, long long lo, long long hi) const;
  std::optional<std::string> text(const std::string& key) const;
};

// Image dimensions of the current HDU (compressed images included); NAXIS = 0 gives 0x0.
struct ImageShape {
  int naxis = 0;
  long width = 0, height = 0;
};
ImageShape image_shape(const FitsFile& file);

// Reads the current HDU's 2-D image as float (null/blank pixels become NaN). IRAF-style
// constant arrays (NAXIS = 0 with NPIX1, NPIX2 and PIXVALUE) are expanded.
Image<float> read_float_image(const FitsFile& file, const Header& header, const std::string& what);

// Asks the kernel to back [data, data + bytes) with transparent huge pages where it can (a no-op
// where THP is off). A CCD stack is gigabytes of fresh memory; faulting it in 2 MiB pages
// instead of 4 KiB ones is what makes first touches cheap, notably on virtual machines.
void advise_huge_pages(void* data, std::size_t bytes);

// A zero-filled image whose memory got advise_huge_pages() before its first touch.
template <typename T>
Image<T> fresh_image(int width, int height) {
  Image<T> image;
  image.width = width;
  image.height = height;
  const std::size_t n = std::size_t(width) * std::size_t(height);
  image.pixels.reserve(n);  // allocated, not yet touched
  advise_huge_pages(image.pixels.data(), n * sizeof(T));
  image.pixels.resize(n);
  return image;
}
// Reads it as 64-bit integers into `values` (resized; reusing its memory matters: first touches
// of fresh pages are a large part of reading time); blank or NaN pixels become all ones.
void read_integer_image(const FitsFile& file, const Header& header, const std::string& what,
                        std::vector<long long>& values, long& width, long& height);

// Writes a 2-D float image HDU (a new HDU appended).
void write_float_image(FitsFile& file, const Image<float>& image, const std::string& extname);

}  // namespace shiftstack::io::detail
