// Shared by the libFuzzer harnesses: the readers take paths, so each input is written to a file
// in one private folder per process (on /dev/shm where it exists, to keep executions fast).
#pragma once
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <string>

namespace shiftstack::fuzz {

inline const std::string& scratch_folder() {
  static const std::string folder = [] {
    std::string base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : (std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp");
    std::string pattern = base + "/shiftstack-fuzz-XXXXXX";
    if (!mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed");
    return pattern;
  }();
  return folder;
}

// The readers' memory budget, below the fuzzer's -rss_limit_mb: any allocation the budget lets
// through then fits, and one that the fuzzer flags is a real finding (the budget was bypassed).
inline void set_fuzz_budget() { setenv("SHIFTSTACK_MEMORY_BUDGET", "512M", 1); }

inline std::string write_input(const std::string& name, const std::uint8_t* data, std::size_t size) {
  const std::string path = scratch_folder() + "/" + name;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), std::streamsize(size));
  if (!out) throw std::runtime_error("cannot write " + path);
  return path;
}

}  // namespace shiftstack::fuzz
