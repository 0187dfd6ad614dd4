#include "io/fits_util.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>

namespace shiftstack::io::detail {

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

FitsFile FitsFile::open_read(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw Error(path + ": no such file");
  if (std::filesystem::is_directory(path, ec)) throw Error(path + ": is a directory, not a FITS file");
  fitsfile* f = nullptr;
  int status = 0;
  // fits_open_diskfile takes the name literally (no extended-filename syntax such as [1] or
  // compression suffix handling), so odd characters in a path are safe.
  fits_open_diskfile(&f, path.c_str(), READONLY, &status);
  if (status) {
    const std::string why = fits_status_text(status);
    if (f) {
      int ignored = 0;
      fits_close_file(f, &ignored);
    }
    throw Error(path + ": cannot open as FITS: " + why);
  }
  return FitsFile(f, path);
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
    throw Error("keyword " + key + " = '" + *v + "' is not a number");
  return value;
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

// IRAF constant arrays: no data, the value in PIXVALUE and the size in NPIX1/NPIX2.
bool constant_array(const Header& header, long& width, long& height, double& value) {
  const auto n1 = header.number("NPIX1"), n2 = header.number("NPIX2"), v = header.number("PIXVALUE");
  if (!n1 || !n2 || !v) return false;
  width = long(*n1);
  height = long(*n2);
  value = *v;
  return width > 0 && height > 0;
}

void check_dimensions(const FitsFile& file, const std::string& what, long width, long height) {
  constexpr long max_side = 1 << 20;  // far beyond any detector; guards size arithmetic
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
    if (constant_array(header, w, h, value)) {
      check_dimensions(file, what, w, h);
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
    if (constant_array(header, width, height, value)) {
      check_dimensions(file, what, width, height);
      values.assign(std::size_t(width) * height, (long long)(value));
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

void commit_file(const std::string& temporary, const std::string& path) {
  std::error_code ec;
  std::filesystem::rename(temporary, path, ec);
  if (ec) {
    std::filesystem::remove(temporary, ec);
    throw Error(path + ": cannot move the finished file into place: " + ec.message());
  }
}

void write_text_atomic(const std::string& path, const std::string& content) {
  const std::string temporary = temporary_sibling(path);
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    if (!out) throw Error(path + ": cannot write (temporary " + temporary + ")");
    out.write(content.data(), std::streamsize(content.size()));
    out.flush();
    if (!out) {
      std::error_code ec;
      std::filesystem::remove(temporary, ec);
      throw Error(path + ": write failed (disk full?)");
    }
  }
  commit_file(temporary, path);
}

}  // namespace shiftstack::io::detail
