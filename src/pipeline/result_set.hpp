// The result set's commit: all of a run's files appear under their final names at once, or none
// of them changes (docs/reliability.md, "The result set").
//
// In a folder F, a set with stem S (results.ecsv -> S = results) is laid out as
//   F/S.ecsv, F/S.fits, ...      symbolic links  -> .S.set/S.ecsv, ...
//   F/.S.set                     symbolic link   -> .S.run-<id>   (the current set)
//   F/.S.run-<id>/S.ecsv, ...    the files of one complete set
//   F/.S.lock                    flock()ed by the run writing the set
// A run writes a new .S.run-<id> folder, flushes it, and replaces .S.set with one rename(2):
// every final name then resolves to the new set. Killed before that rename, every name still
// resolves to the old set (or, for a first run, to nothing: the links dangle); killed after it,
// to the new one. Leftover folders of interrupted runs are removed by the next run, which holds
// the lock. Where the file system has no symbolic links, files are renamed one by one (summary
// last) and a note says the set is not atomic there.
#pragma once
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "shiftstack/run.hpp"

namespace shiftstack::io::detail {

struct ResultSetLayout {
  std::filesystem::path folder;
  std::string stem;
  std::vector<std::string> names;   // file names of this set's files (non-empty paths)
  std::vector<std::string> family;  // every file name a set with this stem may have had
  std::filesystem::path current_link() const { return folder / ("." + stem + ".set"); }
  std::filesystem::path lock_file() const { return folder / ("." + stem + ".lock"); }
  std::string run_prefix() const { return "." + stem + ".run-"; }
};
// Error when the paths (with `extra`, e.g. KBMOD's separate column files) are not all in one
// folder, or none is given.
ResultSetLayout result_set_layout(const OutputPaths& paths, const std::vector<std::string>& extra = {});

// The set's lock, held by this process until it exits (later calls return the same lock).
// Error when another process holds it.
void lock_result_set(const ResultSetLayout& layout);

class ResultSetWriter {
 public:
  explicit ResultSetWriter(ResultSetLayout layout);
  ~ResultSetWriter();  // removes the staging folder unless committed
  ResultSetWriter(const ResultSetWriter&) = delete;
  ResultSetWriter& operator=(const ResultSetWriter&) = delete;

  // Where to write the file that will carry the final name `final_path`.
  std::string staged(const std::string& final_path) const;
  void commit();
  const std::vector<std::string>& notes() const { return notes_; }

 private:
  ResultSetLayout layout_;
  std::filesystem::path staging_;
  bool links_ = true, committed_ = false;
  std::vector<std::string> notes_;
};

// What prepare_outputs() does, for one layout: writability probe, lock, clean-up of what
// interrupted runs left; returns notes.
std::vector<std::string> prepare_result_set(const ResultSetLayout& layout);

}  // namespace shiftstack::io::detail
