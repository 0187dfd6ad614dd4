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

// Where each cube's null window sits.
enum class NullWindowPlacement {
  random,  // uniformly at random (seeded per pair)
  // The window holding the most trials away from masks (ties: lowest y, then x). Chosen from the
  // mask geometry, PSFs and bank alone, never from the noise, so it cannot bias Z.
  away,
};

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
  NullWindowPlacement null_window_placement = NullWindowPlacement::random;
  // The pairs are j = first_pair .. first_pair + pairs - 1 (kit seed seed + j): a run split into
  // pair ranges (several processes or machines) merges into exactly the whole run's numbers.
  int first_pair = 0;
  // Search one cube with every method at once (a host thread per method) and make the next
  // pair's cubes while this pair is searched. The numbers do not depend on it.
  bool concurrent = true;
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

// Host time of the cube preparation, summed over pairs (seconds; overlaps the searches when
// ValidationOptions::concurrent).
struct ValidationTimings {
  double kits = 0, likelihood = 0, encode = 0, near_flags = 0;
  double wall = 0;  // the whole run
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
  ValidationTimings timings;         // where the run's time went (shared by all its methods)
};

// Runs the validation of options.engine x options.encoding. Errors: unknown engine, an engine
// that cannot compute the input, bad options. Progress on stderr when options.verbose.
ValidationReport run_validation(const ValidationOptions& options);

// ---- raw per-pair observations (runs split over pair ranges merge exactly) -------------------

// Sums of null Z over the trials of one class (near masks, away, all) in one cube.
struct ClassSums {
  double n = 0, sum = 0, sum2 = 0;
  std::vector<double> above;  // per excursion threshold: trials with Z > z
  void add(double z, const std::vector<double>& thresholds) {
    n += 1;
    sum += z;
    sum2 += z * z;
    for (std::size_t i = 0; i < thresholds.size(); ++i)
      if (z > thresholds[i]) above[i] += 1;
  }
};

// What one method saw on one pair: everything the reports are computed from.
struct PairObservation {
  double z_null = 0, z_inj = 0;    // at the injected trajectory
  ClassSums near, away, all;       // the null bank
  std::vector<float> high_z;       // null Z above matched_z - 1 (threshold matching)
  std::vector<double> level_max;  // per completeness SNR: max Z over the detection neighbourhood
};

struct MethodSpec {
  std::string engine;
  Encoding encoding = Encoding::fp32;
};

struct ValidationRecords {
  ValidationOptions options;             // first_pair and pairs: the pair range held
  std::vector<MethodSpec> runs;          // runs[0] is the baseline (fp32), then each distinct method
  std::vector<MethodSpec> methods;       // the accepted methods, in the order asked
  std::vector<std::size_t> method_run;   // methods[m] is runs[method_run[m]]
  std::vector<std::string> skipped;      // "engine encoding: reason"
  std::vector<double> thresholds;        // excursion z, then the Bonferroni threshold
  std::vector<std::string> labels;
  std::int64_t trials_per_cube = 0;
  double bonferroni_z = 0;
  std::vector<std::int64_t> null_origins;                  // per pair
  std::vector<std::vector<PairObservation>> observations;  // [run][pair]
  std::vector<double> run_seconds;                          // per run: wall time of its searches
  ValidationTimings timings;
};

// Makes the cubes and runs every method (the baseline once); methods an engine cannot compute
// go to `skipped`. Error when none can.
ValidationRecords collect_validation_records(const ValidationOptions& options, const std::vector<MethodSpec>& methods);
// One report per accepted method.
std::vector<ValidationReport> validation_reports(const ValidationRecords& records);
// Joins runs of the same set-up over disjoint pair ranges that together form one range; Error
// when the set-ups differ or the ranges overlap or leave a gap.
ValidationRecords merge_validation_records(const std::vector<ValidationRecords>& parts);

// Several methods on the same cubes against one baseline run (the cubes, likelihood maps and
// encodings are made once per pair and shared). options.engine/encoding are ignored; each
// report's options name its method. Methods whose engine cannot compute the input (its
// unsupported_reason) are left out and listed in `skipped` as "engine encoding: reason".
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
  // The same planes through the Fourier route (band spectrum of psi, exact information spectrum
  // on the doubled band, separable phase tables, fold onto the grid; first cube of each sigma):
  // largest difference from the direct evaluation, |dA| / sqrt(B), |dB| / B, |d naive B| / B.
  double fourier_spectral_difference = 0;
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
// Raw records (with the quantization rows, if any, and where they were made), and back.
std::string to_json(const ValidationRecords& records, const std::vector<QuantizationRow>& quantization,
                    const Provenance& provenance);
ValidationRecords records_from_json(const std::string& text, std::vector<QuantizationRow>* quantization = nullptr,
                                    Provenance* provenance = nullptr);
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
