// Sensitivity validation (SPEC section 7): does a method compute the same statistic as the FP32
// exact gather? Paired null/injection cubes give the effective SNR and its retention; the null
// bank gives the variance of Z and the tail excursions, near masks and away from them; injections
// over a range of SNR give completeness at a matched false-alarm rate. Also: the quantization
// efficiency eta of SPEC 5, and the null variance of fractional shifts with exact and naive
// normalization (SPEC 2).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "shiftstack/encoding.hpp"
#include "shiftstack/motion.hpp"
#include "shiftstack/synth.hpp"

namespace shiftstack {

// ---- options ------------------------------------------------------------------------------

struct ValidationOptions {
  std::string engine = "reference";
  Encoding encoding = Encoding::fp32;
  // The FP32 exact gather every method is compared with, on the same cubes.
  std::string baseline_engine = "reference";
  // Cube geometry and features; pair j uses kit seed `seed + j`. kit.inject and kit.noise are
  // set per cube (the null cube has inject = false; the kit draws noise and the source from
  // separate random streams, so the injected cube is the same noise plus the source).
  KitOptions kit = workload("ci");
  int pairs = 16;
  std::uint64_t seed = 1;
  double alpha = 0.05;                          // Bonferroni threshold over one cube's trials
  std::vector<double> excursion_z = {4, 5, 6};  // the Bonferroni threshold is added to these
  // A trial is "near a mask" when one of its samples lies within this many PSF FWHM (of that
  // exposure) of a masked pixel or of the image edge (outside pixels carry zero weight too).
  double near_mask_fwhm = 1.0;
  int bootstrap_resamples = 2000;
  std::uint64_t bootstrap_seed = 12345;
  // Completeness: injected SNRs (same noise as each pair's null cube), the detection
  // neighbourhood (origin +-1 px, velocity +-1 grid step around the truth), and the false-alarm
  // budget: the number of baseline null trials above `matched_z` over the whole null bank; each
  // method's threshold is set so its own null bank has the same number of trials above it.
  std::vector<double> completeness_snr = {3, 4, 4.5, 5, 5.5, 6, 7, 8};
  double matched_z = 5.0;
  int neighbourhood = 1;
  // The null bank per cube: trials with origins in a null_window x null_window square placed
  // uniformly at random in each cube (same square for every method), or the whole image when 0.
  // A window keeps the all-trials candidate lists small when many pairs and methods are run.
  int null_window = 0;
  bool verbose = false;  // one progress line per pair on stderr
};
void validate(const ValidationOptions& options);  // throws Error for bad values

// ---- results ------------------------------------------------------------------------------

struct Interval {
  double low = 0, high = 0;
};

// Excursions of null Z above z within one class of trials, pooled over all null cubes.
struct Excursion {
  double z = 0;
  std::string label;        // "4", "5", "6", "bonferroni"
  std::int64_t observed = 0;
  double expected = 0;      // trials * Phi_bar(z) (independent unit normals)
  double poisson_p = 1;     // two-sided Poisson probability of a count this far from expected
  double count_se = 0;      // jackknife over cubes: includes the clustering of correlated trials
};

// Null-bank statistics of one class of trials (near masks, away from masks, or all).
struct NullClass {
  std::int64_t trials = 0;       // scored trials in this class over all cubes
  double mean_z = 0;
  double mean_se = 0;            // jackknife over cubes
  double variance = 0;           // of Z about its mean (target 1)
  double variance_se = 0;        // jackknife over cubes
  std::vector<Excursion> excursions;
};

struct CompletenessPoint {
  double snr = 0;
  int detected = 0, injected = 0;
  double fraction = 0;
  Interval interval;  // Wilson 95%
};

// One method (engine x encoding) on the pairs.
struct MethodResult {
  std::string engine;
  Encoding encoding = Encoding::fp32;
  std::vector<double> z_null_truth, z_inj_truth;  // per pair, at the injected trajectory
  double mean_d = 0;         // mean over pairs of Z_inj - Z_null
  double sd_null = 0;        // sd of Z over the whole null bank
  double effective_snr = 0;  // mean_d / sd_null
  NullClass near, away, all;
  double near_fraction = 0;  // share of scored null trials near masks
  // Completeness at the matched false-alarm rate.
  double matched_threshold = 0;
  std::int64_t matched_false_alarms = 0;  // null trials above matched_threshold (all cubes)
  std::vector<CompletenessPoint> completeness;
  double seconds = 0;        // wall time of this method's searches
};

struct ValidationReport {
  ValidationOptions options;
  std::int64_t trials_per_cube = 0;  // M = origins x velocities
  std::int64_t null_trials_per_cube = 0;  // nominal trials of the null window (= M without one)
  double bonferroni_z = 0;
  MethodResult method, baseline;
  bool same_as_baseline = false;     // method is the baseline itself (retention 1 by definition)
  double retention = 0;              // effective SNR of method / baseline
  Interval retention_interval;       // paired bootstrap 95% (percentile) over pairs
  double seconds = 0;
};

// Runs the validation of options.engine x options.encoding. Errors: unknown engine, an engine
// that cannot compute the input, bad options. Progress on stderr when options.verbose.
ValidationReport run_validation(const ValidationOptions& options);

// Several methods on the same cubes against one baseline run (the cubes, likelihood maps and
// encodings are made once per pair and shared). options.engine/encoding are ignored; each
// report's options name its method. Methods whose engine cannot compute the input (its
// unsupported_reason) are left out and listed in `skipped` as "engine encoding: reason".
struct MethodSpec {
  std::string engine;
  Encoding encoding = Encoding::fp32;
};
std::vector<ValidationReport> run_validation_set(const ValidationOptions& options,
                                                 const std::vector<MethodSpec>& methods,
                                                 std::vector<std::string>* skipped = nullptr);

// ---- quantization (SPEC 5) ----------------------------------------------------------------

struct QuantizationRow {
  std::string name;
  std::string formula;        // the expression evaluated
  double step_sigmas = 0;     // rounding step in units of the noise (0 where not uniform)
  double predicted = 0;       // SPEC 5's formula
  double measured = 0;        // eta = E[X Q(X)] / sqrt(E[X^2] E[Q(X)^2])
  double measured_se = 0;     // standard error over independent batches
};

// Unit-normal draws through: fp16, the project's noise-scaled int8 codes, 8-bit scaled to a
// bright residual at 100 sigma, sign only; then the project's fp16 and int8 encoders on the
// likelihood maps of one kit cube (where the per-pixel noise differs from the per-image scale).
std::vector<QuantizationRow> quantization_table(std::size_t samples_per_batch, int batches,
                                                std::uint64_t seed, const KitOptions& kit);

// ---- fractional shifts: exact and naive normalization (SPEC 2) -----------------------------

struct FractionalOptions {
  std::string engine = "reference";      // the gather (bilinear, B from the covariance planes)
  KitOptions kit = workload("ci");       // geometry; PSF fixed per study point, no injection
  std::vector<double> psf_sigmas = {0.55, 0.65, 0.85};
  int cubes = 8;
  std::uint64_t seed = 1000;
  double near_mask_fwhm = 1.0;
  // Also the band-limited (Fourier-shift) route on the same cubes: psi interpolated with the
  // periodic trigonometric (Dirichlet) kernel of the zero-padded grid, as a Fourier shift does,
  // with B its exact variance and, beside it, the naive phi shifted the same way. Dense per
  // (velocity, exposure) work: meant for small cubes (about 64 x 64).
  bool fourier = false;
  bool verbose = false;
};

struct FractionalVariance {
  double variance = 0, se = 0;  // of Z (target 1), jackknife over cubes
  std::int64_t trials = 0;
};

struct FractionalPoint {
  double psf_sigma = 0;
  // gather: Z from the engine (B = exact quadratic form in the covariance planes);
  // naive: the engine's A over B_naive = bilinear interpolation of phi with the psi weights.
  FractionalVariance gather_near, gather_away, naive_near, naive_away;
  // Band-limited route (when FractionalOptions::fourier): exact = Var of the interpolated psi
  // (the doubled-bandwidth quadratic form), naive = phi interpolated with the psi kernel.
  bool fourier_done = false;
  FractionalVariance fourier_near, fourier_away, fourier_naive_near, fourier_naive_away;
  std::int64_t fourier_naive_unscored = 0;  // trials where the naive B came out <= 0
  // Single exposures' samples at a mask edge (nearest pixel unmasked, a masked 8-neighbour):
  // B_exact / B_naive there is the null variance of that sample's naive score (no Monte Carlo).
  double fourier_edge_ratio_mean = 0, fourier_edge_ratio_max = 0;
  std::int64_t fourier_edge_samples = 0;
  int fourier_grid_x = 0, fourier_grid_y = 0;  // odd periodic grid lengths used
  // Largest |B_engine / B_recomputed - 1| over all trials: this code's own evaluation of the
  // exact quadratic form, an independent check of the engine's B.
  double max_relative_b_difference = 0;
};

struct FractionalReport {
  FractionalOptions options;
  std::vector<FractionalPoint> points;
  double seconds = 0;
};

FractionalReport run_fractional_study(const FractionalOptions& options);

// ---- output -------------------------------------------------------------------------------

// Where a report was produced, written into its JSON.
struct Provenance {
  std::string card;    // CPU model or GPU name
  std::string commit;  // source revision
  std::string date;    // ISO 8601, UTC
  std::string command;
};

std::string to_json(const ValidationReport& report, const std::vector<QuantizationRow>& quantization,
                    const Provenance& provenance);
std::string to_json(const FractionalReport& report, const Provenance& provenance);
std::string format_table(const ValidationReport& report);
std::string format_table(const std::vector<QuantizationRow>& rows);
std::string format_table(const FractionalReport& report);

// SVG plots beside the JSON: retention.svg, null_variance.svg, excursions.svg, completeness.svg
// (validation) and fractional_variance.svg (fractional study). Returns the files written.
std::vector<std::string> write_plots(const ValidationReport& report, const Provenance& provenance,
                                     const std::string& folder);
std::vector<std::string> write_plots(const FractionalReport& report, const Provenance& provenance,
                                     const std::string& folder);

// Summary across committed reports (report.json files of several engine x encoding runs): a
// table, and summary_retention.svg / summary_null_variance.svg in `folder`. Returns the table.
std::string summarize_reports(const std::vector<std::string>& report_files, const std::string& folder);

// ---- statistics helpers (exposed for the tests) ---------------------------------------------

// Two-sided Poisson probability: P(X <= k) or P(X >= k), whichever is smaller, doubled, capped at 1.
double poisson_two_sided_p(std::int64_t observed, double expected);
// Wilson score 95% interval for k successes in n trials.
Interval wilson_interval(int successes, int trials);

}  // namespace shiftstack
