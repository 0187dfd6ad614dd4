// `shiftstack demo`: a benchmark-kit stack with one injected source, searched by one engine; prints
// the best trial against the injected truth, and the digest.
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "options.hpp"
#include "progress.hpp"
#include "shiftstack/likelihood.hpp"

namespace shiftstack::cli {

namespace {

struct DemoOptions {
  std::string workload = "ci";
  std::string engine;  // empty: the best available
  std::string encoding = "fp32";
  std::string shifts = "integer";
  std::uint64_t seed = 1;
  bool json = false;
};

nlohmann::json trajectory(std::int64_t x, std::int64_t y, std::int64_t velocity, double vx, double vy,
                          double z) {
  return {{"x", x}, {"y", y}, {"velocity", velocity}, {"vx", vx}, {"vy", vy}, {"z", z}};
}

void run_demo(const DemoOptions& o) {
  Progress progress;
  KitOptions kit_options = workload(o.workload);
  kit_options.seed = o.seed;
  kit_options.shift_mode = shift_modes().at(o.shifts);
  const std::string engine_name = o.engine.empty() ? best_available_engine() : o.engine;
  auto engine = make_engine(engine_name);

  progress.show("demo: making the " + o.workload + " stack");
  const KitStack kit = make_kit(kit_options);
  progress.show("demo: likelihood maps");
  const EncodedStack stack =
      encode(compute_likelihood(kit.stack, kit_options.shift_mode == ShiftMode::fractional),
             parse_encoding(o.encoding));
  progress.show("demo: searching with " + engine_name);
  const SearchResult result = search(*engine, stack, kit.bank);
  progress.clear();

  const Digest& d = result.digest;
  const Truth& t = kit.truth;
  const Velocity best_v = d.argmax_velocity >= 0 ? kit.bank.velocity(std::size_t(d.argmax_velocity))
                                                 : Velocity{};
  const bool recovered = t.injected && d.argmax_x == t.x && d.argmax_y == t.y &&
                         d.argmax_velocity == t.velocity;
  const double samples = double(d.trials) * stack.exposures;

  if (o.json) {
    nlohmann::json j = {
        {"workload", o.workload},
        {"engine", engine_name},
        {"encoding", o.encoding},
        {"shifts", o.shifts},
        {"seed", o.seed},
        {"truth", trajectory(t.x, t.y, t.velocity, t.vx, t.vy, t.snr)},
        {"best", trajectory(d.argmax_x, d.argmax_y, d.argmax_velocity, best_v.vx, best_v.vy, d.maxZ)},
        {"recovered", recovered},
        {"digest", nlohmann::json::parse(to_json(d))},
        {"seconds", result.seconds},
        {"samples_per_second", samples / result.seconds},
    };
    std::cout << j.dump() << "\n";
    return;
  }
  std::printf("shiftstack demo: workload %s (%d exposures, %dx%d pixels, %zu velocities), %s shifts,\n"
              "  engine %s, encoding %s, seed %llu\n",
              o.workload.c_str(), stack.exposures, stack.width, stack.height, kit.bank.size(),
              o.shifts.c_str(), engine_name.c_str(), o.encoding.c_str(),
              static_cast<unsigned long long>(o.seed));
  std::printf("  injected : x=%d y=%d vx=%+.4f vy=%+.4f px/day (velocity %lld), SNR %.2f\n", t.x, t.y,
              t.vx, t.vy, static_cast<long long>(t.velocity), t.snr);
  std::printf("  recovered: x=%lld y=%lld vx=%+.4f vy=%+.4f px/day (velocity %lld), Z %.2f  -> %s\n",
              static_cast<long long>(d.argmax_x), static_cast<long long>(d.argmax_y), best_v.vx,
              best_v.vy, static_cast<long long>(d.argmax_velocity), d.maxZ,
              recovered ? "the injected trajectory" : "NOT the injected trajectory");
  std::printf("  digest   : %s\n", describe(d).c_str());
  std::printf("  time     : %.4f s per scan, %.3g paired samples/s\n", result.seconds,
              samples / result.seconds);
}

}  // namespace

void add_demo_command(CLI::App& app) {
  auto options = std::make_shared<DemoOptions>();
  CLI::App* demo = app.add_subcommand(
      "demo", "Search a built-in synthetic stack with an injected source and compare with the truth");
  demo->add_option("--workload", options->workload, "Named workload of the benchmark kit")
      ->check(one_of(workload_names()))
      ->capture_default_str();
  demo->add_option("--engine", options->engine, "Search engine (default: the best available here)")
      ->check(one_of(engine_names()));
  demo->add_option("--encoding", options->encoding, "Storage of the likelihood planes")
      ->check(one_of(encoding_names()))
      ->capture_default_str();
  demo->add_option("--shifts", options->shifts, "Trajectory sampling: nearest pixel or bilinear")
      ->check(one_of(shift_mode_names()))
      ->capture_default_str();
  demo->add_option("--seed", options->seed, "Seed of the synthetic stack")->capture_default_str();
  demo->add_flag("--json", options->json, "Print one JSON object instead of text");
  demo->callback([options] { run_demo(*options); });
}

}  // namespace shiftstack::cli
