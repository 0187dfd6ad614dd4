// Timing driver for the GPU gathers' sweep (packet shapes, staging formats, encodings) and for
// output policies the `shiftstack bench` command does not set (top-k per origin, candidates).
// Per combination: median device time of complete scans after a warm-up, paired samples per
// second, and the digest against the baseline engine's fp32 digest under SPEC 4's tolerances.
//
//   shiftstack_gather_sweep --workload dense --encoding fp32,fp16,int8 --variants all
//                           --engines cuda-serial,cuda-tiled --runs 5 --top-k 8 --json out.json
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cuda/common/device_stack.hpp"
#include "cuda/gather/gather_fast.hpp"
#include "shiftstack/encoding.hpp"
#include "shiftstack/error.hpp"
#include "shiftstack/likelihood.hpp"
#include "shiftstack/search.hpp"
#include "shiftstack/synth.hpp"

using namespace shiftstack;

namespace {

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

struct Options {
  std::string workload = "dense";
  std::vector<std::string> encodings = {"fp32", "fp16", "int8"};
  std::vector<std::string> variants = {"all"};  // cuda-fast variants; "auto" = automatic choice
  std::vector<std::string> engines;             // other engines timed as they are
  std::string baseline = "cuda-serial";
  int runs = 5, warmup = 1, top_k = 0;
  double candidate_threshold = 0;  // 0 = no candidate list
  std::string json;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      require(i + 1 < argc, a + " needs a value");
      return argv[++i];
    };
    if (a == "--workload") o.workload = value();
    else if (a == "--encoding") o.encodings = split(value());
    else if (a == "--variants") o.variants = split(value());
    else if (a == "--engines") o.engines = split(value());
    else if (a == "--baseline") o.baseline = value();
    else if (a == "--runs") o.runs = std::stoi(value());
    else if (a == "--warmup") o.warmup = std::stoi(value());
    else if (a == "--top-k") o.top_k = std::stoi(value());
    else if (a == "--candidates-above") o.candidate_threshold = std::stod(value());
    else if (a == "--json") o.json = value();
    else throw Error("unknown option " + a);
  }
  require(o.runs > 0, "--runs must be > 0");
  return o;
}

}  // namespace

int main(int argc, char** argv) try {
  const Options o = parse(argc, argv);
  const KitOptions kit_options = workload(o.workload);
  const KitStack kit = make_kit(kit_options);
  const LikelihoodStack likelihood = compute_likelihood(kit.stack);
  std::map<std::string, EncodedStack> stacks;
  for (const std::string& e : o.encodings) stacks.emplace(e, encode(likelihood, parse_encoding(e)));
  if (!stacks.count("fp32")) stacks.emplace("fp32", encode(likelihood, Encoding::fp32));
  const double samples = double(kit_options.width) * kit_options.height * double(kit.bank.size()) *
                         kit_options.exposures;

  OutputPolicy policy;
  policy.top_k = o.top_k;
  if (o.candidate_threshold > 0) {
    policy.collect_candidates = true;
    policy.candidate_threshold = o.candidate_threshold;
  }
  std::printf("workload %s: %d exposures, %dx%d, %zu velocities, %.4g paired samples; top-k %d, candidates %s\n",
              o.workload.c_str(), kit_options.exposures, kit_options.width, kit_options.height,
              kit.bank.size(), samples, o.top_k,
              policy.collect_candidates ? ("Z > " + std::to_string(o.candidate_threshold)).c_str() : "off");

  auto base_engine = make_engine(o.baseline);
  const SearchResult base = search(*base_engine, stacks.at("fp32"), kit.bank, OutputPolicy{});
  std::printf("baseline %s fp32: %s (%.4f s)\n", o.baseline.c_str(), describe(base.digest).c_str(), base.seconds);
  std::printf("truth: x=%d y=%d v=%lld\n", kit.truth.x, kit.truth.y, (long long)kit.truth.velocity);

  nlohmann::json records = nlohmann::json::array();
  std::printf("%-26s %-6s %10s %10s %12s %9s %7s %s\n", "engine/variant", "enc", "median ms", "min ms",
              "samples/s", "maxZ", "count", "agrees with baseline");

  auto time_one = [&](const std::string& engine_name, const std::string& variant, const std::string& enc) {
    const EncodedStack& stack = stacks.at(enc);
    auto engine = make_engine(engine_name);
    const SearchInput probe{&stack, &kit.bank, resolve({}, stack.width, stack.height), policy};
    const std::string reason = engine->unsupported_reason(probe);
    nlohmann::json r = {{"engine", engine_name}, {"variant", variant}, {"workload", o.workload},
                        {"encoding", enc}, {"top_k", o.top_k}, {"paired_samples", samples}};
    if (!reason.empty()) {
      std::printf("%-26s %-6s skipped: %s\n", (variant.empty() ? engine_name : variant).c_str(), enc.c_str(),
                  reason.c_str());
      r["skipped"] = reason;
      records.push_back(r);
      return;
    }
    std::vector<double> seconds;
    SearchResult last;
    bool deterministic = true;
    for (int i = 0; i < o.warmup + o.runs; ++i) {
      SearchResult res = search(*engine, stack, kit.bank, policy);
      if (i > 0 && (res.digest.sumA != last.digest.sumA || res.digest.count != last.digest.count))
        deterministic = false;
      if (i >= o.warmup) seconds.push_back(res.seconds);
      last = std::move(res);
    }
    const double t = median(seconds);
    const bool reduced = enc != "fp32";
    const DigestComparison cmp = compare(base.digest, last.digest,
                                         reduced ? DigestTolerance::reduced() : DigestTolerance::fp32(), -1);
    std::string agrees = cmp.agrees ? "yes" : "NO: " + cmp.failures.front();
    if (!deterministic) agrees += " (digest changed between runs)";
    const std::string label = variant.empty() ? engine_name : variant;
    std::printf("%-26s %-6s %10.3f %10.3f %12.4g %9.4f %7lld %s\n", label.c_str(), enc.c_str(), 1e3 * t,
                1e3 * *std::min_element(seconds.begin(), seconds.end()), samples / t, last.digest.maxZ,
                (long long)last.digest.count, agrees.c_str());
    std::fflush(stdout);
    r["seconds_median"] = t;
    r["seconds_min"] = *std::min_element(seconds.begin(), seconds.end());
    r["seconds_max"] = *std::max_element(seconds.begin(), seconds.end());
    r["samples_per_second"] = samples / t;
    r["digest"] = nlohmann::json::parse(to_json(last.digest));
    r["agrees"] = cmp.agrees;
    r["tolerance"] = reduced ? "reduced" : "fp32";
    r["rel_sumA"] = cmp.rel_sumA;
    r["rel_sumB"] = cmp.rel_sumB;
    r["d_maxZ"] = cmp.d_maxZ;
    r["d_count"] = cmp.d_count;
    r["deterministic"] = deterministic;
    r["candidates"] = last.candidates.size();
    if (!last.top_k.empty()) {
      // The best entry of the truth's origin: does the top-k list name the injected trajectory?
      const std::size_t o_index = std::size_t(kit.truth.y) * stack.width + kit.truth.x;
      r["truth_top1_velocity"] = last.top_k[o_index * o.top_k].velocity;
    }
    records.push_back(r);
  };

  for (const std::string& engine_name : o.engines)
    for (const std::string& enc : o.encodings) time_one(engine_name, "", enc);
  std::vector<std::string> names;
  for (const std::string& v : o.variants) {
    if (v == "all")
      for (const auto& info : cuda::fast_variants()) names.push_back(info.name);
    else
      names.push_back(v);
  }
  for (const std::string& name : names)
    for (const std::string& enc : o.encodings) {
      cuda::set_fast_variant(name == "auto" ? "" : name);
      time_one("cuda-fast", name == "auto" ? "auto:" : name, enc);
      if (name == "auto") records.back()["variant"] = "auto:" + cuda::last_fast_variant();
    }
  cuda::set_fast_variant("");

  const auto stats = cuda::upload_stats();
  std::printf("uploads %lld (%.3g GB), reuses %lld\n", (long long)stats.uploads, stats.bytes / 1e9,
              (long long)stats.reuses);
  if (!o.json.empty()) {
    std::ofstream out(o.json);
    out << records.dump(2) << "\n";
    require(bool(out), "cannot write " + o.json);
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "gather_sweep: %s\n", e.what());
  return 1;
}
