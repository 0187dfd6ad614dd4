#include <algorithm>
#include <cmath>
#include <numbers>
#include <random>

#include "shiftstack/error.hpp"
#include "shiftstack/synth.hpp"

namespace shiftstack {

namespace {

// Independent, reproducible random streams per (seed, purpose, exposure).
std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
std::mt19937_64 stream(std::uint64_t seed, std::uint64_t purpose, std::uint64_t index = 0) {
  return std::mt19937_64(mix(mix(mix(seed) ^ purpose) ^ index));
}
enum Purpose : std::uint64_t { epochs_stream = 1, seeing_stream, mask_stream, noise_stream, truth_stream };

// Gaussian PSF sampled at integer offsets from a (possibly fractional) centre, normalized to 1.
Image<float> gaussian_kernel(double sigma, double centre_x, double centre_y, int radius) {
  Image<float> k(2 * radius + 1, 2 * radius + 1);
  double sum = 0;
  for (int dy = -radius; dy <= radius; ++dy)
    for (int dx = -radius; dx <= radius; ++dx) {
      const double rx = dx - centre_x, ry = dy - centre_y;
      const double v = std::exp(-(rx * rx + ry * ry) / (2 * sigma * sigma));
      k(dx + radius, dy + radius) = float(v);
      sum += v;
    }
  for (float& v : k.pixels) v = float(v / sum);
  return k;
}

int psf_radius(double sigma) { return int(std::ceil(4 * sigma)); }

}  // namespace

Image<float> gaussian_psf(double sigma) {
  require(sigma > 0 && std::isfinite(sigma), "PSF sigma must be > 0, got " + std::to_string(sigma));
  return gaussian_kernel(sigma, 0, 0, psf_radius(sigma));
}

const std::vector<std::string>& workload_names() {
  static const std::vector<std::string> names = {"dense", "kbmod", "deep", "ci", "nights"};
  return names;
}

KitOptions workload(const std::string& name) {
  KitOptions o;
  o.name = name;
  if (name == "dense") {
    o.exposures = 1024, o.width = 256, o.height = 256, o.vx_count = 65, o.vy_count = 65;
  } else if (name == "kbmod") {
    o.exposures = 199, o.width = 256, o.height = 256, o.vx_count = 65, o.vy_count = 65;
  } else if (name == "deep") {
    o.exposures = 100, o.width = 2048, o.height = 4096, o.vx_count = 50, o.vy_count = 30;
  } else if (name == "ci") {
    o.exposures = 32, o.width = 128, o.height = 128, o.vx_count = 17, o.vy_count = 17;
  } else if (name == "nights") {
    // A multi-night field: 5 nights of 20 exposures over a week, 6 h per night.
    o.exposures = 100, o.width = 256, o.height = 256, o.vx_count = 65, o.vy_count = 65;
    o.span_days = 7, o.nights = 5, o.night_days = 0.25;
  } else {
    std::string known;
    for (const auto& n : workload_names()) known += (known.empty() ? "" : ", ") + n;
    throw Error("unknown workload '" + name + "' (known: " + known + ")");
  }
  return o;
}

KitStack make_kit(const KitOptions& o) {
  require(o.exposures > 0 && o.width > 0 && o.height > 0, "kit: exposures and image size must be > 0");
  require(o.vx_count > 0 && o.vy_count > 0, "kit: velocity grid must be non-empty");
  require(o.span_days > 0, "kit: span_days must be > 0");
  require(o.psf_sigma_min > 0 && o.psf_sigma_max >= o.psf_sigma_min, "kit: bad PSF sigma range");
  require(o.nights >= 0 && o.nights <= o.exposures, "kit: nights must be in [0, exposures]");
  require(o.nights == 0 || (o.night_days > 0 && o.night_days * o.nights < o.span_days),
          "kit: the nights (night_days each) must fit the span with gaps between them");
  KitStack kit;
  kit.options = o;
  const int E = o.exposures, W = o.width, H = o.height;
  const double base_epoch = 60000.0;  // an MJD-like day count

  // Epochs and exposure times.
  std::vector<double> epochs(E), exptime(E, 120.0);
  {
    auto rng = stream(o.seed, epochs_stream);
    std::uniform_real_distribution<double> unit(0, 1);
    if (o.nights == 0) {
      for (int e = 0; e < E; ++e) {
        // Irregular: jittered slots, so epochs stay distinct and in time order.
        const double slot = o.span_days / E;
        epochs[e] = base_epoch + (E == 1 ? 0 : e * slot) +
                    (o.irregular_epochs && E > 1 ? 0.8 * slot * unit(rng) : 0.0);
        if (o.irregular_epochs) exptime[e] = 60 + 120 * unit(rng);
      }
    } else {
      // Night starts spread over the span, each moved by up to a third of the free time
      // between nights; exposures at sorted random times within the night (irregular cadence),
      // or evenly spaced when irregular_epochs is off.
      const int N = o.nights;
      const double free = (o.span_days - o.night_days) / std::max(1, N - 1);
      int e = 0;
      for (int n = 0; n < N; ++n) {
        const double jitter = (N > 1 && n > 0 && n < N - 1 && o.irregular_epochs) ? (unit(rng) - 0.5) * free / 1.5 : 0;
        const double start = n * free + jitter;
        const int count = E / N + (n < E % N ? 1 : 0);
        std::vector<double> times(count);
        for (int k = 0; k < count; ++k)
          times[k] = o.irregular_epochs ? unit(rng) * o.night_days : (k + 0.5) * o.night_days / count;
        std::sort(times.begin(), times.end());
        for (int k = 0; k < count; ++k, ++e) {
          epochs[e] = base_epoch + start + times[k];
          if (o.irregular_epochs) exptime[e] = 60 + 120 * unit(rng);
        }
      }
    }
  }
  MotionBank& bank = kit.bank;
  bank.epochs = epochs;
  bank.t_ref = mid_span(epochs);
  bank.mode = o.shift_mode;
  double max_dt = 0;
  for (double t : epochs) max_dt = std::max(max_dt, std::abs(t - bank.t_ref));
  const double v_max = max_dt > 0 ? o.velocity_displacement / max_dt : 0.0;
  auto axis = [&](int n) {
    std::vector<double> a(n);
    for (int i = 0; i < n; ++i) a[i] = n == 1 ? 0.0 : -v_max + 2 * v_max * i / (n - 1);
    return a;
  };
  bank.vx_axis = axis(o.vx_count);
  bank.vy_axis = axis(o.vy_count);
  if (o.common_curve) {
    // Parallax-like: a quadratic drift plus a periodic wobble, |c| <= curve_amplitude.
    bank.curve_x.resize(E);
    bank.curve_y.resize(E);
    for (int e = 0; e < E; ++e) {
      const double u = max_dt > 0 ? (epochs[e] - bank.t_ref) / max_dt : 0.0;  // in [-1, 1]
      const double phase = 2 * std::numbers::pi * (epochs[e] - epochs[0]) / (o.span_days / 1.7);
      bank.curve_x[e] = o.curve_amplitude * (0.5 * u * u + 0.5 * std::sin(phase));
      bank.curve_y[e] = o.curve_amplitude * (-0.4 * u * u + 0.5 * std::cos(phase) * 0.9 + 0.05 * u);
    }
  }

  // Per-exposure conditions.
  std::vector<double> sigma(E, o.psf_sigma_min);
  {
    auto rng = stream(o.seed, seeing_stream);
    std::uniform_real_distribution<double> range(o.psf_sigma_min, o.psf_sigma_max);
    if (o.variable_seeing)
      for (double& s : sigma) s = range(rng);
  }
  ExposureStack& stack = kit.stack;
  stack.exposures.resize(E);

#pragma omp parallel for schedule(dynamic, 1)
  for (int e = 0; e < E; ++e) {
    Exposure& x = stack.exposures[e];
    x.epoch = epochs[e];
    x.throughput = exptime[e] / 120.0;
    x.label = "kit exposure " + std::to_string(e);
    x.psf = gaussian_psf(sigma[e]);
    x.science = Image<float>(W, H, 0.0f);
    x.variance = Image<float>(W, H, 1.0f);
    x.mask = Image<std::uint8_t>(W, H, 0);
    // Sky variance grows with exposure time; a smooth gradient and bump vary it across the field.
    auto mrng = stream(o.seed, mask_stream, e);
    std::uniform_real_distribution<double> unit(0, 1);
    const double sky = o.varying_variance ? (0.8 + 0.4 * unit(mrng)) * exptime[e] / 120.0 : 1.0;
    for (int y = 0; y < H; ++y)
      for (int xx = 0; xx < W; ++xx) {
        double v = 1.0;
        if (o.varying_variance) {
          const double gx = double(xx) / W, gy = double(y) / H;
          const double bump = std::exp(-((gx - 0.3) * (gx - 0.3) + (gy - 0.6) * (gy - 0.6)) / 0.02);
          v = 1.0 + 0.5 * gx + 0.3 * gy + 0.8 * bump;
        }
        x.variance(xx, y) = float(100.0 * sky * v);
      }
    if (o.masked_holes) {
      // About 0.3% of the area in small round holes.
      const int holes = std::max(1, int(0.003 * W * H / 12));
      for (int h = 0; h < holes; ++h) {
        const int cx = int(unit(mrng) * W), cy = int(unit(mrng) * H);
        const int r = 1 + int(unit(mrng) * 2.5);
        for (int dy = -r; dy <= r; ++dy)
          for (int dx = -r; dx <= r; ++dx)
            if (dx * dx + dy * dy <= r * r && x.mask.contains(cx + dx, cy + dy))
              x.mask(cx + dx, cy + dy) = 1;
      }
    }
    if (o.bad_column) {
      const int column = int((W / 5 + 7 * e) % W);
      for (int y = 0; y < H; ++y) x.mask(column, y) = 1;
    }
    if (o.noise) {
      auto nrng = stream(o.seed, noise_stream, e);
      std::normal_distribution<float> normal;
      for (std::size_t p = 0; p < x.science.size(); ++p)
        x.science.pixels[p] = normal(nrng) * std::sqrt(x.variance.pixels[p]);
    }
  }

  // The injected source: a grid velocity away from the edges, an origin that stays in the image.
  Truth& truth = kit.truth;
  if (o.inject) {
    auto rng = stream(o.seed, truth_stream);
    auto pick = [&](int n) {
      if (n <= 2) return n / 2;
      std::uniform_int_distribution<int> d(n / 4, std::max(n / 4, (3 * n) / 4 - 1));
      return d(rng);
    };
    const int margin = int(std::ceil(o.velocity_displacement + o.curve_amplitude)) +
                       psf_radius(o.psf_sigma_max) + 2;
    require(W > 2 * margin && H > 2 * margin,
            "kit: image too small for the injected trajectory (needs > " +
                std::to_string(2 * margin) + " px)");
    std::vector<double> px(E), py(E);
    if (!o.inject_off_grid) {
      const int ix = pick(o.vx_count), iy = pick(o.vy_count);
      truth.velocity = std::int64_t(iy) * o.vx_count + ix;
      truth.vx = bank.vx_axis[ix];
      truth.vy = bank.vy_axis[iy];
      std::uniform_int_distribution<int> ux(margin, W - 1 - margin), uy(margin, H - 1 - margin);
      truth.x = ux(rng);
      truth.y = uy(rng);
      truth.x_true = truth.x;
      truth.y_true = truth.y;
      // Positions along the trajectory, and B there from the actual maps (SPEC 3).
      for (int e = 0; e < E; ++e) {
        // Round the shift itself, as every engine does (x0 + round(s), SPEC 2), not x0 + s.
        const double sx = bank.shift_x(truth.velocity, e), sy = bank.shift_y(truth.velocity, e);
        const bool integer = o.shift_mode == ShiftMode::integer;
        px[e] = truth.x + (integer ? round_shift(sx) : sx);
        py[e] = truth.y + (integer ? round_shift(sy) : sy);
      }
    } else {
      // Anywhere in the bank's range and at any sub-pixel origin; the nearest bank trial.
      auto [vx_lo, vx_hi] = std::minmax_element(bank.vx_axis.begin(), bank.vx_axis.end());
      auto [vy_lo, vy_hi] = std::minmax_element(bank.vy_axis.begin(), bank.vy_axis.end());
      std::uniform_real_distribution<double> uvx(*vx_lo, *vx_hi), uvy(*vy_lo, *vy_hi);
      std::uniform_real_distribution<double> ux(margin, W - 1 - margin), uy(margin, H - 1 - margin);
      truth.vx = uvx(rng);
      truth.vy = uvy(rng);
      truth.x_true = ux(rng);
      truth.y_true = uy(rng);
      truth.x = int(std::floor(truth.x_true + 0.5));
      truth.y = int(std::floor(truth.y_true + 0.5));
      auto nearest = [](const std::vector<double>& axis, double v) {
        std::size_t best = 0;
        for (std::size_t i = 1; i < axis.size(); ++i)
          if (std::abs(axis[i] - v) < std::abs(axis[best] - v)) best = i;
        return best;
      };
      truth.velocity = std::int64_t(nearest(bank.vy_axis, truth.vy) * bank.vx_count() + nearest(bank.vx_axis, truth.vx));
      for (int e = 0; e < E; ++e) {
        px[e] = truth.x_true + truth.vx * bank.dt(e) + bank.curve_at_x(e);
        py[e] = truth.y_true + truth.vy * bank.dt(e) + bank.curve_at_y(e);
      }
    }
    // Source template at each position: the PSF centred on it (sub-pixel in fractional mode).
    std::vector<Image<float>> templates(E);
    std::vector<int> cx(E), cy(E);
    double B = 0;
    for (int e = 0; e < E; ++e) {
      cx[e] = int(std::floor(px[e] + 0.5));
      cy[e] = int(std::floor(py[e] + 0.5));
      const int r = psf_radius(sigma[e]);
      templates[e] = gaussian_kernel(sigma[e], px[e] - cx[e], py[e] - cy[e], r);
      // B contribution: a_e^2 sum_p T(p)^2 w(p), the information the template carries here.
      const Exposure& x = stack.exposures[e];
      double info = 0;
      for (int dy = -r; dy <= r; ++dy)
        for (int dx = -r; dx <= r; ++dx) {
          const int qx = cx[e] + dx, qy = cy[e] + dy;
          if (!x.science.contains(qx, qy) || x.mask(qx, qy)) continue;
          const double t = templates[e](dx + r, dy + r);
          info += t * t / x.variance(qx, qy);
        }
      B += x.throughput * x.throughput * info;
    }
    require(B > 0, "kit: the injected trajectory has no unmasked samples");
    truth.B = B;
    truth.snr = o.injected_snr;
    truth.flux = o.injected_snr / std::sqrt(B);
    truth.injected = true;
    for (int e = 0; e < E; ++e) {
      Exposure& x = stack.exposures[e];
      const int r = psf_radius(sigma[e]);
      for (int dy = -r; dy <= r; ++dy)
        for (int dx = -r; dx <= r; ++dx) {
          const int qx = cx[e] + dx, qy = cy[e] + dy;
          if (!x.science.contains(qx, qy)) continue;
          x.science(qx, qy) += float(truth.flux * x.throughput * templates[e](dx + r, dy + r));
        }
    }
  }
  return kit;
}

}  // namespace shiftstack
