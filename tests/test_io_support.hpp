// Helpers for the I/O tests: the fixtures' folder and a temporary folder per test.
#pragma once
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>

#include "shiftstack/io/config.hpp"
#include "shiftstack/io/fits.hpp"
#include "shiftstack/synth.hpp"

namespace shiftstack::io::testing_support {

// The default search configuration with the kit's own velocity grid and shift mode.
inline SearchConfig kit_search_config(const KitStack& kit) {
  SearchConfig c = default_config();
  c.generator.name = "VelocityGridSearch";
  c.generator.vx_steps = int(kit.bank.vx_axis.size());
  c.generator.min_vx = kit.bank.vx_axis.front();
  c.generator.max_vx = kit.bank.vx_axis.back();
  c.generator.vy_steps = int(kit.bank.vy_axis.size());
  c.generator.min_vy = kit.bank.vy_axis.front();
  c.generator.max_vy = kit.bank.vy_axis.back();
  c.shift_mode = kit.bank.mode;
  c.reference_time = "mid";  // the kit's bank anchors its trials (and its truth) at mid-span
  return c;
}

// The kit's exposures in memory with the bank's common curve, as run_search takes them.
inline LoadedStack kit_in_memory(const KitStack& kit) {
  LoadedStack loaded;
  loaded.stack = kit.stack;
  for (int e = 0; e < kit.stack.size(); ++e) {
    loaded.curve_x.push_back(kit.bank.curve_at_x(e));
    loaded.curve_y.push_back(kit.bank.curve_at_y(e));
  }
  return loaded;
}

// Third-party files the tests read, shipped in the repository (tests/data/fixtures/README.md).
inline std::string fixtures_dir() { return std::string(SHIFTSTACK_SOURCE_DIR) + "/tests/data/fixtures"; }
inline std::string fixture(const std::string& relative) { return fixtures_dir() + "/" + relative; }

// A fresh folder under the system's temporary directory, removed with its contents.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "shiftstack-test-XXXXXX").string();
    if (!::mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace shiftstack::io::testing_support
