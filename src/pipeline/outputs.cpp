// The result set on disk: which files a run writes (-o NAME), the checks made before any work,
// and writing them all or nothing (result_set.hpp).
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>

#include "pipeline/result_set.hpp"
#include "shiftstack/error.hpp"
#include "shiftstack/run.hpp"

namespace shiftstack::io {

namespace fs = std::filesystem;

namespace {
double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Same file: same device and inode once links are followed (hard links and symbolic links
// included); for a name that does not exist yet, the same absolute path.
bool same_file(const std::string& a, const std::string& b) {
  struct stat sa {}, sb {};
  if (::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0) return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
  std::error_code ec;
  return fs::weakly_canonical(a, ec) == fs::weakly_canonical(b, ec);
}

std::string run_id() {
  char text[64];
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  std::snprintf(text, sizeof text, "%d-%llx", int(::getpid()),
                (unsigned long long)std::chrono::duration_cast<std::chrono::microseconds>(now).count());
  return text;
}
}  // namespace

OutputPaths OutputPaths::from(const std::string& output) {
  require(!output.empty(), "no output path (-o)");
  std::string base = output;
  for (const char* suffix : {".ecsv", ".fits"}) {
    const std::string s = suffix;
    if (base.size() > s.size() && base.compare(base.size() - s.size(), s.size(), s) == 0) {
      base.resize(base.size() - s.size());
      break;
    }
  }
  return {base + ".ecsv", base + ".fits", base + ".stamps.fits", base + ".summary.json"};
}

void check_outputs_against_inputs(const OutputPaths& paths, const std::vector<std::string>& inputs) {
  for (const std::string* output : {&paths.ecsv, &paths.fits, &paths.stamps, &paths.summary}) {
    if (output->empty()) continue;
    for (const std::string& input : inputs)
      if (same_file(*output, input))
        throw Error("output " + *output + " would replace the input " + input +
                    "; choose another -o (a run writes NAME.ecsv, NAME.fits, NAME.stamps.fits and NAME.summary.json)");
  }
}

std::vector<std::string> prepare_outputs(const OutputPaths& paths, const std::vector<std::string>& inputs) {
  check_outputs_against_inputs(paths, inputs);
  return detail::prepare_result_set(detail::result_set_layout(paths));
}

std::string summary_text(const nlohmann::json& summary, std::vector<std::string>* warnings) {
  try {
    return summary.dump(2) + "\n";
  } catch (const nlohmann::json::type_error&) {
    // Invalid UTF-8 (a file name or a config value in another encoding): JSON cannot carry the
    // bytes, so they are shown as U+FFFD and the summary says so.
    nlohmann::json copy = summary;
    const std::string note = "some file names or config values are not valid UTF-8; the summary shows their "
                             "invalid bytes as U+FFFD";
    if (copy.contains("warnings") && copy["warnings"].is_array()) copy["warnings"].push_back(note);
    if (warnings) warnings->push_back(note);
    return copy.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  }
}

void write_outputs(RunOutput& run, const SearchConfig& config, const OutputPaths& paths,
                   const std::function<void(const StageTime&)>& progress) {
  const auto start = std::chrono::steady_clock::now();
  check_outputs_against_inputs(paths, run.files);
  detail::ResultSetWriter set(detail::result_set_layout(paths));
  run.warnings.insert(run.warnings.end(), set.notes().begin(), set.notes().end());
  ResultTable table = make_result_table(run, config);
  // Every file of one set carries the same id, so that a reader can tell the set is whole.
  const std::string id = run_id();
  table.meta["run_id"] = id;
  std::string written;
  if (!paths.ecsv.empty()) {
    write_ecsv(table, set.staged(paths.ecsv));
    written += paths.ecsv;
  }
  if (!paths.fits.empty()) {
    write_fits_table(table, set.staged(paths.fits));
    written += (written.empty() ? "" : ", ") + paths.fits;
  }
  if (!paths.stamps.empty()) {
    std::vector<StampSet> sets;
    for (std::size_t k = 0; k < run.coadd_types.size(); ++k) sets.push_back({to_string(run.coadd_types[k]), run.stamps[k]});
    write_stamps_fits(set.staged(paths.stamps), sets, table, table.meta);
    written += (written.empty() ? "" : ", ") + paths.stamps;
  }
  StageTime s{"write", seconds_since(start), std::to_string(table.rows) + " candidates to " + written};
  run.stages.push_back(s);
  if (progress) progress(s);
  if (!paths.summary.empty()) {
    nlohmann::json summary = run_summary(run, config, paths);
    summary["run_id"] = id;
    write_text_file(set.staged(paths.summary), summary_text(summary, &run.warnings));
  }
  set.commit();
}

}  // namespace shiftstack::io
