// Provenance of a measurement for result records (bench, validate, the Python module): the
// machine, the source revision, the time. commit_id() reads the tree when SHIFTSTACK_SOURCE_DIR is set.
#pragma once
#include <omp.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <string>

namespace shiftstack {
#ifdef SHIFTSTACK_HAVE_CUDA
std::string cuda_device_name();  // src/cuda/device.cu
#endif
}  // namespace shiftstack

namespace shiftstack {

// The first line of `text`, without its line ending.
inline std::string first_line(std::string text) {
  const auto end = text.find_first_of("\r\n");
  return end == std::string::npos ? text : text.substr(0, end);
}

// "model name" of /proc/cpuinfo.
inline std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(" \t", colon + 1));
    }
  return "unknown model";
}

// The GPU's name for GPU engines, else "cpu: <model> (<n> cores)".
inline std::string machine_name(bool gpu) {
#ifdef SHIFTSTACK_HAVE_CUDA
  if (gpu) return cuda_device_name();
#endif
  (void)gpu;
  return "cpu: " + cpu_model() + " (" + std::to_string(omp_get_num_procs()) + " cores)";
}

// The revision named by the environment (SHIFTSTACK_COMMIT, for binaries run away from their
// source tree), else the source tree's commit (-dirty when it has uncommitted changes) as it is
// when this runs, else the one given at build time (-DSHIFTSTACK_COMMIT=...), else "unknown".
inline std::string commit_id() {
  if (const char* named = std::getenv("SHIFTSTACK_COMMIT"); named && *named) return named;
#ifdef SHIFTSTACK_SOURCE_DIR
  const std::string command =
      "git -C '" SHIFTSTACK_SOURCE_DIR "' describe --always --dirty --abbrev=12 2>/dev/null";
  if (FILE* pipe = popen(command.c_str(), "r")) {
    char buffer[128] = {};
    const bool got = std::fgets(buffer, sizeof buffer, pipe) != nullptr;
    const int status = pclose(pipe);
    if (got && status == 0) return first_line(buffer);
  }
#endif
#ifdef SHIFTSTACK_COMMIT
  return SHIFTSTACK_COMMIT;
#else
  return "unknown";
#endif
}

// Now, in UTC, ISO 8601: 2026-11-30T02:11:58Z.
inline std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

}  // namespace shiftstack
