// Unit records: the append-only journals, the checksum check that decides what a rerun skips,
// and the run summary built from them.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include "shiftstack/error.hpp"
#include "shiftstack/search_many.hpp"

namespace shiftstack::many {

namespace fs = std::filesystem;

bool outputs_verified(const Record& record, const std::string& output_root) {
  if (record.value("status", "") != "ok" || !record.contains("outputs") || record["outputs"].empty()) return false;
  for (const auto& out : record["outputs"]) {
    const std::string path = (fs::path(output_root) / out.value("file", "")).string();
    std::error_code ec;
    if (!fs::is_regular_file(path, ec)) return false;
    // The size first: a truncated or rewritten file usually fails it without reading the bytes.
    if (fs::file_size(path, ec) != out.value("bytes", std::uint64_t(0)) || ec) return false;
    try {
      if (file_crc32(path) != out.value("crc32", "")) return false;
    } catch (const Error&) {
      return false;
    }
  }
  return true;
}

std::vector<Record> read_journals(const std::string& output_root) {
  std::vector<Record> records;
  const fs::path folder = fs::path(output_root) / "records";
  std::error_code ec;
  if (!fs::is_directory(folder, ec)) return records;
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(folder, ec))
    if (entry.path().extension() == ".jsonl") files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  for (const auto& file : files) {
    std::ifstream in(file);
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty()) continue;
      // A line cut short by a killed run does not parse: it is skipped (its unit runs again).
      Record r = Record::parse(line, nullptr, false);
      if (r.is_discarded() || !r.is_object() || !r.contains("unit")) continue;
      records.push_back(std::move(r));
    }
  }
  return records;
}

std::vector<UnitState> unit_states(const Manifest& manifest, const std::vector<Record>& records,
                                   const std::vector<std::size_t>* only) {
  std::vector<std::size_t> all;
  if (!only) {
    for (std::size_t i = 0; i < manifest.units.size(); ++i) all.push_back(i);
    only = &all;
  }
  std::map<std::string, std::size_t> index;  // unit name -> manifest index, for the units asked
  std::vector<std::string> prints(manifest.units.size());
  for (std::size_t i : *only) {
    index[manifest.units[i].name] = i;
    prints[i] = fingerprint(manifest.units[i]);
  }
  std::vector<std::vector<const Record*>> by_unit(manifest.units.size());
  for (const Record& r : records) {
    const auto it = index.find(r.value("unit", ""));
    if (it == index.end() || r.value("fingerprint", "") != prints[it->second]) continue;
    by_unit[it->second].push_back(&r);
  }
  std::vector<UnitState> states(manifest.units.size());
  for (std::size_t i : *only) {
    auto& list = by_unit[i];
    // Latest first (finish time; journal order among equals).
    std::stable_sort(list.begin(), list.end(), [](const Record* a, const Record* b) {
      return a->value("finished", 0.0) > b->value("finished", 0.0);
    });
    for (const Record* r : list)
      if (outputs_verified(*r, manifest.output_root)) {
        states[i].record = *r;
        states[i].complete = true;
        break;
      }
    if (!states[i].complete && !list.empty()) {
      Record latest = *list.front();
      if (latest.value("status", "") == "ok") {
        latest["status"] = "incomplete";
        latest["error"] = "its outputs no longer match the recorded sizes and checksums";
      }
      states[i].record = std::move(latest);
    }
  }
  return states;
}

Journal::Journal(const std::string& output_root, const std::string& label) {
  const fs::path folder = fs::path(output_root) / "records";
  std::error_code ec;
  fs::create_directories(folder, ec);
  require(!ec, folder.string() + ": cannot create the records folder: " + ec.message());
  path_ = (folder / (label + ".jsonl")).string();
  std::ofstream probe(path_, std::ios::app);
  require(bool(probe), path_ + ": cannot write the journal");
}

void Journal::append(const Record& record) {
  // One write of a whole line to a file opened for appending: records of a run never interleave
  // (a journal has one writer), and a kill leaves at most one torn line, which readers skip.
  const std::string line = record.dump() + "\n";
  std::FILE* f = std::fopen(path_.c_str(), "a");
  require(f != nullptr, path_ + ": cannot append to the journal");
  const bool written = std::fwrite(line.data(), 1, line.size(), f) == line.size();
  const bool flushed = std::fflush(f) == 0 && ::fsync(fileno(f)) == 0;
  std::fclose(f);
  require(written && flushed, path_ + ": journal write failed (disk full?)");
}

std::vector<std::size_t> shard_units(const Manifest& manifest, int shard, int shards) {
  require(shards >= 1 && shard >= 0 && shard < shards,
          "--shard " + std::to_string(shard) + "/" + std::to_string(shards) + ": expected i/N with 0 <= i < N");
  std::vector<std::size_t> units;
  // Every N-th unit: neighbours in the manifest (often similar sizes) spread over the shards.
  for (std::size_t i = std::size_t(shard); i < manifest.units.size(); i += std::size_t(shards)) units.push_back(i);
  return units;
}

nlohmann::json make_summary(const Manifest& manifest, const std::vector<std::size_t>& units,
                            const std::vector<UnitState>& states, const nlohmann::json& run_fields) {
  nlohmann::json list = nlohmann::json::array();
  std::map<std::string, int> counts;
  double unit_seconds = 0;
  for (std::size_t i : units) {
    const Unit& u = manifest.units[i];
    nlohmann::json entry;
    if (states[i].record) {
      entry = *states[i].record;
    } else {
      entry = {{"unit", u.name}, {"status", "missing"}, {"error", "no record: not run yet"}};
    }
    entry["output"] = u.output_rel;
    const std::string status = entry.value("status", "missing");
    ++counts[status];
    if (status == "ok") unit_seconds += entry.value("seconds", 0.0);
    list.push_back(std::move(entry));
  }
  nlohmann::json summary = run_fields;
  summary["manifest"] = manifest.path;
  summary["output_root"] = manifest.output_root;
  summary["units_listed"] = units.size();
  summary["status_counts"] = counts;
  summary["unit_seconds_ok"] = unit_seconds;
  summary["units"] = std::move(list);
  return summary;
}

}  // namespace shiftstack::many
