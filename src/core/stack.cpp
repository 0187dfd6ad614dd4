#include <cmath>
#include <map>
#include <sstream>
#include <vector>

#include "shiftstack/error.hpp"
#include "shiftstack/stack.hpp"

namespace shiftstack {

std::string exposure_name(const ExposureStack& stack, int index) {
  const auto& label = stack.exposures[index].label;
  return label.empty() ? "exposure " + std::to_string(index)
                       : "exposure " + std::to_string(index) + " (" + label + ")";
}

namespace {

void validate_psf(const ExposureStack& stack, int e) {
  const auto& psf = stack.exposures[e].psf;
  const std::string who = exposure_name(stack, e);
  require(psf.width > 0 && psf.height > 0 && psf.width % 2 == 1 && psf.height % 2 == 1,
          who + ": PSF must be a non-empty odd-sized kernel, got " + std::to_string(psf.width) +
              "x" + std::to_string(psf.height));
  require(psf.size() == std::size_t(psf.width) * psf.height, who + ": PSF pixel count mismatch");
  double sum = 0;
  for (float v : psf.pixels) {
    require(std::isfinite(v), who + ": PSF has a non-finite value");
    sum += v;
  }
  require(std::abs(sum - 1.0) <= 1e-3, who + ": PSF sums to " + std::to_string(sum) + ", not 1");
}

// The per-pixel part of validate(), for one exposure whose planes have matching sizes.
struct PixelCheck {
  std::size_t unmasked = 0, bad_science = 0, bad_variance = 0, first_bad = 0;
};

PixelCheck check_pixels(const Exposure& x) {
  PixelCheck c;
  for (std::size_t p = 0; p < x.science.size(); ++p) {
    if (!x.mask.empty() && x.mask.pixels[p]) continue;
    ++c.unmasked;
    const float s = x.science.pixels[p], v = x.variance.pixels[p];
    if (!std::isfinite(s)) {
      if (!c.bad_science && !c.bad_variance) c.first_bad = p;
      ++c.bad_science;
    }
    if (!std::isfinite(v) || v <= 0) {
      if (!c.bad_science && !c.bad_variance) c.first_bad = p;
      ++c.bad_variance;
    }
  }
  return c;
}

}  // namespace

void validate(const ExposureStack& stack) {
  require(!stack.exposures.empty(), "empty stack: no exposures");
  const int width = stack.width(), height = stack.height();
  require(width > 0 && height > 0, exposure_name(stack, 0) + ": empty science image");
  // The pixel scans run in parallel (a CCD stack has ~1e9 pixels); the checks below still report
  // the first problem in exposure order, exactly as a serial pass would.
  const int count = stack.size();
  std::vector<PixelCheck> pixel_checks(count);
#pragma omp parallel for schedule(dynamic, 1)
  for (int e = 0; e < count; ++e) {
    const Exposure& x = stack.exposures[e];
    const bool sizes_match = x.science.size() == std::size_t(width) * height &&
                             x.variance.size() == x.science.size() &&
                             (x.mask.empty() || x.mask.size() == x.science.size());
    if (sizes_match) pixel_checks[e] = check_pixels(x);
  }
  for (int e = 0; e < stack.size(); ++e) {
    const Exposure& x = stack.exposures[e];
    const std::string who = exposure_name(stack, e);
    auto shape = [](const auto& img) {
      return std::to_string(img.width) + "x" + std::to_string(img.height);
    };
    require(x.science.width == width && x.science.height == height &&
                x.science.size() == std::size_t(width) * height,
            who + ": science is " + shape(x.science) + ", expected " + std::to_string(width) + "x" +
                std::to_string(height) + " like exposure 0");
    require(x.variance.width == width && x.variance.height == height &&
                x.variance.size() == x.science.size(),
            who + ": variance is " + shape(x.variance) + ", science is " + shape(x.science));
    require(x.mask.empty() || (x.mask.width == width && x.mask.height == height &&
                               x.mask.size() == x.science.size()),
            who + ": mask is " + shape(x.mask) + ", science is " + shape(x.science));
    require(std::isfinite(x.epoch), who + ": epoch is not finite");
    require(std::isfinite(x.throughput) && x.throughput > 0,
            who + ": throughput must be finite and > 0, got " + std::to_string(x.throughput));
    validate_psf(stack, e);

    const auto [unmasked, bad_science, bad_variance, first_bad] = pixel_checks[e];
    require(unmasked > 0, who + ": every pixel is masked");
    if (bad_science || bad_variance) {
      std::ostringstream msg;
      msg << who << ": ";
      if (bad_science) msg << bad_science << " unmasked pixels with NaN/inf science";
      if (bad_science && bad_variance) msg << " and ";
      if (bad_variance) msg << bad_variance << " unmasked pixels with variance <= 0 or non-finite";
      msg << " (first at x=" << first_bad % width << ", y=" << first_bad / width
          << "); mask them or fix the input";
      throw Error(msg.str());
    }
  }
}

}  // namespace shiftstack
