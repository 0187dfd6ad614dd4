// The three Fourier-route CUDA engines (cuda-fourier, cuda-gemm, cuda-tc) share everything but
// the contraction: decode, zero padding and forward transforms, phase tables, then per velocity
// chunk the contraction, inverse transforms, crop and scoring. Host-only header: the device state
// lives behind a pointer (spectra.cuh), so benchmarks and tests can read the stage times.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "shiftstack/search.hpp"
#include "shiftstack/tc_emulation.hpp"

namespace shiftstack {
bool cuda_device_available();  // device.cu (also in engine_registry.hpp when SHIFTSTACK_HAVE_CUDA is set)
}

namespace shiftstack::cuda {

// Device time of each stage of the last scan (CUDA events), milliseconds.
struct SpectralStageTimes {
  double forward_ms = 0;      // decode, zero padding, forward FFTs of psi and phi
  double tables_ms = 0;       // engine-specific preparation: FP16 spectra and scales, phase tables
  double contraction_ms = 0;  // the per-frequency products (all velocity chunks)
  double inverse_ms = 0;      // inverse FFTs per velocity (fused route: along y only)
  double scoring_ms = 0;      // (fused route: inverse along x,) crop, no-sample test, Z, digest, candidates, top-k
  double total_ms = 0;        // first event to last: the scan
};

struct SpectralDiagnostics {
  FourierGeometry geometry;
  double useful_flops = 0;          // SPEC 6: 16 F E V for both channels
  int velocity_chunks = 0;          // passes over the velocity rows (memory budget)
  std::int64_t clamped_trials = 0;  // scored trials whose FFT-route B fell below the floor
  // Trials whose FFT-route B was too small to trust (engines with exact_below(), and fractional
  // shifts, whose exact B can undercut any floor), gathered exactly on the device instead.
  std::int64_t recomputed_trials = 0;
  float b_trusted = 0;              // the B below which trials were gathered exactly (0: none)
  float b_floor = 0;                // smallest positive weighted phi: a lower bound of any scored B
  // Post-processing route: the inverse along x ran inside the scoring kernel (cuFFT only along y),
  // else cuFFT's 2-D inverse, then scoring.
  bool fused_scoring = false;
  // Contraction route (cuda-tc): the planes transformed along x only and the y shifts taken as row
  // offsets (no transforms along y), else the 2-D transforms of SPEC 6. On the row route F counts
  // (nx / 2 + 1) x region rows: the products it computes.
  bool row_route = false;
  SpectralStageTimes times;
  double contraction_tflops() const {
    return times.contraction_ms > 0 ? useful_flops / (times.contraction_ms * 1e-3) / 1e12 : 0.0;
  }
};

struct SpectralState;  // device buffers, plans and handles (spectra.cuh)

class SpectralEngine : public Engine {
 public:
  SpectralEngine();
  ~SpectralEngine() override;
  std::string unsupported_reason(const SearchInput& input) const override;
  SearchResult search(const SearchInput& input) override;
  const SpectralDiagnostics& diagnostics() const { return diagnostics_; }

 protected:
  // Extra limits of one engine (empty when it can run the input).
  virtual std::string engine_unsupported_reason(const SearchInput&) const { return {}; }
  // After the forward transforms: engine-specific tables (state.spectra holds the FP32 spectra).
  virtual void prepare(SpectralState& state) = 0;
  // Fills state.velocity_spectra for velocity rows b in [b_begin, b_end) (all a).
  virtual void contract(SpectralState& state, int b_begin, int b_end) = 0;
  // Fractional shifts (bilinear, exact B from the covariance channels): engines that implement
  // the five-channel contraction say so.
  virtual bool supports_fractional() const { return false; }
  // Trials whose FFT-route B is below this fraction of E times the largest weighted phi are
  // gathered exactly (SpectralState::exact_below); 0 keeps the clamp to the smallest phi.
  virtual float exact_below() const { return 0; }
  // Velocity rows per chunk are a multiple of this.
  virtual int row_granularity() const { return 1; }
  // Engines with a row-route contraction: the most rows per exposure its window holds (0: none).
  virtual int row_route_window_limit() const { return 0; }
  // Whether its contraction fits the planned windows (shared memory); if not, the planar route.
  virtual bool row_route_fits(const SpectralState&) const { return true; }
  // Extra device bytes per velocity row of a chunk (materialized operands and the like).
  virtual double bytes_per_row(const SpectralState&) const { return 0; }

 private:
  std::unique_ptr<SpectralState> state_;
  SpectralDiagnostics diagnostics_;
};

// Registration, called from register_cuda_engines() (device.cu).
void register_fourier_engine();          // fourier.cu: cuda-fourier
void register_separable_gemm_engine();   // separable_gemm.cu: cuda-gemm
void register_tensor_core_engine();      // tensor_core.cu: cuda-tc

}  // namespace shiftstack::cuda
