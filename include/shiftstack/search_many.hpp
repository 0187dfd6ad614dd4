// Many searches in one run (`shiftstack search-many MANIFEST`): a manifest lists the units (one
// search each: a CCD's files, a folder, a glob, a WorkUnit, perhaps at several reprojection
// distances through per-unit overrides), each with its output folder. Units run in a worker
// process (one per rank, kept between units, replaced after a failure so that nothing a failed
// unit held, GPU memory included, reaches the next), each unit's outputs are written atomically,
// a unit that fails or runs past its timeout is recorded with its error and the run goes on.
// Every finished unit appends one record (status, times, digest, engine, output checksums) to
// the run's journal; a rerun skips the units whose outputs still match their recorded checksums.
// At the end: a run summary and a merged catalogue. Under MPI rank 0 hands units out one at a
// time; without it, `--shard i/N` runs every N-th unit (Slurm job arrays) and `--merge` joins
// the shards' records.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace shiftstack::many {

// One search: everything the worker needs, paths absolute.
struct Unit {
  std::string name;                    // [A-Za-z0-9._-]+, unique in the manifest
  std::vector<std::string> inputs;     // files, folders, globs, @lists, WorkUnit files
  std::string config;                  // YAML configuration file; empty = the defaults
  std::vector<std::string> overrides;  // key=value, applied in order after the config file
  std::string engine, encoding;        // empty = the configuration's
  std::string output_dir;              // absolute
  std::string output_rel;              // the same, relative to the output root (for records)
  double timeout = 0;                  // seconds; 0 = none
  bool fits = true, stamps = true;     // write NAME.fits / NAME.stamps.fits beside the ECSV
};

struct Manifest {
  std::string path;         // the manifest file (relative paths in it are relative to its folder)
  std::string output_root;  // absolute: records, summaries and the catalogue live here
  std::vector<Unit> units;
};

// Reads a manifest (YAML; docs/scale-out.md describes the keys). `output_root` non-empty
// overrides the manifest's `output`. Errors name the file and the entry.
Manifest load_manifest(const std::string& path, const std::string& output_root = {});
Manifest parse_manifest(const std::string& yaml, const std::string& base_dir, const std::string& source,
                        const std::string& output_root = {});

// A fingerprint of what the unit computes (name, inputs as written, config file contents,
// overrides, engine, encoding, outputs written): a record counts for a rerun only if it matches.
std::string fingerprint(const Unit& unit);

// CRC-32 (zlib) of a file's bytes, as 8 hexadecimal digits; Error when unreadable.
std::string file_crc32(const std::string& path, std::uint64_t* bytes = nullptr);

// ---- records ------------------------------------------------------------------------------

// A unit's record (JSON object): unit, fingerprint, status (ok, failed, timeout, crashed), error,
// host, rank, pid, device, started/finished (Unix seconds), seconds, engine, encoding,
// likelihood_device, digest, detections, stages, outputs [{file (relative to the root), bytes,
// crc32}].
using Record = nlohmann::json;

// Whether an ok record's outputs are on disk with the recorded sizes and checksums.
bool outputs_verified(const Record& record, const std::string& output_root);

// Every record in the root's journals (records/*.jsonl); a torn last line is ignored.
std::vector<Record> read_journals(const std::string& output_root);

struct UnitState {
  std::optional<Record> record;  // the verified ok record, else the latest one, else none
  bool complete = false;         // an ok record whose outputs verify
};
// Per unit of the manifest, from the records (matched by name and fingerprint); only the units
// listed in `only` when given (the others stay empty), since checking reads every output file.
std::vector<UnitState> unit_states(const Manifest& manifest, const std::vector<Record>& records,
                                   const std::vector<std::size_t>* only = nullptr);

// Appends records to one journal file (records/<label>.jsonl), one line each, flushed.
class Journal {
 public:
  Journal(const std::string& output_root, const std::string& label);
  void append(const Record& record);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// ---- the worker process -------------------------------------------------------------------

// Runs one unit in this process: reads, searches, writes the outputs (atomically, each file)
// and returns its record. Errors become a failed record; nothing is thrown.
Record run_unit(const Unit& unit);

// The worker side of the pipe protocol: reads one unit (JSON) per line from `in`, runs it, writes
// its record as one line to `out`. Each unit's progress goes to <output_dir>/search.log. Exits
// after a failed unit (the parent starts a fresh worker) or at end of input.
int serve_units(int in_fd, int out_fd);

nlohmann::json unit_to_json(const Unit& unit);
Unit unit_from_json(const nlohmann::json& j);

// A worker process running units for one rank: started on first use, replaced after a failure,
// a crash or a timeout (the timed-out worker is killed).
class WorkerProcess {
 public:
  // `executable`: the shiftstack command; `environment`: extra VAR=value for the worker (e.g.
  // CUDA_VISIBLE_DEVICES to pin a device).
  WorkerProcess(std::string executable, std::vector<std::string> environment);
  ~WorkerProcess();
  WorkerProcess(const WorkerProcess&) = delete;
  WorkerProcess& operator=(const WorkerProcess&) = delete;
  // Runs one unit and returns its record (status timeout/crashed when the worker did not answer).
  Record run(const Unit& unit);
  int restarts() const { return starts_ > 0 ? starts_ - 1 : 0; }

 private:
  void start();
  void stop(bool kill_it);
  std::string executable_;
  std::vector<std::string> environment_;
  int pid_ = -1, to_child_ = -1, from_child_ = -1;
  int starts_ = 0;
  std::string pending_;  // bytes read past the last line
};

// ---- runs ---------------------------------------------------------------------------------

struct RunOptions {
  std::string executable;             // the shiftstack command the worker runs
  int shard = 0, shards = 1;          // this process runs units with index % shards == shard
  bool force = false;                 // rerun units that are already complete
  std::optional<double> timeout;      // overrides every unit's timeout
  std::vector<std::string> overrides; // appended to every unit's overrides
  std::string engine, encoding;       // non-empty: override every unit's
  int gpus_per_rank = 1;              // devices pinned per worker (CUDA_VISIBLE_DEVICES)
  std::function<void(const std::string&)> log;  // progress lines; may be empty
};

struct RunReport {
  nlohmann::json summary;       // what was written as the summary
  std::string summary_path, catalogue_path;
  int ran = 0, reused = 0, ok = 0, failed = 0, missing = 0;
};

// The units of this shard (manifest order).
std::vector<std::size_t> shard_units(const Manifest& manifest, int shard, int shards);

// Runs this process's units (all, or one shard) one after another in one worker process.
// Without shards it also writes the merged catalogue; a shard writes its own summary only.
RunReport run_local(const Manifest& manifest, const RunOptions& options);

// Joins every record under the root into summary.json and catalogue.ecsv (after job arrays).
RunReport merge_run(const Manifest& manifest, const RunOptions& options);

// The run summary: per unit its chosen record (status, times, digest, engine, outputs), counts by
// status, and the run's own fields (mode, ranks, wall seconds, units per hour).
nlohmann::json make_summary(const Manifest& manifest, const std::vector<std::size_t>& units,
                            const std::vector<UnitState>& states, const nlohmann::json& run_fields);

// The merged catalogue: every ok unit's results table (scalar columns) with a leading `unit`
// column, as ECSV (and FITS beside it). Returns the number of rows.
std::size_t write_catalogue(const Manifest& manifest, const std::vector<UnitState>& states,
                            const std::string& ecsv_path);

// The device list a rank pins: `per_rank` entries of the visible devices (CUDA_VISIBLE_DEVICES
// when set, else the driver's GPUs), starting at local_rank * per_rank, wrapping; empty when no
// GPU is visible. As a CUDA_VISIBLE_DEVICES value ("2,3").
std::string devices_for_rank(int local_rank, int per_rank);
// This process's rank on its node without MPI (SLURM_LOCALID, else 0).
int local_rank_from_environment();

#ifdef SHIFTSTACK_HAVE_MPI
// Under MPI: rank 0 hands units out one at a time (and runs units itself), every rank runs them
// in its own worker process, rank 0 writes the summary and catalogue. Call between MPI_Init
// and MPI_Finalize; every rank returns the same counts.
RunReport run_mpi(const Manifest& manifest, const RunOptions& options);
#endif

}  // namespace shiftstack::many
