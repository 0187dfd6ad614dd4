// The readers against third-party FITS files (tests/data/fixtures): header values read here are
// compared with the values in the files' own headers and with astropy's (independent SIP code)
// pixel-to-sky results, recorded when these tests were written.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "io/fits_util.hpp"
#include "io/read_internal.hpp"
#include "shiftstack/error.hpp"
#include "shiftstack/io/config.hpp"
#include "shiftstack/io/fits.hpp"
#include "shiftstack/run.hpp"
#include "shiftstack/io/wcs.hpp"
#include "test_io_support.hpp"

namespace shiftstack::io {
namespace {

using testing_support::fixture;
using testing_support::TempDir;

// Degrees to within a micro-arcsecond or so.
constexpr double sky_tolerance = 1e-9;

std::optional<Wcs> wcs_of(const std::string& path, int hdu) {
  auto file = detail::FitsFile::open_read(path);
  file.move_to(hdu + 1);
  return Wcs::from_header(detail::Header::read(file).raw, path);
}

TEST(IoFixtures, KbmodFilesReadWithTimesPlanesAndWcs) {
  std::vector<std::string> files;
  for (int i = 0; i < 4; ++i) files.push_back(fixture("kbmod/small/00000" + std::to_string(i) + ".fits"));
  ReadOptions o;
  const LoadedStack loaded = read_exposures(files, o);
  ASSERT_EQ(loaded.stack.size(), 4);
  // MJD keywords of the primary headers.
  const double mjd[4] = {57130.19921875, 57130.2109375, 57130.21875, 57131.19921875};
  for (int e = 0; e < 4; ++e) {
    EXPECT_DOUBLE_EQ(loaded.stack.exposures[e].epoch, mjd[e]);
    EXPECT_EQ(loaded.info[e].epoch_keyword, "MJD");
    EXPECT_EQ(loaded.info[e].hdus, "HDU1,HDU2,HDU3");  // unnamed HDUs: positional layout
    EXPECT_EQ(loaded.info[e].masked_pixels, 0);
    EXPECT_TRUE(loaded.info[e].has_wcs);
    EXPECT_NE(loaded.info[e].mask.find("default plane numbers"), std::string::npos);
  }
  const Exposure& first = loaded.stack.exposures[0];
  EXPECT_EQ(first.science.width, 64);
  EXPECT_EQ(first.science.height, 64);
  EXPECT_FLOAT_EQ(first.science(11, 27), 42.63623f);  // the fake object's peak (numpy [27, 11])
  EXPECT_FLOAT_EQ(first.science(0, 0), 2.3279634f);
  EXPECT_FLOAT_EQ(first.variance(5, 5), 4.0f);
  EXPECT_EQ(first.psf.width % 2, 1);  // no PSF HDU: the Gaussian psf_val kernel

  // SIP-typed WCS without coefficients; astropy's all_pix2world(x, y, 0).
  ASSERT_TRUE(loaded.wcs[0]);
  const Wcs& w = *loaded.wcs[0];
  SkyPosition p = w.pixel_to_sky(0, 0);
  EXPECT_NEAR(p.ra, 200.464269890609, sky_tolerance);
  EXPECT_NEAR(p.dec, -7.713090925436, sky_tolerance);
  p = w.pixel_to_sky(10, 20);
  EXPECT_NEAR(p.ra, 200.465745511596, sky_tolerance);
  EXPECT_NEAR(p.dec, -7.713824050916, sky_tolerance);
  // 1-based FITS convention: CRVAL sits at (CRPIX1 - 1, CRPIX2 - 1) in 0-based pixels.
  p = w.pixel_to_sky(1033.934327 - 1, 2043.548284 - 1);
  EXPECT_NEAR(p.ra, 200.614997245422, sky_tolerance);
  EXPECT_NEAR(p.dec, -7.78878863332778, sky_tolerance);
  double x = 0, y = 0;
  w.sky_to_pixel(200.465745511596, -7.713824050916, x, y);
  EXPECT_NEAR(x, 10, 1e-6);
  EXPECT_NEAR(y, 20, 1e-6);
}

TEST(IoFixtures, SipDistortionMatchesAstropy) {
  const auto w = wcs_of(fixture("astropy/sip-wcs.fits"), 0);
  ASSERT_TRUE(w);
  EXPECT_TRUE(w->has_distortion());
  struct Point {
    double x, y, ra, dec;
  };
  for (const Point& q : {Point{0, 0, 280.537916970419, 0.110075388030}, Point{10, 20, 280.539951866399, 0.112884817199},
                         Point{99, 49, 280.554299409994, 0.115109986246}}) {
    const SkyPosition p = w->pixel_to_sky(q.x, q.y);
    EXPECT_NEAR(p.ra, q.ra, sky_tolerance) << q.x << "," << q.y;
    EXPECT_NEAR(p.dec, q.dec, sky_tolerance) << q.x << "," << q.y;
    double x = 0, y = 0;
    w->sky_to_pixel(p.ra, p.dec, x, y);  // through the inverse distortion
    EXPECT_NEAR(x, q.x, 1e-4);
    EXPECT_NEAR(y, q.y, 1e-4);
  }
  // At CRPIX (37.5, 25) the SIP polynomials vanish: CRVAL exactly.
  const SkyPosition c = w->pixel_to_sky(37.5 - 1, 25.0 - 1);
  EXPECT_NEAR(c.ra, 280.544106813, 1e-9);
  EXPECT_NEAR(c.dec, 0.112838900008, 1e-9);
}

TEST(IoFixtures, TimesFromMjdObsAndFromDateObsPlusHalfExposure) {
  const std::string path = fixture("astropy/sip-wcs.fits");
  auto file = detail::FitsFile::open_read(path);
  const detail::Header h = detail::Header::read(file);
  const detail::Header none;
  // MJD-OBS as given (KBMOD's convention).
  auto e = detail::read_epoch(h, none, "auto", path);
  EXPECT_DOUBLE_EQ(e.mjd, 55805.089641204);
  EXPECT_EQ(e.keyword, "MJD-OBS");
  // Without MJD-OBS: DATE-OBS '2011-09-01T02:09:05' plus EXPTIME/2 = 60 s. The header's own
  // MJD-OBS (the same instant as DATE-OBS) checks the calendar conversion independently.
  detail::Header no_mjd = h;
  for (auto& card : no_mjd.cards)
    if (card.first == "MJD-OBS") card.first = "XMJD-OBS";
  e = detail::read_epoch(no_mjd, none, "auto", path);
  EXPECT_NEAR(e.mjd, 55805.089641204 + 60.0 / 86400, 1e-9);
  EXPECT_EQ(e.keyword, "DATE-OBS + EXPTIME/2");
  // A keyword named in the config is used as given.
  e = detail::read_epoch(h, none, "JD-OBS", path);
  EXPECT_DOUBLE_EQ(e.mjd, 2455805.589641204);
  EXPECT_THROW(detail::read_epoch(h, none, "EXPSTART", path), Error);
}

TEST(IoFixtures, HstExtensionsByNameAndConstantErrorPlanes) {
  const std::string path = fixture("astropy/o4sp040b0_raw.fits");
  ReadOptions o;
  o.science_hdu = "SCI";
  o.variance_hdu = "ERR";
  o.mask_hdu = "DQ";
  o.variance_kind = VarianceKind::sigma;
  o.mask_kind = MaskKind::bitmask;
  o.epoch_keyword = "EXPSTART";
  // ERR is an IRAF constant array (NAXIS = 0, PIXVALUE = 0): a zero sigma everywhere is not a
  // usable noise plane, and the error says so.
  try {
    read_exposures({path}, o);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sigma plane has no usable values"), std::string::npos) << e.what();
  }
  // Without names the HDUs are SCI/ERR/DQ, not an unnamed triple: a clear error, listing them.
  try {
    read_exposures({path}, ReadOptions{});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("1:SCI"), std::string::npos) << e.what();
  }
  // The time keyword itself, from the SCI header: EXPSTART = 50923.77657113.
  auto file = detail::FitsFile::open_read(path);
  ASSERT_TRUE(file.move_to_name("SCI"));
  const detail::Header sci = detail::Header::read(file);
  file.move_to(1);
  const detail::Header primary = detail::Header::read(file);
  EXPECT_DOUBLE_EQ(detail::read_epoch(sci, primary, "EXPSTART", path).mjd, 50923.77657113);
  EXPECT_EQ(sci.text("EXTNAME").value_or(""), "SCI");
}

TEST(IoFixtures, TileCompressedImageReadsTransparently) {
  const std::string path = fixture("astropy/comp.fits");
  auto file = detail::FitsFile::open_read(path);
  file.move_to(2);
  const detail::Header h = detail::Header::read(file);
  const Image<float> image = detail::read_float_image(file, h, "compressed image");
  ASSERT_EQ(image.width, 440);
  ASSERT_EQ(image.height, 300);
  // Pixel values and the total as numpy reads them (data[0, 0], data[10, 20], data[299, 439]).
  EXPECT_EQ(image(0, 0), 7.0f);
  EXPECT_EQ(image(20, 10), 127.0f);
  EXPECT_EQ(image(439, 299), 65.0f);
  double total = 0;
  for (float v : image.pixels) total += v;
  EXPECT_EQ(total, 34417871.0);
  const auto w = Wcs::from_header(h.raw, path);
  ASSERT_TRUE(w);
  const SkyPosition p = w->pixel_to_sky(439, 299);
  EXPECT_NEAR(p.ra, 49.675034153994, sky_tolerance);
  EXPECT_NEAR(p.dec, -37.086965363389, sky_tolerance);
}

TEST(IoFixtures, SearchFindsTheKbmodFakeObject) {
  // The fake object sits at (11, 27) in the first three exposures (MJD 57130.20-.22) and at
  // (27, 30) one day later: about (16, 3) pixels per day from (11, 27) at the first epoch.
  SearchConfig config = parse_config(R"(
generator_config: {name: VelocityGridSearch, vx_steps: 21, min_vx: 0, max_vx: 20, vy_steps: 11, min_vy: -5, max_vy: 5}
reference_time: first
cpu_only: true
lh_level: 10
stamp_radius: 3
)",
                                     "test");
  RunOptions options;
  options.inputs = {fixture("kbmod/small/000000.fits"), fixture("kbmod/small/000001.fits"),
                    fixture("kbmod/small/000002.fits"), fixture("kbmod/small/000003.fits")};
  RunOutput run = run_search(config, options);
  ASSERT_GE(run.detections.size(), 1u);
  const Detection& best = run.detections.front();
  const Velocity v = run.bank.velocity(std::size_t(best.candidate.velocity));
  EXPECT_EQ(best.candidate.x, 11);
  EXPECT_EQ(best.candidate.y, 27);
  EXPECT_NEAR(v.vx, 16, 1.0);
  EXPECT_NEAR(v.vy, 3, 1.0);
  EXPECT_EQ(best.obs_count, 4);
  // RA/Dec at the first epoch is the WCS at (11, 27).
  ASSERT_TRUE(run.have_sky);
  const SkyPosition expected = run.loaded.wcs[0]->pixel_to_sky(11, 27);
  EXPECT_NEAR(run.sky_first[0].ra, expected.ra, 1e-12);
  EXPECT_NEAR(run.sky_first[0].dec, expected.dec, 1e-12);
}

}  // namespace
}  // namespace shiftstack::io

namespace shiftstack::io {
namespace {

std::string header_cards(const std::vector<std::string>& cards) {
  std::string out;
  for (std::string c : cards) {
    c.resize(80, ' ');
    out += c;
  }
  return out;
}

TEST(IoWcs, TpvPolynomialMatchesItsAnalyticEquivalent) {
  // TPV applies xi' = PV1_0 + PV1_1 xi + PV1_4 xi^2 + ... before the TAN projection (degrees).
  const double cd = 7.3e-5, c0 = 2.0e-4, a = 0.5;
  auto cards = [&](const std::string& ctype1, const std::string& ctype2, double crpix1,
                   const std::vector<std::string>& extra) {
    std::vector<std::string> list = {"WCSAXES =                    2",
                                     "CTYPE1  = '" + ctype1 + "'",
                                     "CTYPE2  = '" + ctype2 + "'",
                                     "CRPIX1  = " + std::to_string(crpix1),
                                     "CRPIX2  = 50.0",
                                     "CRVAL1  = 30.0",
                                     "CRVAL2  = -10.0",
                                     "CD1_1   = " + std::to_string(cd),
                                     "CD1_2   = 0.0",
                                     "CD2_1   = 0.0",
                                     "CD2_2   = " + std::to_string(cd)};
    list.insert(list.end(), extra.begin(), extra.end());
    return header_cards(list);
  };
  char c0_text[40], a_text[40];
  std::snprintf(c0_text, sizeof c0_text, "%.10E", c0);
  std::snprintf(a_text, sizeof a_text, "%.10E", a);
  // Constant and linear terms only: a TAN with CRPIX1 moved by -c0 / cd pixels.
  const auto tpv = Wcs::from_header(cards("RA---TPV", "DEC--TPV", 40.0,
                                          {"PV1_0   = " + std::string(c0_text), "PV1_1   = 1.0", "PV2_1   = 1.0"}),
                                    "tpv");
  const auto tan = Wcs::from_header(cards("RA---TAN", "DEC--TAN", 40.0 - c0 / cd, {}), "tan");
  ASSERT_TRUE(tpv && tan);
  EXPECT_TRUE(tpv->has_distortion());
  for (auto [x, y] : std::vector<std::pair<double, double>>{{0, 0}, {39, 49}, {120, 7}}) {
    const SkyPosition p = tpv->pixel_to_sky(x, y), q = tan->pixel_to_sky(x, y);
    EXPECT_NEAR(p.ra, q.ra, 1e-10) << x << "," << y;
    EXPECT_NEAR(p.dec, q.dec, 1e-10) << x << "," << y;
  }
  // A quadratic term along the reference row (eta = 0): xi' = xi + a xi^2, the TAN position of
  // the pixel whose xi is xi'.
  const auto quadratic = Wcs::from_header(
      cards("RA---TPV", "DEC--TPV", 40.0, {"PV1_1   = 1.0", "PV1_4   = " + std::string(a_text), "PV2_1   = 1.0"}), "tpv2");
  const auto plain = Wcs::from_header(cards("RA---TAN", "DEC--TAN", 40.0, {}), "tan2");
  const double x = 140;  // 0-based; FITS x = 141, xi = cd * (141 - 40)
  const double xi = cd * (x + 1 - 40.0), xi2 = xi + a * xi * xi;
  const SkyPosition p = quadratic->pixel_to_sky(x, 49);
  const SkyPosition q = plain->pixel_to_sky(xi2 / cd + 40.0 - 1, 49);
  EXPECT_NEAR(p.ra, q.ra, 1e-10);
  EXPECT_NEAR(p.dec, q.dec, 1e-10);
  EXPECT_GT(std::abs(p.ra - plain->pixel_to_sky(x, 49).ra), 1e-7);  // the term matters
}

TEST(IoWcs, HeadersWithoutCelestialAxesHaveNoWcs) {
  EXPECT_FALSE(Wcs::from_header(header_cards({"CTYPE1  = 'LINEAR'", "CTYPE2  = 'LINEAR'"}), "linear"));
  EXPECT_FALSE(Wcs::from_header(header_cards({"OBJECT  = 'nothing'"}), "plain"));
}

}  // namespace
}  // namespace shiftstack::io
