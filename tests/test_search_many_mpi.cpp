// search-many under `mpirun -np 2 --oversubscribe` with the CPU engines: the same digests as a
// serial run, both ranks given units, an injected failure recorded while the others complete,
// and a resume that runs only what is not complete. Skipped in builds without MPI.
#include <gtest/gtest.h>

#include <cstdlib>
#include <set>

#include "test_search_many_support.hpp"

using namespace shiftstack::many::testing_support;
using shiftstack::io::testing_support::TempDir;

namespace {

std::string mpirun(int ranks, const std::string& arguments) {
  // CI runs as root; OpenMPI refuses that unless told it is meant.
  ::setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
  ::setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  // One node: shared memory only, and no cross-process memory copies (containers often forbid
  // them), so that the test depends on neither the network nor ptrace rights.
  ::setenv("OMPI_MCA_btl", "self,vader", 1);
  ::setenv("OMPI_MCA_btl_vader_single_copy_mechanism", "none", 1);
  return "mpirun -np " + std::to_string(ranks) + " --oversubscribe '" + SHIFTSTACK_CLI_PATH + "' " + arguments;
}

std::string manifest(const std::string& kits) {
  return "output: out\nconfig: " + kits + "/kit1/search.yaml\nengine: cpu\nunits:\n"
         "  - each: \"" + kits + "/kit*\"\n"
         "  - name: broken\n    inputs: " + kits + "/bad\n";
}

}  // namespace

TEST(SearchManyMpi, TwoRanksMatchTheSerialRunRecordTheFailureAndResume) {
#ifndef SHIFTSTACK_HAVE_MPI
  GTEST_SKIP() << "built without MPI";
#else
  if (run_command("mpirun --version").status != 0) GTEST_SKIP() << "no mpirun on the PATH";
  TempDir kits, serial, parallel;
  write_kits(kits.path(), 6);
  write_text(serial.file("m.yaml"), manifest(kits.path()));
  write_text(parallel.file("m.yaml"), manifest(kits.path()));
  const Outcome alone = run_cli("search-many -q '" + serial.file("m.yaml") + "'");
  ASSERT_EQ(alone.status, 2) << alone.output;

  const Outcome first = run_command(mpirun(2, "search-many '" + parallel.file("m.yaml") + "'"));
  EXPECT_NE(first.status, 0) << first.output;  // the broken unit: rank 0 exits with 2
  const nlohmann::json summary = read_json(parallel.file("out/summary.json"));
  EXPECT_EQ(summary.at("mode"), "mpi");
  EXPECT_EQ(summary.at("ranks"), 2);
  EXPECT_EQ(summary.at("units_run"), 7);
  auto units = units_by_name(summary);
  auto reference = units_by_name(read_json(serial.file("out/summary.json")));
  ASSERT_EQ(units.size(), 7u);
  std::set<int> ranks;
  for (const auto& [name, u] : reference) {
    SCOPED_TRACE(name);
    EXPECT_EQ(units[name].at("status"), u.at("status"));
    if (u.at("status") == "ok") {
      EXPECT_EQ(units[name].at("digest"), u.at("digest"));
    }
    ranks.insert(units[name].at("rank").get<int>());
  }
  EXPECT_EQ(units["broken"].at("status"), "failed");
  EXPECT_EQ(ranks, (std::set<int>{0, 1})) << "rank 0 handed out units to both ranks";
  EXPECT_EQ(read_json(parallel.file("out/summary.json")).at("catalogue").at("rows"),
            read_json(serial.file("out/summary.json")).at("catalogue").at("rows"));

  // The rerun under MPI: only the failed unit runs again.
  const Outcome second = run_command(mpirun(2, "search-many -q '" + parallel.file("m.yaml") + "'"));
  const nlohmann::json again = read_json(parallel.file("out/summary.json"));
  EXPECT_EQ(again.at("units_run"), 1) << second.output;
  EXPECT_EQ(again.at("units_reused"), 6);
  EXPECT_EQ(units_by_name(again)["kit4"].at("digest"), reference["kit4"].at("digest"));
#endif
}
