// Files that hold a single image and no noise plane (read_internal.hpp).
#include <algorithm>
#include <cmath>
#include <sstream>

#include "io/read_internal.hpp"

namespace shiftstack::io::detail {

int single_image_hdu(FitsFile& file) {
  int found = 0;
  const int hdus = file.hdu_count();
  for (int h = 1; h <= hdus; ++h) {
    file.move_to(h);
    int type = 0, status = 0;
    fits_get_hdu_type(file.get(), &type, &status);
    if (status || type != IMAGE_HDU) continue;
    const ImageShape shape = image_shape(file);
    if (shape.naxis < 2 || shape.width < 2 || shape.height < 2) continue;
    if (found) return 0;
    found = h;
  }
  return found;
}

double single_image_noise(const Image<float>& science, const SingleImageVariance& how, const std::string& label,
                          std::string& description, std::vector<std::string>& warnings) {
  if (!how.estimate) {
    std::ostringstream d;
    d << "given (single_image_variance) = " << how.value;
    description = d.str();
    return how.value;
  }
  std::vector<float> finite;
  finite.reserve(science.size());
  for (float v : science.pixels)
    if (std::isfinite(v)) finite.push_back(v);
  constexpr std::size_t min_pixels = 16;  // a spread from fewer pixels means little
  if (finite.size() < min_pixels) throw Error(label + ": too few finite pixels to estimate the noise of a single image");
  auto median_of = [](std::vector<float>& v) {
    const std::size_t mid = v.size() / 2;
    std::nth_element(v.begin(), v.begin() + std::ptrdiff_t(mid), v.end());
    return double(v[mid]);
  };
  std::vector<float> values = finite;
  const double median = median_of(values);
  for (float& v : finite) v = float(std::abs(v - median));
  // 1.4826 MAD is the standard deviation of Gaussian noise, robust to sources and outliers.
  const double sigma = 1.4826 * median_of(finite);
  if (!(sigma > 0)) throw Error(label + ": the image's median absolute deviation is 0; its noise cannot be estimated");
  std::ostringstream d;
  d.precision(6);
  d << "estimated (1.4826 MAD)^2 = " << sigma * sigma;
  description = d.str();
  // The statistic assumes background-subtracted images; a large median says this one is not.
  constexpr double background_sigmas = 3;
  if (std::abs(median) > background_sigmas * sigma) {
    std::ostringstream w;
    w.precision(4);
    w << label << ": the image's median is " << median << ", " << std::abs(median) / sigma
      << " times its noise: the search assumes background-subtracted (difference) images";
    warnings.push_back(w.str());
  }
  return sigma * sigma;
}

}  // namespace shiftstack::io::detail
