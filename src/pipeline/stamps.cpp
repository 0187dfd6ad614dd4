// Coadded postage stamps along a trajectory (KBMOD's sum, mean, median and weighted coadds).
#include <algorithm>
#include <cmath>
#include <limits>

#include "shiftstack/error.hpp"
#include "shiftstack/pipeline.hpp"

namespace shiftstack {

CoaddType parse_coadd_type(const std::string& name) {
  if (name == "sum") return CoaddType::sum;
  if (name == "mean") return CoaddType::mean;
  if (name == "median") return CoaddType::median;
  if (name == "weighted") return CoaddType::weighted;
  throw Error("unknown coadd type '" + name + "' (known: sum, mean, median, weighted)");
}

std::string to_string(CoaddType type) {
  switch (type) {
    case CoaddType::sum: return "sum";
    case CoaddType::mean: return "mean";
    case CoaddType::median: return "median";
    case CoaddType::weighted: return "weighted";
  }
  return "?";
}

std::vector<Image<float>> coadd_stamps(const ExposureStack& stack, const MotionBank& bank,
                                       const Candidate& candidate,
                                       const std::vector<std::uint8_t>& obs_valid, int radius,
                                       const std::vector<CoaddType>& types) {
  require(radius >= 0, "stamp_radius must be >= 0, got " + std::to_string(radius));
  const int E = stack.size();
  require(bank.exposures() == E, "stamps: the motion bank and the stack differ in exposures");
  require(obs_valid.empty() || int(obs_valid.size()) == E, "stamps: obs_valid has the wrong length");
  const int side = 2 * radius + 1;
  const std::size_t pixels = std::size_t(side) * side;

  // Per stamp pixel, the values (and inverse variances) of the exposures with data there.
  std::vector<std::vector<float>> values(pixels);
  std::vector<double> weighted_sum(pixels, 0), weight_total(pixels, 0), plain_sum(pixels, 0);
  for (int e = 0; e < E; ++e) {
    if (!obs_valid.empty() && !obs_valid[e]) continue;
    const Exposure& x = stack.exposures[e];
    const PixelIndex centre =
        sampled_pixel(bank, candidate.x, candidate.y, std::size_t(candidate.velocity), e);
    for (int dy = -radius; dy <= radius; ++dy)
      for (int dx = -radius; dx <= radius; ++dx) {
        const int px = centre.x + dx, py = centre.y + dy;
        if (!x.science.contains(px, py)) continue;
        if (!x.mask.empty() && x.mask(px, py)) continue;
        const float value = x.science(px, py);
        const float variance = x.variance(px, py);
        if (!std::isfinite(value)) continue;
        const std::size_t k = std::size_t(dy + radius) * side + (dx + radius);
        values[k].push_back(value);
        plain_sum[k] += value;
        if (variance > 0 && std::isfinite(variance)) {
          weighted_sum[k] += value / double(variance);
          weight_total[k] += 1.0 / double(variance);
        }
      }
  }

  const float no_data = std::numeric_limits<float>::quiet_NaN();
  std::vector<Image<float>> out;
  for (CoaddType type : types) {
    Image<float> stamp(side, side, 0.0f);
    for (std::size_t k = 0; k < pixels; ++k) {
      std::vector<float>& v = values[k];
      float result = 0;
      switch (type) {
        case CoaddType::sum:
          result = float(plain_sum[k]);
          break;
        case CoaddType::mean:
          result = v.empty() ? no_data : float(plain_sum[k] / double(v.size()));
          break;
        case CoaddType::weighted:
          result = weight_total[k] > 0 ? float(weighted_sum[k] / weight_total[k]) : no_data;
          break;
        case CoaddType::median: {
          if (v.empty()) {
            result = no_data;
            break;
          }
          // Selection, not a sort; the even case averages the two middle values.
          std::vector<float> w = v;
          const std::size_t mid = w.size() / 2;
          std::nth_element(w.begin(), w.begin() + mid, w.end());
          double m = w[mid];
          if (w.size() % 2 == 0) m = 0.5 * (m + *std::max_element(w.begin(), w.begin() + mid));
          result = float(m);
          break;
        }
      }
      stamp.pixels[k] = result;
    }
    out.push_back(std::move(stamp));
  }
  return out;
}

}  // namespace shiftstack
