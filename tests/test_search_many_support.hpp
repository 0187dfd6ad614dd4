// Helpers of the search-many tests: small kits written as FITS folders by the built command,
// manifests over them, and runs of the command with its exit status and output.
#pragma once
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "test_io_support.hpp"

namespace shiftstack::many::testing_support {

struct Outcome {
  int status = -1;     // exit code, -1 when killed by a signal
  std::string output;  // stdout and stderr
};

inline Outcome run_command(const std::string& command) {
  Outcome out;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (!pipe) return out;
  char buffer[4096];
  std::size_t n;
  while ((n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) out.output.append(buffer, n);
  const int status = pclose(pipe);
  out.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

inline Outcome run_cli(const std::string& arguments) {
  return run_command(std::string("'") + SHIFTSTACK_CLI_PATH + "' " + arguments);
}

inline void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
}

inline nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

// A folder of `ci` kits kit1..kitN (seeds 1..N), a folder "bad" holding a file that is no FITS
// file, and the kit's search.yaml. Kits are written once per folder.
inline void write_kits(const std::string& dir, int count) {
  for (int k = 1; k <= count; ++k) {
    const std::string kit = dir + "/kit" + std::to_string(k);
    if (std::filesystem::exists(kit + "/search.yaml")) continue;
    const Outcome r = run_cli("write-kit --workload ci --seed " + std::to_string(k) + " --out '" + kit + "'");
    if (r.status != 0) throw std::runtime_error("write-kit failed: " + r.output);
  }
  std::filesystem::create_directories(dir + "/bad");
  write_text(dir + "/bad/exposure.fits", "this is not a FITS file\n");
}

// The summary's units by name.
inline std::map<std::string, nlohmann::json> units_by_name(const nlohmann::json& summary) {
  std::map<std::string, nlohmann::json> out;
  for (const auto& u : summary.at("units")) out[u.at("unit").get<std::string>()] = u;
  return out;
}

}  // namespace shiftstack::many::testing_support
