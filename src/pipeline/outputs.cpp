// The result set on disk: which files a run writes (-o NAME) and writing them.
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <regex>

#include "shiftstack/error.hpp"
#include "shiftstack/run.hpp"

namespace shiftstack::io {

namespace {
double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
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

void write_outputs(RunOutput& run, const SearchConfig& config, const OutputPaths& paths,
                   const std::function<void(const StageTime&)>& progress) {
  const auto start = std::chrono::steady_clock::now();
  ResultTable table = make_result_table(run, config);
  std::string written;
  auto note = [&](const std::string& path) { written += (written.empty() ? "" : ", ") + path; };
  // Stamps file first: it indexes the candidates by the full table's columns.
  if (!paths.stamps.empty()) {
    std::vector<StampSet> sets;
    for (std::size_t k = 0; k < run.coadd_types.size(); ++k) sets.push_back({to_string(run.coadd_types[k]), run.stamps[k]});
    write_stamps_fits(paths.stamps, sets, table, table.meta);
    note(paths.stamps);
  }
  // KBMOD's separate_col_files: matching columns go to NAME_<column>.fits and leave the table.
  if (!config.separate_col_files.empty() && !paths.base.empty()) {
    std::vector<std::regex> patterns;
    for (const auto& p : config.separate_col_files) patterns.emplace_back(p);
    std::vector<Column> kept;
    for (auto& column : table.columns) {
      const bool separate = std::any_of(patterns.begin(), patterns.end(),
                                        [&](const std::regex& r) { return std::regex_match(column.name, r); });
      if (!separate) {
        kept.push_back(std::move(column));
        continue;
      }
      const std::string path = paths.base + "_" + column.name + ".fits";
      ResultTable single;
      single.rows = table.rows;
      single.columns.push_back(std::move(column));
      if (const Column* uuid = table.find("uuid")) single.columns.push_back(*uuid);
      write_column_fits(single, path, image_like(single.columns.front()));
      note(path);
    }
    table.columns = std::move(kept);
  }
  if (!paths.ecsv.empty()) {
    write_ecsv(table, paths.ecsv);
    note(paths.ecsv);
  }
  if (!paths.fits.empty()) {
    write_fits_table(table, paths.fits);
    note(paths.fits);
  }
  if (!paths.unclustered.empty()) {
    write_ecsv(make_unclustered_table(run, config), paths.unclustered);
    note(paths.unclustered);
  }
  StageTime s{"write", seconds_since(start), std::to_string(table.rows) + " candidates to " + written};
  run.stages.push_back(s);
  if (progress) progress(s);
  if (!paths.summary.empty()) write_text_file(paths.summary, run_summary(run, config, paths).dump(2) + "\n");
}

}  // namespace shiftstack::io
