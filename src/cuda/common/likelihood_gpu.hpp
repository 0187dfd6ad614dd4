// psi/phi (SPEC 1) computed on the GPU, their encoding (SPEC 5) into the device cube that the
// CUDA gather engines search, and light curves sampled from the device planes. Host-only
// declarations (no CUDA syntax): the I/O pipeline and the tests include this header.
//
// The arithmetic is the CPU's (compute_likelihood, encode) operation for operation: the same
// double-precision kernel coefficients, the same summation order, no fused multiply-adds, one
// rounding to float at the end; the encoder reproduces encode()'s scales, codes and exceptions.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "shiftstack/encoding.hpp"
#include "shiftstack/likelihood.hpp"
#include "shiftstack/motion.hpp"
#include "shiftstack/pipeline.hpp"
#include "shiftstack/search.hpp"
#include "shiftstack/stack.hpp"

namespace shiftstack::cuda {

// A CUDA device is present.
bool likelihood_gpu_available();

// Creates the CUDA context now (it takes a noticeable fraction of a second), e.g. on a thread
// while the inputs are read. Errors are swallowed: the real calls report them.
void warm_up_device();

// Host-clock seconds of the parts of DeviceLikelihood's construction.
struct DeviceLikelihoodTimes {
  double validate = 0;  // validate(stack)
  double staging = 0;   // host copies into pinned staging buffers (overlaps the device's work)
  double total = 0;     // construction, the device's work finished
};

class DeviceLikelihood {
 public:
  // Validates the stack (like compute_likelihood; skipped when `validated`), uploads every
  // exposure through pinned staging buffers and correlates it on the device. Integer-shift
  // searches only: no covariance planes. Throws Error when the device has too little free memory
  // for the planes plus an fp32 cube.
  explicit DeviceLikelihood(const ExposureStack& stack, bool validated = false);
  ~DeviceLikelihood();
  DeviceLikelihood(const DeviceLikelihood&) = delete;
  DeviceLikelihood& operator=(const DeviceLikelihood&) = delete;

  int width() const;
  int height() const;
  int exposures() const;
  const DeviceLikelihoodTimes& times() const;

  // The planes on the host, laid out as compute_likelihood returns them.
  LikelihoodStack download() const;

  // Encodes on the device into the CUDA gather engines' device cache. The returned stack holds
  // the metadata (weights, int8 exceptions, id) but no host payload; searches with cuda-serial,
  // cuda-tiled and cuda-fast read the device copy; download_device_cube() fills the payload for
  // any other engine. Replaces the previous device-encoded cube, if any.
  EncodedStack encode(Encoding encoding) const;

  // Light curves of integer-mode trajectories, exactly light_curve() on the same planes:
  // candidates[begin, end) with the bank's shifts.
  std::vector<LightCurve> light_curves(const MotionBank& bank, const std::vector<Candidate>& candidates,
                                       std::size_t begin, std::size_t end) const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// compute_likelihood(stack) on the GPU (without covariances), returned on the host.
LikelihoodStack compute_likelihood_gpu(const ExposureStack& stack);

// For a stack from DeviceLikelihood::encode(): copies its device cube into the host payload
// (for engines that read the host copy). release_device_cube() frees the device-encoded cube and
// any rectangle cut from it.
void download_device_cube(EncodedStack& shell);
void release_device_cube();

}  // namespace shiftstack::cuda
