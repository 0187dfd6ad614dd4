// Reading exposures from FITS files (cfitsio) into an ExposureStack, and writing them back.
//
// Layouts recognised:
//   rubin     primary header + IMAGE, MASK, VARIANCE image HDUs found by EXTNAME (names
//             configurable); without those names, HDUs 1, 2, 3 in that order.
//   workunit  KBMOD WorkUnit files: SCI_i, VAR_i, MSK_i and optional PSF_i HDUs for i = 0..n-1,
//             several exposures in one file (tile-compressed HDUs are read transparently), or a
//             sharded WorkUnit: a primary file (NUMIMG, KBMOD_CONFIG, IMG_META) beside files
//             i_<name> holding image i each.
//   single    one image HDU per file and no noise plane: the variance is estimated from the
//             image or given (ReadOptions::single_image_variance).
// Masks: bit planes named by MP_<NAME> header keywords (Rubin/LSST), rejecting the planes in
// `flag_keys`; or integer codes (DECam style) rejecting any bit of `mask_bitmask`. Non-finite
// science or variance values, and variance <= 0, are masked too (counted per exposure).
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "shiftstack/io/wcs.hpp"
#include "shiftstack/stack.hpp"

namespace shiftstack::io {

enum class Layout { automatic, rubin, workunit, single };
enum class VarianceKind { variance, sigma, weight };  // weight = inverse variance
enum class MaskKind { planes, bitmask };

// The noise of files that hold a single image: a constant variance per image, either estimated
// from the image as (1.4826 MAD)^2 over its finite pixels (a robust sigma, insensitive to the few
// bright sources) or given.
struct SingleImageVariance {
  bool estimate = true;
  double value = 0;  // when not estimated
};

struct ReadOptions {
  Layout layout = Layout::automatic;
  std::string science_hdu = "IMAGE", mask_hdu = "MASK", variance_hdu = "VARIANCE";
  std::string psf_hdu = "PSF";  // per-exposure PSF kernel HDU (Rubin layout); "" = never
  VarianceKind variance_kind = VarianceKind::variance;
  MaskKind mask_kind = MaskKind::planes;
  std::vector<std::string> flag_keys = default_flag_keys();
  std::uint64_t mask_bitmask = ~std::uint64_t(0);
  // "auto": DATE-AVG, MJD-AVG, MJD-OBS, MJD, then DATE-OBS + EXPTIME/2. Any other value names
  // the one keyword to use (a number is an MJD, a string an ISO date), taken as given.
  std::string epoch_keyword = "auto";
  std::string throughput_keyword = "THROUGHP";  // relative throughput a_e; 1 when absent
  // Per-exposure common-curve offsets in pixels (SPEC 2's c_e); 0 when absent.
  std::array<std::string, 2> curve_keywords = {"CURVE_X", "CURVE_Y"};
  double psf_sigma = 1.4;  // Gaussian PSF (pixels) when no kernel HDU is present (KBMOD psf_val)
  double max_masked_fraction = 0.5;  // exposures masked beyond this are dropped (KBMOD)
  std::optional<SingleImageVariance> single_image_variance;  // nullopt: single-image files are an error
  int threads = 0;  // 0 = OpenMP's default
  std::function<void(int done, int total)> progress;  // files read so far; may be empty

  static std::vector<std::string> default_flag_keys();
};

// What was read for one exposure, for the run summary.
struct ExposureInfo {
  std::string file;
  std::string hdus;           // e.g. "IMAGE,MASK,VARIANCE" or "SCI_3,MSK_3,VAR_3"
  double epoch = 0;           // MJD (UTC)
  std::string epoch_keyword;  // which keyword gave the epoch, e.g. "DATE-AVG (TAI)"
  double throughput = 1;
  std::string psf;            // "kernel PSF 15x15" or "gaussian sigma 1.4"
  std::string mask;           // "planes BAD,EDGE,... (MP_* keywords)" etc.
  std::int64_t masked_pixels = 0;     // rejected by the mask plane
  std::int64_t nonfinite_pixels = 0;  // unmasked but NaN/inf/variance <= 0, masked on read
  bool has_wcs = false;
  std::string variance;       // "plane VAR_0" or "estimated (1.4826 MAD)^2 = 3.9" etc.
};

// One original image behind an exposure of a reprojected WorkUnit (KBMOD's IMG_META row).
struct OriginalFrame {
  std::optional<Wcs> ebd;       // original pixels -> the reprojected frame's sky (KBMOD ebd_wcs)
  std::optional<Wcs> original;  // original pixels -> observed sky (KBMOD per_image_wcs)
  int width = 0, height = 0;    // the original image's size (pixels)
};

// The frame of the pixel grid. Plain files: their own WCS. A KBMOD WorkUnit may have been
// reprojected onto a common WCS (`global`); in the barycentric "ebd" frame that WCS gives
// parallax-corrected positions, so observed sky positions go through each exposure's original
// images instead (`originals`).
struct GridFrame {
  bool reprojected = false;
  std::string frame;                            // "", "original" or "ebd" (WorkUnit REPFRAME)
  std::optional<double> barycentric_distance;   // AU (WorkUnit BARY)
  std::optional<Wcs> global;                    // the common WCS (WorkUnit primary header)
  std::vector<std::vector<OriginalFrame>> originals;  // per exposure (ebd frames only)
};

struct LoadedStack {
  ExposureStack stack;                     // sorted by epoch
  std::vector<double> curve_x, curve_y;    // common-curve offsets per exposure (zeros if none)
  std::vector<ExposureInfo> info;          // same order
  std::vector<std::optional<Wcs>> wcs;     // same order
  std::vector<std::string> warnings;       // dropped exposures, inconsistent WCS, ...
  GridFrame frame;
};

// Input paths: files as given, directories (their *.fits, *.fit, *.fits.fz, *.fz, *.fits.gz
// files), glob patterns, and @list files with one path per line. Sorted within each directory
// or glob, duplicates removed. Error when a path does not exist or nothing matches, or names a
// FIFO, device or socket. The tool's own FITS outputs (SSOUTPUT in the primary header) found in
// folders or patterns are left out (with a note in `notes`); named explicitly, they are an Error.
std::vector<std::string> expand_inputs(const std::vector<std::string>& inputs,
                                       std::vector<std::string>* notes = nullptr);

// Reads every exposure of every file (files in parallel), validates, sorts by epoch.
LoadedStack read_exposures(const std::vector<std::string>& files, const ReadOptions& options);

// Date and time helpers (exposed for tests): ISO-8601 date/time -> MJD in the same time scale
// (through cfitsio's parser), and an MJD in a FITS TIMESYS scale -> UTC.
double iso_to_mjd(const std::string& iso);
double mjd_to_utc(double mjd, const std::string& timesys);
double utc_to_tai(double mjd_utc);  // UTC MJD -> TAI MJD (leap-second table)

// ---- writing ------------------------------------------------------------------------------

// Rubin-style file: primary header (MJD-AVG, TIMESYS, THROUGHP, CURVE_X/Y), IMAGE, MASK (bit 0
// = BAD, declared by MP_* keywords), VARIANCE and PSF HDUs. Written atomically.
struct WriteOptions {
  double curve_x = 0, curve_y = 0;  // common-curve offsets to record
  std::string extra_cards;          // optional header cards (80-char each) for the IMAGE HDU
};
void write_exposure_fits(const std::string& path, const Exposure& exposure,
                         const WriteOptions& options = {});

// KBMOD WorkUnit file with every exposure (SCI_i, VAR_i, MSK_i, PSF_i), science and variance
// tile-compressed (lossless GZIP_2) when `compress`. Written atomically.
void write_workunit_fits(const std::string& path, const ExposureStack& stack, bool compress);

}  // namespace shiftstack::io
