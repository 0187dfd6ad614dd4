#include "io/fits_util.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <system_error>

#include "io/fits_guard.hpp"

namespace shiftstack::io::detail {

std::string printable_text(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c >= 0x20 && c < 0x7f) {
      out += char(c);
    } else {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02X", c);
      out += hex;
    }
  }
  return out;
}

std::string fits_status_text(int status) {
  char text[FLEN_STATUS] = {0};
  fits_get_errstatus(status, text);
  std::string out = text;
  // The error stack holds the detail (which keyword, which HDU); it is shared by all threads,
  // so in a parallel read it may carry another file's messages: keep only the first lines.
  char message[FLEN_ERRMSG];
  int lines = 0;
  while (fits_read_errmsg(message) && lines < 3) {
    if (message[0] == 0) continue;
    out += std::string(lines == 0 ? " (" : "; ") + message;
    ++lines;
  }
  if (lines > 0) out += ")";
  fits_clear_errmsg();
  return out;
}

FitsFile::FitsFile(fitsfile* f, std::string path) : file_(f), path_(std::move(path)) {}

FitsFile FitsFile::open_read(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw Error(path + ": no such file");
  if (std::filesystem::is_directory(path, ec)) throw Error(path + ": is a directory, not a FITS file");
  std::unique_ptr<MemoryImage> memory = guard_fits_file(path, default_guard_limits());
  fitsfile* f = nullptr;
  int status = 0;
  if (memory) {
    // The inflated bytes the guard checked; cfitsio keeps the addresses of pointer and size.
    fits_open_memfile(&f, path.c_str(), READONLY, &memory->pointer, &memory->size, 0, nullptr, &status);
  } else {
    // fits_open_diskfile takes the name literally (no extended-filename syntax such as [1] or
    // compression suffix handling), so odd characters in a path are safe.
    fits_open_diskfile(&f, path.c_str(), READONLY, &status);
  }
  if (status) {
    const std::string why = fits_status_text(status);
    if (f) {
      int ignored = 0;
      fits_close_file(f, &ignored);
    }
    throw Error(path + ": cannot open as FITS: " + why);
  }
  FitsFile file(f, path);
  file.memory_ = std::move(memory);
  return file;
}

FitsFile FitsFile::create(const std::string& path) {
  std::error_code ec;
  std::filesystem::remove(path, ec);
  fitsfile* f = nullptr;
  int status = 0;
  fits_create_diskfile(&f, path.c_str(), &status);
  if (status) throw Error(path + ": cannot create: " + fits_status_text(status));
  return FitsFile(f, path);
}

FitsFile::~FitsFile() {
  if (file_) {
    int status = 0;
    fits_close_file(file_, &status);
  }
}

void FitsFile::check(int status, const std::string& what) const {
  if (status) throw Error(path_ + ": " + what + ": " + fits_status_text(status));
}

void FitsFile::close() {
  if (!file_) return;
  int status = 0;
  fits_close_file(file_, &status);
  file_ = nullptr;
  check(status, "closing");
}

int FitsFile::hdu_count() const {
  int n = 0, status = 0;
  fits_get_num_hdus(file_, &n, &status);
  check(status, "counting HDUs");
  return n;
}

void FitsFile::move_to(int hdu_number) {
  int type = 0, status = 0;
  fits_movabs_hdu(file_, hdu_number, &type, &status);
  check(status, "moving to HDU " + std::to_string(hdu_number - 1));
}

bool FitsFile::move_to_name(const std::string& extname) {
  int status = 0;
  std::string name = extname;
  fits_movnam_hdu(file_, ANY_HDU, name.data(), 0, &status);
  if (status == BAD_HDU_NUM) {
    fits_clear_errmsg();
    return false;
  }
  check(status, "looking for HDU " + extname);
  return true;
}

int FitsFile::current_hdu() const {
  int n = 0;
  fits_get_hdu_num(file_, &n);
  return n;
}

// ---- headers ----------------------------------------------------------------------------

Header Header::read(const FitsFile& file) {
  Header h;
  int status = 0, keys = 0, more = 0;
  fits_get_hdrspace(file.get(), &keys, &more, &status);
  file.check(status, "reading the header size");
  h.cards.reserve(keys);
  h.is_string.reserve(keys);
  h.raw.reserve(std::size_t(keys) * 80);
  char card[FLEN_CARD];
  for (int i = 1; i <= keys; ++i) {
    fits_read_record(file.get(), i, card, &status);
    file.check(status, "reading header card " + std::to_string(i));
    std::string line = card;
    line.resize(80, ' ');
    h.raw += line;
    char name[FLEN_KEYWORD] = {0}, value[FLEN_VALUE] = {0}, comment[FLEN_COMMENT] = {0};
    int length = 0, parse_status = 0;
    fits_get_keyname(card, name, &length, &parse_status);
    if (parse_status || length == 0) continue;
    fits_parse_value(card, value, comment, &parse_status);
    if (parse_status) {
      fits_clear_errmsg();
      continue;  // commentary or malformed cards carry no value we need
    }
    std::string v = value;
    bool quoted = false;
    if (v.size() >= 2 && v.front() == '\'') {
      // A FITS string: between the outer quotes, '' stands for one quote, trailing blanks
      // are not significant.
      quoted = true;
      const std::size_t close = v.rfind('\'');
      const std::string inner = v.substr(1, close > 0 ? close - 1 : std::string::npos);
      std::string unquoted;
      for (std::size_t k = 0; k < inner.size(); ++k) {
        unquoted += inner[k];
        if (inner[k] == '\'' && k + 1 < inner.size() && inner[k + 1] == '\'') ++k;
      }
      while (!unquoted.empty() && unquoted.back() == ' ') unquoted.pop_back();
      v = unquoted;
    }
    h.cards.emplace_back(name, v);
    h.is_string.push_back(quoted);
  }
  h.card_count = keys;
  return h;
}

const std::string* Header::find(const std::string& key) const {
  for (const auto& [k, v] : cards)
    if (k == key) return &v;
  return nullptr;
}

std::optional<double> Header::number(const std::string& key) const {
  const std::string* v = find(key);
  if (!v) return std::nullopt;
  std::string text = *v;
  for (char& c : text)
    if (c == 'D' || c == 'd') c = 'E';  // FITS allows Fortran-style exponents
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  while (end && *end == ' ') ++end;
  if (text.empty() || !end || *end != 0)
    throw Error("keyword " + key + " = '" + printable_text(*v) + "' is not a number");
  return value;
}

std::optional<long long> Header::integer(const std::string& key, long long lo, long long hi) const {
  const auto value = number(key);
  if (!value) return std::nullopt;
  // Compared as doubles before any conversion: converting NaN or 1e20 to an integer is undefined.
  if (!(*value >= double(lo) && *value <= double(hi)) || *value != std::floor(*value))
    throw Error("keyword " + key + " = " + printable_text(*find(key)) + " is not an integer in " + std::to_string(lo) +
                ".." + std::to_string(hi));
  return static_cast<long long>(*value);
}

std::optional<std::string> Header::text(const std::string& key) const {
  const std::string* v = find(key);
  if (!v) return std::nullopt;
  return *v;
}

// ---- images -----------------------------------------------------------------------------

ImageShape image_shape(const FitsFile& file) {
  int status = 0, naxis = 0;
  long naxes[3] = {0, 0, 0};
  fits_get_img_dim(file.get(), &naxis, &status);
  file.check(status, "reading the image dimensions of HDU " + std::to_string(file.current_hdu() - 1));
  ImageShape s;
  s.naxis = naxis;
  if (naxis == 0) return s;
  if (naxis > 3) throw Error(file.path() + ": HDU " + std::to_string(file.current_hdu() - 1) +
                             " has " + std::to_string(naxis) + " axes; expected a 2-D image");
  fits_get_img_size(file.get(), 3, naxes, &status);
  file.check(status, "reading the image size");
  if (naxis == 3 && naxes[2] != 1)
    throw Error(file.path() + ": HDU " + std::to_string(file.current_hdu() - 1) +
                " is a cube of " + std::to_string(naxes[2]) + " planes; expected a 2-D image");
  s.width = naxes[0];
  s.height = naxis >= 2 ? naxes[1] : 1;
  return s;
}

namespace {

constexpr long max_side = 1 << 20;  // far beyond any detector; guards size arithmetic

// IRAF constant arrays: no data, the value in PIXVALUE and the size in NPIX1/NPIX2. Nothing in
// the file bounds the size, so the memory budget does (8 bytes per pixel: the widest reading).
bool constant_array(const FitsFile& file, const Header& header, const std::string& what, long& width, long& height,
                    double& value) {
  if (!header.find("NPIX1") || !header.find("NPIX2") || !header.find("PIXVALUE")) return false;
  try {
    width = long(*header.integer("NPIX1", 1, max_side));
    height = long(*header.integer("NPIX2", 1, max_side));
    value = *header.number("PIXVALUE");
  } catch (const Error& e) {
    throw Error(file.path() + ": " + what + " (IRAF constant array): " + e.what());
  }
  const double bytes = double(width) * double(height) * 8;
  const double budget = double(default_guard_limits().max_image_bytes);
  if (bytes > budget)
    throw Error(file.path() + ": " + what + " (IRAF constant array) declares " + std::to_string(width) + " x " +
                std::to_string(height) + " pixels (NPIX1, NPIX2), more than the memory budget allows");
  return true;
}

void check_dimensions(const FitsFile& file, const std::string& what, long width, long height) {
  if (width <= 0 || height <= 0 || width > max_side || height > max_side)
    throw Error(file.path() + ": " + what + " has no usable 2-D image (size " +
                std::to_string(width) + " x " + std::to_string(height) + ")");
}

}  // namespace

void advise_huge_pages(void* data, std::size_t bytes) {
  constexpr std::uintptr_t huge_page = std::uintptr_t(2) << 20;  // x86-64 THP size
  const std::uintptr_t begin = (reinterpret_cast<std::uintptr_t>(data) + huge_page - 1) & ~(huge_page - 1);
  const std::uintptr_t end = (reinterpret_cast<std::uintptr_t>(data) + bytes) & ~(huge_page - 1);
  if (data && end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);  // advice only
}

Image<float> read_float_image(const FitsFile& file, const Header& header, const std::string& what) {
  const ImageShape shape = image_shape(file);
  if (shape.naxis == 0) {
    long w = 0, h = 0;
    double value = 0;
    if (constant_array(file, header, what, w, h, value)) {
      check_dimensions(file, what, w, h);
      if (!(std::abs(value) <= double(std::numeric_limits<float>::max())))
        throw Error(file.path() + ": " + what + " (IRAF constant array): PIXVALUE = " + std::to_string(value) +
                    " is not a finite single-precision value");
      return Image<float>(int(w), int(h), float(value));
    }
    throw Error(file.path() + ": " + what + " (HDU " + std::to_string(file.current_hdu() - 1) +
                ") has no image data (NAXIS = 0)");
  }
  check_dimensions(file, what, shape.width, shape.height);
  Image<float> image = fresh_image<float>(int(shape.width), int(shape.height));
  long first[3] = {1, 1, 1};
  float null_value = std::numeric_limits<float>::quiet_NaN();
  int any_null = 0, status = 0;
  fits_read_pix(file.get(), TFLOAT, first, LONGLONG(image.size()), &null_value,
                image.pixels.data(), &any_null, &status);
  file.check(status, "reading " + what + " (HDU " + std::to_string(file.current_hdu() - 1) + ")");
  return image;
}

void read_integer_image(const FitsFile& file, const Header& header, const std::string& what,
                        std::vector<long long>& values, long& width, long& height) {
  const ImageShape shape = image_shape(file);
  if (shape.naxis == 0) {
    double value = 0;
    if (constant_array(file, header, what, width, height, value)) {
      check_dimensions(file, what, width, height);
      // An integer plane's value must be an integer: 1e300, NaN or 2.5 have no 64-bit code.
      constexpr double two63 = 9223372036854775808.0;
      if (!(value >= -two63 && value < two63) || value != std::floor(value))
        throw Error(file.path() + ": " + what + " (IRAF constant array): PIXVALUE = " +
                    printable_text(*header.find("PIXVALUE")) + " is not a 64-bit integer code");
      values.assign(std::size_t(width) * height, static_cast<long long>(value));
      return;
    }
    throw Error(file.path() + ": " + what + " (HDU " + std::to_string(file.current_hdu() - 1) +
                ") has no image data (NAXIS = 0)");
  }
  width = shape.width;
  height = shape.height;
  check_dimensions(file, what, width, height);
  values.resize(std::size_t(width) * height);
  long first[3] = {1, 1, 1};
  LONGLONG null_value = -1;  // all bits set: a blank mask pixel rejects under any flag choice
  int any_null = 0, status = 0;
  fits_read_pix(file.get(), TLONGLONG, first, LONGLONG(values.size()), &null_value, values.data(),
                &any_null, &status);
  file.check(status, "reading " + what + " (HDU " + std::to_string(file.current_hdu() - 1) + ")");
}

void write_float_image(FitsFile& file, const Image<float>& image, const std::string& extname) {
  int status = 0;
  long naxes[2] = {image.width, image.height};
  fits_create_img(file.get(), FLOAT_IMG, 2, naxes, &status);
  file.check(status, "creating HDU " + extname);
  if (!extname.empty()) {
    std::string name = extname;
    fits_update_key(file.get(), TSTRING, "EXTNAME", name.data(), nullptr, &status);
  }
  long first[2] = {1, 1};
  fits_write_pix(file.get(), TFLOAT, first, LONGLONG(image.size()),
                 const_cast<float*>(image.pixels.data()), &status);
  file.check(status, "writing HDU " + extname);
}

// ---- atomic files -----------------------------------------------------------------------

std::string temporary_sibling(const std::string& path) {
  static std::atomic<unsigned> counter{0};
  const std::filesystem::path p(path);
  std::string name = ".";
  name += p.filename().string();
  name += ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
  return (p.parent_path() / name).string();
}

std::string system_error_text(int code) { return std::generic_category().message(code); }

void sync_path(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(path + ": cannot open to flush it to disk: " + system_error_text(errno));
  const int rc = ::fsync(fd);
  const int code = errno;
  ::close(fd);
  // Some file systems cannot flush a folder (EINVAL): the rename is then as durable as they allow.
  if (rc != 0 && code != EINVAL && code != EROFS) throw Error(path + ": flushing to disk failed: " + system_error_text(code));
}

void commit_file(const std::string& temporary, const std::string& path) {
  std::error_code ec;
  try {
    sync_path(temporary);
  } catch (...) {
    std::filesystem::remove(temporary, ec);
    throw;
  }
  std::filesystem::rename(temporary, path, ec);
  if (ec) {
    // Keep the rename's error: the clean-up below would overwrite it.
    const std::string why = ec.message();
    std::filesystem::remove(temporary, ec);
    throw Error(path + ": cannot move the finished file into place: " + why);
  }
  const std::string folder = std::filesystem::path(path).parent_path().string();
  sync_path(folder.empty() ? std::string(".") : folder);
}

void write_text_atomic(const std::string& path, const std::string& content) {
  const std::string temporary = temporary_sibling(path);
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    if (!out) throw Error(path + ": cannot write (temporary " + temporary + "): " + system_error_text(errno));
    out.write(content.data(), std::streamsize(content.size()));
    out.flush();
    if (!out) {
      const int code = errno;
      std::error_code ec;
      std::filesystem::remove(temporary, ec);
      throw Error(path + ": write failed: " + system_error_text(code));
    }
  }
  commit_file(temporary, path);
}

}  // namespace shiftstack::io::detail
