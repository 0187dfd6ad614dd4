// World coordinates through wcslib (TAN, SIN, ... with SIP and TPV distortions).
//
// Pixel convention: shiftstack pixels are 0-based with (0, 0) the centre of the first pixel;
// FITS (and wcslib) pixels are 1-based. pixel_to_sky(x, y) evaluates the FITS WCS at
// (x + 1, y + 1), so CRVAL is reached at (CRPIX1 - 1, CRPIX2 - 1).
#pragma once
#include <memory>
#include <optional>
#include <string>

namespace shiftstack::io {

struct SkyPosition {
  double ra = 0, dec = 0;  // degrees
};

class Wcs {
 public:
  // Parses the celestial WCS of a header given as concatenated 80-character cards (cfitsio's
  // fits_hdr2str). Returns nullopt when the header has no celestial WCS; throws Error when it
  // has one that wcslib rejects. `label` names the source in messages.
  static std::optional<Wcs> from_header(const std::string& cards, const std::string& label);

  SkyPosition pixel_to_sky(double x, double y) const;       // 0-based pixel -> degrees
  void sky_to_pixel(double ra, double dec, double& x, double& y) const;  // degrees -> 0-based
  std::string description() const;  // e.g. "RA---TAN-SIP/DEC--TAN-SIP"
  bool has_distortion() const;
  // KBMOD's serialized form (wcs_utils.serialize_wcs): a JSON object of the WCS keywords it was
  // read from (distortions included) with NAXIS1 and NAXIS2 = the image size.
  std::string to_kbmod_json(int width, int height) const;

 private:
  struct State;
  std::shared_ptr<const State> state_;
};

// Header cards (80 characters each) of a TAN WCS with DECam's 0.263"/px scale around
// (RA, Dec) = (150, 2) degrees, centred on the image: what synthetic stacks written to FITS carry
// so that RA/Dec columns are exercised.
std::string synthetic_tan_wcs_cards(int width, int height);

}  // namespace shiftstack::io
