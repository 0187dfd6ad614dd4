// Post-processing of search candidates (DESIGN: "post-processing"): light curves, robust sigma-G
// clipping, threshold and minimum-observation filters, friends-of-friends clustering and coadded
// stamps. Pure C++ on in-memory values: no file formats here (src/io writes the results).
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "shiftstack/image.hpp"
#include "shiftstack/likelihood.hpp"
#include "shiftstack/motion.hpp"
#include "shiftstack/search.hpp"
#include "shiftstack/stack.hpp"

namespace shiftstack {

// ---- trajectories -------------------------------------------------------------------------

// Predicted position (0-based pixel coordinates, continuous) of the trajectory that starts at
// origin (x, y) at t_ref with bank velocity `velocity`, at exposure e: x + s_{v,e}.
struct PixelPosition {
  double x = 0, y = 0;
};
PixelPosition predicted_position(const MotionBank& bank, int x, int y, std::size_t velocity, int e);

// The pixel a search samples (integer mode: x + round(s), SPEC 2) or, in fractional mode, the
// nearest pixel to the continuous position; used for stamps.
struct PixelIndex {
  int x = 0, y = 0;
};
PixelIndex sampled_pixel(const MotionBank& bank, int x, int y, std::size_t velocity, int e);

// ---- light curves -------------------------------------------------------------------------

// Per-exposure terms of one trajectory, in stack order, with the throughput weights applied
// (psi[e] = a_e psi_e(x_e), phi[e] = a_e^2 phi_e(x_e)), so that sum(psi) = A and sum(phi) = B
// exactly as the search defines them (SPEC 1). valid[e] = 1 when the sample carries
// information (inside the image, phi > 0). Fractional banks interpolate bilinearly and need the
// covariance planes, like the reference engine (SPEC 2).
struct LightCurve {
  std::vector<double> psi, phi;
  std::vector<std::uint8_t> valid;
  int size() const { return int(psi.size()); }
};
LightCurve light_curve(const LikelihoodStack& likelihood, const MotionBank& bank, int x, int y,
                       std::size_t velocity);

// Per-exposure likelihood psi_e / sqrt(phi_e); NaN where the sample is not valid.
std::vector<double> likelihood_curve(const LightCurve& curve);

// ---- sigma-G clipping ---------------------------------------------------------------------

// KBMOD's clipped sigma-G (Smotherman et al. 2021): with percentiles p_lo, p_50, p_hi of the
// valid per-exposure likelihoods, sigma_G = c (p_hi - p_lo), c = 1 / (Phi^-1(hi) - Phi^-1(lo)),
// and a point stays valid when p_50 - n sigma_G < lh_e < p_50 + n sigma_G.
struct SigmaGOptions {
  double low_percentile = 25, high_percentile = 75;  // KBMOD sigmaG_lims
  double n_sigma = 2;
  bool clip_negative = false;  // KBMOD clip_negative: percentiles over positive values only
};
void validate(const SigmaGOptions& options);  // throws Error for bounds outside (0, 100) etc.
double sigma_g_coefficient(double low_percentile, double high_percentile);

// Percentile (0..100) of `values` with linear interpolation between order statistics (numpy's
// default), found by selection in O(n) rather than a sort; reorders `values`. Error if empty.
double percentile(std::vector<double>& values, double percent);

// Valid flags after clipping: 1 where lh[e] is finite and inside the band. `scratch` is reused
// between calls to avoid allocations.
std::vector<std::uint8_t> sigma_g_clip(const std::vector<double>& lh, const SigmaGOptions& options,
                                       std::vector<double>& scratch);

// ---- filtering ----------------------------------------------------------------------------

// One candidate after post-processing: likelihood, flux and obs_count recomputed over the
// epochs that survived clipping (obs_valid), as KBMOD does.
struct Detection {
  Candidate candidate;  // as the search reported it
  double likelihood = 0, flux = 0;
  int obs_count = 0;
  LightCurve curve;
  std::vector<std::uint8_t> obs_valid;
  int cluster_size = 1;  // how many filtered candidates this one represents
};

struct FilterOptions {
  double lh_level = 7;         // minimum likelihood after clipping (KBMOD lh_level)
  int num_obs = 10;            // minimum valid observations; clamped to the exposure count
  bool sigma_g = true;         // KBMOD sigmaG_filter
  SigmaGOptions sigma_g_options;
};

struct FilterStats {
  std::int64_t input = 0, below_likelihood = 0, too_few_observations = 0, kept = 0;
};

// Light curves, clipping and the two thresholds for every candidate (in parallel); returns the
// survivors in input order.
std::vector<Detection> filter_candidates(const std::vector<Candidate>& candidates,
                                         const LikelihoodStack& likelihood, const MotionBank& bank,
                                         const FilterOptions& options, FilterStats* stats = nullptr);

// The same with the light curves already sampled (curves[i] belongs to candidates[i], each of
// `exposures` epochs), e.g. from likelihood planes that live on a GPU.
std::vector<Detection> filter_candidates(const std::vector<Candidate>& candidates,
                                         std::vector<LightCurve> curves, int exposures,
                                         const FilterOptions& options, FilterStats* stats = nullptr);

// ---- clustering ---------------------------------------------------------------------------

// How duplicates of one mover are found (names as KBMOD's cluster_type). Positions are
// continuous predicted positions; "first" and "last" are the first and last epochs.
//   peaks               shiftstack's rule (the default): candidates in order of likelihood; one
//                       is kept only when the epochs where no brighter kept detection is near it
//                       still reach lh_level on their own (see cluster_detections)
//   all                 (x, y, s vx, s vy): first-epoch position, velocities times s days (DBSCAN)
//   position            first-epoch position (DBSCAN); also start_position
//   mid_position        position at the median of the epochs (DBSCAN)
//   start_end_position  first- and last-epoch positions, 4-D (DBSCAN)
//   nn_start, nn_start_end     KBMOD's nearest-neighbour sweep: keep a candidate that is the
//                       best within eps of itself in first (and last) position, not transitive
//   grid_start, grid_start_end KBMOD's grid: the best candidate per cell of ceil(eps) pixels
// DBSCAN here is friends-of-friends (min_samples = 1, KBMOD's setting): transitive linking.
enum class ClusterSpace {
  peaks, all, position, mid_position, start_end_position, nn_start, nn_start_end, grid_start, grid_start_end
};
ClusterSpace parse_cluster_space(const std::string& name);
std::string to_string(ClusterSpace space);

struct ClusterOptions {
  ClusterSpace space = ClusterSpace::peaks;
  double eps = 20;       // linking length or cell width in pixels (KBMOD cluster_eps)
  double v_scale = 1;    // days per unit velocity in `all`; < 0 = half the epoch span
  // peaks: a kept detection of likelihood Z explains the epochs where a candidate passes within
  // r(Z) = 2 psf_sigma sqrt(ln(2 Z / lh_level)) + 1 pixels of it (see cluster_detections).
  double psf_sigma = 1.4;  // the widest exposure's Gaussian-equivalent PSF sigma, pixels
  double lh_level = 7;
  int num_obs = 1;         // a kept detection needs this many unexplained valid epochs
};

// Friends-of-friends: points closer than eps (Euclidean) share a label, transitively (DBSCAN
// with min_samples = 1, KBMOD's setting). Grid hashing with cells of size eps, so the cost is
// linear in the number of points for bounded density. Labels are 0..k-1 in order of first
// appearance. `dims` is 2 or 4.
std::vector<int> friends_of_friends(const std::vector<std::array<double, 4>>& points, int dims,
                                    double eps);

// Keeps one detection per mover with cluster_size set (how many input detections it stands for)
// and returns them sorted by likelihood, best first. `representative`, when given, receives for
// every input detection the index (in the output) of the detection it was merged into.
//
// peaks: detections in order of likelihood (ties: input order). For each, an epoch is explained
// when a kept detection of likelihood Z passes within r(Z) of it there: a point source seen
// through the matched filter at offset d scores Z exp(-d^2 / (4 sigma^2)) for Gaussian PSFs, so
// beyond r(Z) (plus a pixel of rounding) it contributes less than lh_level / 2. The detection is
// kept when its own psi and phi over the unexplained valid epochs still reach lh_level; it then
// explains epochs for the ones after it. Distinct movers keep their own epochs and stay apart;
// a halo of neighbouring trials, and trials that borrow epochs from two movers, are explained away.
// The other types follow KBMOD: the best member of each group.
std::vector<Detection> cluster_detections(std::vector<Detection> detections, const MotionBank& bank,
                                          const ClusterOptions& options, std::vector<int>* representative = nullptr);

// ---- KBMOD's thinning before the light-curve filter ---------------------------------------
// Each takes candidates with a ranking key (their score, or the prefilter likelihood below) and
// returns the indices kept, in input order; ties go to the earlier candidate.

// KBMOD's in-search sigma-G (gpu_filter): over the valid epochs, the per-epoch fluxes psi/phi
// are sorted; with n values, the percentile values are those at indices ceil(n p) - 1 for p =
// low/100, 1/2 and high/100 (p clamped to [0.0001, 0.9999]); epochs whose flux lies within
// 2 sigma_G of that median are kept and the likelihood is recomputed over them. -inf when no
// epoch is valid.
double prefilter_likelihood(const LightCurve& curve, double low_percentile, double high_percentile);

// KBMOD's results_per_pixel: the best k per first-epoch pixel (the pixel sampled at the first
// epoch, KBMOD's starting pixel).
std::vector<std::size_t> best_per_pixel(const std::vector<Candidate>& candidates, const std::vector<double>& key,
                                        const MotionBank& bank, int k);

// KBMOD's near-duplicate thinning (near_dup_thresh): the best per bin of `bin_width` pixels in
// first-epoch and last-epoch position.
std::vector<std::size_t> near_duplicate_survivors(const std::vector<Candidate>& candidates, const std::vector<double>& key,
                                                  const MotionBank& bank, double bin_width);

// The effective Gaussian sigma of a PSF kernel (pixels): sqrt of half its second moment.
double psf_sigma_of(const Image<float>& psf);

// ---- stamps -------------------------------------------------------------------------------

// Coadds of science cut-outs centred on the trajectory (KBMOD's coadd types). Pixels that are
// masked or outside the image are "no data": sum treats them as 0; mean, median and weighted
// (sum(I/V) / sum(1/V)) skip them and give NaN where no exposure has data.
enum class CoaddType { sum, mean, median, weighted };
CoaddType parse_coadd_type(const std::string& name);
std::string to_string(CoaddType type);

// One coadd per requested type, each (2 radius + 1)^2, over the exposures with obs_valid set
// (every exposure when obs_valid is empty).
std::vector<Image<float>> coadd_stamps(const ExposureStack& stack, const MotionBank& bank,
                                       const Candidate& candidate,
                                       const std::vector<std::uint8_t>& obs_valid, int radius,
                                       const std::vector<CoaddType>& types);

}  // namespace shiftstack
