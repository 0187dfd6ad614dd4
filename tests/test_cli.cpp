// The built `shiftstack` command, run as a user would: --version/--help, bad option values (a
// clear message naming the option and a non-zero exit), `demo --json` against the injected truth,
// and `bench --json` records.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "shiftstack/cpu_engine.hpp"
#include "shiftstack/search.hpp"

namespace {

struct Outcome {
  int status = -1;     // exit code, -1 when killed by a signal
  std::string output;  // stdout (and stderr where asked)
};

Outcome shiftstack(const std::string& arguments, bool with_stderr = true) {
  const std::string command = std::string("'") + SHIFTSTACK_CLI_PATH + "' " + arguments +
                              (with_stderr ? " 2>&1" : " 2>/dev/null");
  Outcome out;
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return out;
  char buffer[4096];
  std::size_t n;
  while ((n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) out.output.append(buffer, n);
  const int status = pclose(pipe);
  out.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// A folder of this test process's own, so that runs side by side (ctest -j, several checkouts)
// never see each other's files.
std::filesystem::path temp_path(const std::string& name) {
  const std::filesystem::path folder =
      std::filesystem::path(::testing::TempDir()) / ("shiftstack_cli_" + std::to_string(::getpid()));
  std::filesystem::create_directories(folder);
  return folder / name;
}

TEST(Cli, VersionPrintsTheProjectVersion) {
  const Outcome r = shiftstack("--version");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(contains(r.output, SHIFTSTACK_VERSION)) << r.output;
}

TEST(Cli, MisspelledCommandsAndOptionsGetSuggestions) {
  Outcome r = shiftstack("demoo");
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "unknown command 'demoo' (did you mean 'demo'?)")) << r.output;
  r = shiftstack("--verison");
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "unknown option '--verison' (did you mean '--version'?)")) << r.output;
  r = shiftstack("demo --sed 3");
  EXPECT_EQ(r.status, 109) << r.output;  // CLI11's "argument not expected", documented in --help
  EXPECT_TRUE(contains(r.output, "unknown option '--sed' for 'demo' (did you mean '--seed'?)")) << r.output;
  // Far from every name: no guess, CLI11's own message.
  r = shiftstack("demo --zzzzzzzz");
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_FALSE(contains(r.output, "did you mean")) << r.output;
}

TEST(Cli, HelpDocumentsTheExitCodes) {
  std::vector<const char*> commands = {"--help", "demo --help", "bench --help"};
#ifdef SHIFTSTACK_CLI_HAS_SEARCH
  commands.push_back("search --help");  // a footer of its own, then the exit codes
#endif
  for (const char* args : commands) {
    const Outcome r = shiftstack(args);
    EXPECT_EQ(r.status, 0) << r.output;
    for (const char* code : {"Exit codes", "105", "106", "109", "114"})
      EXPECT_TRUE(contains(r.output, code)) << args << ": " << code << " missing";
    const std::size_t once = r.output.find("Exit codes");
    EXPECT_EQ(r.output.find("Exit codes", once + 1), std::string::npos) << args << ": the exit codes twice";
  }
}

TEST(Cli, HelpListsTheSubcommands) {
  const Outcome r = shiftstack("--help");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "demo")) << r.output;
  EXPECT_TRUE(contains(r.output, "bench")) << r.output;
  const Outcome bench = shiftstack("bench --help");
  EXPECT_EQ(bench.status, 0) << bench.output;
  EXPECT_TRUE(contains(bench.output, "--runs")) << bench.output;
}

TEST(Cli, NoSubcommandIsAnError) {
  const Outcome r = shiftstack("");
  EXPECT_NE(r.status, 0) << r.output;
}

TEST(Cli, BadOptionValuesNameTheOption) {
  const std::pair<const char*, const char*> cases[] = {
      {"demo --workload nonesuch", "--workload"},
      {"demo --engine nonesuch", "--engine"},
      {"demo --encoding fp64", "--encoding"},
      {"demo --shifts sideways", "--shifts"},
      {"demo --seed minus-one", "--seed"},
      {"bench --runs 0", "--runs"},
      {"bench --warmup -1", "--warmup"},
      {"bench --engine nonesuch", "--engine"},
      {"bench --encoding int4", "--encoding"},
      {"bench --baseline nonesuch", "--baseline"},
      {"bench --width 0", "--width"},
      {"bench --exposures -3", "--exposures"},
      {"bench --top-k -1", "--top-k"},
      {"bench --nonesuch 1", "--nonesuch"},
  };
  for (const auto& [arguments, option] : cases) {
    const Outcome r = shiftstack(arguments);
    EXPECT_NE(r.status, 0) << arguments << "\n" << r.output;
    EXPECT_TRUE(contains(r.output, option)) << arguments << " should name " << option << ":\n" << r.output;
  }
}

TEST(Cli, UnwritableJsonPathFailsBeforeRunningAndWritesNothing) {
  const std::filesystem::path target = temp_path("missing_dir") / "out.json";
  const Outcome r = shiftstack("bench --runs 1 --warmup 0 --baseline none --json '" + target.string() + "'");
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "--json")) << r.output;
  EXPECT_FALSE(std::filesystem::exists(target));
}

// Every engine available here recovers the injected trajectory exactly, with Z consistent with
// the injected SNR of 8 (Z ~ N(8, 1) at the true trial; 4 sigma allowed).
TEST(Cli, DemoJsonRecoversTheInjectedTrajectoryOnEveryEngine) {
  for (const auto& info : shiftstack::engines()) {
    if (!info.available()) continue;
    const Outcome r = shiftstack("demo --json --engine " + info.name, false);
    ASSERT_EQ(r.status, 0) << info.name << ": " << r.output;
    const nlohmann::json j = nlohmann::json::parse(r.output);  // one object, nothing else
    const auto &truth = j.at("truth"), &best = j.at("best");
    EXPECT_EQ(best.at("x"), truth.at("x")) << info.name;
    EXPECT_EQ(best.at("y"), truth.at("y")) << info.name;
    EXPECT_DOUBLE_EQ(best.at("vx").get<double>(), truth.at("vx").get<double>()) << info.name;
    EXPECT_DOUBLE_EQ(best.at("vy").get<double>(), truth.at("vy").get<double>()) << info.name;
    EXPECT_DOUBLE_EQ(truth.at("z").get<double>(), 8.0);
    EXPECT_NEAR(best.at("z").get<double>(), 8.0, 4.0) << info.name;
    EXPECT_TRUE(j.at("recovered").get<bool>()) << info.name;
    for (const char* field : {"sumA", "sumB", "maxZ", "count", "z_thr"})
      EXPECT_TRUE(j.at("digest").contains(field)) << field;
    EXPECT_DOUBLE_EQ(j.at("digest").at("maxZ").get<double>(), best.at("z").get<double>());
  }
}

TEST(Cli, BenchJsonHasOneRecordPerCombinationThatAgreesWithTheReference) {
  const std::filesystem::path file = temp_path("bench.json");
  std::filesystem::remove(file);
  const Outcome r = shiftstack("bench --workload ci --engine cpu --encoding all --runs 2 --warmup 0 --json '" +
                               file.string() + "'");
  ASSERT_EQ(r.status, 0) << r.output;
  std::ifstream in(file);
  const nlohmann::json records = nlohmann::json::parse(in);
  ASSERT_TRUE(records.is_array());
  ASSERT_EQ(records.size(), 3u);
  const double samples = 128.0 * 128 * 17 * 17 * 32;  // the ci workload
  for (const auto& rec : records) {
    EXPECT_EQ(rec.at("engine"), "cpu");
    EXPECT_EQ(rec.at("workload"), "ci");
    EXPECT_EQ(rec.at("baseline"), "reference");
    EXPECT_TRUE(rec.at("agrees").get<bool>()) << rec.dump(2);
    EXPECT_TRUE(rec.at("deterministic").get<bool>()) << rec.dump(2);
    const double seconds = rec.at("seconds_median").get<double>();
    EXPECT_GT(seconds, 0);
    EXPECT_NEAR(rec.at("samples_per_second").get<double>() * seconds, samples, 1e-6 * samples);
    for (const char* field : {"sumA", "sumB", "maxZ", "count", "z_thr"})
      EXPECT_TRUE(rec.at("digest").contains(field)) << field;
    for (const char* field : {"card", "commit", "date"})
      EXPECT_FALSE(rec.at(field).get<std::string>().empty()) << field;
    EXPECT_GT(rec.at("cpu_seconds_median").get<double>(), 0);
    const char* env = std::getenv("SHIFTSTACK_CPU_TARGET");
    if (!env || !*env) {  // the SIMD target the cpu engine ran: the best one here
      EXPECT_EQ(rec.at("cpu_target"), shiftstack::cpu_engine_targets().front());
    }
  }
  EXPECT_TRUE(contains(r.output, "cpu engine SIMD target: ")) << r.output;
  EXPECT_EQ(records[0].at("encoding"), "fp32");
  EXPECT_EQ(records[2].at("encoding"), "int8");
  for (const auto& entry : std::filesystem::directory_iterator(file.parent_path()))  // no temp left
    EXPECT_FALSE(contains(entry.path().filename().string(), "bench.json.tmp")) << entry.path();
}

// --top-k: every engine keeps k trials per origin, and the time is the host clock around the
// search (the lists on the host), never less than the engine's own time.
TEST(Cli, BenchTopKTimesTheListsOnTheHost) {
  const std::filesystem::path file = temp_path("topk.json");
  const Outcome r = shiftstack(
      "bench --exposures 4 --width 61 --height 58 --vx 3 --vy 2 --runs 2 --warmup 1 --top-k 3 "
      "--engine cpu --engine reference --baseline reference --json '" + file.string() + "'");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "top-3 per origin")) << r.output;
  std::ifstream in(file);
  const nlohmann::json records = nlohmann::json::parse(in);
  ASSERT_EQ(records.size(), 2u);
  for (const auto& rec : records) {
    EXPECT_EQ(rec.at("top_k"), 3) << rec.dump(2);
    EXPECT_TRUE(contains(rec.at("timing").get<std::string>(), "wall clock")) << rec.dump(2);
    EXPECT_TRUE(rec.at("agrees").get<bool>()) << rec.dump(2);
    EXPECT_GT(rec.at("engine_seconds_median").get<double>(), 0);
    EXPECT_GE(rec.at("seconds_median").get<double>(), rec.at("engine_seconds_median").get<double>());
  }
}

TEST(Cli, BenchCustomShapeOverridesTheWorkload) {
  const std::filesystem::path file = temp_path("custom.json");
  const Outcome r = shiftstack(
      "bench --exposures 4 --width 61 --height 58 --vx 3 --vy 2 --runs 1 --warmup 0 --baseline none "
      "--engine cpu --json '" + file.string() + "'");
  ASSERT_EQ(r.status, 0) << r.output;
  std::ifstream in(file);
  const nlohmann::json rec = nlohmann::json::parse(in).at(0);
  EXPECT_EQ(rec.at("workload"), "custom");
  EXPECT_EQ(rec.at("shape").at("exposures"), 4);
  EXPECT_EQ(rec.at("shape").at("width"), 61);
  EXPECT_EQ(rec.at("shape").at("height"), 58);
  EXPECT_EQ(rec.at("shape").at("velocities"), 6);
  EXPECT_DOUBLE_EQ(rec.at("paired_samples").get<double>(), 61.0 * 58 * 6 * 4);
  EXPECT_TRUE(rec.at("agrees").is_null());
}

}  // namespace
