// The merged catalogue of a many-unit run: each complete unit's results table (the scalar
// columns, read back from its ECSV) under a leading `unit` column.
#include <yaml-cpp/yaml.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include "shiftstack/error.hpp"
#include "shiftstack/io/results.hpp"
#include "shiftstack/search_many.hpp"

namespace shiftstack::many {

namespace fs = std::filesystem;
using io::Column;

namespace {

struct EcsvColumn {
  std::string name, unit, description;
  Column::Type type = Column::Type::float64;
  bool scalar = true;  // array columns (light curves, stamps) stay in the unit's own table
};

struct EcsvTable {
  std::vector<EcsvColumn> columns;
  std::vector<std::vector<std::string>> rows;  // cells as written
};

Column::Type type_of(const std::string& datatype, const std::string& where) {
  if (datatype == "int32") return Column::Type::int32;
  if (datatype == "int64") return Column::Type::int64;
  if (datatype == "float32") return Column::Type::float32;
  if (datatype == "float64") return Column::Type::float64;
  if (datatype == "bool") return Column::Type::boolean;
  if (datatype == "string") return Column::Type::string;
  throw Error(where + ": unsupported ECSV datatype '" + datatype + "'");
}

// Space-separated cells; a double-quoted cell may hold spaces, and "" stands for one quote.
std::vector<std::string> split_cells(const std::string& line) {
  std::vector<std::string> cells;
  std::size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && line[i] == ' ') ++i;
    if (i >= line.size()) break;
    std::string cell;
    if (line[i] == '"') {
      ++i;
      while (i < line.size()) {
        if (line[i] == '"') {
          if (i + 1 < line.size() && line[i + 1] == '"') {
            cell += '"';
            i += 2;
            continue;
          }
          ++i;
          break;
        }
        cell += line[i++];
      }
    } else {
      while (i < line.size() && line[i] != ' ') cell += line[i++];
    }
    cells.push_back(std::move(cell));
  }
  return cells;
}

// Reads a table written by io::write_ecsv.
EcsvTable read_ecsv(const std::string& path) {
  std::ifstream in(path);
  require(bool(in), path + ": cannot read");
  EcsvTable t;
  std::string line;
  bool header_done = false;
  while (std::getline(in, line)) {
    if (line.rfind("# - {", 0) == 0) {
      const YAML::Node n = YAML::Load(line.substr(4));
      EcsvColumn c;
      c.name = n["name"].as<std::string>();
      c.type = type_of(n["datatype"].as<std::string>(), path);
      c.scalar = !n["subtype"];
      if (n["unit"]) c.unit = n["unit"].as<std::string>();
      if (n["description"]) c.description = n["description"].as<std::string>();
      t.columns.push_back(c);
      continue;
    }
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> cells = split_cells(line);
    if (!header_done) {  // the column-name line
      require(cells.size() == t.columns.size(), path + ": the column names do not match the header");
      header_done = true;
      continue;
    }
    require(cells.size() == t.columns.size(), path + ": a row has " + std::to_string(cells.size()) + " cells, expected " +
                                                  std::to_string(t.columns.size()));
    t.rows.push_back(std::move(cells));
  }
  return t;
}

double parse_real(const std::string& s) {
  if (s == "nan") return std::nan("");
  if (s == "inf") return INFINITY;
  if (s == "-inf") return -INFINITY;
  return std::stod(s);
}

}  // namespace

std::size_t write_catalogue(const Manifest& manifest, const std::vector<UnitState>& states,
                            const std::string& ecsv_path) {
  std::vector<std::pair<std::string, EcsvTable>> tables;
  for (std::size_t i = 0; i < manifest.units.size(); ++i) {
    if (!states[i].complete) continue;
    const std::string path = (fs::path(manifest.units[i].output_dir) / "results.ecsv").string();
    tables.emplace_back(manifest.units[i].name, read_ecsv(path));
  }
  // The scalar columns every unit's table has (configurations may differ, e.g. without RA/Dec).
  std::vector<EcsvColumn> common;
  if (!tables.empty()) {
    for (const EcsvColumn& c : tables.front().second.columns) {
      if (!c.scalar) continue;
      bool everywhere = true;
      for (const auto& [name, t] : tables) {
        bool found = false;
        for (const EcsvColumn& d : t.columns) found |= d.name == c.name && d.type == c.type && d.scalar;
        everywhere &= found;
      }
      if (everywhere) common.push_back(c);
    }
  }
  io::ResultTable out;
  Column unit_column;
  unit_column.name = "unit";
  unit_column.type = Column::Type::string;
  unit_column.description = "the search-many unit the candidate comes from";
  out.columns.push_back(unit_column);
  for (const EcsvColumn& c : common) {
    Column col;
    col.name = c.name;
    col.unit = c.unit;
    col.description = c.description;
    col.type = c.type;
    out.columns.push_back(col);
  }
  for (const auto& [name, t] : tables) {
    std::map<std::string, std::size_t> where;
    for (std::size_t k = 0; k < t.columns.size(); ++k) where[t.columns[k].name] = k;
    for (const auto& row : t.rows) {
      out.columns[0].strings.push_back(name);
      for (std::size_t k = 0; k < common.size(); ++k) {
        Column& col = out.columns[k + 1];
        const std::string& cell = row[where[common[k].name]];
        try {
          switch (col.type) {
            case Column::Type::int32:
            case Column::Type::int64: col.integers.push_back(std::stoll(cell)); break;
            case Column::Type::boolean: col.integers.push_back(cell == "True" || cell == "true"); break;
            case Column::Type::float32:
            case Column::Type::float64: col.reals.push_back(parse_real(cell)); break;
            case Column::Type::string: col.strings.push_back(cell); break;
          }
        } catch (const std::exception&) {
          throw Error("unit " + name + ": results.ecsv column " + col.name + ": unreadable value '" + cell + "'");
        }
      }
      ++out.rows;
    }
  }
  out.meta = {{"origin", "shiftstack search-many"}, {"units", tables.size()}};
  io::write_ecsv(out, ecsv_path);
  const std::string fits = fs::path(ecsv_path).replace_extension(".fits").string();
  io::write_fits_table(out, fits, "CATALOGUE");
  return out.rows;
}

}  // namespace shiftstack::many
