// `shiftstack search-many MANIFEST`: many searches in one run (serially, as one shard of a job
// array, or over MPI ranks), and the hidden `search-many-worker` each rank runs its units in.
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>

#ifdef SHIFTSTACK_HAVE_MPI
#include <mpi.h>
#endif

#include "commands.hpp"
#include "shiftstack/error.hpp"
#include "shiftstack/search_many.hpp"

namespace shiftstack::cli {

namespace {

struct ManyArgs {
  std::string manifest, out, shard, engine, encoding, mpi = "auto";
  std::vector<std::string> overrides;
  double timeout = -1;
  int gpus_per_rank = 1;
  bool merge = false, force = false, json = false, quiet = false;
};

std::string own_executable() {
  char path[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", path, sizeof path - 1);
  require(n > 0, "search-many: cannot find this program's own path (/proc/self/exe)");
  return std::string(path, std::size_t(n));
}

// Launched by mpirun or srun with MPI: the launchers set one of these in every rank.
bool launched_by_mpi() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"})
    if (std::getenv(name)) return true;
  return false;
}

void parse_shard(const std::string& text, many::RunOptions& o) {
  const std::size_t slash = text.find('/');
  try {
    require(slash != std::string::npos, "");
    std::size_t a = 0, b = 0;
    o.shard = std::stoi(text.substr(0, slash), &a);
    o.shards = std::stoi(text.substr(slash + 1), &b);
    require(a == slash && b == text.size() - slash - 1, "");
  } catch (const std::exception&) {
    throw Error("--shard '" + text + "': expected i/N, e.g. --shard 3/32 (or $SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT)");
  }
  require(o.shards >= 1 && o.shard >= 0 && o.shard < o.shards,
          "--shard " + text + ": expected i/N with 0 <= i < N");
}

void print_report(const many::RunReport& r, const ManyArgs& a) {
  if (!a.quiet) {
    std::fprintf(stderr, "shiftstack: %d unit(s) ok, %d failed, %d not run; %d run now, %d complete already; summary %s",
                 r.ok, r.failed, r.missing, r.ran, r.reused, r.summary_path.c_str());
    if (!r.catalogue_path.empty()) std::fprintf(stderr, "; catalogue %s", r.catalogue_path.c_str());
    std::fprintf(stderr, "\n");
  }
  if (a.json) std::cout << r.summary.dump(2) << std::endl;
}

// Exit status: 0 when every unit is complete, 2 when some failed or did not run (the summary
// says which), 1 for errors that stopped the run.
void run_many_command(const ManyArgs& a) {
  many::RunOptions o;
  o.executable = own_executable();
  o.overrides = a.overrides;
  o.engine = a.engine;
  o.encoding = a.encoding;
  o.force = a.force;
  o.gpus_per_rank = a.gpus_per_rank;
  if (a.timeout >= 0) o.timeout = a.timeout;
  if (!a.shard.empty()) parse_shard(a.shard, o);
  if (!a.quiet) o.log = [](const std::string& line) {
    std::fprintf(stderr, "shiftstack: %s\n", line.c_str());
    std::fflush(stderr);
  };
  const bool mpi = a.mpi == "on" || (a.mpi == "auto" && launched_by_mpi() && !a.merge && a.shard.empty());
  require(!(mpi && (a.merge || !a.shard.empty())), "--mpi on: not with --merge or --shard");

  many::RunReport report;
  if (mpi) {
#ifdef SHIFTSTACK_HAVE_MPI
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    try {
      require(provided >= MPI_THREAD_FUNNELED, "search-many: this MPI offers no MPI_THREAD_FUNNELED");
      const many::Manifest manifest = many::load_manifest(a.manifest, a.out);
      if (rank != 0) o.log = nullptr;
      report = many::run_mpi(manifest, o);
    } catch (const std::exception& e) {
      // One rank's error would leave the others waiting for it: stop them all.
      std::fprintf(stderr, "shiftstack: error (rank %d): %s\n", rank, e.what());
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    MPI_Finalize();
    if (rank != 0) return;  // rank 0's exit status speaks for the run (mpirun passes it on)
#else
    throw Error("search-many: launched under MPI (or --mpi on), but this build has no MPI: rebuild with "
                "libopenmpi-dev installed, or run ranks as shards (--shard i/N)");
#endif
  } else {
    const many::Manifest manifest = many::load_manifest(a.manifest, a.out);
    report = a.merge ? many::merge_run(manifest, o) : many::run_local(manifest, o);
  }
  print_report(report, a);
  if (report.failed + report.missing > 0) throw CLI::RuntimeError(2);
}

}  // namespace

void add_search_many_commands(CLI::App& app) {
  auto a = std::make_shared<ManyArgs>();
  CLI::App* many = app.add_subcommand(
      "search-many", "Search many units (CCDs, distances) listed in a manifest: serially, as one shard of a job array, "
                     "or over MPI ranks; resumable");
  many->add_option("manifest", a->manifest, "YAML manifest of units (see docs/scale-out.md)")->required()->check(CLI::ExistingFile);
  many->add_option("--out", a->out, "output root (overrides the manifest's `output`)");
  many->add_option("--shard", a->shard, "run every N-th unit starting at i: i/N (Slurm job arrays); then --merge");
  many->add_flag("--merge", a->merge, "join every shard's records into summary.json and catalogue.ecsv; runs nothing");
  many->add_flag("--force", a->force, "run units again even when their outputs are complete");
  many->add_option("--timeout", a->timeout, "seconds per unit, for every unit (0: none); overrides the manifest");
  many->add_option("--set", a->overrides, "config override for every unit: --set lh_level=8")->allow_extra_args(false);
  many->add_option("--engine", a->engine, "search engine for every unit");
  many->add_option("--encoding", a->encoding, "psi/phi storage for every unit")->check(CLI::IsMember({"fp32", "fp16", "int8"}));
  many->add_option("--gpus-per-rank", a->gpus_per_rank, "GPUs pinned to each rank's worker (CUDA_VISIBLE_DEVICES)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  many->add_option("--mpi", a->mpi, "auto: MPI when started by mpirun/srun; on; off")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str();
  many->add_flag("--json", a->json, "print the run summary as JSON on stdout");
  many->add_flag("--quiet,-q", a->quiet, "no progress on stderr");
  many->callback([a] { run_many_command(*a); });

  // The worker process a rank starts (not for users): units in on descriptor 3, records out.
  CLI::App* worker = app.add_subcommand("search-many-worker", "");
  worker->group("");
  worker->callback([] {
    const int rc = many::serve_units(3, 3);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace shiftstack::cli
