// search-many without MPI: all units, or one shard of them (Slurm job arrays), one after another
// in this process's worker; and the merge of every shard's records.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "distributed/run_internal.hpp"
#include "shiftstack/error.hpp"
#include "shiftstack/io/results.hpp"

namespace shiftstack::many {

namespace fs = std::filesystem;

namespace detail {

double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "unknown";
  return name;
}

Manifest with_options(const Manifest& manifest, const RunOptions& options) {
  Manifest m = manifest;
  for (Unit& u : m.units) {
    u.overrides.insert(u.overrides.end(), options.overrides.begin(), options.overrides.end());
    if (!options.engine.empty()) u.engine = options.engine;
    if (!options.encoding.empty()) u.encoding = options.encoding;
    if (options.timeout) u.timeout = *options.timeout;
  }
  return m;
}

std::vector<std::string> worker_environment(int local_rank, int per_rank) {
  const std::string devices = devices_for_rank(local_rank, per_rank);
  if (devices.empty()) return {};
  return {"CUDA_VISIBLE_DEVICES=" + devices};
}

std::string describe(const Record& r, std::size_t done, std::size_t total) {
  char text[512];
  const std::string status = r.value("status", "?");
  if (status == "ok") {
    std::snprintf(text, sizeof text, "[%zu/%zu] %s ok %.2f s (%s, %d candidate(s))", done, total,
                  r.value("unit", "?").c_str(), r.value("seconds", 0.0), r.value("engine", "?").c_str(),
                  r.value("detections", 0));
  } else {
    std::snprintf(text, sizeof text, "[%zu/%zu] %s %s after %.2f s: %.300s", done, total, r.value("unit", "?").c_str(),
                  status.c_str(), r.value("seconds", 0.0), r.value("error", "").c_str());
  }
  return text;
}

RunReport finish(const Manifest& manifest, const std::vector<std::size_t>& units, const std::vector<UnitState>& states,
                 nlohmann::json run_fields, const std::string& summary_name, bool catalogue) {
  RunReport report;
  report.ran = run_fields.value("units_run", 0);
  report.reused = run_fields.value("units_reused", 0);
  for (std::size_t i : units) {
    const std::string status = states[i].record ? states[i].record->value("status", "missing") : "missing";
    if (states[i].complete) ++report.ok;
    else if (status == "missing") ++report.missing;
    else ++report.failed;
  }
  if (catalogue) {
    report.catalogue_path = (fs::path(manifest.output_root) / "catalogue.ecsv").string();
    run_fields["catalogue"] = {{"ecsv", "catalogue.ecsv"},
                               {"fits", "catalogue.fits"},
                               {"rows", write_catalogue(manifest, states, report.catalogue_path)}};
  }
  report.summary = make_summary(manifest, units, states, run_fields);
  report.summary_path = (fs::path(manifest.output_root) / summary_name).string();
  io::write_text_file(report.summary_path, report.summary.dump(2) + "\n");
  return report;
}

}  // namespace detail

int local_rank_from_environment() {
  for (const char* name : {"SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK"}) {
    const char* v = std::getenv(name);
    if (v && *v) return std::atoi(v);
  }
  return 0;
}

std::string devices_for_rank(int local_rank, int per_rank) {
  require(per_rank >= 1, "--gpus-per-rank must be >= 1");
  std::vector<std::string> visible;
  const char* env = std::getenv("CUDA_VISIBLE_DEVICES");
  if (env) {
    std::string text = env, item;
    for (std::size_t i = 0; i <= text.size(); ++i) {
      if (i == text.size() || text[i] == ',') {
        if (!item.empty()) visible.push_back(item);
        item.clear();
      } else if (text[i] != ' ') {
        item += text[i];
      }
    }
  } else {
    // Without CUDA_VISIBLE_DEVICES: the driver's GPUs, counted without starting CUDA here (a
    // CUDA context in the rank itself would hold device memory for nothing).
    std::error_code ec;
    int count = 0;
    for (const auto& e : fs::directory_iterator("/proc/driver/nvidia/gpus", ec)) {
      (void)e;
      ++count;
    }
    for (int d = 0; d < count; ++d) visible.push_back(std::to_string(d));
  }
  if (visible.empty()) return {};
  std::string out;
  for (int k = 0; k < per_rank; ++k) {
    const std::size_t at = (std::size_t(local_rank) * std::size_t(per_rank) + std::size_t(k)) % visible.size();
    out += (out.empty() ? "" : ",") + visible[at];
  }
  return out;
}

RunReport run_local(const Manifest& original, const RunOptions& options) {
  const Manifest manifest = detail::with_options(original, options);
  const std::vector<std::size_t> units = shard_units(manifest, options.shard, options.shards);
  const bool sharded = options.shards > 1;
  char label[64];
  std::snprintf(label, sizeof label, "shard-%04d-of-%04d", options.shard, options.shards);
  const std::string run_label = sharded ? label : "serial";

  std::vector<UnitState> states = unit_states(manifest, read_journals(manifest.output_root), &units);
  Journal journal(manifest.output_root, run_label);
  const int local_rank = local_rank_from_environment();
  const std::vector<std::string> environment = detail::worker_environment(local_rank, options.gpus_per_rank);
  WorkerProcess worker(options.executable, environment);

  const double started = detail::unix_seconds();
  const auto t0 = std::chrono::steady_clock::now();
  int ran = 0, reused = 0;
  std::size_t done = 0;
  for (std::size_t i : units) {
    ++done;
    if (!options.force && states[i].complete) {
      ++reused;
      if (options.log) options.log(detail::describe(*states[i].record, done, units.size()) + " (complete already)");
      continue;
    }
    Record r = worker.run(manifest.units[i]);  // a worker that cannot start is an Error: stop
    r["rank"] = 0;
    r["shard"] = options.shard;
    if (!r.contains("host")) r["host"] = detail::host_name();
    if (!r.contains("device")) r["device"] = environment.empty() ? "" : environment.front().substr(environment.front().find('=') + 1);
    journal.append(r);
    ++ran;
    states[i].complete = r.value("status", "") == "ok";
    states[i].record = std::move(r);
    if (options.log) options.log(detail::describe(*states[i].record, done, units.size()));
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  nlohmann::json fields = {{"mode", sharded ? "shard" : "serial"},
                           {"shard", options.shard},
                           {"shards", options.shards},
                           {"ranks", 1},
                           {"host", detail::host_name()},
                           {"devices", environment.empty() ? "" : environment.front().substr(environment.front().find('=') + 1)},
                           {"started", started},
                           {"finished", detail::unix_seconds()},
                           {"wall_seconds", wall},
                           {"units_run", ran},
                           {"units_reused", reused},
                           {"units_per_hour", wall > 0 ? 3600.0 * ran / wall : 0.0},
                           {"worker_restarts", worker.restarts()},
                           {"journal", fs::path(journal.path()).lexically_relative(manifest.output_root).string()}};
  const std::string summary_name = sharded ? "summary." + run_label + ".json" : "summary.json";
  return detail::finish(manifest, units, states, fields, summary_name, !sharded);
}

RunReport merge_run(const Manifest& original, const RunOptions& options) {
  const Manifest manifest = detail::with_options(original, options);
  std::vector<std::size_t> units;
  for (std::size_t i = 0; i < manifest.units.size(); ++i) units.push_back(i);
  const std::vector<UnitState> states = unit_states(manifest, read_journals(manifest.output_root));
  nlohmann::json fields = {{"mode", "merge"}, {"host", detail::host_name()}, {"merged", detail::unix_seconds()}};
  return detail::finish(manifest, units, states, fields, "summary.json", true);
}

}  // namespace shiftstack::many
