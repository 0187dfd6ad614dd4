// Reliability, writing side: the result set is committed all or nothing, failures and
// interrupted runs leave the previous set whole, leftovers are cleaned, one run writes a set at
// a time, the output folder is checked before any work, and text that is not UTF-8 cannot stop
// the summary.
#include <gtest/gtest.h>
#include <sys/file.h>
#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include <nlohmann/json.hpp>

#include "io/atomic_file.hpp"
#include "pipeline/result_set.hpp"
#include "shiftstack/error.hpp"
#include "shiftstack/io/fits.hpp"
#include "shiftstack/run.hpp"
#include "shiftstack/synth.hpp"
#include "test_io_support.hpp"

namespace shiftstack::io {
namespace {

namespace fs = std::filesystem;
using testing_support::TempDir;

std::string error_of(const std::function<void()>& body) {
  try {
    body();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}
bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }
std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A small search with at least one candidate, read from files in `dir`.
struct Fixture {
  KitStack kit;
  SearchConfig config;
  RunOptions options;
  explicit Fixture(const std::string& dir) {
    const std::string prefix = "exposure_";
    KitOptions o = workload("ci");
    o.exposures = 4, o.width = 48, o.height = 40, o.vx_count = 3, o.vy_count = 3;
    o.velocity_displacement = 2, o.curve_amplitude = 0.5, o.injected_snr = 12;
    kit = make_kit(o);
    for (int e = 0; e < kit.stack.size(); ++e) {
      WriteOptions w;
      w.curve_x = kit.bank.curve_at_x(e);
      w.curve_y = kit.bank.curve_at_y(e);
      write_exposure_fits(dir + "/" + prefix + std::to_string(e) + ".fits", kit.stack.exposures[std::size_t(e)], w);
    }
    config = testing_support::kit_search_config(kit);
    config.cpu_only = true;
    config.stamp_radius = 2;
    config.filter.lh_level = 5;
    config.filter.num_obs = 2;
    options.inputs = {dir};
  }
};

// The run id every file of the set carries (ECSV meta, FITS headers, summary).
struct SetIds {
  std::string ecsv, fits, stamps, summary;
};
// In the ECSV header's JSON metadata: "run_id":"<id>".
std::string id_in(const std::string& text) {
  const std::size_t at = text.find("\"run_id\"");
  if (at == std::string::npos) return "";
  const std::size_t open = text.find('"', text.find(':', at));
  const std::size_t close = text.find('"', open + 1);
  return text.substr(open + 1, close - open - 1);
}
SetIds ids(const OutputPaths& p) {
  SetIds s;
  s.ecsv = id_in(slurp(p.ecsv));
  // The FITS files write long keyword names with the HIERARCH convention: RUN_ID = 'id'.
  for (auto [path, out] : {std::pair{&p.fits, &s.fits}, std::pair{&p.stamps, &s.stamps}}) {
    const std::string text = slurp(*path);
    std::size_t at = text.find("RUN_ID");
    if (at == std::string::npos) at = text.find("run_id");
    if (at != std::string::npos) {
      const std::size_t open = text.find('\'', at), close = text.find('\'', open + 1);
      *out = text.substr(open + 1, close - open - 1);
    }
  }
  s.summary = nlohmann::json::parse(slurp(p.summary)).value("run_id", "");
  return s;
}
void expect_one_set(const OutputPaths& p, const std::string& id) {
  const SetIds s = ids(p);
  EXPECT_EQ(s.ecsv, id);
  EXPECT_EQ(s.fits, id);
  EXPECT_EQ(s.stamps, id);
  EXPECT_EQ(s.summary, id);
}

int hidden_runs(const std::string& dir) {
  int n = 0;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().rfind(".results.run-", 0) == 0) ++n;
  return n;
}

}  // namespace

TEST(ReliabilitySet, EachRunReplacesTheWholeSet) {
  TempDir dir;
  Fixture f(dir.path());
  const OutputPaths paths = OutputPaths::from(dir.file("results.ecsv"));
  RunOutput one = run_search(f.config, f.options);
  ASSERT_FALSE(one.detections.empty());
  write_outputs(one, f.config, paths);
  const std::string first = ids(paths).summary;
  ASSERT_FALSE(first.empty());
  expect_one_set(paths, first);
  RunOutput two = run_search(f.config, f.options);
  write_outputs(two, f.config, paths);
  const std::string second = ids(paths).summary;
  EXPECT_NE(second, first);
  expect_one_set(paths, second);
  EXPECT_EQ(hidden_runs(dir.path()), 1);  // the previous set's folder is gone
}

TEST(ReliabilitySet, AFailureHalfwayLeavesThePreviousSetWhole) {
  TempDir dir;
  Fixture f(dir.path());
  const OutputPaths paths = OutputPaths::from(dir.file("results.ecsv"));
  RunOutput good = run_search(f.config, f.options);
  ASSERT_FALSE(good.detections.empty());
  write_outputs(good, f.config, paths);
  const std::string before = ids(paths).summary;
  const std::string ecsv_before = slurp(paths.ecsv);
  // The stamps file fails after the ECSV and FITS files were written (it used to leave the new
  // ECSV beside the old FITS, stamps and summary).
  RunOutput bad = run_search(f.config, f.options);
  // A coadd that only the stamps file holds, one stamp short: the table is whole, the stamps
  // file is not.
  SearchConfig config = f.config;
  config.coadds = {CoaddType::mean};
  bad.coadd_types = {config.stamp_type, CoaddType::mean, CoaddType::median};
  bad.stamps = {bad.stamps[0], bad.stamps[0], std::vector<Image<float>>(bad.detections.size() - 1)};
  const std::string why = error_of([&] { write_outputs(bad, config, paths); });
  EXPECT_TRUE(has(why, "stamps for")) << why;
  expect_one_set(paths, before);
  EXPECT_EQ(slurp(paths.ecsv), ecsv_before);
  EXPECT_EQ(hidden_runs(dir.path()), 1);  // the failed run's folder was removed
}

TEST(ReliabilitySet, LeftoversOfAKilledRunAreRemovedAndReported) {
  TempDir dir;
  Fixture f(dir.path());
  const OutputPaths paths = OutputPaths::from(dir.file("results.ecsv"));
  // What a kill -9 leaves: a half-written run folder and per-file temporaries.
  fs::create_directory(dir.file(".results.run-999-dead-0"));
  std::ofstream(dir.file(".results.run-999-dead-0/results.ecsv")) << "partial";
  std::ofstream(dir.file(".results.fits.tmp-999-3")) << "partial";
  ASSERT_EQ(::symlink(".results.run-999-dead-0", dir.file("..results.set.link-999-1").c_str()), 0);
  const auto notes = prepare_outputs(paths, {});
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_TRUE(has(notes[0], "removed 3 leftover")) << notes[0];
  EXPECT_FALSE(fs::is_symlink(dir.file("..results.set.link-999-1")));
  EXPECT_FALSE(fs::exists(dir.file(".results.run-999-dead-0")));
  EXPECT_FALSE(fs::exists(dir.file(".results.fits.tmp-999-3")));
  // Nothing was ever committed: no final name resolves to anything.
  for (const std::string* p : {&paths.ecsv, &paths.fits, &paths.stamps, &paths.summary}) EXPECT_FALSE(fs::exists(*p));
}

TEST(ReliabilitySet, FilesOfAnOlderLayoutAreReplacedAsOneSet) {
  TempDir dir;
  fs::create_directory(dir.file("in"));
  Fixture f(dir.file("in"));
  OutputPaths paths = OutputPaths::from(dir.file("results.ecsv"));
  // Plain files under the final names (an earlier version's outputs), then a run without the
  // FITS table: the old results.fits must not stay beside the new ECSV.
  for (const std::string* p : {&paths.ecsv, &paths.fits, &paths.stamps, &paths.summary})
    std::ofstream(*p) << "old " << *p;
  paths.fits.clear();
  RunOutput run = run_search(f.config, f.options);
  write_outputs(run, f.config, paths);
  EXPECT_FALSE(fs::exists(dir.file("results.fits")));
  EXPECT_FALSE(fs::is_symlink(dir.file("results.fits")));
  const std::string id = ids(paths).summary;
  EXPECT_FALSE(id.empty());
  EXPECT_EQ(id_in(slurp(paths.ecsv)), id);
}

TEST(ReliabilitySet, OneRunAtATimePerSet) {
  TempDir dir;
  const OutputPaths paths = OutputPaths::from(dir.file("busy.ecsv"));
  // Another process holding the lock: an open file description of its own, as flock() sees it.
  const int fd = ::open(dir.file(".busy.lock").c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);
  EXPECT_TRUE(has(error_of([&] { prepare_outputs(paths, {}); }), "another shiftstack run"));
  ::close(fd);
  EXPECT_EQ(error_of([&] { prepare_outputs(paths, {}); }), "");
}

TEST(ReliabilitySet, TheOutputFolderIsCheckedBeforeAnyWork) {
  TempDir dir;
  EXPECT_TRUE(has(error_of([&] { prepare_outputs(OutputPaths::from(dir.file("none/x.ecsv")), {}); }), "does not exist"));
  std::ofstream(dir.file("file")) << "x";
  EXPECT_TRUE(has(error_of([&] { prepare_outputs(OutputPaths::from(dir.file("file/x.ecsv")), {}); }), "not a folder"));
  // A folder nobody may write in (even root cannot create files in /proc).
  EXPECT_TRUE(has(error_of([&] { prepare_outputs(OutputPaths::from("/proc/x.ecsv"), {}); }), "cannot write in"));
  fs::create_directory(dir.file("r.fits"));
  EXPECT_TRUE(has(error_of([&] { prepare_outputs(OutputPaths::from(dir.file("r.ecsv")), {}); }), "is a folder"));
  OutputPaths split = OutputPaths::from(dir.file("a.ecsv"));
  split.summary = "/tmp/a.summary.json";
  EXPECT_TRUE(has(error_of([&] { prepare_outputs(split, {}); }), "share one folder"));
}

TEST(ReliabilitySet, TextThatIsNotUtf8CannotStopTheSummary) {
  TempDir dir;
  const std::string folder = dir.file("caf\xE9");  // Latin-1 e-acute: not UTF-8
  fs::create_directory(folder);
  Fixture f(folder);
  const OutputPaths paths = OutputPaths::from(dir.file("results.ecsv"));
  RunOutput run = run_search(f.config, f.options);
  write_outputs(run, f.config, paths);  // threw nlohmann's type_error after three of four files
  const nlohmann::json summary = nlohmann::json::parse(slurp(paths.summary));
  EXPECT_TRUE(has(summary["inputs"]["files"][0].get<std::string>(), "caf\xEF\xBF\xBD"));
  bool noted = false;
  for (const auto& w : summary["warnings"]) noted = noted || has(w.get<std::string>(), "not valid UTF-8");
  EXPECT_TRUE(noted);
  expect_one_set(paths, summary["run_id"].get<std::string>());
}

TEST(ReliabilitySet, AFailedRenameReportsItsOwnError) {
  TempDir dir;
  const std::string temporary = dir.file(".x.tmp");
  std::ofstream(temporary) << "x";
  // It said "cannot move the finished file into place: Success" (the clean-up's errno).
  const std::string why = error_of([&] { detail::commit_file(temporary, dir.file("missing/x")); });
  EXPECT_TRUE(has(why, "No such file or directory")) << why;
  EXPECT_FALSE(has(why, "Success")) << why;
  EXPECT_FALSE(fs::exists(temporary));
}

}  // namespace shiftstack::io
