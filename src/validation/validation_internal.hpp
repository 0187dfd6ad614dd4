// Internal pieces shared by the validation sources: which trials lie near masks, and pooled
// null-bank sums with jackknife errors over cubes.
#pragma once
#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

#include "shiftstack/likelihood.hpp"
#include "shiftstack/motion.hpp"
#include "shiftstack/search.hpp"
#include "shiftstack/stack.hpp"
#include "shiftstack/validation.hpp"

namespace shiftstack::validation_detail {

// FWHM of a Gaussian in units of its sigma: 2 sqrt(2 ln 2).
constexpr double kFwhmPerSigma = 2.3548200450309493;

// RMS width (sigma) of a PSF image from its second moment about its centroid.
double psf_sigma(const Image<float>& psf);

// One flag per trial, index (v * height + y) * width + x over the whole image: 1 when some
// exposure's sample of the trial lies within near_mask_fwhm * FWHM_e of a masked pixel or of the
// image edge, or outside the image. Fractional banks test the nearest pixel with the radius
// widened by half a pixel diagonal, so every bilinear corner's surroundings are covered.
// With a region, only its origins are flagged: index (v * region.height + y - y0) * region.width
// + x - x0.
std::vector<std::uint8_t> near_mask_flags(const ExposureStack& stack, const MotionBank& bank,
                                          double near_mask_fwhm, Region region = {});

using shiftstack::ClassSums;  // public: per-pair records carry them

// JSON pieces shared by the reports (validation_output.cpp) and the saved records
// (validation_records.cpp): every kit option (so records can rebuild the kits), a run's options
// around a kit's JSON, and where a report was made.
nlohmann::json full_kit_json(const KitOptions& k);
nlohmann::json run_options_json(const ValidationOptions& o, nlohmann::json kit);
nlohmann::json provenance_json(const Provenance& p);
Provenance provenance_of(const nlohmann::json& j);

// Whole-image near-mask flags reduced to one null window: the window of side `side` (clipped to
// the image) with the most trials away from masks, ties to the lowest y, then x.
Region window_away_from_masks(const std::vector<std::uint8_t>& whole_image_flags, int width, int height,
                              std::size_t velocities, int side);

// Variance about the mean from pooled sums (n - 1 in the denominator).
double pooled_variance(double n, double sum, double sum2);

// Pools per-cube sums of one class; the variance and the excursion rates get jackknife errors
// over cubes (delete one cube), which include the correlation between neighbouring trials.
NullClass pool_class(const std::vector<ClassSums>& cubes, const std::vector<double>& thresholds,
                     const std::vector<std::string>& labels);

// Band-limited (Fourier-shift) evaluation of one velocity over every origin of the image:
// psi_e sampled at x + s_{v,e} through the periodic trigonometric interpolant of the zero-padded
// grid (odd lengths grid_x, grid_y), summed with the throughputs: A, its exact variance B
// (sum_r w(r) [sum_p h(x - p) P(r - p)]^2, the doubled-bandwidth form, computed separably) and
// the naive B (phi interpolated with h). Planes are row-major over origins (y * width + x).
struct BandLimitedPlanes {
  std::vector<double> A, B, naive_B;
  // Single samples at a mask edge (nearest pixel unmasked, one of its 8 neighbours masked):
  // sum, count and maximum of B_e / naive_B_e, the null variance of that sample's naive score.
  double edge_ratio_sum = 0, edge_ratio_max = 0;
  std::int64_t edge_samples = 0;
};
struct BandLimitedGrid {
  int x = 0, y = 0;
};
BandLimitedGrid band_limited_grid(const ExposureStack& stack, const MotionBank& bank);
BandLimitedPlanes band_limited_planes(const ExposureStack& stack, const LikelihoodStack& maps,
                                      const MotionBank& bank, std::size_t velocity,
                                      const BandLimitedGrid& grid);
// The periodic interpolation kernel of an odd grid of n points (Dirichlet kernel).
double dirichlet(double t, int n);

// The same planes for every velocity through the Fourier route (SPEC 6's contraction shape),
// as a GPU engine would compute them: per exposure the spectrum of psi on the grid's band K
// (|k| <= (n - 1) / 2 per axis) and the exact information spectrum on the doubled band K2
// (|k| <= n - 1): the variance map Q_e(y) = sum_r w(r) G_x(r_x; y_x)^2 G_y(r_y; y_y)^2 of the
// interpolated psi is band-limited to K2 (squaring doubles the bandwidth), its spectrum is
// W_e(k) = sum_r g2_x[r_x](k_x) w(r) g2_y[r_y](k_y) with g2 the spectra of the squared,
// shifted PSF factors G^2 (sampled at half pixels, which resolves K2 exactly). Per velocity,
// Ahat(k) = sum_e a_e px_e(k_x) psihat_e(k) py_e(k_y) and Bhat(k) = sum_e a_e^2 px_e(k_x) W_e(k)
// py_e(k_y) with the phase tables p_e(k) = exp(2 pi i k s_e / n) of the fractional shifts (a
// separable product with the spectrum as the diagonal); Bhat is folded onto K (integer origins
// cannot tell k from k +- n) and both are transformed back on the n grid. Separable PSFs only.
std::vector<BandLimitedPlanes> band_limited_spectral_planes(const ExposureStack& stack, const LikelihoodStack& maps,
                                                            const MotionBank& bank, const BandLimitedGrid& grid);

}  // namespace shiftstack::validation_detail
