// KBMOD WorkUnit metadata, embedded configurations and shards (workunit.hpp).
#include "io/workunit.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "shiftstack/error.hpp"
#include "shiftstack/io/config.hpp"

namespace shiftstack::io::detail {

namespace {

// Every column of a binary table HDU (the current HDU) as text, row by row.
std::vector<std::map<std::string, std::string>> read_text_table(FitsFile& file, const std::string& what) {
  int status = 0, columns = 0;
  long rows = 0;
  fits_get_num_rows(file.get(), &rows, &status);
  fits_get_num_cols(file.get(), &columns, &status);
  file.check(status, "reading the size of " + what);
  constexpr long max_rows = 10'000'000;  // a metadata table larger than this is not a WorkUnit's
  if (rows < 0 || rows > max_rows) throw Error(file.path() + ": " + what + " has " + std::to_string(rows) + " rows");
  std::vector<std::map<std::string, std::string>> table(static_cast<std::size_t>(rows));
  for (int c = 1; c <= columns; ++c) {
    char key[FLEN_KEYWORD], name[FLEN_VALUE] = {0};
    std::snprintf(key, sizeof key, "TTYPE%d", c);
    fits_read_key(file.get(), TSTRING, key, name, nullptr, &status);
    file.check(status, "reading the name of column " + std::to_string(c) + " of " + what);
    int width = 0;
    fits_get_col_display_width(file.get(), c, &width, &status);
    file.check(status, "reading the width of column " + std::string(name) + " of " + what);
    std::vector<char> buffer(std::size_t(std::max(width, 1)) + 1);
    for (long r = 0; r < rows; ++r) {
      char* cell = buffer.data();
      int any_null = 0;
      fits_read_col(file.get(), TSTRING, c, r + 1, 1, 1, nullptr, &cell, &any_null, &status);
      file.check(status, "reading column " + std::string(name) + " of " + what);
      std::string text = cell;
      while (!text.empty() && text.back() == ' ') text.pop_back();
      table[std::size_t(r)][name] = text;
    }
  }
  return table;
}

std::string fits_card(const std::string& key, const std::string& value) {
  std::string card = key;
  card.resize(8, ' ');
  card += "= " + value;
  card.resize(80, ' ');
  return card;
}

}  // namespace

std::optional<Wcs> wcs_from_json(const std::string& json, const std::string& label, int* width, int* height) {
  if (json.empty() || json == "None" || json == "none") return std::nullopt;
  nlohmann::json dict;
  try {
    dict = nlohmann::json::parse(json);
  } catch (const nlohmann::json::exception& e) {
    throw Error(label + ": the serialized WCS is not valid JSON: " + e.what());
  }
  if (!dict.is_object()) throw Error(label + ": the serialized WCS is not a JSON object");
  std::string cards;
  for (auto it = dict.begin(); it != dict.end(); ++it) {
    const std::string& key = it.key();
    if (key.size() > 8) continue;  // not a plain FITS keyword: no WCS meaning
    const auto& v = it.value();
    if (v.is_string()) {
      std::string quoted = "'";
      for (char ch : v.get<std::string>()) quoted += ch == '\'' ? std::string("''") : std::string(1, ch);
      quoted += "'";
      cards += fits_card(key, quoted);
    } else if (v.is_boolean()) {
      cards += fits_card(key, v.get<bool>() ? "T" : "F");
    } else if (v.is_number_integer()) {
      cards += fits_card(key, std::to_string(v.get<long long>()));
    } else if (v.is_number()) {
      char text[40];
      std::snprintf(text, sizeof text, "%.17G", v.get<double>());
      cards += fits_card(key, text);
    }
  }
  if (width && dict.contains("NAXIS1") && dict["NAXIS1"].is_number()) *width = dict["NAXIS1"].get<int>();
  if (height && dict.contains("NAXIS2") && dict["NAXIS2"].is_number()) *height = dict["NAXIS2"].get<int>();
  return Wcs::from_header(cards, label);
}

bool is_workunit(FitsFile& file) {
  if (file.move_to_name("SCI_0") || file.move_to_name("KBMOD_CONFIG")) return true;
  // A shard holds SCI_<i> for its own index i only.
  const int hdus = file.hdu_count();
  for (int h = 2; h <= std::min(hdus, 3); ++h) {
    file.move_to(h);
    const std::string name = Header::read(file).text("EXTNAME").value_or("");
    if (name.rfind("SCI_", 0) == 0 && name.size() > 4 &&
        std::all_of(name.begin() + 4, name.end(), [](char c) { return c >= '0' && c <= '9'; }))
      return true;
  }
  return false;
}

WorkUnitMeta read_workunit_meta(FitsFile& file, const Header& primary) {
  WorkUnitMeta m;
  m.primary_path = file.path();
  const std::string& path = file.path();
  auto present = [&](const std::string& key) {
    const std::string* v = primary.find(key);
    return v && !v->empty();
  };
  if (present("NUMIMG")) {
    const double n = *primary.number("NUMIMG");
    constexpr double max_images = 1'000'000;
    if (!(n >= 1 && n <= max_images && n == std::floor(n)))
      throw Error(path + ": NUMIMG = " + *primary.find("NUMIMG") + " is not an image count in [1, 1000000]");
    m.images = int(n);
  }
  if (present("REPRJCTD")) {
    const std::string v = *primary.find("REPRJCTD");
    m.reprojected = v == "T" || v == "True" || v == "1";
  }
  if (present("REPFRAME")) m.frame = *primary.find("REPFRAME");
  if (present("BARY")) m.barycentric_distance = primary.number("BARY");
  m.global = Wcs::from_header(primary.raw, path + " (WorkUnit global WCS)");
  if (m.reprojected && !m.global)
    throw Error(path + ": the WorkUnit is marked reprojected (REPRJCTD) but its primary header has no WCS");
  if (m.frame == "ebd" && !m.barycentric_distance)
    throw Error(path + ": the WorkUnit is in the barycentric 'ebd' frame but its primary header has no BARY distance");

  if (file.move_to_name("IMG_META")) {
    const auto rows = read_text_table(file, "IMG_META");
    for (std::size_t i = 0; i < rows.size(); ++i) {
      OriginalFrame f;
      const std::string label = path + " IMG_META row " + std::to_string(i);
      if (auto it = rows[i].find("_WCSSTR_per_image_wcs"); it != rows[i].end())
        f.original = wcs_from_json(it->second, label + " per_image_wcs", &f.width, &f.height);
      if (auto it = rows[i].find("_WCSSTR_ebd_wcs"); it != rows[i].end()) {
        int w = 0, h = 0;
        f.ebd = wcs_from_json(it->second, label + " ebd_wcs", &w, &h);
        if (f.width == 0) f.width = w;
        if (f.height == 0) f.height = h;
      }
      m.constituents.push_back(std::move(f));
    }
  }
  // A primary file without images: the images are in shard files.
  m.sharded = !file.move_to_name("SCI_0") && file.move_to_name("KBMOD_CONFIG");
  if (m.sharded && m.images < 1)
    throw Error(path + ": a sharded WorkUnit's primary file needs NUMIMG to name its shard files");
  return m;
}

std::vector<int> constituent_indices(const Header& science_header, int index) {
  const std::string* n = science_header.find("NIND");
  if (!n || n->empty()) return {index};
  const double count = *science_header.number("NIND");
  if (!(count >= 1 && count <= 10000 && count == std::floor(count)))
    throw Error("NIND = " + *n + " is not a count of constituent images");
  std::vector<int> out;
  for (int j = 0; j < int(count); ++j) {
    const auto v = science_header.number("IND_" + std::to_string(j));
    if (!v || *v < 0 || *v != std::floor(*v)) throw Error("IND_" + std::to_string(j) + " is missing or not an index");
    out.push_back(int(*v));
  }
  return out;
}

std::optional<std::string> read_embedded_config(FitsFile& file) {
  if (!file.move_to_name("KBMOD_CONFIG")) return std::nullopt;
  const auto rows = read_text_table(file, "KBMOD_CONFIG");
  if (rows.size() != 1)
    throw Error(file.path() + ": KBMOD_CONFIG has " + std::to_string(rows.size()) + " rows; a configuration has one");
  // Each cell is a YAML document of its own (KBMOD dumps every value separately).
  YAML::Node mapping(YAML::NodeType::Map);
  for (const auto& [key, text] : rows.front()) {
    try {
      mapping[key] = YAML::Load(text);
    } catch (const YAML::Exception& e) {
      throw Error(file.path() + ": KBMOD_CONFIG value of " + key + " is not valid YAML: " + e.what());
    }
  }
  YAML::Emitter out;
  out << mapping;
  return std::string(out.c_str()) + "\n";
}

std::vector<WorkUnitPart> resolve_workunit_shards(const std::vector<std::string>& files) {
  namespace fs = std::filesystem;
  std::vector<WorkUnitPart> parts;
  std::set<std::string> shard_files;
  auto canonical = [](const std::string& p) {
    std::error_code ec;
    const auto c = fs::weakly_canonical(p, ec);
    return ec ? p : c.string();
  };
  std::vector<std::shared_ptr<const WorkUnitMeta>> metas(files.size());
  for (std::size_t i = 0; i < files.size(); ++i) {
    std::shared_ptr<WorkUnitMeta> meta;
    try {
      FitsFile file = FitsFile::open_read(files[i]);
      file.move_to(1);
      const Header primary = Header::read(file);
      if (!file.move_to_name("KBMOD_CONFIG") || file.move_to_name("SCI_0")) continue;
      meta = std::make_shared<WorkUnitMeta>(read_workunit_meta(file, primary));
    } catch (const Error&) {
      continue;  // unreadable files are reported by the reader, in input order
    }
    if (!meta->sharded) continue;
    for (int k = 0; k < meta->images; ++k)
      shard_files.insert(canonical((fs::path(files[i]).parent_path() / (std::to_string(k) + "_" + fs::path(files[i]).filename().string())).string()));
    metas[i] = meta;
  }
  for (std::size_t i = 0; i < files.size(); ++i) {
    if (metas[i]) {
      const fs::path primary(files[i]);
      for (int k = 0; k < metas[i]->images; ++k) {
        const std::string shard = (primary.parent_path() / (std::to_string(k) + "_" + primary.filename().string())).string();
        std::error_code ec;
        if (!fs::is_regular_file(shard, ec))
          throw Error(files[i] + ": sharded WorkUnit of " + std::to_string(metas[i]->images) + " images, but its shard " +
                      shard + " does not exist");
        parts.push_back({shard, metas[i], k});
      }
    } else if (!shard_files.count(canonical(files[i]))) {
      parts.push_back({files[i], nullptr, -1});
    }
  }
  return parts;
}

}  // namespace shiftstack::io::detail

namespace shiftstack::io {

std::vector<ConfigLayer> embedded_config_layers(const std::vector<std::string>& files, std::vector<std::string>& warnings) {
  std::vector<ConfigLayer> layers;
  std::string first_text, first_path;
  for (const auto& path : files) {
    detail::FitsFile file = detail::FitsFile::open_read(path);
    std::optional<std::string> text = detail::read_embedded_config(file);
    if (!text) continue;
    if (layers.empty()) {
      layers.push_back({path + " (embedded WorkUnit configuration)", *text, true});
      first_text = *text;
      first_path = path;
    } else if (*text != first_text) {
      warnings.push_back(path + ": its embedded configuration differs from " + first_path +
                         "'s; only the first WorkUnit's configuration is used");
    }
  }
  return layers;
}

}  // namespace shiftstack::io
