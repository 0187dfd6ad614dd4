// search-many under MPI: rank 0 hands out units one at a time, as ranks ask for work, and runs
// units itself in a second thread; every rank runs its units in its own worker process. Only
// rank 0's main thread calls MPI (MPI_THREAD_FUNNELED is enough).
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <thread>

#include "distributed/run_internal.hpp"
#include "shiftstack/error.hpp"

namespace shiftstack::many {

namespace fs = std::filesystem;

namespace {

constexpr int kTagRequest = 11;  // worker -> rank 0: the last unit's record (empty at first)
constexpr int kTagAssign = 12;   // rank 0 -> worker: a unit index, or -1 = no more work

void send_text(const std::string& text, int to, int tag) {
  MPI_Send(text.data(), int(text.size()), MPI_CHAR, to, tag, MPI_COMM_WORLD);
}

// Waits for a message without spinning: a blocking MPI_Probe busy-polls in OpenMPI, which on
// rank 0 would take a core from the units for the whole run. Polls with a short sleep instead
// (1 ms, growing to 10 ms while nothing comes; a hand-out is late by at most that).
std::string receive_text(int from, int tag, int* source) {
  MPI_Status status;
  for (int wait_us = 1000;; wait_us = std::min(2 * wait_us, 10000)) {
    int arrived = 0;
    MPI_Iprobe(from, tag, MPI_COMM_WORLD, &arrived, &status);
    if (arrived) break;
    std::this_thread::sleep_for(std::chrono::microseconds(wait_us));
  }
  int count = 0;
  MPI_Get_count(&status, MPI_CHAR, &count);
  std::string text(std::size_t(count), '\0');
  MPI_Recv(text.data(), count, MPI_CHAR, status.MPI_SOURCE, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  if (source) *source = status.MPI_SOURCE;
  return text;
}

int node_local_rank() {
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  int rank = 0;
  MPI_Comm_rank(node, &rank);
  MPI_Comm_free(&node);
  return rank;
}

// Rank 0's bookkeeping, shared by its dispatching main thread and its own worker thread.
struct Dispatch {
  std::mutex lock;
  const Manifest* manifest = nullptr;
  const RunOptions* options = nullptr;
  std::vector<std::size_t> pending;  // units to run, manifest order
  std::size_t next = 0, finished = 0, total = 0;
  std::vector<UnitState>* states = nullptr;
  Journal* journal = nullptr;
  int ran = 0;

  long take() {
    std::lock_guard guard(lock);
    return next < pending.size() ? long(pending[next++]) : -1;
  }
  void record(Record r) {
    std::lock_guard guard(lock);
    journal->append(r);
    ++ran;
    ++finished;
    const auto it = manifest->units.begin();
    for (std::size_t i = 0; i < manifest->units.size(); ++i)
      if (it[std::ptrdiff_t(i)].name == r.value("unit", "")) {
        (*states)[i].complete = r.value("status", "") == "ok";
        (*states)[i].record = r;
        break;
      }
    if (options->log) options->log(detail::describe(r, finished, total));
  }
};

// Runs one unit; a worker that cannot even start gives a failed record, never a lost rank.
Record run_one(WorkerProcess& worker, const Unit& unit, int rank, const std::string& host, const std::string& devices) {
  Record r;
  try {
    r = worker.run(unit);
  } catch (const std::exception& e) {
    r = {{"unit", unit.name}, {"fingerprint", fingerprint(unit)}, {"status", "failed"}, {"error", e.what()},
         {"started", detail::unix_seconds()}, {"finished", detail::unix_seconds()}, {"seconds", 0.0},
         {"outputs", nlohmann::json::array()}};
  }
  r["rank"] = rank;
  if (!r.contains("host")) r["host"] = host;
  if (!r.contains("device")) r["device"] = devices;
  return r;
}

}  // namespace

RunReport run_mpi(const Manifest& original, const RunOptions& options) {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const Manifest manifest = detail::with_options(original, options);
  const int local = node_local_rank();
  const std::vector<std::string> environment = detail::worker_environment(local, options.gpus_per_rank);
  const std::string host = detail::host_name();
  const std::string devices = environment.empty() ? "" : environment.front().substr(environment.front().find('=') + 1);

  if (rank != 0) {
    WorkerProcess worker(options.executable, environment);
    std::string last;
    for (;;) {
      send_text(last, 0, kTagRequest);
      const std::string assigned = receive_text(0, kTagAssign, nullptr);
      const long index = std::stol(assigned);
      if (index < 0) break;
      last = run_one(worker, manifest.units[std::size_t(index)], rank, host, devices).dump();
    }
    int counts[5] = {};
    MPI_Bcast(counts, 5, MPI_INT, 0, MPI_COMM_WORLD);
    RunReport report;
    report.ran = counts[0], report.reused = counts[1], report.ok = counts[2], report.failed = counts[3];
    report.missing = counts[4];
    return report;
  }

  std::vector<std::size_t> units;
  for (std::size_t i = 0; i < manifest.units.size(); ++i) units.push_back(i);
  std::vector<UnitState> states = unit_states(manifest, read_journals(manifest.output_root));
  Journal journal(manifest.output_root, "mpi");
  Dispatch d;
  d.manifest = &manifest;
  d.options = &options;
  d.states = &states;
  d.journal = &journal;
  int reused = 0;
  for (std::size_t i : units) {
    if (!options.force && states[i].complete) {
      ++reused;
      continue;
    }
    d.pending.push_back(i);
  }
  d.total = d.pending.size();
  if (options.log) {
    char text[160];
    std::snprintf(text, sizeof text, "%zu unit(s) to run on %d rank(s), %d complete already", d.pending.size(), size, reused);
    options.log(text);
  }

  const double started = detail::unix_seconds();
  const auto t0 = std::chrono::steady_clock::now();
  std::exception_ptr local_error;
  std::thread local_worker([&] {
    try {
      WorkerProcess worker(options.executable, environment);
      for (long index; (index = d.take()) >= 0;)
        d.record(run_one(worker, manifest.units[std::size_t(index)], 0, host, devices));
    } catch (...) {
      local_error = std::current_exception();
    }
  });
  int active = size - 1;
  while (active > 0) {
    int source = -1;
    const std::string text = receive_text(MPI_ANY_SOURCE, kTagRequest, &source);
    if (!text.empty()) {
      Record r = Record::parse(text, nullptr, false);
      if (!r.is_discarded()) d.record(std::move(r));
    }
    const long index = d.take();
    send_text(std::to_string(index), source, kTagAssign);
    if (index < 0) --active;
  }
  local_worker.join();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  RunReport report;
  std::string error;
  try {
    if (local_error) std::rethrow_exception(local_error);
    nlohmann::json fields = {{"mode", "mpi"},
                             {"ranks", size},
                             {"host", host},
                             {"rank0_devices", devices},
                             {"started", started},
                             {"finished", detail::unix_seconds()},
                             {"wall_seconds", wall},
                             {"units_run", d.ran},
                             {"units_reused", reused},
                             {"units_per_hour", wall > 0 ? 3600.0 * d.ran / wall : 0.0},
                             {"journal", fs::path(journal.path()).lexically_relative(manifest.output_root).string()}};
    report = detail::finish(manifest, units, states, fields, "summary.json", true);
  } catch (const std::exception& e) {
    error = e.what();
  }
  int counts[5] = {report.ran, report.reused, report.ok, report.failed, report.missing};
  MPI_Bcast(counts, 5, MPI_INT, 0, MPI_COMM_WORLD);
  if (!error.empty()) throw Error(error);
  return report;
}

}  // namespace shiftstack::many
