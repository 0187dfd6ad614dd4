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

// The space duplicates are found in (names as KBMOD's cluster_type):
//   all                 (x, y, s vx, s vy): origin at t_ref in pixels, velocities times s days
//   position            predicted position at the first epoch (pixels)
//   mid_position        predicted position at the middle of the epoch span
//   start_end_position  predicted positions at the first and the last epoch (4-D)
enum class ClusterSpace { all, position, mid_position, start_end_position };
ClusterSpace parse_cluster_space(const std::string& name);
std::string to_string(ClusterSpace space);

struct ClusterOptions {
  ClusterSpace space = ClusterSpace::all;
  double eps = 4;        // linking length in pixels (KBMOD cluster_eps)
  double v_scale = -1;   // days per unit velocity in `all`; < 0 = half the epoch span
};

// Friends-of-friends: points closer than eps (Euclidean) share a label, transitively (DBSCAN
// with min_samples = 1, KBMOD's setting). Grid hashing with cells of size eps, so the cost is
// linear in the number of points for bounded density. Labels are 0..k-1 in order of first
// appearance. `dims` is 2 or 4.
std::vector<int> friends_of_friends(const std::vector<std::array<double, 4>>& points, int dims,
                                    double eps);

// Keeps the highest-likelihood member of each cluster (ties: the earlier one) with cluster_size
// set; returns them sorted by likelihood, best first.
std::vector<Detection> cluster_detections(std::vector<Detection> detections, const MotionBank& bank,
                                          const ClusterOptions& options);

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
