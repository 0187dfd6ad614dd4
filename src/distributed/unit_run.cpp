// One unit inside the worker process: configuration, the pipeline run, the outputs and their
// checksums; and the worker's read-a-unit, answer-a-record loop.
#include <fcntl.h>
#include <fitsio.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <new>

#include "shiftstack/error.hpp"
#include "shiftstack/run.hpp"
#include "shiftstack/search_many.hpp"

namespace shiftstack::many {

namespace fs = std::filesystem;

namespace {

double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "unknown";
  return name;
}

// Files are recorded relative to the output root (the unit's folder is output_rel there).
void add_output(Record& r, const std::string& path, const Unit& u) {
  if (path.empty()) return;
  std::uint64_t bytes = 0;
  const std::string crc = file_crc32(path, &bytes);
  const std::string file = (fs::path(u.output_rel) / fs::path(path).filename()).string();
  r["outputs"].push_back({{"file", file}, {"bytes", bytes}, {"crc32", crc}});
}

bool write_all(int fd, const std::string& text) {
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += std::size_t(n);
  }
  return true;
}

}  // namespace

nlohmann::json unit_to_json(const Unit& u) {
  return {{"name", u.name},         {"inputs", u.inputs},         {"config", u.config},
          {"overrides", u.overrides}, {"engine", u.engine},       {"encoding", u.encoding},
          {"output_dir", u.output_dir}, {"output_rel", u.output_rel}, {"timeout", u.timeout},
          {"fits", u.fits},         {"stamps", u.stamps}};
}

Unit unit_from_json(const nlohmann::json& j) {
  Unit u;
  u.name = j.at("name").get<std::string>();
  u.inputs = j.at("inputs").get<std::vector<std::string>>();
  u.config = j.value("config", "");
  u.overrides = j.value("overrides", std::vector<std::string>{});
  u.engine = j.value("engine", "");
  u.encoding = j.value("encoding", "");
  u.output_dir = j.at("output_dir").get<std::string>();
  u.output_rel = j.value("output_rel", u.name);
  u.timeout = j.value("timeout", 0.0);
  u.fits = j.value("fits", true);
  u.stamps = j.value("stamps", true);
  return u;
}

Record run_unit(const Unit& u) {
  Record r = {{"unit", u.name},        {"fingerprint", fingerprint(u)}, {"host", host_name()},
              {"pid", int(::getpid())}, {"started", unix_seconds()},     {"outputs", nlohmann::json::array()}};
  const char* devices = std::getenv("CUDA_VISIBLE_DEVICES");
  r["device"] = devices ? devices : "";
  const auto start = std::chrono::steady_clock::now();
  auto progress = [](const io::StageTime& s) {
    std::fprintf(stderr, "shiftstack: %-10s %8.3f s  %s\n", s.name.c_str(), s.seconds, s.detail.c_str());
    std::fflush(stderr);
  };
  // cfitsio keeps one message stack per process: without this, a unit's error would also quote
  // warnings left by the units this worker ran before it.
  fits_clear_errmsg();
  try {
    io::SearchConfig config = u.config.empty() ? io::parse_config("", "defaults", u.overrides)
                                               : io::load_config(u.config, u.overrides);
    io::RunOptions options;
    options.inputs = u.inputs;
    options.engine = u.engine;
    if (!u.encoding.empty()) options.encoding = parse_encoding(u.encoding);
    options.progress = progress;
    std::error_code ec;
    fs::create_directories(u.output_dir, ec);
    require(!ec, u.output_dir + ": cannot create the unit's output folder: " + ec.message());
    io::OutputPaths paths = io::OutputPaths::from((fs::path(u.output_dir) / "results.ecsv").string());
    if (!u.fits) paths.fits.clear();
    if (!u.stamps) paths.stamps.clear();

    io::RunOutput run = io::run_search(config, options);
    io::write_outputs(run, config, paths, progress);
    for (const std::string* p : {&paths.ecsv, &paths.fits, &paths.stamps, &paths.summary}) add_output(r, *p, u);
    r["status"] = "ok";
    r["engine"] = run.engine;
    r["encoding"] = to_string(run.encoding);
    r["likelihood_device"] = run.likelihood_device;
    r["digest"] = nlohmann::json::parse(to_json(run.digest));
    r["exposures"] = run.loaded.stack.size();
    r["detections"] = run.detections.size();
    r["warnings"] = run.warnings;
    nlohmann::json stages = nlohmann::json::object();
    for (const auto& s : run.stages) stages[s.name] = s.seconds;
    r["stages"] = stages;
  } catch (const std::bad_alloc&) {
    r["status"] = "failed";
    r["error"] = "out of host memory";
  } catch (const std::exception& e) {
    r["status"] = "failed";
    r["error"] = e.what();
  }
  if (r["status"] != "ok") r["outputs"] = nlohmann::json::array();
  r["finished"] = unix_seconds();
  r["seconds"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

int serve_units(int in_fd, int out_fd) {
  // Die with the rank that started us: a worker must never outlive it holding a GPU.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  const pid_t parent = ::getppid();
  if (parent == 1) return 1;
  std::string pending;
  char buffer[65536];
  for (;;) {
    const std::size_t newline = pending.find('\n');
    if (newline == std::string::npos) {
      const ssize_t n = ::read(in_fd, buffer, sizeof buffer);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return 0;  // the rank closed the connection: done
      pending.append(buffer, std::size_t(n));
      continue;
    }
    const std::string line = pending.substr(0, newline);
    pending.erase(0, newline + 1);
    Record record;
    bool failed = true;
    try {
      const Unit unit = unit_from_json(nlohmann::json::parse(line));
      // The unit's progress and any message go to its own log.
      std::error_code ec;
      fs::create_directories(unit.output_dir, ec);
      const std::string log = (fs::path(unit.output_dir) / "search.log").string();
      const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (fd >= 0) {
        std::fflush(stdout);
        std::fflush(stderr);
        ::dup2(fd, 1);
        ::dup2(fd, 2);
        ::close(fd);
      }
      record = run_unit(unit);
      failed = record.value("status", "") != "ok";
      if (failed) std::fprintf(stderr, "shiftstack: unit %s failed: %s\n", unit.name.c_str(), record.value("error", "").c_str());
      std::fflush(stderr);
    } catch (const std::exception& e) {
      record = {{"status", "failed"}, {"error", std::string("worker: bad request: ") + e.what()}};
    }
    if (!write_all(out_fd, record.dump() + "\n")) return 1;
    // A failed unit may have left device memory or other state behind: a fresh worker follows.
    if (failed) return 0;
  }
}

}  // namespace shiftstack::many
