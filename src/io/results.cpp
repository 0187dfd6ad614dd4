// ECSV, FITS binary table and stamp-cube writers.
#include "shiftstack/io/results.hpp"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <sstream>

#include "io/fits_util.hpp"
#include "shiftstack/error.hpp"

namespace shiftstack::io {

using detail::FitsFile;

std::size_t Column::values_per_row() const {
  std::size_t n = 1;
  for (int s : shape) n *= std::size_t(s);
  return n;
}

const Column* ResultTable::find(const std::string& name) const {
  for (const auto& c : columns)
    if (c.name == name) return &c;
  return nullptr;
}

void ResultTable::check() const {
  for (const auto& c : columns) {
    const std::size_t want = rows * c.values_per_row();
    const std::size_t have = c.type == Column::Type::string                                  ? c.strings.size()
                             : (c.type == Column::Type::float32 || c.type == Column::Type::float64) ? c.reals.size()
                                                                                             : c.integers.size();
    if (have != want)
      throw Error("results column " + c.name + " has " + std::to_string(have) + " values, expected " +
                  std::to_string(want));
    if (c.type == Column::Type::string && !c.shape.empty())
      throw Error("results column " + c.name + ": string columns must be scalar");
  }
}

// ---- ECSV ---------------------------------------------------------------------------------

namespace {

std::string datatype_name(Column::Type t) {
  switch (t) {
    case Column::Type::int32: return "int32";
    case Column::Type::int64: return "int64";
    case Column::Type::float32: return "float32";
    case Column::Type::float64: return "float64";
    case Column::Type::boolean: return "bool";
    case Column::Type::string: return "string";
  }
  return "?";
}

// Shortest text that reads back to the same value at the column's precision.
std::string format_real(double v, Column::Type t, bool json) {
  if (std::isnan(v)) return json ? "NaN" : "nan";
  if (std::isinf(v)) return json ? (v > 0 ? "Infinity" : "-Infinity") : (v > 0 ? "inf" : "-inf");
  char text[40];
  std::snprintf(text, sizeof text, t == Column::Type::float32 ? "%.9g" : "%.17g", v);
  return text;
}

std::string quote_ecsv_string(const std::string& s) {
  if (!s.empty() && s.find_first_of(" \"\t,") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

// A JSON array for one row of a multidimensional column (numpy order, nested by shape).
void json_cell(const Column& c, std::size_t offset, std::size_t axis, std::string& out) {
  out += '[';
  const std::size_t count = std::size_t(c.shape[axis]);
  std::size_t stride = 1;
  for (std::size_t a = axis + 1; a < c.shape.size(); ++a) stride *= std::size_t(c.shape[a]);
  for (std::size_t i = 0; i < count; ++i) {
    if (i) out += ',';
    if (axis + 1 < c.shape.size()) {
      json_cell(c, offset + i * stride, axis + 1, out);
    } else if (c.type == Column::Type::boolean) {
      out += c.integers[offset + i] ? "true" : "false";
    } else if (c.type == Column::Type::float32 || c.type == Column::Type::float64) {
      out += format_real(c.reals[offset + i], c.type, true);
    } else {
      out += std::to_string(c.integers[offset + i]);
    }
  }
  out += ']';
}

std::string yaml_string(const std::string& s) { return nlohmann::json(s).dump(); }

}  // namespace

void write_ecsv(const ResultTable& table, const std::string& path) {
  table.check();
  std::string out;
  out += "# %ECSV 1.0\n# ---\n# datatype:\n";
  for (const auto& c : table.columns) {
    out += "# - {name: ";
    out += yaml_string(c.name);
    if (c.shape.empty()) {
      out += ", datatype: " + datatype_name(c.type);
    } else if (table.rows == 0) {
      out += ", datatype: string, subtype: '" + datatype_name(c.type) + "[null]'";
    } else {
      std::string dims;
      for (std::size_t a = 0; a < c.shape.size(); ++a) {
        if (a) dims += ',';
        dims += std::to_string(c.shape[a]);
      }
      out += ", datatype: string, subtype: '" + datatype_name(c.type) + "[" + dims + "]'";
    }
    if (!c.unit.empty()) out += ", unit: " + yaml_string(c.unit);
    if (!c.description.empty()) out += ", description: " + yaml_string(c.description);
    out += "}\n";
  }
  // JSON is valid YAML, so the metadata goes in as one flow mapping.
  nlohmann::json meta = table.meta.is_object() ? table.meta : nlohmann::json::object();
  nlohmann::json shapes = nlohmann::json::object();
  for (const auto& c : table.columns)
    if (!c.shape.empty()) shapes[c.name] = c.shape;
  if (!shapes.empty()) meta["column_shapes"] = shapes;
  if (!meta.empty()) out += "# meta: " + meta.dump() + "\n";
  out += "# schema: astropy-2.0\n";
  for (std::size_t i = 0; i < table.columns.size(); ++i) out += (i ? " " : "") + table.columns[i].name;
  out += '\n';
  for (std::size_t r = 0; r < table.rows; ++r) {
    for (std::size_t i = 0; i < table.columns.size(); ++i) {
      const Column& c = table.columns[i];
      if (i) out += ' ';
      const std::size_t n = c.values_per_row();
      if (!c.shape.empty()) {
        json_cell(c, r * n, 0, out);
        continue;
      }
      switch (c.type) {
        case Column::Type::int32:
        case Column::Type::int64: out += std::to_string(c.integers[r]); break;
        case Column::Type::boolean: out += c.integers[r] ? "True" : "False"; break;
        case Column::Type::float32:
        case Column::Type::float64: out += format_real(c.reals[r], c.type, false); break;
        case Column::Type::string: out += quote_ecsv_string(c.strings[r]); break;
      }
    }
    out += '\n';
  }
  detail::write_text_atomic(path, out);
}

// ---- FITS binary table --------------------------------------------------------------------

namespace {

void write_meta_keywords(FitsFile& f, const nlohmann::json& meta) {
  int status = 0;
  for (auto it = meta.begin(); it != meta.end(); ++it) {
    const std::string key = it.key();
    const auto& v = it.value();
    if (v.is_boolean()) {
      int b = v.get<bool>();
      fits_update_key(f.get(), TLOGICAL, key.c_str(), &b, nullptr, &status);
    } else if (v.is_number_integer()) {
      LONGLONG i = v.get<long long>();
      fits_update_key(f.get(), TLONGLONG, key.c_str(), &i, nullptr, &status);
    } else if (v.is_number()) {
      fits_update_key_dbl(f.get(), key.c_str(), v.get<double>(), -17, nullptr, &status);
    } else if (v.is_string()) {
      std::string s = v.get<std::string>();
      fits_write_key_longstr(f.get(), key.c_str(), s.c_str(), nullptr, &status);
    }
    f.check(status, "writing keyword " + key);
  }
  // The whole metadata (lists included) as one long string.
  std::string all = meta.dump();
  fits_write_key_longstr(f.get(), "SSMETA", all.c_str(), "run metadata (JSON)", &status);
  fits_write_key_longwarn(f.get(), &status);
  f.check(status, "writing the metadata keyword");
}

void write_table_hdu(FitsFile& f, const ResultTable& table, const std::string& extname) {
  const int ncols = int(table.columns.size());
  std::vector<std::string> names, forms, units;
  for (const auto& c : table.columns) {
    names.push_back(c.name);
    units.push_back(c.unit);
    const std::size_t n = c.values_per_row();
    std::string code;
    switch (c.type) {
      case Column::Type::int32: code = "J"; break;
      case Column::Type::int64: code = "K"; break;
      case Column::Type::float32: code = "E"; break;
      case Column::Type::float64: code = "D"; break;
      case Column::Type::boolean: code = "L"; break;
      case Column::Type::string: {
        std::size_t width = 1;
        for (const auto& s : c.strings) width = std::max(width, s.size());
        code = std::to_string(width) + "A";
        break;
      }
    }
    forms.push_back(c.type == Column::Type::string ? code : std::to_string(n) + code);
  }
  std::vector<char*> name_ptrs, form_ptrs, unit_ptrs;
  for (int i = 0; i < ncols; ++i) {
    name_ptrs.push_back(names[i].data());
    form_ptrs.push_back(forms[i].data());
    unit_ptrs.push_back(units[i].data());
  }
  int status = 0;
  std::string ext = extname;
  fits_create_tbl(f.get(), BINARY_TBL, LONGLONG(table.rows), ncols, name_ptrs.data(), form_ptrs.data(),
                  unit_ptrs.data(), ext.c_str(), &status);
  f.check(status, "creating table " + extname);
  for (int i = 0; i < ncols; ++i) {
    const Column& c = table.columns[i];
    const int colnum = i + 1;
    if (c.shape.size() > 1) {
      // FITS lists axes fastest first: the reverse of numpy's order.
      std::vector<long> dims(c.shape.rbegin(), c.shape.rend());
      fits_write_tdim(f.get(), colnum, int(dims.size()), dims.data(), &status);
    }
    if (!c.description.empty()) {
      const std::string key = "TCOMM" + std::to_string(colnum);
      std::string text = c.description;
      fits_update_key_str(f.get(), key.c_str(), text.data(), nullptr, &status);
    }
    const LONGLONG n = LONGLONG(table.rows * c.values_per_row());
    if (n == 0) continue;
    switch (c.type) {
      case Column::Type::int32: {
        std::vector<int> v(c.integers.begin(), c.integers.end());
        fits_write_col(f.get(), TINT, colnum, 1, 1, n, v.data(), &status);
        break;
      }
      case Column::Type::int64: {
        std::vector<LONGLONG> v(c.integers.begin(), c.integers.end());
        fits_write_col(f.get(), TLONGLONG, colnum, 1, 1, n, v.data(), &status);
        break;
      }
      case Column::Type::float32: {
        std::vector<float> v(c.reals.begin(), c.reals.end());
        fits_write_col(f.get(), TFLOAT, colnum, 1, 1, n, v.data(), &status);
        break;
      }
      case Column::Type::float64: {
        std::vector<double> v(c.reals.begin(), c.reals.end());
        fits_write_col(f.get(), TDOUBLE, colnum, 1, 1, n, v.data(), &status);
        break;
      }
      case Column::Type::boolean: {
        std::vector<char> v(c.integers.begin(), c.integers.end());
        fits_write_col(f.get(), TLOGICAL, colnum, 1, 1, n, v.data(), &status);
        break;
      }
      case Column::Type::string: {
        std::vector<std::string> copy = c.strings;
        std::vector<char*> ptrs;
        for (auto& s : copy) ptrs.push_back(s.data());
        fits_write_col(f.get(), TSTRING, colnum, 1, 1, n, ptrs.data(), &status);
        break;
      }
    }
    f.check(status, "writing column " + c.name);
  }
}

// `kind` goes into the primary header as SSOUTPUT: the reader's input listing recognises the
// tool's own outputs by it and never takes them for exposures.
template <typename Body>
void write_fits_atomically(const std::string& path, const char* kind, Body body) {
  const std::string temporary = detail::temporary_sibling(path);
  try {
    FitsFile f = FitsFile::create(temporary);
    body(f);
    int status = 0, type = 0;
    fits_movabs_hdu(f.get(), 1, &type, &status);
    std::string value = kind;
    fits_update_key_str(f.get(), "SSOUTPUT", value.data(), "a shiftstack output, never read as an exposure", &status);
    f.check(status, "marking the file as a shiftstack output");
    f.close();
  } catch (...) {
    std::error_code ec;
    std::filesystem::remove(temporary, ec);
    throw;
  }
  detail::commit_file(temporary, path);
}

void empty_primary(FitsFile& f) {
  int status = 0;
  fits_create_img(f.get(), BYTE_IMG, 0, nullptr, &status);
  f.check(status, "creating the primary HDU");
}

}  // namespace

void write_fits_table(const ResultTable& table, const std::string& path, const std::string& extname) {
  table.check();
  write_fits_atomically(path, "results", [&](FitsFile& f) {
    empty_primary(f);
    write_table_hdu(f, table, extname);
    if (table.meta.is_object()) write_meta_keywords(f, table.meta);
  });
}

void write_stamps_fits(const std::string& path, const std::vector<StampSet>& sets, const ResultTable& table,
                       const nlohmann::json& meta) {
  table.check();
  write_fits_atomically(path, "stamps", [&](FitsFile& f) {
    empty_primary(f);
    if (meta.is_object()) write_meta_keywords(f, meta);
    for (const auto& set : sets) {
      if (set.stamps.size() != table.rows)
        throw Error(path + ": " + std::to_string(set.stamps.size()) + " " + set.type + " stamps for " +
                    std::to_string(table.rows) + " candidates");
      const long side = set.stamps.empty() ? 1 : set.stamps.front().width;
      long naxes[3] = {side, side, long(set.stamps.size())};
      int status = 0;
      fits_create_img(f.get(), FLOAT_IMG, 3, naxes, &status);
      std::string upper = set.type;
      for (char& ch : upper) ch = char(std::toupper(static_cast<unsigned char>(ch)));
      std::string extname = "COADD_" + upper;
      fits_update_key_str(f.get(), "EXTNAME", extname.data(), "one plane per candidate, table row order", &status);
      f.check(status, "creating " + extname);
      std::vector<float> cube;
      cube.reserve(std::size_t(side) * side * set.stamps.size());
      for (const auto& s : set.stamps) cube.insert(cube.end(), s.pixels.begin(), s.pixels.end());
      if (!cube.empty()) {
        long first[3] = {1, 1, 1};
        fits_write_pix(f.get(), TFLOAT, first, LONGLONG(cube.size()), cube.data(), &status);
        f.check(status, "writing " + extname);
      }
    }
    // Which candidate each plane belongs to.
    ResultTable index;
    index.rows = table.rows;
    for (const char* name : {"uuid", "x", "y", "vx", "vy", "likelihood"})
      if (const Column* c = table.find(name)) index.columns.push_back(*c);
    write_table_hdu(f, index, "CANDIDATES");
  });
}

void write_column_fits(const ResultTable& single, const std::string& path, bool image) {
  single.check();
  require(!single.columns.empty(), path + ": no column to write");
  const Column& column = single.columns.front();
  const Column* uuid = single.find("uuid");
  write_fits_atomically(path, "column", [&](FitsFile& f) {
    empty_primary(f);
    int status = 0;
    LONGLONG rows = LONGLONG(single.rows);
    int is_image = image ? 1 : 0;
    std::string name = column.name;
    fits_update_key(f.get(), TLONGLONG, "NUMRES", &rows, "rows of the results table", &status);
    fits_update_key(f.get(), TLOGICAL, "ISIMG", &is_image, "one image HDU per row", &status);
    fits_update_key_str(f.get(), "COLNAME", name.data(), "results column", &status);
    f.check(status, "writing the column header");
    if (!image) {
      ResultTable data;
      data.rows = single.rows;
      data.columns.push_back(column);
      write_table_hdu(f, data, "DATA");
      return;
    }
    require(column.type == Column::Type::float32 || column.type == Column::Type::float64,
            path + ": image column " + column.name + " is not real-valued");
    std::vector<long> axes(column.shape.rbegin(), column.shape.rend());  // FITS: fastest axis first
    const std::size_t per_row = column.values_per_row();
    for (std::size_t r = 0; r < single.rows; ++r) {
      fits_create_img(f.get(), FLOAT_IMG, int(axes.size()), axes.data(), &status);
      std::string extname = "IMG_" + std::to_string(r);
      fits_update_key_str(f.get(), "EXTNAME", extname.data(), nullptr, &status);
      if (uuid) {
        std::string id = uuid->strings[r];
        fits_update_key_str(f.get(), "UUID", id.data(), "the row's uuid", &status);
      }
      f.check(status, "creating " + extname);
      std::vector<float> pixels(column.reals.begin() + std::ptrdiff_t(r * per_row),
                                column.reals.begin() + std::ptrdiff_t((r + 1) * per_row));
      fits_write_img(f.get(), TFLOAT, 1, LONGLONG(pixels.size()), pixels.data(), &status);
      f.check(status, "writing " + extname);
    }
  });
}

void write_text_file(const std::string& path, const std::string& content) {
  detail::write_text_atomic(path, content);
}

}  // namespace shiftstack::io
