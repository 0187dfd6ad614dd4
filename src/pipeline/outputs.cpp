// The result set on disk: which files a run writes (-o NAME) and writing them.
#include <chrono>

#include "shiftstack/error.hpp"
#include "shiftstack/run.hpp"

namespace shiftstack::io {

namespace {
double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
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

void write_outputs(RunOutput& run, const SearchConfig& config, const OutputPaths& paths,
                   const std::function<void(const StageTime&)>& progress) {
  const auto start = std::chrono::steady_clock::now();
  const ResultTable table = make_result_table(run, config);
  std::string written;
  if (!paths.ecsv.empty()) {
    write_ecsv(table, paths.ecsv);
    written += paths.ecsv;
  }
  if (!paths.fits.empty()) {
    write_fits_table(table, paths.fits);
    written += (written.empty() ? "" : ", ") + paths.fits;
  }
  if (!paths.stamps.empty()) {
    std::vector<StampSet> sets;
    for (std::size_t k = 0; k < run.coadd_types.size(); ++k) sets.push_back({to_string(run.coadd_types[k]), run.stamps[k]});
    write_stamps_fits(paths.stamps, sets, table, table.meta);
    written += (written.empty() ? "" : ", ") + paths.stamps;
  }
  StageTime s{"write", seconds_since(start), std::to_string(table.rows) + " candidates to " + written};
  run.stages.push_back(s);
  if (progress) progress(s);
  if (!paths.summary.empty()) write_text_file(paths.summary, run_summary(run, config, paths).dump(2) + "\n");
}

}  // namespace shiftstack::io
