// Reliability, reading side: the reproducers in tests/data/repro (each crashed, hung,
// allocated gigabytes or hit undefined behaviour before), truncated and foreign files, FIFOs,
// the tool's own outputs among the inputs, and header numbers out of range.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "shiftstack/error.hpp"
#include "shiftstack/io/fits.hpp"
#include "shiftstack/run.hpp"
#include "shiftstack/synth.hpp"
#include "test_io_support.hpp"

namespace shiftstack::io {
namespace {

namespace fs = std::filesystem;
using testing_support::TempDir;

std::string repro(const std::string& name) { return std::string(SHIFTSTACK_SOURCE_DIR) + "/tests/data/repro/" + name; }

std::string error_of(const std::function<void()>& body) {
  try {
    body();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string read_error(const std::vector<std::string>& files) {
  return error_of([&] { read_exposures(files, ReadOptions{}); });
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
void put(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), std::streamsize(bytes.size()));
}

KitStack tiny_kit(int exposures = 3) {
  KitOptions o = workload("ci");
  o.exposures = exposures, o.width = 40, o.height = 36, o.vx_count = 3, o.vy_count = 3;
  o.velocity_displacement = 2, o.curve_amplitude = 0.5;
  return make_kit(o);
}

std::vector<std::string> write_kit(const KitStack& kit, const std::string& dir) {
  std::vector<std::string> files;
  for (int e = 0; e < kit.stack.size(); ++e) {
    WriteOptions w;
    w.curve_x = kit.bank.curve_at_x(e);
    w.curve_y = kit.bank.curve_at_y(e);
    files.push_back(dir + "/exposure_" + std::to_string(e) + ".fits");
    write_exposure_fits(files.back(), kit.stack.exposures[std::size_t(e)], w);
  }
  return files;
}

}  // namespace

// ---- the reproducers ------------------------------------------------------------------------

TEST(ReliabilityRepro, CorruptTileCompressionIsRefusedBeforeCfitsio) {
  // SIGFPE inside cfitsio 4.2 (a ZTILE1 card full of garbage) at fd9c465.
  const std::string why = read_error({repro("cfitsio-sigfpe-imcomp_get_compressed_image_par.fits")});
  EXPECT_TRUE(has(why, "ZTILE1")) << why;
  EXPECT_TRUE(has(why, "HDU 2")) << why;
  EXPECT_TRUE(has(why, "cfitsio-sigfpe")) << why;
}

TEST(ReliabilityRepro, RiceStreamEndingBeforeItsTileIsRefusedBeforeCfitsio) {
  // SEGV inside cfitsio 4.2's RICE decoder (found by fuzz_read_one from the WorkUnit fixture):
  // without the guard the read ends in cfitsio's own error at best, past its buffer at worst.
  const fs::path finding = fs::path(SHIFTSTACK_SOURCE_DIR) / "tests/data/fuzz/read_one-crash-rice-stream-past-its-end";
  TempDir dir;
  put(dir.file("workunit.fits"), slurp(finding.string()));
  const std::string why = read_error({dir.file("workunit.fits")});
  EXPECT_TRUE(has(why, "RICE stream")) << why;
  EXPECT_TRUE(has(why, "SCI_2")) << why;
  EXPECT_TRUE(has(why, "tile 5 of 30")) << why;
}

TEST(ReliabilityRepro, CutGzipTileIsRefusedInsteadOfHanging) {
  // Never returned at fd9c465: cfitsio's inflate loop grew its buffer for ever.
  const std::string why = read_error({repro("cfitsio-hang-gzip-tile-uncompress2mem.fits")});
  EXPECT_TRUE(has(why, "gzip")) << why;
  EXPECT_TRUE(has(why, "cut short")) << why;
  EXPECT_TRUE(has(why, "VAR_1")) << why;
}

TEST(ReliabilityRepro, DeclaredSizeBeyondTheFileIsRefusedBeforeAllocating) {
  // 6.4 GB and 18 s before the truncation error at fd9c465.
  const std::string why = read_error({repro("trunc-header-declares-40000x40000.fits")});
  EXPECT_TRUE(has(why, "6400000000 bytes")) << why;
  EXPECT_TRUE(has(why, "truncated")) << why;
}

TEST(ReliabilityRepro, HeaderNumbersOutOfRangeAreErrors) {
  // int(1e20), long(1e30), (long long)1e300: undefined behaviour (exit 0) at fd9c465.
  std::string why = read_error({repro("workunit-NUMIMG-1e20.fits")});
  EXPECT_TRUE(has(why, "NUMIMG")) << why;
  why = read_error({repro("iraf-NPIX1-1e30.fits")});
  EXPECT_TRUE(has(why, "NPIX1")) << why;
  why = read_error({repro("iraf-mask-PIXVALUE-1e300-a.fits"), repro("iraf-mask-PIXVALUE-1e300-b.fits")});
  EXPECT_TRUE(has(why, "PIXVALUE")) << why;
  EXPECT_TRUE(has(why, "mask plane")) << why;
}

// ---- damaged and foreign files ------------------------------------------------------------

TEST(ReliabilityRead, FileCutInsideAHeaderSaysSo) {
  TempDir dir;
  const KitStack kit = tiny_kit(2);
  const auto files = write_kit(kit, dir.path());
  const std::string bytes = slurp(files[0]);
  // Cut inside the header of the last HDU (the PSF): it was reported as a missing HDU.
  const std::size_t last = bytes.rfind("XTENSION=");
  ASSERT_NE(last, std::string::npos);
  put(files[0], bytes.substr(0, last + 400));
  const std::string why = read_error(files);
  EXPECT_TRUE(has(why, "truncated inside the header of HDU 4")) << why;
  EXPECT_FALSE(has(why, "no HDU named")) << why;
}

TEST(ReliabilityRead, GzipFilesAreReadAndCutOnesRefused) {
  TempDir dir;
  const KitStack kit = tiny_kit(2);
  auto files = write_kit(kit, dir.path());
  for (std::string& f : files) {
    const std::string plain = slurp(f);
    gzFile z = gzopen((f + ".gz").c_str(), "wb");
    ASSERT_NE(z, nullptr);
    ASSERT_EQ(gzwrite(z, plain.data(), unsigned(plain.size())), int(plain.size()));
    gzclose(z);
    fs::remove(f);
    f += ".gz";
  }
  const LoadedStack loaded = read_exposures(files, ReadOptions{});
  ASSERT_EQ(loaded.stack.size(), 2);
  EXPECT_EQ(loaded.stack.exposures[0].science.pixels, kit.stack.exposures[0].science.pixels);
  // A download cut short: was read as far as it went and reported as a missing VARIANCE HDU.
  const std::string whole = slurp(files[1]);
  put(files[1], whole.substr(0, whole.size() / 2));
  const std::string why = read_error(files);
  EXPECT_TRUE(has(why, "cut short")) << why;
  EXPECT_FALSE(has(why, "VARIANCE")) << why;
}

TEST(ReliabilityRead, OtherCompressionsAndNonFitsAreRefused) {
  TempDir dir;
  put(dir.file("a.fits"), std::string("BZh91AY&SY") + std::string(3000, 'x'));
  EXPECT_TRUE(has(read_error({dir.file("a.fits")}), "bzip2")) << read_error({dir.file("a.fits")});
  put(dir.file("b.fits"), std::string(3000, ' '));
  EXPECT_TRUE(has(read_error({dir.file("b.fits")}), "does not begin with SIMPLE"));
  // Non-ASCII bytes in a header value: refused, and the message stays printable.
  std::string bytes = slurp(write_kit(tiny_kit(2), dir.path())[0]);
  const std::size_t naxis1 = bytes.find("NAXIS1  = ", 2880);
  ASSERT_NE(naxis1, std::string::npos);
  bytes[naxis1 + 12] = char(0xE9);
  put(dir.file("c.fits"), bytes);
  const std::string why = read_error({dir.file("c.fits")});
  EXPECT_TRUE(has(why, "NAXIS1")) << why;
  EXPECT_TRUE(has(why, "\\xE9")) << why;
}

TEST(ReliabilityRead, UnclosedStringsAndControlBytesAreRefused) {
  // wcslib 7.12's header parser aborts the process (a strcpy overflow) on a string value with
  // no closing quote; found by fuzz_read_pair through a NUL byte that cut a CTYPE card short.
  TempDir dir;
  const auto files = write_kit(tiny_kit(2), dir.path());
  const std::string bytes = slurp(files[0]);
  const std::size_t extname = bytes.find("EXTNAME = 'IMAGE");
  ASSERT_NE(extname, std::string::npos);
  // The card goes where END was; END moves one card down (the block has room).
  const std::string end_card = std::string("END").append(77, ' ');
  ASSERT_EQ(bytes.substr(extname + 80, 80), end_card);
  std::string unclosed = bytes;
  unclosed.replace(extname + 80, 160, std::string("WCSNAME = 'abc").append(66, ' ') + end_card);
  put(files[0], unclosed);
  std::string why = read_error(files);
  EXPECT_TRUE(has(why, "WCSNAME has a string value without its closing quote")) << why;
  std::string nul = bytes;
  nul.replace(extname + 80, 160, std::string("WCSNAME = 'a").append(1, '\0').append("b'").append(65, ' ') + end_card);
  put(files[0], nul);
  why = read_error(files);
  EXPECT_TRUE(has(why, "control byte 0x00")) << why;
}

TEST(ReliabilityRead, FifosAreRefusedNotOpened) {
  TempDir dir;
  const std::string fifo = dir.file("pipe.fits");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // Both used to block for ever, waiting for a writer.
  EXPECT_TRUE(has(error_of([&] { expand_inputs({fifo}); }), "FIFO"));
  EXPECT_TRUE(has(error_of([&] { expand_inputs({dir.path()}); }), "FIFO"));
  EXPECT_TRUE(has(read_error({fifo}), "FIFO"));
}

TEST(ReliabilityRead, AbsurdEpochsAndKernelsAreRefused) {
  TempDir dir;
  const KitStack kit = tiny_kit(2);
  auto files = write_kit(kit, dir.path());
  Exposure odd = kit.stack.exposures[1];
  odd.epoch = 1e300;  // sorted and shifted as if real, before
  write_exposure_fits(files[1], odd);
  std::string why = read_error(files);
  EXPECT_TRUE(has(why, "not a plausible date")) << why;
  odd.epoch = kit.stack.exposures[1].epoch;
  odd.psf = gaussian_psf(40.0);  // 321 x 321: a likelihood of hours on a real image
  write_exposure_fits(files[1], odd);
  why = read_error(files);
  EXPECT_TRUE(has(why, "at most 255 pixels")) << why;
}

TEST(ReliabilityRead, OneBadEpochAmongTheFilesIsNamedBeforeTheLikelihood) {
  // MJD 65536 among MJD ~60000: the run used to go on (the reference engine exited 0, the cpu
  // engine's band layout overflowed). Now the bank stage refuses it, naming the file.
  TempDir dir;
  const KitStack kit = tiny_kit(3);
  auto files = write_kit(kit, dir.path());
  Exposure odd = kit.stack.exposures[1];
  odd.epoch = 65536;
  write_exposure_fits(files[1], odd);
  SearchConfig config = testing_support::kit_search_config(kit);
  config.cpu_only = true;
  // KBMOD's usual range: +-20 px/day moves ~5e4 px over the 2768 days from t_ref to the odd
  // epoch (the kit's own velocities, a few px over its span, would keep the search small).
  config.generator.min_vx = config.generator.min_vy = -20;
  config.generator.max_vx = config.generator.max_vy = 20;
  RunOptions options;
  options.inputs = files;
  ::setenv("SHIFTSTACK_MEMORY_BUDGET", "256M", 1);
  std::vector<std::string> stages;
  options.progress = [&](const StageTime& s) { stages.push_back(s.name); };
  const std::string why = error_of([&] { run_search(config, options); });
  ::unsetenv("SHIFTSTACK_MEMORY_BUDGET");
  EXPECT_TRUE(has(why, files[1])) << why;
  EXPECT_TRUE(has(why, "epoch 65536")) << why;
  EXPECT_TRUE(has(why, "check the epochs")) << why;
  EXPECT_EQ(std::find(stages.begin(), stages.end(), "likelihood"), stages.end());
}

// ---- outputs among the inputs -------------------------------------------------------------

TEST(ReliabilityOutputs, OwnOutputsAreNeverReadAndNeverOverwriteInputs) {
  TempDir dir;
  const KitStack kit = tiny_kit(3);
  const auto files = write_kit(kit, dir.path());
  SearchConfig config = testing_support::kit_search_config(kit);
  config.cpu_only = true;
  config.stamp_radius = 2;
  // -o into the input folder naming an input: the FITS twin would replace exposure_2.fits.
  const OutputPaths clash = OutputPaths::from(dir.file("exposure_2.ecsv"));
  const std::string why = error_of([&] { prepare_outputs(clash, files); });
  EXPECT_TRUE(has(why, "would replace the input")) << why;
  EXPECT_EQ(slurp(files[2]).substr(0, 6), "SIMPLE");
  // Results written beside the inputs, then a rerun over the folder: the outputs are left out
  // (a rerun used to read results.fits as an exposure and fail).
  RunOptions options;
  options.inputs = {dir.path()};
  const OutputPaths paths = OutputPaths::from(dir.file("results.ecsv"));
  RunOutput first = run_search(config, options);
  write_outputs(first, config, paths);
  std::vector<std::string> notes;
  const auto listed = expand_inputs({dir.path()}, &notes);
  EXPECT_EQ(listed.size(), files.size());
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_TRUE(has(notes[0], "left out 2 shiftstack output")) << notes[0];
  RunOutput second = run_search(config, options);
  EXPECT_EQ(second.loaded.stack.size(), 3);
  EXPECT_EQ(second.digest.maxZ, first.digest.maxZ);
  // Named explicitly, an output is an error, not an exposure.
  EXPECT_TRUE(has(error_of([&] { expand_inputs({paths.fits}); }), "is a shiftstack output (results)"));
  EXPECT_TRUE(has(error_of([&] { expand_inputs({paths.stamps}); }), "is a shiftstack output (stamps)"));
}

// ---- fuzz findings --------------------------------------------------------------------------

TEST(ReliabilityFuzz, EveryFindingReadsBackAsAnError) {
  // Inputs the fuzz targets once flagged (a leak, a crash, a hang): each must now give an
  // Error, and nothing the sanitizer build would report.
  const fs::path folder = fs::path(SHIFTSTACK_SOURCE_DIR) / "tests/data/fuzz";
  int count = 0;
  TempDir dir;
  for (const auto& entry : fs::directory_iterator(folder)) {
    const std::string name = entry.path().filename().string();
    if (name == "README.md") continue;
    const std::string bytes = slurp(entry.path().string());
    std::vector<std::string> files;
    if (name.rfind("read_pair-", 0) == 0) {
      // fuzz_read_pair's format: a 4-byte little-endian length, the first file, the second.
      ASSERT_GE(bytes.size(), 4u) << name;
      std::size_t n = 0;
      for (int i = 0; i < 4; ++i) n |= std::size_t(static_cast<unsigned char>(bytes[std::size_t(i)])) << (8 * i);
      n = std::min(n, bytes.size() - 4);
      put(dir.file("a.fits"), bytes.substr(4, n));
      put(dir.file("b.fits"), bytes.substr(4 + n));
      files = {dir.file("a.fits"), dir.file("b.fits")};
    } else {
      put(dir.file("one.fits"), bytes);
      files = {dir.file("one.fits")};
    }
    try {
      read_exposures(files, ReadOptions{});
    } catch (const Error&) {
    }
    ++count;
  }
  EXPECT_GT(count, 0);
}

}  // namespace shiftstack::io
