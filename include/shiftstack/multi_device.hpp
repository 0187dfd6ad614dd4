// One search spread over several devices (`--gpus`): the region's origin rows are cut into one
// band per listed device, each band is searched by its own engine instance (on GPU engines in its
// own thread, bound to its device), and the parts are merged into the result one search of the
// whole region returns. A device may be listed more than once ("virtual devices": two workers
// share one card, each with its share of its memory), which also lets a one-GPU or CPU-only
// machine check the merge.
#pragma once
#include <string>
#include <vector>

#include "shiftstack/search.hpp"

namespace shiftstack {

// CUDA devices visible to this process (0 in a build without CUDA or without a device).
int visible_device_count();

// The devices `--gpus TEXT` names, given `available` visible devices:
//   all            every visible device (Error when there is none)
//   N              the first N devices (N >= 1; N above `available` is an Error)
//   I,J,...        those device indices in that order; an index may repeat; a single device
//                  by index is written with a trailing comma ("1,")
// For CPU engines the entries only count bands (see search_on_devices).
std::vector<int> parse_device_list(const std::string& text, int available);

// `parts` contiguous bands of origin rows covering `region` (resolved), heights differing by at
// most one alignment step; bands start on multiples of 8 rows from the region's top where the
// height allows, so that GPU blocks tile each band as they tile the whole region. Fewer bands
// come back when the region has fewer rows than parts.
std::vector<Region> split_rows(const Region& region, int parts);

struct DeviceSplit {
  std::vector<int> devices;          // one band per entry (repeats share a card)
  std::vector<double> band_seconds;  // wall time of each band's search, filled by the search
  bool parallel = false;             // filled: whether the bands ran at once (GPU engines)
};

// Searches `region` with a fresh instance of engine `engine_name` per band. GPU engines run the
// bands in parallel threads, each bound to its device with its own device cache; CPU engines run
// them one after another (each already uses every core). The result equals that of
// search(engine, stack, bank, policy, region) on one device: the same z_thr (the whole search's
// Bonferroni count), count, scored, trials, maxZ and argmax, the same candidates in the same order
// and the same top-k lists, provided the engine computes each trial independently of the region's
// shape (every gather engine and both CPU engines do; the Fourier-route engines pad their
// transforms to the region, so their parts agree only to SPEC 4's tolerances). sumA and sumB are
// the same sums added in another order: equal up to double rounding (relative 1e-15 or so).
// The stack must carry its host payload (a cube encoded on one device is not shared).
SearchResult search_on_devices(const std::string& engine_name, const EncodedStack& stack, const MotionBank& bank,
                               const OutputPolicy& policy, Region region, DeviceSplit& split);

}  // namespace shiftstack
