// The stages of one search run (shiftstack/run.hpp), each a function from plain values to plain
// values, in the order run_search() calls them and the progress output prints them:
//   bank -> likelihood -> encode -> search -> filter -> cluster -> stamps -> wcs
// Each stage's `detail` is the line the progress output shows for it.
#pragma once
#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "shiftstack/io/config.hpp"
#include "shiftstack/io/fits.hpp"
#include "shiftstack/io/wcs.hpp"
#include "shiftstack/likelihood.hpp"
#include "shiftstack/pipeline.hpp"
#include "shiftstack/search.hpp"
#ifdef SHIFTSTACK_HAVE_CUDA
#include "cuda/common/likelihood_gpu.hpp"
#endif

namespace shiftstack::io {

// bank: epochs, t_ref, the common curve from the headers, the velocity generator.
struct BankStage {
  MotionBank bank;
  std::string detail;
};
BankStage build_bank(const SearchConfig& config, const LoadedStack& loaded);

// likelihood: psi/phi on the GPU when chosen (the planes then stay on the device: the gathers
// search the cube encoded there and light curves are sampled there), otherwise on the CPU.
struct LikelihoodMaps {
  LikelihoodStack host;  // empty when on the GPU or kept by the caller
  const LikelihoodStack* kept = nullptr;  // the caller's maps (SharedInputs), used in place
#ifdef SHIFTSTACK_HAVE_CUDA
  std::unique_ptr<cuda::DeviceLikelihood> device;
#endif
  std::vector<std::string> warnings;
  std::string detail;
  bool on_gpu() const;
  const LikelihoodStack& planes() const { return kept ? *kept : host; }  // on the host
};
LikelihoodMaps compute_maps(const SearchConfig& config, const ExposureStack& stack, ShiftMode mode);
// The maps a caller keeps between runs, checked against this stack and shift mode.
LikelihoodMaps kept_maps(const LikelihoodStack& kept, const ExposureStack& stack, ShiftMode mode);
// Whether psi/phi may go to the GPU at all (decides whether to warm the device up early).
bool gpu_likelihood_wanted(const SearchConfig& config);

// encode: the storage encoding of the planes (on the device when they are there).
struct EncodeStage {
  std::unique_ptr<EncodedStack> stack;  // made by this run
  const EncodedStack* kept = nullptr;   // or the caller's (SharedInputs)
  std::string detail;
  const EncodedStack& cube() const { return kept ? *kept : *stack; }
};
EncodeStage encode_maps(const LikelihoodMaps& maps, Encoding encoding);
// The cube a caller keeps between runs, checked against this run's encoding and exposures.
EncodeStage kept_cube(const EncodedStack& kept, Encoding encoding, int exposures);

// search: picks the engine (`requested`, or the config's; "auto" = fastest that supports the
// input) and runs it over the configured pixel bounds; `stop` (may be null) is polled by the
// engine. The cube made by this run is released after it.
struct SearchStage {
  SearchResult result;
  std::vector<int> devices;  // the device bands of config gpus ({0}: one search)
  std::string detail;
};
SearchStage search_stage(const SearchConfig& config, const std::string& requested, EncodeStage encoded,
                         const MotionBank& bank, bool cube_on_gpu, const std::atomic<bool>* stop);

// filter: light curves of the threshold crossings, sigma-G clipping, likelihood and obs_count cuts.
struct FilterStage {
  std::vector<Detection> detections;
  FilterStats stats;
  std::string detail;
};
FilterStage filter_stage(std::vector<Candidate> candidates, const LikelihoodMaps& maps, const MotionBank& bank,
                         const FilterOptions& options);

// cluster: merges detections of one mover (or only sorts them), then max_results.
struct ClusterStage {
  std::vector<Detection> detections;  // best first
  std::vector<std::string> warnings;
  std::string detail;
};
ClusterStage cluster_stage(std::vector<Detection> detections, const MotionBank& bank, const SearchConfig& config);

// stamps: the configured coadds of every detection.
struct StampStage {
  std::vector<CoaddType> coadd_types;
  std::vector<std::vector<Image<float>>> stamps;  // [coadd][detection]
  std::string detail;
};
StampStage stamp_stage(const ExposureStack& stack, const MotionBank& bank, const std::vector<Detection>& detections,
                       const SearchConfig& config);

// wcs: RA/Dec at the first and last epoch (NaN without a WCS).
struct SkyStage {
  bool have_sky = false;
  std::vector<SkyPosition> first, last;
  std::vector<std::string> warnings;
  std::string detail;
};
SkyStage sky_stage(const std::vector<std::optional<Wcs>>& wcs, const MotionBank& bank,
                   const std::vector<Detection>& detections, const SearchConfig& config);

}  // namespace shiftstack::io
