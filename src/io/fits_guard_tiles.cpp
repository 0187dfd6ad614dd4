// Tile-compressed image checks of the FITS structure guard (the tiled-image convention, FITS
// standard 4.0 section 10, as cfitsio 4.2 reads it).
#include <zlib.h>

#include <algorithm>
#include <set>

#include "io/fits_guard_internal.hpp"

namespace shiftstack::io::detail::guard {

namespace {

// cfitsio keeps a tile's pixel count in an int and allocates 8 bytes per pixel.
constexpr std::uint64_t max_tile_pixels = std::uint64_t(1) << 27;
constexpr int max_compressed_axes = 6;  // cfitsio's MAX_COMPRESS_DIM

// ---- binary table columns -------------------------------------------------------------------

struct ColumnForm {
  std::uint64_t repeat = 1;
  char type = 0;         // L X B I J K A E D C M P Q
  char element = 0;      // for P and Q: the element type of the array
  std::uint64_t width = 0;  // bytes in the row
};

std::uint64_t element_bytes(char t) {
  switch (t) {
    case 'L': case 'B': case 'A': return 1;
    case 'I': return 2;
    case 'J': case 'E': return 4;
    case 'K': case 'D': case 'C': return 8;
    case 'M': return 16;
    default: return 0;
  }
}

ColumnForm parse_tform(const Keys& keys, const std::string& key, const std::string& form) {
  ColumnForm f;
  std::size_t i = 0;
  while (i < form.size() && form[i] == ' ') ++i;
  std::size_t digits = i;
  while (digits < form.size() && form[digits] >= '0' && form[digits] <= '9') ++digits;
  if (digits > i) {
    if (digits - i > 12) keys.fail("keyword " + key + " = '" + form + "' has an absurd repeat count");
    f.repeat = std::stoull(form.substr(i, digits - i));
  }
  if (digits >= form.size()) keys.fail("keyword " + key + " = '" + form + "' has no data type");
  f.type = form[digits];
  if (f.type == 'P' || f.type == 'Q') {
    const char element = digits + 1 < form.size() ? form[digits + 1] : 0;
    if (element != 'X' && element_bytes(element) == 0)
      keys.fail("keyword " + key + " = '" + form + "' has no valid array element type");
    f.element = element;
    if (f.repeat > 1) keys.fail("keyword " + key + " = '" + form + "': a descriptor column holds one descriptor");
    f.width = f.repeat * (f.type == 'P' ? 8 : 16);
    return f;
  }
  if (f.type == 'X') {
    f.width = (f.repeat + 7) / 8;
    return f;
  }
  const std::uint64_t bytes = element_bytes(f.type);
  if (bytes == 0) keys.fail("keyword " + key + " = '" + form + "' has an unknown data type");
  f.width = f.repeat * bytes;
  return f;
}

std::uint64_t big_endian(const unsigned char* p, int n) {
  std::uint64_t v = 0;
  for (int i = 0; i < n; ++i) v = (v << 8) | p[i];
  return v;
}

// ---- tile-compressed images -----------------------------------------------------------------

struct Table {
  std::uint64_t row_bytes = 0, rows = 0, heap_offset = 0, heap_size = 0;
  std::vector<ColumnForm> columns;
  std::vector<std::string> names;
  std::vector<std::uint64_t> column_start;
  std::vector<unsigned char> data;  // the rows
  int column(const std::string& name) const {
    for (std::size_t i = 0; i < names.size(); ++i) {
      std::string upper = names[i];
      for (char& c : upper) c = char(std::toupper(static_cast<unsigned char>(c)));
      if (upper == name) return int(i);
    }
    return -1;
  }
  // (element count, byte offset in the heap) of a descriptor cell.
  std::pair<std::uint64_t, std::uint64_t> descriptor(int col, std::uint64_t row) const {
    const unsigned char* p = data.data() + row * row_bytes + column_start[std::size_t(col)];
    const int n = columns[std::size_t(col)].type == 'P' ? 4 : 8;
    return {big_endian(p, n), big_endian(p + n, n)};
  }
};

Table read_table(const Bytes& bytes, const Keys& keys, std::uint64_t data_offset, std::uint64_t naxis1,
                 std::uint64_t naxis2, std::uint64_t pcount, const HduHeader& h) {
  Table t;
  t.row_bytes = naxis1;
  t.rows = naxis2;
  const int fields = int(keys.required_integer("TFIELDS", 0, 999));
  std::uint64_t width = 0;
  for (int n = 1; n <= fields; ++n) {
    const std::string key = "TFORM" + std::to_string(n);
    const auto form = keys.text(key);
    if (!form) keys.fail("required keyword " + key + " is missing");
    t.columns.push_back(parse_tform(keys, key, *form));
    t.names.push_back(keys.text("TTYPE" + std::to_string(n)).value_or(""));
    t.column_start.push_back(width);
    width += t.columns.back().width;
  }
  (void)h;
  if (width != naxis1)
    keys.fail("the columns (TFORMn) add up to " + std::to_string(width) + " bytes per row but NAXIS1 = " +
              std::to_string(naxis1));
  const std::uint64_t main = naxis1 * naxis2;  // bounded by the file size already
  const std::uint64_t theap = std::uint64_t(keys.integer("THEAP", 0, std::numeric_limits<std::int64_t>::max()).value_or(std::int64_t(main)));
  if (theap < main || theap > main + pcount)
    keys.fail("THEAP = " + std::to_string(theap) + " is outside the data area (" + std::to_string(main) + ".." +
              std::to_string(main + pcount) + ")");
  t.heap_offset = data_offset + theap;
  t.heap_size = main + pcount - theap;
  t.data.resize(main);
  if (main) bytes.read(data_offset, main, reinterpret_cast<char*>(t.data.data()));
  return t;
}

// Inflates a gzip member fully, producing at most `bound` bytes (their count in `produced`);
// false with `why` otherwise.
bool bounded_gunzip(const unsigned char* in, std::size_t n, std::uint64_t bound, std::string& why,
                    std::uint64_t& produced) {
  z_stream z{};
  if (inflateInit2(&z, 15 + 16) != Z_OK) {
    why = "zlib could not start";
    return false;
  }
  std::vector<unsigned char> out(std::size_t(std::min<std::uint64_t>(bound + 1, 1 << 16)));
  z.next_in = const_cast<unsigned char*>(in);
  z.avail_in = uInt(n);
  produced = 0;
  bool ok = false;
  for (;;) {
    z.next_out = out.data();
    z.avail_out = uInt(out.size());
    const int rc = inflate(&z, Z_NO_FLUSH);
    produced += out.size() - z.avail_out;
    if (produced > bound) {
      why = "decompresses to more than the " + std::to_string(bound) + " bytes the tile can hold";
      break;
    }
    if (rc == Z_STREAM_END) {
      ok = true;
      break;
    }
    if (rc == Z_BUF_ERROR && z.avail_in == 0) {
      why = "the compressed stream is cut short";
      break;
    }
    if (rc != Z_OK && rc != Z_BUF_ERROR) {
      why = std::string("zlib: ") + (z.msg ? z.msg : "corrupt data");
      break;
    }
  }
  inflateEnd(&z);
  return ok;
}

// Walks a RICE_1 stream the way cfitsio 4.2's decoder (fits_rdecomp, _short, _byte) reads it,
// without producing pixels, and says where it would read past the stream's end or meet a block
// code no encoder writes. cfitsio checks the end only once per block, so a corrupt block (a run
// of zero bytes read as one long unary code) makes it read, and crash, beyond the tile's buffer;
// a stream this walk accepts is read within its bytes. Empty when it decodes.
std::string rice_stream_fault(const unsigned char* c, std::size_t clen, std::uint64_t pixels, int block, int bytepix) {
  // cfitsio: 1 byte per pixel -> _byte, 2 -> _short, 4 and 8 -> the 32-bit decoder.
  const int fsbits = bytepix == 1 ? 3 : bytepix == 2 ? 4 : 5;
  const int fsmax = bytepix == 1 ? 6 : bytepix == 2 ? 14 : 25;
  const int bbits = 1 << fsbits;
  const std::size_t first = bytepix == 1 ? 1 : bytepix == 2 ? 2 : 4;  // the first pixel, raw
  std::size_t at = first;
  bool past_end = false;
  auto next = [&]() -> std::uint32_t {
    if (at >= clen) {
      past_end = true;
      return 1;  // any non-zero byte: ends the walk's inner loops; the fault is reported below
    }
    return c[at++];
  };
  auto bit_length = [](std::uint32_t v) {
    int n = 0;
    while (v) ++n, v >>= 1;
    return n;
  };
  if (clen < first + 1) return "a RICE stream of " + std::to_string(clen) + " bytes is shorter than its header";
  std::uint32_t b = next();
  int nbits = 8;
  for (std::uint64_t i = 0; i < pixels && !past_end;) {
    nbits -= fsbits;
    while (nbits < 0) b = (b << 8) | next(), nbits += 8;
    const int fs = int(b >> nbits) - 1;
    b &= (1u << nbits) - 1;
    const std::uint64_t end = std::min<std::uint64_t>(i + std::uint64_t(block), pixels);
    if (fs > fsmax)
      return "RICE block at pixel " + std::to_string(i) + " has code " + std::to_string(fs) + ", above " +
             std::to_string(fsmax);
    if (fs < 0) {
      i = end;
    } else if (fs == fsmax) {  // raw values of bbits bits each
      for (; i < end && !past_end; ++i) {
        int k = bbits - nbits;
        for (k -= 8; k >= 0; k -= 8) next();
        if (nbits > 0) {
          b = next() & ((1u << nbits) - 1);
        } else {
          b = 0;
        }
      }
    } else {
      for (; i < end && !past_end; ++i) {
        while (b == 0 && !past_end) nbits += 8, b = next();
        if (past_end) break;
        const int high = bit_length(b) - 1;  // the unary code's terminating 1
        nbits = high;
        b ^= 1u << nbits;
        nbits -= fs;
        while (nbits < 0 && !past_end) b = (b << 8) | next(), nbits += 8;
        if (past_end) break;
        b &= (1u << nbits) - 1;
      }
    }
  }
  if (past_end)
    return "the RICE stream of " + std::to_string(clen) + " bytes ends before its " + std::to_string(pixels) +
           " pixels are decoded";
  return "";
}

}  // namespace

void check_tile_compressed(const Bytes& bytes, const Keys& keys, const HduHeader& h, std::uint64_t naxis1,
                           std::uint64_t naxis2, std::uint64_t pcount, const GuardLimits& limits) {
  const Table t = read_table(bytes, keys, h.data_offset, naxis1, naxis2, pcount, h);
  const auto algorithm = keys.text("ZCMPTYPE");
  if (!algorithm) keys.fail("tile-compressed image without ZCMPTYPE");
  static const std::set<std::string> known = {"RICE_1", "RICE_ONE", "GZIP_1", "GZIP_2", "HCOMPRESS_1", "PLIO_1", "NOCOMPRESS"};
  if (!known.count(*algorithm))
    keys.fail("ZCMPTYPE = '" + printable(*algorithm) + "' is not a compression this reader accepts (RICE_1, GZIP_1, " +
              "GZIP_2, HCOMPRESS_1, PLIO_1, NOCOMPRESS)");
  const std::int64_t zbitpix = keys.required_integer("ZBITPIX", -64, 64);
  if (zbitpix != 8 && zbitpix != 16 && zbitpix != 32 && zbitpix != 64 && zbitpix != -32 && zbitpix != -64)
    keys.fail("ZBITPIX = " + std::to_string(zbitpix) + " is not 8, 16, 32, 64, -32 or -64");
  const int axes = int(keys.required_integer("ZNAXIS", 1, max_compressed_axes));
  u128 pixels = 1, tiles = 1, tile_pixels = 1;
  std::vector<std::int64_t> lengths, tile_sides;
  for (int n = 1; n <= axes; ++n) {
    const std::int64_t length = keys.required_integer("ZNAXIS" + std::to_string(n), 1, std::numeric_limits<std::int32_t>::max());
    // cfitsio's defaults: the first axis in one tile, one pixel along the others.
    const std::int64_t tile =
        keys.integer("ZTILE" + std::to_string(n), 1, std::numeric_limits<std::int32_t>::max()).value_or(n == 1 ? length : 1);
    lengths.push_back(length);
    tile_sides.push_back(tile);
    pixels *= u128(length);
    tiles *= u128((length - 1) / tile + 1);
    tile_pixels *= u128(tile);
    if (tile_pixels > max_tile_pixels)
      keys.fail("tiles of " + std::to_string(std::uint64_t(tile_pixels)) + "+ pixels (ZTILEn) exceed the " +
                std::to_string(max_tile_pixels) + " a tile may hold");
  }
  if (tiles != u128(naxis2))
    keys.fail("the image (ZNAXISn / ZTILEn) has " + std::to_string(std::uint64_t(tiles)) + " tiles but the table has " +
              std::to_string(naxis2) + " rows (NAXIS2)");
  // Read as float or 64-bit codes: 8 bytes per pixel at most.
  const u128 image_bytes = pixels * 8;
  if (image_bytes > u128(limits.max_image_bytes))
    keys.fail("the compressed image declares " + std::to_string(double(pixels)) + " pixels (ZNAXISn), more than the " +
              "memory budget of " + std::to_string(limits.max_image_bytes) + " bytes allows");

  const bool rice = *algorithm == "RICE_1" || *algorithm == "RICE_ONE";
  int rice_block = 32, rice_bytepix = 4;
  if (rice) {
    // cfitsio's own reading of the two parameters, swap of reversed values included.
    std::int64_t block = keys.required_integer("ZVAL1", std::numeric_limits<std::int32_t>::min(), std::numeric_limits<std::int32_t>::max());
    const bool old_format = keys.text("ZNAME2").value_or("") == "NOISEBIT";
    std::int64_t bytepix = old_format ? 4 : keys.integer("ZVAL2", std::numeric_limits<std::int32_t>::min(), std::numeric_limits<std::int32_t>::max()).value_or(4);
    if (block < 16 && bytepix > 8) std::swap(block, bytepix);
    if (block < 1 || block > 65536) keys.fail("RICE block size ZVAL1 = " + std::to_string(block) + " is not in 1..65536");
    if (bytepix != 1 && bytepix != 2 && bytepix != 4 && bytepix != 8)
      keys.fail("RICE bytes per pixel ZVAL2 = " + std::to_string(bytepix) + " is not 1, 2, 4 or 8");
    rice_block = int(block), rice_bytepix = int(bytepix);
  } else if (*algorithm == "HCOMPRESS_1") {
    if (!keys.real("ZVAL1")) keys.fail("HCOMPRESS_1 needs its scale ZVAL1");
    keys.integer("ZVAL2", std::numeric_limits<std::int32_t>::min(), std::numeric_limits<std::int32_t>::max());
  }

  const int compressed = t.column("COMPRESSED_DATA");
  if (compressed < 0) keys.fail("tile-compressed image without a COMPRESSED_DATA column");
  // Every descriptor must stay inside the heap.
  for (std::size_t c = 0; c < t.columns.size(); ++c) {
    const ColumnForm& f = t.columns[c];
    if (f.type != 'P' && f.type != 'Q') continue;
    const std::uint64_t element = f.element == 'X' ? 1 : element_bytes(f.element);
    for (std::uint64_t row = 0; row < t.rows; ++row) {
      const auto [count, offset] = t.descriptor(int(c), row);
      const u128 end = u128(offset) + u128(count) * element;
      if (end > u128(t.heap_size))
        keys.fail("column " + printable(t.names[c]) + ", tile " + std::to_string(row + 1) + ": its data (" +
                  std::to_string(count) + " elements at heap offset " + std::to_string(offset) +
                  ") runs past the heap of " + std::to_string(t.heap_size) + " bytes");
    }
  }
  const int uncompressed = t.column("UNCOMPRESSED_DATA");
  if (uncompressed >= 0 && (t.columns[std::size_t(uncompressed)].type == 'P' || t.columns[std::size_t(uncompressed)].type == 'Q'))
    for (std::uint64_t row = 0; row < t.rows; ++row)
      if (t.descriptor(uncompressed, row).first > std::uint64_t(tile_pixels))
        keys.fail("tile " + std::to_string(row + 1) + ": UNCOMPRESSED_DATA holds more values than a tile has pixels");

  const ColumnForm& data_form = t.columns[std::size_t(compressed)];
  if (data_form.type != 'P' && data_form.type != 'Q') keys.fail("COMPRESSED_DATA is not a variable-length array column");
  const std::uint64_t element = data_form.element == 'X' ? 1 : element_bytes(data_form.element);
  const bool gzip = *algorithm == "GZIP_1" || *algorithm == "GZIP_2";
  const int gzip_column = t.column("GZIP_COMPRESSED_DATA");
  std::vector<unsigned char> tile;
  auto load = [&](int col, std::uint64_t row, std::uint64_t elem_bytes) {
    const auto [count, offset] = t.descriptor(col, row);
    tile.resize(std::size_t(count * elem_bytes));
    if (!tile.empty()) bytes.read(t.heap_offset + offset, tile.size(), reinterpret_cast<char*>(tile.data()));
  };
  const std::uint64_t tile_bound = std::uint64_t(tile_pixels) * 8;
  // Pixels of tile `row` (axis 1 fastest), cut at the image's edges as cfitsio cuts them.
  auto tile_length = [&](std::uint64_t row) {
    std::uint64_t n = 1, rest = row;
    for (std::size_t a = 0; a < lengths.size(); ++a) {
      const std::uint64_t count = std::uint64_t((lengths[a] - 1) / tile_sides[a] + 1);
      const std::uint64_t index = rest % count;
      rest /= count;
      n *= std::uint64_t(std::min<std::int64_t>(tile_sides[a], lengths[a] - std::int64_t(index) * tile_sides[a]));
    }
    return n;
  };
  // A gzip tile must inflate to 1, 2, 4 or 8 bytes per pixel of its tile: cfitsio 4.2 takes any
  // other size as an error and returns without freeing the tile's compressed bytes.
  auto gunzip_tile = [&](const std::string& which, std::uint64_t row) {
    std::string why;
    std::uint64_t produced = 0;
    if (!bounded_gunzip(tile.data(), tile.size(), tile_bound, why, produced)) keys.fail(which + why);
    const std::uint64_t n = tile_length(row);
    if (produced != n && produced != 2 * n && produced != 4 * n && produced != 8 * n)
      keys.fail(which + "inflates to " + std::to_string(produced) + " bytes, not 1, 2, 4 or 8 per pixel of its " +
                std::to_string(n) + " pixels");
  };
  for (std::uint64_t row = 0; row < t.rows; ++row) {
    const std::string which = "tile " + std::to_string(row + 1) + " of " + std::to_string(t.rows);
    if (rice || gzip || *algorithm == "HCOMPRESS_1" || *algorithm == "PLIO_1") {
      load(compressed, row, element);
      if (tile.empty()) {
      } else if (rice) {
        const std::string fault = rice_stream_fault(tile.data(), tile.size(), tile_length(row), rice_block, rice_bytepix);
        if (!fault.empty()) keys.fail(which + ": " + fault);
      } else if (gzip) {
        gunzip_tile(which + ": gzip data: ", row);
      } else if (*algorithm == "HCOMPRESS_1") {
        // The stream starts with magic DD 99 and the tile's two sides; cfitsio decodes that
        // many pixels into a buffer of one tile.
        if (tile.size() < 14 || tile[0] != 0xDD || tile[1] != 0x99)
          keys.fail(which + ": HCOMPRESS data without its header");
        const std::uint64_t nx = big_endian(tile.data() + 2, 4), ny = big_endian(tile.data() + 6, 4);
        if (nx < 1 || ny < 1 || nx > 0x7fffffff || ny > 0x7fffffff || u128(nx) * ny > tile_pixels)
          keys.fail(which + ": HCOMPRESS header declares " + std::to_string(nx) + " x " + std::to_string(ny) +
                    " pixels for a tile of " + std::to_string(std::uint64_t(tile_pixels)));
      } else {
        // PLIO line list: 16-bit words; the header's length must lie within the data.
        if (element != 2) keys.fail(which + ": PLIO_1 data must be 16-bit words (TFORM ...PI)");
        const std::size_t words = tile.size() / 2;
        auto word = [&](std::size_t k) { return std::int16_t(big_endian(tile.data() + 2 * k, 2)); };
        if (words < 7) keys.fail(which + ": PLIO_1 line list shorter than its header");
        const std::int64_t length = word(2) > 0 ? word(2) : (std::int64_t(word(4)) << 15) + word(3);
        if (length < 7 || std::uint64_t(length) > words)
          keys.fail(which + ": PLIO_1 line list declares " + std::to_string(length) + " words but holds " +
                    std::to_string(words));
      }
    }
    if (gzip_column >= 0) {
      const ColumnForm& g = t.columns[std::size_t(gzip_column)];
      if (g.type != 'P' && g.type != 'Q') keys.fail("GZIP_COMPRESSED_DATA is not a variable-length array column");
      load(gzip_column, row, g.element == 'X' ? 1 : element_bytes(g.element));
      if (!tile.empty()) gunzip_tile(which + ": GZIP_COMPRESSED_DATA: ", row);
    }
  }
}

}  // namespace shiftstack::io::detail::guard
