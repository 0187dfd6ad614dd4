// One search over several devices: row bands, one engine instance per band, exact merge.
#include "shiftstack/multi_device.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <map>
#include <thread>

#include "shiftstack/error.hpp"
#ifdef SHIFTSTACK_HAVE_CUDA
#include "cuda/common/device_stack.hpp"
#endif

namespace shiftstack {

namespace {

// Band starts fall on multiples of this many rows (GPU gathers tile origins in blocks of up to
// 8 rows), so a band's blocks are the whole region's blocks.
constexpr int kBandAlignment = 8;

int parse_index(const std::string& text, const std::string& whole) {
  std::size_t used = 0;
  int value = -1;
  try {
    value = std::stoi(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  require(used == text.size() && value >= 0 && !text.empty(),
          "--gpus '" + whole + "': '" + text + "' is not a device index or count (expected all, N or a list such as 0,1)");
  return value;
}

bool has_host_payload(const EncodedStack& s) {
  switch (s.encoding) {
    case Encoding::fp32: return !s.fp32.empty();
    case Encoding::fp16: return !s.fp16.empty();
    case Encoding::int8: return !s.int8.empty();
  }
  return false;
}

const EngineInfo& engine_info(const std::string& name) {
  if (const EngineInfo* e = find_engine(name)) return *e;
  make_engine(name);  // throws the registry's own "unknown engine" error with the known names
  throw Error("unknown engine '" + name + "'");
}

SearchResult search_band(const EngineInfo& info, const EncodedStack& stack, const MotionBank& bank,
                         const OutputPolicy& policy, const Region& band, int device, int sharing) {
#ifdef SHIFTSTACK_HAVE_CUDA
  if (info.gpu) {
    cuda::DeviceWorkerScope scope(device, sharing);
    auto engine = make_engine(info.name);  // made on the bound device; gone before the scope
    return search(*engine, stack, bank, policy, band);
  }
#else
  (void)sharing;
#endif
  (void)device;
  auto engine = make_engine(info.name);
  return search(*engine, stack, bank, policy, band);
}

}  // namespace

int visible_device_count() {
#ifdef SHIFTSTACK_HAVE_CUDA
  return cuda::device_count();
#else
  return 0;
#endif
}

std::vector<int> parse_device_list(const std::string& text, int available) {
  require(!text.empty(), "--gpus: empty (expected all, N or a list such as 0,1)");
  std::vector<int> devices;
  if (text == "all") {
    require(available > 0, "--gpus all: no CUDA device is visible");
    for (int d = 0; d < available; ++d) devices.push_back(d);
    return devices;
  }
  if (text.find(',') == std::string::npos) {
    const int count = parse_index(text, text);
    require(count >= 1, "--gpus " + text + ": a count must be at least 1");
    require(count <= std::max(available, 1),
            "--gpus " + text + ": only " + std::to_string(available) + " CUDA device(s) visible");
    for (int d = 0; d < count; ++d) devices.push_back(d);
    return devices;
  }
  std::size_t begin = 0;
  while (begin <= text.size()) {
    const std::size_t comma = std::min(text.find(',', begin), text.size());
    const std::string item = text.substr(begin, comma - begin);
    // "1," is the one-device list: a trailing comma ends the list.
    if (!(item.empty() && comma == text.size() && !devices.empty())) {
      const int d = parse_index(item, text);
      require(available == 0 || d < available, "--gpus " + text + ": device " + std::to_string(d) +
                                                   " does not exist (" + std::to_string(available) + " visible)");
      devices.push_back(d);
    }
    begin = comma + 1;
  }
  return devices;
}

std::vector<Region> split_rows(const Region& region, int parts) {
  require(parts >= 1, "split_rows: parts must be >= 1");
  require(region.width > 0 && region.height > 0, "split_rows: the region must be resolved");
  // In units of aligned row groups where there are enough of them, else single rows.
  const int unit = region.height >= parts * kBandAlignment ? kBandAlignment : 1;
  const int units = (region.height + unit - 1) / unit;
  parts = std::min(parts, units);
  std::vector<Region> bands;
  int start_unit = 0;
  for (int p = 0; p < parts; ++p) {
    // The extra units go to the last bands, which also hold the region's partial last unit.
    const int count = units / parts + (p >= parts - units % parts ? 1 : 0);
    const int y0 = start_unit * unit;
    const int y1 = std::min(region.height, (start_unit + count) * unit);
    bands.push_back(Region{region.x0, region.y0 + y0, region.width, y1 - y0});
    start_unit += count;
  }
  return bands;
}

SearchResult search_on_devices(const std::string& engine_name, const EncodedStack& stack, const MotionBank& bank,
                               const OutputPolicy& policy, Region region, DeviceSplit& split) {
  require(!split.devices.empty(), "multi-device search: no devices listed");
  require(stack.exposures > 0, "search: empty stack");
  require(has_host_payload(stack),
          "multi-device search: the encoded stack has no host payload (its cube was encoded on one device); "
          "download it first");
  validate(bank, stack.exposures);
  const EngineInfo& info = engine_info(engine_name);
  require(info.available(), "engine '" + engine_name + "' is not available here (no CUDA device?)");
  const Region whole = resolve(region, stack.width, stack.height);
  const std::vector<Region> bands = split_rows(whole, int(split.devices.size()));

  OutputPolicy part_policy = policy;
  const double whole_trials = double(whole.count()) * double(bank.size());
  if (part_policy.bonferroni_trials == 0) part_policy.bonferroni_trials = whole_trials;

  std::map<int, int> sharing;  // workers per card
  for (std::size_t b = 0; b < bands.size(); ++b) ++sharing[split.devices[b]];

  std::vector<SearchResult> parts(bands.size());
  std::vector<std::exception_ptr> errors(bands.size());
  split.band_seconds.assign(bands.size(), 0.0);
  // GPU bands always run in threads of their own, even a single band on another device, so
  // that the caller's thread keeps its device and its cache.
  split.parallel = info.gpu;
  auto run = [&](std::size_t b) {
    const auto start = std::chrono::steady_clock::now();
    try {
      parts[b] = search_band(info, stack, bank, part_policy, bands[b], split.devices[b], sharing[split.devices[b]]);
    } catch (...) {
      errors[b] = std::current_exception();
    }
    split.band_seconds[b] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  const auto start = std::chrono::steady_clock::now();
  if (split.parallel) {
    std::vector<std::thread> threads;
    for (std::size_t b = 0; b < bands.size(); ++b) threads.emplace_back(run, b);
    for (auto& t : threads) t.join();
  } else {
    for (std::size_t b = 0; b < bands.size(); ++b) run(b);
  }
  for (std::size_t b = 0; b < bands.size(); ++b) {
    if (!errors[b]) continue;
    const std::string where = "device " + std::to_string(split.devices[b]) + " (origin rows " +
                              std::to_string(bands[b].y0) + "-" + std::to_string(bands[b].y0 + bands[b].height - 1) + ")";
    try {
      std::rethrow_exception(errors[b]);
    } catch (const std::exception& e) {
      throw Error(where + ": " + e.what());
    }
  }

  SearchResult result;
  result.engine = info.name;
  result.digest.z_thr = parts.front().digest.z_thr;
  std::size_t candidates = 0, top = 0;
  for (const SearchResult& p : parts) {
    candidates += p.candidates.size();
    top += p.top_k.size();
  }
  require(std::int64_t(candidates) <= policy.max_candidates,
          "candidate list of " + std::to_string(candidates) + " trials exceeds max_candidates (" +
              std::to_string(policy.max_candidates) + "): raise the candidate threshold or the limit");
  result.candidates.reserve(candidates);
  result.top_k.reserve(top);
  for (const SearchResult& p : parts) {
    result.digest.merge(p.digest);
    result.candidates.insert(result.candidates.end(), p.candidates.begin(), p.candidates.end());
    // Row bands in order: their origin-major lists concatenate to the region's order.
    result.top_k.insert(result.top_k.end(), p.top_k.begin(), p.top_k.end());
  }
  std::sort(result.candidates.begin(), result.candidates.end(), [](const Candidate& a, const Candidate& b) {
    if (a.velocity != b.velocity) return a.velocity < b.velocity;
    if (a.y != b.y) return a.y < b.y;
    return a.x < b.x;
  });
  result.digest.trials = whole.count() * std::int64_t(bank.size());
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace shiftstack
