// Table writers: the FITS table read back through cfitsio's column readers, the ECSV text
// checked line by line against the ECSV 1.0 layout (multidimensional cells as JSON).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "io/fits_util.hpp"
#include "shiftstack/error.hpp"
#include "shiftstack/io/results.hpp"
#include "test_io_support.hpp"

namespace shiftstack::io {
namespace {

using testing_support::TempDir;

ResultTable sample_table() {
  ResultTable t;
  t.rows = 2;
  Column x;
  x.name = "x";
  x.type = Column::Type::int32;
  x.unit = "pix";
  x.integers = {3, -4};
  Column lh;
  lh.name = "likelihood";
  lh.type = Column::Type::float64;
  lh.description = "a: description, with commas";
  lh.reals = {7.25, 1.0 / 3.0};
  Column id;
  id.name = "uuid";
  id.type = Column::Type::string;
  id.strings = {"abc", "with space"};
  Column valid;
  valid.name = "obs_valid";
  valid.type = Column::Type::boolean;
  valid.shape = {3};
  valid.integers = {1, 0, 1, 0, 0, 1};
  Column stamp;
  stamp.name = "stamp";
  stamp.type = Column::Type::float32;
  stamp.shape = {2, 3};  // 2 rows of 3 (numpy order)
  stamp.reals = {0, 1, 2, 3, 4, 5, 10, 11, 12, 13, 14, NAN};
  t.columns = {x, lh, id, valid, stamp};
  t.meta = {{"t_ref", 60000.5}, {"mjd_mid", {60000.0, 60001.0}}, {"engine", "cpu"}};
  return t;
}

TEST(IoTables, EcsvFollowsTheFormat) {
  TempDir dir;
  const ResultTable t = sample_table();
  write_ecsv(t, dir.file("t.ecsv"));
  std::ifstream in(dir.file("t.ecsv"));
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_GE(lines.size(), 10u);
  EXPECT_EQ(lines[0], "# %ECSV 1.0");
  EXPECT_EQ(lines[1], "# ---");
  EXPECT_EQ(lines[2], "# datatype:");
  EXPECT_EQ(lines[3], R"(# - {name: "x", datatype: int32, unit: "pix"})");
  EXPECT_EQ(lines[4], R"(# - {name: "likelihood", datatype: float64, description: "a: description, with commas"})");
  EXPECT_EQ(lines[6], R"(# - {name: "obs_valid", datatype: string, subtype: 'bool[3]'})");
  EXPECT_EQ(lines[7], R"(# - {name: "stamp", datatype: string, subtype: 'float32[2,3]'})");
  EXPECT_EQ(lines[8].rfind("# meta: {", 0), 0u);
  EXPECT_EQ(lines[9], "# schema: astropy-2.0");
  EXPECT_EQ(lines[10], "x likelihood uuid obs_valid stamp");
  EXPECT_EQ(lines[11], "3 7.25 abc [true,false,true] [[0,1,2],[3,4,5]]");
  EXPECT_EQ(lines[12], R"(-4 0.33333333333333331 "with space" [false,false,true] [[10,11,12],[13,14,NaN]])");
  // Values read back to the same doubles.
  EXPECT_EQ(std::stod("0.33333333333333331"), 1.0 / 3.0);
}

TEST(IoTables, FitsTableReadsBackThroughCfitsio) {
  TempDir dir;
  const ResultTable t = sample_table();
  write_fits_table(t, dir.file("t.fits"));
  auto f = detail::FitsFile::open_read(dir.file("t.fits"));
  ASSERT_TRUE(f.move_to_name("RESULTS"));
  int status = 0;
  long rows = 0;
  int cols = 0;
  fits_get_num_rows(f.get(), &rows, &status);
  fits_get_num_cols(f.get(), &cols, &status);
  EXPECT_EQ(rows, 2);
  EXPECT_EQ(cols, 5);
  int x[2] = {0, 0};
  fits_read_col(f.get(), TINT, 1, 1, 1, 2, nullptr, x, nullptr, &status);
  EXPECT_EQ(x[0], 3);
  EXPECT_EQ(x[1], -4);
  double lh[2] = {0, 0};
  fits_read_col(f.get(), TDOUBLE, 2, 1, 1, 2, nullptr, lh, nullptr, &status);
  EXPECT_EQ(lh[1], 1.0 / 3.0);
  char a[16] = {0}, b[16] = {0};
  char* strings[2] = {a, b};
  fits_read_col(f.get(), TSTRING, 3, 1, 1, 2, nullptr, strings, nullptr, &status);
  EXPECT_STREQ(b, "with space");
  char valid[6] = {0};
  fits_read_col(f.get(), TLOGICAL, 4, 1, 1, 6, nullptr, valid, nullptr, &status);
  EXPECT_EQ((std::vector<int>(valid, valid + 6)), (std::vector<int>{1, 0, 1, 0, 0, 1}));
  // The stamp column: 6 floats per row, TDIM (3,2) = numpy shape (2, 3) reversed.
  int naxis = 0;
  long dims[2] = {0, 0};
  fits_read_tdim(f.get(), 5, 2, &naxis, dims, &status);
  EXPECT_EQ(naxis, 2);
  EXPECT_EQ(dims[0], 3);
  EXPECT_EQ(dims[1], 2);
  float stamp[6];
  fits_read_col(f.get(), TFLOAT, 5, 2, 1, 6, nullptr, stamp, nullptr, &status);
  EXPECT_EQ(stamp[0], 10.0f);
  EXPECT_TRUE(std::isnan(stamp[5]));
  EXPECT_EQ(status, 0);
  char unit[FLEN_VALUE] = {0};
  fits_read_key(f.get(), TSTRING, "TUNIT1", unit, nullptr, &status);
  EXPECT_STREQ(unit, "pix");
  double t_ref = 0;
  fits_read_key(f.get(), TDOUBLE, "T_REF", &t_ref, nullptr, &status);
  EXPECT_EQ(t_ref, 60000.5);
  EXPECT_EQ(status, 0);
}

TEST(IoTables, InconsistentColumnsAreRejected) {
  ResultTable t = sample_table();
  t.columns[0].integers.pop_back();
  TempDir dir;
  EXPECT_THROW(write_ecsv(t, dir.file("bad.ecsv")), Error);
  EXPECT_FALSE(std::filesystem::exists(dir.file("bad.ecsv")));
  // Writing into a folder that does not exist fails with the path, leaving nothing behind.
  EXPECT_THROW(write_ecsv(sample_table(), dir.file("missing/t.ecsv")), Error);
  EXPECT_THROW(write_fits_table(sample_table(), dir.file("missing/t.fits")), Error);
}

}  // namespace
}  // namespace shiftstack::io
