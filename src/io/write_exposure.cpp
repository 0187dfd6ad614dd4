// Writing exposures to FITS: the Rubin-style layout the reader prefers, and KBMOD WorkUnits.
// Values are written exactly (float planes as float, epochs with 17 significant digits) so a
// stack read back is the stack written.
#include <filesystem>
#include <map>

#include "io/fits_util.hpp"
#include "shiftstack/io/fits.hpp"

namespace shiftstack::io {

using detail::FitsFile;

namespace {

constexpr int exact_double_digits = -17;  // cfitsio: negative = %G with 17 significant digits

void write_double(FitsFile& f, const char* key, double value, const char* comment) {
  int status = 0;
  fits_update_key_dbl(f.get(), key, value, exact_double_digits, comment, &status);
  f.check(status, std::string("writing keyword ") + key);
}

void write_string(FitsFile& f, const char* key, const std::string& value, const char* comment) {
  int status = 0;
  std::string v = value;
  fits_update_key_str(f.get(), key, v.data(), comment, &status);
  f.check(status, std::string("writing keyword ") + key);
}

void write_empty_primary(FitsFile& f) {
  int status = 0;
  fits_create_img(f.get(), BYTE_IMG, 0, nullptr, &status);
  f.check(status, "creating the primary HDU");
}

// Mask planes declared the Rubin way; only BAD is used for the masks written here.
const std::map<std::string, int>& written_planes() {
  static const std::map<std::string, int> planes = {{"BAD", 0}, {"SAT", 1}, {"INTRP", 2}, {"CR", 3},
                                                    {"EDGE", 4}, {"SUSPECT", 7}, {"NO_DATA", 8}};
  return planes;
}

void write_mask(FitsFile& f, const Image<std::uint8_t>& mask, int width, int height,
                const std::string& extname, bool declare_planes) {
  int status = 0;
  long naxes[2] = {width, height};
  fits_create_img(f.get(), SHORT_IMG, 2, naxes, &status);
  f.check(status, "creating HDU " + extname);
  write_string(f, "EXTNAME", extname, nullptr);
  if (declare_planes)
    for (const auto& [name, bit] : written_planes()) {
      int s = 0;
      std::string key = "MP_" + name;
      int value = bit;
      fits_update_key(f.get(), TINT, key.c_str(), &value, "mask plane bit", &s);
      f.check(s, "writing keyword " + key);
    }
  std::vector<short> codes(std::size_t(width) * height, 0);
  if (!mask.empty())
    for (std::size_t p = 0; p < codes.size(); ++p) codes[p] = mask.pixels[p] ? short(1 << written_planes().at("BAD")) : 0;
  long first[2] = {1, 1};
  fits_write_pix(f.get(), TSHORT, first, LONGLONG(codes.size()), codes.data(), &status);
  f.check(status, "writing HDU " + extname);
}

void write_cards(FitsFile& f, const std::string& cards) {
  for (std::size_t i = 0; i + 1 <= cards.size(); i += 80) {
    std::string card = cards.substr(i, 80);
    while (!card.empty() && card.back() == ' ') card.pop_back();
    if (card.empty()) continue;
    int status = 0;
    fits_write_record(f.get(), card.c_str(), &status);
    f.check(status, "writing header card '" + card + "'");
  }
}

}  // namespace

void write_exposure_fits(const std::string& path, const Exposure& x, const WriteOptions& options) {
  const std::string temporary = detail::temporary_sibling(path);
  try {
    FitsFile f = FitsFile::create(temporary);
    write_empty_primary(f);
    write_double(f, "MJD-AVG", x.epoch, "[d] mid-exposure time");
    write_string(f, "TIMESYS", "UTC", "time scale of MJD-AVG");
    write_double(f, "THROUGHP", x.throughput, "relative throughput a_e");
    write_double(f, "CURVE_X", options.curve_x, "[pix] common-curve offset x");
    write_double(f, "CURVE_Y", options.curve_y, "[pix] common-curve offset y");
    write_string(f, "ORIGIN", "shiftstack", nullptr);
    detail::write_float_image(f, x.science, "IMAGE");
    write_cards(f, options.extra_cards);
    write_mask(f, x.mask, x.science.width, x.science.height, "MASK", true);
    detail::write_float_image(f, x.variance, "VARIANCE");
    detail::write_float_image(f, x.psf, "PSF");
    f.close();
  } catch (...) {
    std::error_code ec;
    std::filesystem::remove(temporary, ec);
    throw;
  }
  detail::commit_file(temporary, path);
}

void write_workunit_fits(const std::string& path, const ExposureStack& stack, bool compress) {
  const std::string temporary = detail::temporary_sibling(path);
  try {
    FitsFile f = FitsFile::create(temporary);
    write_empty_primary(f);
    int status = 0;
    int count = stack.size();
    fits_update_key(f.get(), TINT, "NUMIMG", &count, "number of images", &status);
    int reprojected = 0;
    fits_update_key(f.get(), TLOGICAL, "REPRJCTD", &reprojected, nullptr, &status);
    f.check(status, "writing the WorkUnit header");
    for (int i = 0; i < stack.size(); ++i) {
      const Exposure& x = stack.exposures[i];
      const std::string index = std::to_string(i);
      auto compressed = [&](bool on) {
        int s = 0;
        // Off is 0: with NOCOMPRESS (-1) cfitsio 4.2 still creates later HDUs as compressed tables.
        fits_set_compression_type(f.get(), on ? GZIP_2 : 0, &s);
        // Quantize level 0: floats are stored exactly (lossless GZIP of the bytes).
        if (on) fits_set_quantize_level(f.get(), 0.0f, &s);
        f.check(s, "setting tile compression");
      };
      compressed(compress);
      detail::write_float_image(f, x.science, "SCI_" + index);
      write_double(f, "MJD", x.epoch, "[d] observation time (UTC)");
      write_double(f, "THROUGHP", x.throughput, "relative throughput a_e");
      detail::write_float_image(f, x.variance, "VAR_" + index);
      compressed(false);
      write_mask(f, x.mask, x.science.width, x.science.height, "MSK_" + index, false);
      detail::write_float_image(f, x.psf, "PSF_" + index);
    }
    f.close();
  } catch (...) {
    std::error_code ec;
    std::filesystem::remove(temporary, ec);
    throw;
  }
  detail::commit_file(temporary, path);
}

}  // namespace shiftstack::io
