// Results tables and their files: ECSV (astropy reads it with Table.read), a FITS binary table
// with the same columns, and coadded stamps as FITS cubes. Every file is written to a temporary
// sibling and renamed into place, so a reader never sees a half-written file.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "shiftstack/image.hpp"

namespace shiftstack::io {

// One column: scalar per row (shape empty) or a fixed-shape array per row (shape in numpy order,
// e.g. {E} for a light curve or {side, side} for a stamp stored row-major).
struct Column {
  enum class Type { int32, int64, float32, float64, boolean, string };
  std::string name, unit, description;
  Type type = Type::float64;
  std::vector<int> shape;
  std::vector<std::int64_t> integers;  // int32, int64, boolean (0/1)
  std::vector<double> reals;           // float32, float64
  std::vector<std::string> strings;    // string
  std::size_t values_per_row() const;
};

struct ResultTable {
  std::vector<Column> columns;
  std::size_t rows = 0;
  nlohmann::json meta;  // written to the ECSV header and (flattened scalars) the FITS header

  const Column* find(const std::string& name) const;
  // Checks every column has rows * values_per_row values; throws Error naming the first that
  // does not.
  void check() const;
};

// Array columns are declared with their fixed shape ('float64[10]'); a table with no rows
// declares them variable-length ('float64[null]'), because astropy 5.2 cannot read fixed-shape
// array columns without rows. meta['column_shapes'] records the shapes either way.
void write_ecsv(const ResultTable& table, const std::string& path);
void write_fits_table(const ResultTable& table, const std::string& path, const std::string& extname = "RESULTS");

// One 3-D image HDU per coadd type (EXTNAME COADD_<TYPE>, NAXIS3 = number of candidates, in
// table row order) and a CANDIDATES table HDU with uuid, x, y, vx, vy.
struct StampSet {
  std::string type;                 // sum, mean, median, weighted
  std::vector<Image<float>> stamps;  // one per candidate
};
void write_stamps_fits(const std::string& path, const std::vector<StampSet>& sets,
                       const ResultTable& table, const nlohmann::json& meta);

// One column in a file of its own, KBMOD's separate-column format (Results.load_column): a
// primary header with NUMRES (rows), ISIMG and COLNAME; then, for an image column, one image
// HDU IMG_<i> per row (its header holding the row's uuid when the table has one), otherwise a
// DATA table holding the column. `single` holds the column first, then optionally uuid.
void write_column_fits(const ResultTable& single, const std::string& path, bool image);

// Plain text (the run summary JSON), atomically.
void write_text_file(const std::string& path, const std::string& content);

}  // namespace shiftstack::io
