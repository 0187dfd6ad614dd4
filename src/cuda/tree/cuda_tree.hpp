// The `cuda-tree` and `cuda-tree-screen` engines (docs/tree-search.md, section "cuda-tree"): cpu-tree's
// plan run on the GPU, level by level, the root streamed and screened, then the screened trials
// re-scored exactly on the device. No CUDA syntax here: tests and the CLI include it.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "shiftstack/search.hpp"
#include "shiftstack/tree.hpp"

namespace shiftstack::cuda {

struct CudaTreeStats {
  bool fell_back = false;
  std::string fallback_reason;
  std::int64_t trials = 0;
  int depth = 0, bands = 0, band_rows = 0;
  std::vector<std::int64_t> level_additions;  // per channel, all bands (margins included)
  double additions_per_trial() const;
  double level_bytes = 0;  // device memory of the two level buffers
  bool fused_root = false;  // the root read its grandchildren (level 1 never formed)
  int formed_levels = 0;    // levels below the root with maps (the others fused into the one above)
  bool cube_resident = false;  // the whole image on the device (else bands of it, host refinement)
  bool refined_on_device = false;  // the flood ran on the device (else cpu-tree's, on the host)
  double z_screen = 0;
  std::int64_t screened = 0, refined = 0;
  int screen_passes = 0, refine_rounds = 0;
  double seconds_tree = 0, seconds_refine = 0, seconds_total = 0;
};

// TreeOptions as cpu-tree reads them (oversample, child_reach, screen_margin, refine,
// fallback_fraction); tile_height > 0 forces the origin rows per band (tests), 0 lets the engine
// choose from the free device memory.
class CudaTreeEngine final : public Engine {
 public:
  explicit CudaTreeEngine(TreeOptions options = {}, std::string name = "cuda-tree");
  ~CudaTreeEngine() override;
  std::string name() const override { return name_; }
  std::string unsupported_reason(const SearchInput& input) const override;
  SearchResult search(const SearchInput& input) override;
  const CudaTreeStats& last_stats() const { return stats_; }
  const TreeOptions& options() const { return options_; }

 private:
  struct State;
  TreeOptions options_;
  std::string name_;
  CudaTreeStats stats_;
  std::unique_ptr<State> state_;
};

void register_cuda_tree_engines();  // called from register_cuda_engines (common/device.cu)

}  // namespace shiftstack::cuda
