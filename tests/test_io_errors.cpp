// Bad input gives a clear Error that names the file and the problem: truncated files, missing
// HDUs, NaN planes, mismatched sizes, unreadable paths, duplicate epochs, bad configurations.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "io/fits_util.hpp"
#include "io/read_internal.hpp"
#include "shiftstack/error.hpp"
#include "shiftstack/io/config.hpp"
#include "shiftstack/io/fits.hpp"
#include "shiftstack/synth.hpp"
#include "test_io_support.hpp"

namespace shiftstack::io {
namespace {

using testing_support::TempDir;

// Runs `body`, expects an Error whose message contains every fragment.
template <typename Body>
void expect_error(Body body, std::initializer_list<std::string> fragments) {
  try {
    body();
  } catch (const Error& e) {
    const std::string message = e.what();
    for (const auto& f : fragments) EXPECT_NE(message.find(f), std::string::npos) << "'" << f << "' not in: " << message;
    return;
  }
  ADD_FAILURE() << "expected an Error";
}

Exposure small_exposure(double epoch, int width = 16, int height = 12) {
  Exposure x;
  x.science = Image<float>(width, height, 1.0f);
  x.variance = Image<float>(width, height, 2.0f);
  x.mask = Image<std::uint8_t>(width, height, 0);
  x.psf = gaussian_psf(1.0);
  x.epoch = epoch;
  return x;
}

// A file with chosen planes, written with cfitsio directly (not through the writer under test).
void write_planes(const std::string& path, const std::vector<std::pair<std::string, Image<float>>>& planes,
                  double mjd = 60000.5) {
  auto f = detail::FitsFile::create(path);
  int status = 0;
  fits_create_img(f.get(), BYTE_IMG, 0, nullptr, &status);
  fits_update_key_dbl(f.get(), "MJD-OBS", mjd, -17, nullptr, &status);
  f.check(status, "primary");
  for (const auto& [name, image] : planes) detail::write_float_image(f, image, name);
  f.close();
}

TEST(IoBadInput, UnreadablePaths) {
  TempDir dir;
  expect_error([&] { expand_inputs({dir.file("missing.fits")}); }, {"missing.fits", "no such file"});
  expect_error([&] { expand_inputs({dir.file("*.fits")}); }, {"pattern matches no files"});
  expect_error([&] { expand_inputs({dir.path()}); }, {"directory has no FITS files"});
  expect_error([&] { expand_inputs({}); }, {"no input files"});
  expect_error([&] { expand_inputs({std::string("@").append(dir.file("list.txt"))}); }, {"cannot read the input list"});
  // Not a FITS file at all.
  const std::string text = dir.file("notes.fits");
  std::ofstream(text) << "this is not FITS\n";
  expect_error([&] { read_exposures({text}, ReadOptions{}); }, {"notes.fits", "cannot open as FITS"});
  // A directory given where a file is read.
  expect_error([&] { read_exposures({dir.path()}, ReadOptions{}); }, {"is a directory"});
}

TEST(IoBadInput, InputListsAndDuplicates) {
  TempDir dir;
  write_exposure_fits(dir.file("a.fits"), small_exposure(60000.1));
  write_exposure_fits(dir.file("b.fits"), small_exposure(60000.2));
  std::ofstream(dir.file("list.txt")) << "# two files\na.fits\n\n" << dir.file("b.fits") << "\n";
  const auto files = expand_inputs({std::string("@").append(dir.file("list.txt")), dir.file("a.fits")});
  ASSERT_EQ(files.size(), 2u);  // a.fits once
  EXPECT_EQ(read_exposures(files, ReadOptions{}).stack.size(), 2);
}

TEST(IoBadInput, TruncatedFile) {
  TempDir dir;
  const std::string path = dir.file("truncated.fits");
  write_exposure_fits(path, small_exposure(60000.1, 64, 64));
  const auto size = std::filesystem::file_size(path);
  std::filesystem::resize_file(path, size / 2);
  expect_error([&] { read_exposures({path, dir.file("other.fits")}, ReadOptions{}); }, {"truncated.fits"});
  write_exposure_fits(dir.file("other.fits"), small_exposure(60000.2, 64, 64));
  expect_error([&] { read_exposures({path, dir.file("other.fits")}, ReadOptions{}); }, {"truncated.fits"});
}

TEST(IoBadInput, MissingHdus) {
  TempDir dir;
  const std::string only_image = dir.file("image_only.fits");
  write_planes(only_image, {{"IMAGE", Image<float>(8, 8, 1.0f)}});
  expect_error([&] { read_exposures({only_image}, ReadOptions{}); }, {"image_only.fits", "no HDU named VARIANCE"});
  const std::string bare = dir.file("bare.fits");
  write_planes(bare, {});
  expect_error([&] { read_exposures({bare}, ReadOptions{}); }, {"bare.fits", "no HDU named IMAGE"});
  // A WorkUnit whose SCI_1 lacks its VAR_1.
  const std::string wu = dir.file("workunit.fits");
  write_planes(wu, {{"SCI_0", Image<float>(8, 8, 1.0f)}, {"VAR_0", Image<float>(8, 8, 1.0f)},
                    {"SCI_1", Image<float>(8, 8, 1.0f)}});
  expect_error([&] { read_exposures({wu}, ReadOptions{}); }, {"workunit.fits", "SCI_1 but no VAR_1"});
}

TEST(IoBadInput, NanPlanesAndNanPixels) {
  TempDir dir;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::string all_nan = dir.file("nan_science.fits");
  write_planes(all_nan, {{"IMAGE", Image<float>(8, 8, nan)}, {"VARIANCE", Image<float>(8, 8, 1.0f)}});
  expect_error([&] { read_exposures({all_nan}, ReadOptions{}); }, {"nan_science.fits", "science plane has no finite values"});
  const std::string bad_variance = dir.file("nan_variance.fits");
  write_planes(bad_variance, {{"IMAGE", Image<float>(8, 8, 1.0f)}, {"VARIANCE", Image<float>(8, 8, nan)}});
  expect_error([&] { read_exposures({bad_variance}, ReadOptions{}); }, {"nan_variance.fits", "variance plane has no usable values"});
  // Scattered NaN pixels are masked and counted, not an error (KBMOD masks them too).
  Image<float> science(8, 8, 1.0f);
  science(2, 3) = nan;
  Image<float> variance(8, 8, 1.0f);
  variance(5, 5) = -1.0f;
  write_planes(dir.file("a.fits"), {{"IMAGE", science}, {"VARIANCE", variance}}, 60000.1);
  write_planes(dir.file("b.fits"), {{"IMAGE", Image<float>(8, 8, 1.0f)}, {"VARIANCE", Image<float>(8, 8, 1.0f)}}, 60000.2);
  const LoadedStack s = read_exposures({dir.file("a.fits"), dir.file("b.fits")}, ReadOptions{});
  EXPECT_EQ(s.info[0].nonfinite_pixels, 2);
  EXPECT_TRUE(s.stack.exposures[0].mask(2, 3));
  EXPECT_TRUE(s.stack.exposures[0].mask(5, 5));
  EXPECT_EQ(s.stack.exposures[0].science(2, 3), 0.0f);  // no NaN left for later arithmetic
  EXPECT_EQ(s.info[0].mask, "none (no mask plane)");
}

TEST(IoBadInput, MismatchedSizes) {
  TempDir dir;
  const std::string inside = dir.file("inside.fits");
  write_planes(inside, {{"IMAGE", Image<float>(8, 8, 1.0f)}, {"VARIANCE", Image<float>(8, 6, 1.0f)}});
  expect_error([&] { read_exposures({inside}, ReadOptions{}); }, {"inside.fits", "variance plane is 8x6", "science plane is 8x8"});
  write_exposure_fits(dir.file("a.fits"), small_exposure(60000.1, 16, 12));
  write_exposure_fits(dir.file("b.fits"), small_exposure(60000.2, 16, 14));
  expect_error([&] { read_exposures({dir.file("a.fits"), dir.file("b.fits")}, ReadOptions{}); },
               {"16x14", "16x12", "one pixel grid"});
}

TEST(IoBadInput, DuplicateEpochsAndTooFewExposures) {
  TempDir dir;
  write_exposure_fits(dir.file("a.fits"), small_exposure(60000.1));
  write_exposure_fits(dir.file("b.fits"), small_exposure(60000.1));
  expect_error([&] { read_exposures({dir.file("a.fits"), dir.file("b.fits")}, ReadOptions{}); }, {"same epoch"});
  expect_error([&] { read_exposures({dir.file("a.fits")}, ReadOptions{}); }, {"at least 2"});
}

TEST(IoBadInput, MostlyMaskedExposuresAreDropped) {
  TempDir dir;
  Exposure masked = small_exposure(60000.3);
  for (std::size_t p = 0; p < masked.mask.size() * 3 / 4; ++p) masked.mask.pixels[p] = 1;
  write_exposure_fits(dir.file("a.fits"), small_exposure(60000.1));
  write_exposure_fits(dir.file("b.fits"), small_exposure(60000.2));
  write_exposure_fits(dir.file("c.fits"), masked);
  const LoadedStack s = read_exposures(expand_inputs({dir.path()}), ReadOptions{});
  EXPECT_EQ(s.stack.size(), 2);
  ASSERT_EQ(s.warnings.size(), 1u);
  EXPECT_NE(s.warnings[0].find("c.fits: dropped"), std::string::npos) << s.warnings[0];
}

TEST(IoMaskPlanes, ConfiguredPlanesAndBitmasks) {
  TempDir dir;
  // Codes: bit 0 BAD, bit 5 DETECTED (never a reason to reject), bit 1 SAT.
  auto f = detail::FitsFile::create(dir.file("planes.fits"));
  int status = 0;
  fits_create_img(f.get(), BYTE_IMG, 0, nullptr, &status);
  fits_update_key_dbl(f.get(), "MJD-OBS", 60000.1, -17, nullptr, &status);
  detail::write_float_image(f, Image<float>(4, 1, 1.0f), "IMAGE");
  long naxes[2] = {4, 1};
  fits_create_img(f.get(), LONG_IMG, 2, naxes, &status);
  std::string extname = "MASK";
  fits_update_key_str(f.get(), "EXTNAME", extname.data(), nullptr, &status);
  for (auto [key, bit] : std::vector<std::pair<std::string, int>>{{"MP_BAD", 0}, {"MP_SAT", 1}, {"MP_DETECTED", 5}})
    fits_update_key(f.get(), TINT, key.c_str(), &bit, nullptr, &status);
  int codes[4] = {0, 1, 1 << 5, 2};
  long first[2] = {1, 1};
  fits_write_pix(f.get(), TINT, first, 4, codes, &status);
  f.check(status, "mask");
  detail::write_float_image(f, Image<float>(4, 1, 1.0f), "VARIANCE");
  f.close();
  write_exposure_fits(dir.file("other.fits"), small_exposure(60000.2, 4, 1));

  const std::vector<std::string> files = {dir.file("planes.fits"), dir.file("other.fits")};
  ReadOptions o;
  o.max_masked_fraction = 1;
  LoadedStack s = read_exposures(files, o);
  const auto& m = s.stack.exposures[0].mask;
  EXPECT_EQ((std::vector<int>{m(0, 0), m(1, 0), m(2, 0), m(3, 0)}), (std::vector<int>{0, 1, 0, 1}));
  EXPECT_NE(s.info[0].mask.find("MP_* keywords"), std::string::npos);
  o.flag_keys = {"SAT"};
  s = read_exposures(files, o);
  EXPECT_EQ((std::vector<int>{s.stack.exposures[0].mask(0, 0), s.stack.exposures[0].mask(1, 0),
                              s.stack.exposures[0].mask(2, 0), s.stack.exposures[0].mask(3, 0)}),
            (std::vector<int>{0, 0, 0, 1}));
  // Integer codes: any bit of the bitmask.
  o.mask_kind = MaskKind::bitmask;
  o.mask_bitmask = 1 << 5;
  s = read_exposures(files, o);
  EXPECT_EQ((std::vector<int>{s.stack.exposures[0].mask(0, 0), s.stack.exposures[0].mask(1, 0),
                              s.stack.exposures[0].mask(2, 0), s.stack.exposures[0].mask(3, 0)}),
            (std::vector<int>{0, 0, 1, 0}));
}

TEST(IoNoisePlanes, SigmaAndWeightPlanesBecomeVariances) {
  TempDir dir;
  write_planes(dir.file("sigma.fits"), {{"IMAGE", Image<float>(4, 4, 1.0f)}, {"VARIANCE", Image<float>(4, 4, 3.0f)}}, 60000.1);
  write_planes(dir.file("sigma2.fits"), {{"IMAGE", Image<float>(4, 4, 1.0f)}, {"VARIANCE", Image<float>(4, 4, 0.5f)}}, 60000.2);
  ReadOptions o;
  o.variance_kind = VarianceKind::sigma;
  LoadedStack s = read_exposures({dir.file("sigma.fits"), dir.file("sigma2.fits")}, o);
  EXPECT_FLOAT_EQ(s.stack.exposures[0].variance(1, 1), 9.0f);
  EXPECT_FLOAT_EQ(s.stack.exposures[1].variance(1, 1), 0.25f);
  o.variance_kind = VarianceKind::weight;
  s = read_exposures({dir.file("sigma.fits"), dir.file("sigma2.fits")}, o);
  EXPECT_FLOAT_EQ(s.stack.exposures[0].variance(1, 1), 1.0f / 3.0f);
  EXPECT_FLOAT_EQ(s.stack.exposures[1].variance(1, 1), 2.0f);
}

TEST(IoTimes, CalendarAndTimeScales) {
  EXPECT_DOUBLE_EQ(iso_to_mjd("1858-11-17"), 0.0);      // the MJD epoch
  EXPECT_DOUBLE_EQ(iso_to_mjd("2000-01-01T12:00:00"), 51544.5);  // J2000.0 (as a UTC label)
  EXPECT_THROW(iso_to_mjd("yesterday"), Error);
  const double t = 59000.25;  // 2020: TAI - UTC = 37 s, GPS = TAI - 19 s, TT = TAI + 32.184 s
  EXPECT_NEAR((t - mjd_to_utc(t, "TAI")) * 86400, 37.0, 1e-6);
  EXPECT_NEAR((t - mjd_to_utc(t, "TT")) * 86400, 69.184, 1e-6);
  EXPECT_NEAR((t - mjd_to_utc(t, "GPS")) * 86400, 18.0, 1e-6);
  EXPECT_EQ(mjd_to_utc(t, "UTC"), t);
  const double t1999 = iso_to_mjd("1999-06-01");  // TAI - UTC = 32 s then
  EXPECT_NEAR((t1999 - mjd_to_utc(t1999, "TAI")) * 86400, 32.0, 1e-6);
  EXPECT_THROW(mjd_to_utc(t, "LOCAL"), Error);
}

TEST(IoTimes, DateAvgHonoursTimesys) {
  detail::Header h;
  h.cards = {{"DATE-AVG", "2020-06-01T00:00:37"}, {"TIMESYS", "TAI"}};
  h.is_string = {true, true};
  const auto e = detail::read_epoch(h, detail::Header{}, "auto", "test");
  EXPECT_NEAR(e.mjd, iso_to_mjd("2020-06-01T00:00:00"), 1e-9);
  EXPECT_EQ(e.keyword, "DATE-AVG (TAI -> UTC)");
  detail::Header none;
  expect_error([&] { detail::read_epoch(none, none, "auto", "nothing.fits"); }, {"nothing.fits", "no observation time"});
}

}  // namespace
}  // namespace shiftstack::io
