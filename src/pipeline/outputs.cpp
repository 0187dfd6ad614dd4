// The result set on disk: which files a run writes (-o NAME), the checks made before any work,
// and writing them all or nothing (result_set.hpp).
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <regex>

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

// Columns that hold an image per row (stamps): written one image HDU per row when separate.
bool image_like(const Column& c) { return c.shape.size() >= 2; }
}  // namespace

OutputPaths OutputPaths::from(const std::string& output) {
  require(!output.empty(), "no output path (-o)");
  namespace fs = std::filesystem;
  const fs::path path(output);
  std::string base = output;
  const std::string extension = path.has_filename() ? path.extension().string() : std::string();
  if (extension == ".ecsv" || extension == ".fits") {
    base.resize(base.size() - extension.size());
  } else if (!extension.empty()) {
    throw Error("-o " + output + ": shiftstack writes results as .ecsv and .fits tables (NAME.ecsv, NAME.fits, "
                "NAME.stamps.fits and NAME.summary.json, all from one -o NAME.ecsv); '" + extension +
                "' is not one of them");
  }
  require(!base.empty() && fs::path(base).has_filename(), "-o " + output + ": needs a file name");
  OutputPaths p{base + ".ecsv", base + ".fits", base + ".stamps.fits", base + ".summary.json"};
  p.base = base;
  return p;
}

void check_outputs_against_inputs(const OutputPaths& paths, const std::vector<std::string>& inputs) {
  for (const std::string* output : {&paths.ecsv, &paths.fits, &paths.stamps, &paths.summary, &paths.unclustered}) {
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
  ResultTable table = make_result_table(run, config);
  // KBMOD's separate_col_files: matching columns go to NAME_<column>.fits and leave the table.
  // Their names join the result set before anything is written.
  std::vector<Column> separate;
  if (!config.separate_col_files.empty() && !paths.base.empty()) {
    std::vector<std::regex> patterns;
    for (const auto& p : config.separate_col_files) patterns.emplace_back(p);
    std::vector<Column> kept;
    for (auto& column : table.columns) {
      const bool matches = std::any_of(patterns.begin(), patterns.end(),
                                       [&](const std::regex& r) { return std::regex_match(column.name, r); });
      (matches ? separate : kept).push_back(std::move(column));
    }
    table.columns = std::move(kept);
  }
  std::vector<std::string> column_paths;
  for (const Column& column : separate) column_paths.push_back(paths.base + "_" + column.name + ".fits");
  for (const std::string& path : column_paths)
    for (const std::string& input : run.files)
      if (same_file(path, input)) throw Error("output " + path + " would replace the input " + input + "; choose another -o");
  detail::ResultSetWriter set(detail::result_set_layout(paths, column_paths));
  run.warnings.insert(run.warnings.end(), set.notes().begin(), set.notes().end());
  // Every file of one set carries the same id, so that a reader can tell the set is whole.
  const std::string id = run_id();
  table.meta["run_id"] = id;
  std::string written;
  auto note = [&](const std::string& path) { written += (written.empty() ? "" : ", ") + path; };
  // Stamps file first: it indexes the candidates by the full table's columns.
  if (!paths.stamps.empty()) {
    std::vector<StampSet> sets;
    for (std::size_t k = 0; k < run.coadd_types.size(); ++k) sets.push_back({to_string(run.coadd_types[k]), run.stamps[k]});
    write_stamps_fits(set.staged(paths.stamps), sets, table, table.meta);
    note(paths.stamps);
  }
  for (std::size_t i = 0; i < separate.size(); ++i) {
    ResultTable single;
    single.rows = table.rows;
    single.meta["run_id"] = id;
    single.columns.push_back(std::move(separate[i]));
    if (const Column* uuid = table.find("uuid")) single.columns.push_back(*uuid);
    write_column_fits(single, set.staged(column_paths[i]), image_like(single.columns.front()));
    note(column_paths[i]);
  }
  if (!paths.ecsv.empty()) {
    write_ecsv(table, set.staged(paths.ecsv));
    note(paths.ecsv);
  }
  if (!paths.fits.empty()) {
    write_fits_table(table, set.staged(paths.fits));
    note(paths.fits);
  }
  if (!paths.unclustered.empty()) {
    ResultTable unclustered = make_unclustered_table(run, config);
    unclustered.meta["run_id"] = id;
    write_ecsv(unclustered, set.staged(paths.unclustered));
    note(paths.unclustered);
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
