// FITS structure checks before cfitsio sees a file (fits_guard.hpp says why). The rules follow
// the FITS standard 4.0 (sections 4 and 7) and the tiled-image convention (section 10); where
// cfitsio 4.2 reads a keyword with a default, the default is reproduced so both agree on sizes.
#include "io/fits_guard.hpp"

#include "io/fits_util.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <optional>
#include <limits>
#include <map>
#include <set>

#include "shiftstack/error.hpp"
#include "shiftstack/limits.hpp"

namespace shiftstack::io::detail {

GuardLimits default_guard_limits() { return {memory_budget_bytes()}; }

namespace {

constexpr std::size_t block_size = 2880;  // FITS logical record
constexpr std::size_t card_size = 80;
// cfitsio keeps a tile's pixel count in an int and allocates 8 bytes per pixel.
constexpr std::uint64_t max_tile_pixels = std::uint64_t(1) << 27;
constexpr int max_compressed_axes = 6;  // cfitsio's MAX_COMPRESS_DIM

using u128 = unsigned __int128;

// ---- bytes --------------------------------------------------------------------------------

class Bytes {
 public:
  virtual ~Bytes() = default;
  virtual std::uint64_t size() const = 0;
  virtual void read(std::uint64_t offset, std::size_t n, char* out) const = 0;  // within size()
};

class MemoryBytes final : public Bytes {
 public:
  MemoryBytes(const char* data, std::size_t size) : data_(data), size_(size) {}
  std::uint64_t size() const override { return size_; }
  void read(std::uint64_t offset, std::size_t n, char* out) const override { std::memcpy(out, data_ + offset, n); }

 private:
  const char* data_;
  std::size_t size_;
};

class FileBytes final : public Bytes {
 public:
  FileBytes(int fd, std::uint64_t size, std::string label) : fd_(fd), size_(size), label_(std::move(label)) {}
  std::uint64_t size() const override { return size_; }
  void read(std::uint64_t offset, std::size_t n, char* out) const override {
    while (n > 0) {
      const ssize_t got = ::pread(fd_, out, n, off_t(offset));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0)
        throw Error(label_ + ": read failed at byte " + std::to_string(offset) +
                    (got < 0 ? std::string(": ") + std::strerror(errno) : std::string(" (the file shrank)")));
      out += got;
      offset += std::uint64_t(got);
      n -= std::size_t(got);
    }
  }

 private:
  int fd_;
  std::uint64_t size_;
  std::string label_;
};

// Header text for messages: printable, and cut to a readable length.
std::string printable(const std::string& s) {
  constexpr std::size_t shown = 40;
  return s.size() > shown ? printable_text(s.substr(0, shown)) + "..." : printable_text(s);
}

// ---- headers ------------------------------------------------------------------------------

struct Card {
  std::string key;
  std::string value;  // strings unquoted; others trimmed, comment removed
  bool has_value = false, is_string = false, malformed = false;
  int number = 0;  // 1-based card number in the header
};

struct HduHeader {
  int index = 0;  // 0 = primary
  std::vector<Card> cards;
  std::uint64_t header_offset = 0, data_offset = 0;
  std::string where;  // "HDU 2 (EXTNAME 'VAR_0')", for messages

  const Card* find(const std::string& key) const {
    for (const Card& c : cards)
      if (c.key == key) return &c;
    return nullptr;
  }
};

// Keywords that decide sizes, layout or decompression: their values must be well formed and
// given once, since a reader that took a different copy would see a different file.
bool structural(const std::string& key) {
  static const std::set<std::string> exact = {"SIMPLE", "XTENSION", "BITPIX", "NAXIS",   "PCOUNT",   "GCOUNT",
                                              "GROUPS", "EXTNAME",  "THEAP",  "TFIELDS", "ZIMAGE",   "ZBITPIX",
                                              "ZNAXIS", "ZCMPTYPE", "ZQUANTIZ", "ZDITHER0", "ZBLANK", "BLANK",
                                              "BSCALE", "BZERO",    "ZSCALE", "ZZERO"};
  if (exact.count(key)) return true;
  for (const char* prefix : {"NAXIS", "TFORM", "TTYPE", "ZNAXIS", "ZTILE", "ZNAME", "ZVAL"}) {
    const std::size_t n = std::strlen(prefix);
    if (key.size() > n && key.compare(0, n, prefix) == 0 &&
        std::all_of(key.begin() + std::ptrdiff_t(n), key.end(), [](char c) { return c >= '0' && c <= '9'; }))
      return true;
  }
  return false;
}

bool commentary(const std::string& key) { return key.empty() || key == "COMMENT" || key == "HISTORY"; }

Card parse_card(const char* raw, int number) {
  Card card;
  card.number = number;
  std::string key(raw, 8);
  while (!key.empty() && key.back() == ' ') key.pop_back();
  card.key = key;
  if (raw[8] != '=' || raw[9] != ' ' || commentary(key)) return card;
  card.has_value = true;
  const std::string field(raw + 10, card_size - 10);
  std::size_t i = field.find_first_not_of(' ');
  if (i == std::string::npos) return card;  // undefined value
  if (field[i] == '\'') {
    card.is_string = true;
    std::string text;
    bool closed = false;
    for (std::size_t k = i + 1; k < field.size(); ++k) {
      if (field[k] == '\'') {
        if (k + 1 < field.size() && field[k + 1] == '\'') {
          text += '\'';
          ++k;
          continue;
        }
        closed = true;
        break;
      }
      text += field[k];
    }
    card.malformed = !closed;
    while (!text.empty() && text.back() == ' ') text.pop_back();
    card.value = text;
    return card;
  }
  std::size_t end = field.find('/', i);
  std::string text = field.substr(i, end == std::string::npos ? std::string::npos : end - i);
  while (!text.empty() && text.back() == ' ') text.pop_back();
  card.value = text;
  return card;
}

class HeaderReader {
 public:
  HeaderReader(const Bytes& bytes, std::string label) : bytes_(bytes), label_(std::move(label)) {}

  // Reads the header at `offset`; throws when it has no END card before the end of the file.
  HduHeader read(std::uint64_t offset, int index) const {
    HduHeader h;
    h.index = index;
    h.header_offset = offset;
    h.where = "HDU " + std::to_string(index);
    char block[block_size];
    int number = 0;
    std::map<std::string, std::string> seen;  // structural keyword -> its first value
    for (std::uint64_t at = offset;; at += block_size) {
      if (at + block_size > bytes_.size())
        throw Error(label_ + ": truncated inside the header of " + h.where + " (no END card before the end of the " +
                    "file at byte " + std::to_string(bytes_.size()) + ")");
      bytes_.read(at, block_size, block);
      for (std::size_t c = 0; c < block_size / card_size; ++c) {
        const char* raw = block + c * card_size;
        ++number;
        if (std::strncmp(raw, "END     ", 8) == 0) {
          h.data_offset = at + block_size;
          name(h);
          return h;
        }
        Card card = parse_card(raw, number);
        check_card(h, raw, card);
        if (structural(card.key) && card.has_value) {
          const auto [it, first] = seen.emplace(card.key, card.value);
          if (!first && it->second != card.value)
            throw Error(label_ + ": " + h.where + ": keyword " + card.key + " appears twice with different values (" +
                        printable(it->second) + ", then " + printable(card.value) + " at card " +
                        std::to_string(number) + "); the header is ambiguous");
        }
        h.cards.push_back(std::move(card));
      }
    }
  }

 private:
  void name(HduHeader& h) const {
    if (const Card* c = h.find("EXTNAME"); c && c->is_string) h.where += " (EXTNAME '" + printable(c->value) + "')";
  }

  void check_card(const HduHeader& h, const char* raw, const Card& card) const {
    // Keyword names are printable ASCII (FITS 4.1.2.1 asks for upper case, digits, '-' and '_';
    // older files use lower case too, which cfitsio accepts). Bytes beyond that are damage.
    for (int k = 0; k < 8; ++k) {
      const unsigned char c = static_cast<unsigned char>(raw[k]);
      if (c < 0x20 || c >= 0x7f)
        throw Error(label_ + ": " + h.where + ": header card " + std::to_string(card.number) + " has an invalid " +
                    "keyword name '" + printable(std::string(raw, 8)) + "'; the header is corrupt");
    }
    // The values that decide sizes and decompression must be clean printable ASCII (FITS 4.2);
    // other cards are left to the reader, which only looks at the keywords it needs.
    if (!card.has_value || !structural(card.key)) return;
    const std::string& v = card.value;
    const bool ascii = std::all_of(v.begin(), v.end(), [](char c) { return c >= 0x20 && c < 0x7f; });
    if (!ascii || card.malformed)
      throw Error(label_ + ": " + h.where + ": keyword " + card.key + " has a malformed value '" + printable(v) +
                  "' (card " + std::to_string(card.number) + "); the header is corrupt");
  }

  const Bytes& bytes_;
  std::string label_;
};

// ---- typed look-ups ---------------------------------------------------------------------

class Keys {
 public:
  Keys(const HduHeader& h, const std::string& label) : h_(h), prefix_(label + ": " + h.where + ": ") {}

  [[noreturn]] void fail(const std::string& what) const { throw Error(prefix_ + what); }

  std::optional<std::int64_t> integer(const std::string& key, std::int64_t lo, std::int64_t hi) const {
    const Card* c = h_.find(key);
    if (!c || !c->has_value || c->value.empty()) return std::nullopt;
    const std::string& v = c->value;
    std::size_t i = (v[0] == '+' || v[0] == '-') ? 1 : 0;
    bool digits = i < v.size();
    for (std::size_t k = i; k < v.size(); ++k) digits = digits && v[k] >= '0' && v[k] <= '9';
    if (c->is_string || !digits) fail("keyword " + key + " = " + printable(v) + " is not an integer");
    errno = 0;
    const long long n = std::strtoll(v.c_str(), nullptr, 10);
    if (errno == ERANGE || n < lo || n > hi)
      fail("keyword " + key + " = " + v + " is outside " + std::to_string(lo) + ".." + std::to_string(hi));
    return n;
  }
  std::int64_t required_integer(const std::string& key, std::int64_t lo, std::int64_t hi) const {
    const auto n = integer(key, lo, hi);
    if (!n) fail("required keyword " + key + " is missing");
    return *n;
  }
  std::optional<std::string> text(const std::string& key) const {
    const Card* c = h_.find(key);
    if (!c || !c->has_value) return std::nullopt;
    if (!c->is_string) fail("keyword " + key + " = " + printable(c->value) + " is not a string");
    return c->value;
  }
  std::optional<bool> logical(const std::string& key) const {
    const Card* c = h_.find(key);
    if (!c || !c->has_value) return std::nullopt;
    if (c->value == "T") return true;
    if (c->value == "F") return false;
    fail("keyword " + key + " = " + printable(c->value) + " is not T or F");
  }
  std::optional<double> real(const std::string& key) const {
    const Card* c = h_.find(key);
    if (!c || !c->has_value || c->value.empty()) return std::nullopt;
    std::string v = c->value;
    for (char& ch : v)
      if (ch == 'D' || ch == 'd') ch = 'E';
    char* end = nullptr;
    const double x = std::strtod(v.c_str(), &end);
    if (c->is_string || end == v.c_str() || *end != 0 || !std::isfinite(x))
      fail("keyword " + key + " = " + printable(c->value) + " is not a finite number");
    return x;
  }

 private:
  const HduHeader& h_;
  std::string prefix_;
};

std::uint64_t checked_product(const Keys& keys, u128 value, const std::string& what) {
  if (value > u128(std::numeric_limits<std::int64_t>::max())) keys.fail(what + " overflows 64 bits");
  return std::uint64_t(value);
}

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

// Inflates a gzip member fully, producing at most `bound` bytes; false with `why` otherwise.
bool bounded_gunzip(const unsigned char* in, std::size_t n, std::uint64_t bound, std::string& why) {
  z_stream z{};
  if (inflateInit2(&z, 15 + 16) != Z_OK) {
    why = "zlib could not start";
    return false;
  }
  std::vector<unsigned char> out(std::size_t(std::min<std::uint64_t>(bound + 1, 1 << 16)));
  z.next_in = const_cast<unsigned char*>(in);
  z.avail_in = uInt(n);
  std::uint64_t produced = 0;
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
  for (int n = 1; n <= axes; ++n) {
    const std::int64_t length = keys.required_integer("ZNAXIS" + std::to_string(n), 1, std::numeric_limits<std::int32_t>::max());
    // cfitsio's defaults: the first axis in one tile, one pixel along the others.
    const std::int64_t tile =
        keys.integer("ZTILE" + std::to_string(n), 1, std::numeric_limits<std::int32_t>::max()).value_or(n == 1 ? length : 1);
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

  if (*algorithm == "RICE_1" || *algorithm == "RICE_ONE") {
    // cfitsio's own reading of the two parameters, swap of reversed values included.
    std::int64_t block = keys.required_integer("ZVAL1", std::numeric_limits<std::int32_t>::min(), std::numeric_limits<std::int32_t>::max());
    const bool old_format = keys.text("ZNAME2").value_or("") == "NOISEBIT";
    std::int64_t bytepix = old_format ? 4 : keys.integer("ZVAL2", std::numeric_limits<std::int32_t>::min(), std::numeric_limits<std::int32_t>::max()).value_or(4);
    if (block < 16 && bytepix > 8) std::swap(block, bytepix);
    if (block < 1 || block > 65536) keys.fail("RICE block size ZVAL1 = " + std::to_string(block) + " is not in 1..65536");
    if (bytepix != 1 && bytepix != 2 && bytepix != 4 && bytepix != 8)
      keys.fail("RICE bytes per pixel ZVAL2 = " + std::to_string(bytepix) + " is not 1, 2, 4 or 8");
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
  for (std::uint64_t row = 0; row < t.rows; ++row) {
    const std::string which = "tile " + std::to_string(row + 1) + " of " + std::to_string(t.rows);
    if (gzip || *algorithm == "HCOMPRESS_1" || *algorithm == "PLIO_1") {
      load(compressed, row, element);
      std::string why;
      if (tile.empty()) {
      } else if (gzip) {
        if (!bounded_gunzip(tile.data(), tile.size(), tile_bound, why)) keys.fail(which + ": gzip data: " + why);
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
      std::string why;
      if (!tile.empty() && !bounded_gunzip(tile.data(), tile.size(), tile_bound, why))
        keys.fail(which + ": GZIP_COMPRESSED_DATA: " + why);
    }
  }
}

// ---- the walk -------------------------------------------------------------------------------

void check_structure(const Bytes& bytes, const std::string& label, const GuardLimits& limits) {
  if (bytes.size() < block_size)
    throw Error(label + ": cannot open as FITS: not a FITS file (" + std::to_string(bytes.size()) + " bytes, less than one 2880-byte " +
                "header block)");
  char start[10];
  bytes.read(0, 10, start);
  if (std::strncmp(start, "SIMPLE  = ", 10) != 0)
    throw Error(label + ": cannot open as FITS: not a FITS file (it does not begin with SIMPLE =)");
  const HeaderReader reader(bytes, label);
  std::uint64_t offset = 0;
  for (int index = 0; offset < bytes.size(); ++index) {
    if (index > 0) {
      // Anything after the last HDU that is not an extension header is ignored, as cfitsio
      // does; an extension header cut short is not (cfitsio would silently see one HDU less).
      char first[8];
      const std::size_t n = std::size_t(std::min<std::uint64_t>(8, bytes.size() - offset));
      bytes.read(offset, n, first);
      if (n < 8 || std::strncmp(first, "XTENSION", 8) != 0) break;
    }
    const HduHeader h = reader.read(offset, index);
    const Keys keys(h, label);
    if (index == 0) {
      if (h.cards.empty() || h.cards[0].key != "SIMPLE" || !keys.logical("SIMPLE").value_or(false))
        keys.fail("the primary header does not start with SIMPLE = T");
    } else if (h.cards.empty() || h.cards[0].key != "XTENSION") {
      keys.fail("the extension header does not start with XTENSION");
    }
    const std::int64_t bitpix = keys.required_integer("BITPIX", -64, 64);
    if (bitpix != 8 && bitpix != 16 && bitpix != 32 && bitpix != 64 && bitpix != -32 && bitpix != -64)
      keys.fail("BITPIX = " + std::to_string(bitpix) + " is not 8, 16, 32, 64, -32 or -64");
    const int naxis = int(keys.required_integer("NAXIS", 0, 999));
    std::vector<std::uint64_t> axis(std::size_t(naxis) + 1, 0);
    for (int n = 1; n <= naxis; ++n)
      axis[std::size_t(n)] = std::uint64_t(keys.required_integer("NAXIS" + std::to_string(n), 0, std::numeric_limits<std::int64_t>::max()));
    const std::uint64_t pcount = std::uint64_t(keys.integer("PCOUNT", 0, std::numeric_limits<std::int64_t>::max()).value_or(0));
    const std::uint64_t gcount = std::uint64_t(keys.integer("GCOUNT", 0, std::numeric_limits<std::int64_t>::max()).value_or(1));
    u128 elements = 0;
    if (naxis > 0) {
      const bool groups = index == 0 && axis[1] == 0 && keys.logical("GROUPS").value_or(false);
      u128 product = 1;
      for (int n = groups ? 2 : 1; n <= naxis; ++n) {
        product *= axis[std::size_t(n)];
        if (product > u128(std::numeric_limits<std::int64_t>::max())) keys.fail("the declared axes overflow 64 bits");
      }
      if (index == 0 && !groups) {
        elements = product;
      } else {
        elements = u128(gcount) * (u128(pcount) + product);
      }
    }
    const std::uint64_t data_bytes = checked_product(keys, elements * u128(std::abs(bitpix) / 8), "the data size");
    const std::uint64_t available = bytes.size() - h.data_offset;
    if (data_bytes > available)
      keys.fail("declares " + std::to_string(data_bytes) + " bytes of data (BITPIX, NAXISn, PCOUNT) but only " +
                std::to_string(available) + " bytes follow its header: the file is truncated or corrupt");
    if (index > 0 && keys.text("XTENSION").value_or("") == "BINTABLE" && keys.logical("ZIMAGE").value_or(false)) {
      if (naxis != 2 || bitpix != 8) keys.fail("a tile-compressed image table must have BITPIX = 8 and NAXIS = 2");
      check_tile_compressed(bytes, keys, h, axis[1], axis[2], pcount, limits);
    }
    offset = h.data_offset + (data_bytes + block_size - 1) / block_size * block_size;
  }
}

// Magic numbers cfitsio would act on (it decompresses by content, not by name).
std::string compression_of(const unsigned char* p, std::size_t n) {
  if (n >= 2 && p[0] == 0x1f && p[1] == 0x8b) return "gzip";
  if (n >= 2 && p[0] == 0x1f && (p[1] == 0x9d || p[1] == 0x1e || p[1] == 0xa0)) return "Unix compress/pack/LZH";
  if (n >= 4 && p[0] == 'P' && p[1] == 'K' && p[2] == 3 && p[3] == 4) return "zip";
  if (n >= 3 && p[0] == 'B' && p[1] == 'Z' && p[2] == 'h') return "bzip2";
  return "";
}

std::unique_ptr<MemoryImage> gunzip_file(int fd, std::uint64_t size, const std::string& label, const GuardLimits& limits) {
  std::vector<unsigned char> in(std::size_t(std::min<std::uint64_t>(size, 1 << 20)));
  auto image = std::make_unique<MemoryImage>();
  z_stream z{};
  if (inflateInit2(&z, 15 + 16) != Z_OK) throw Error(label + ": zlib could not start");
  std::uint64_t consumed = 0;
  int rc = Z_OK;
  bool member_done = false;
  const std::size_t chunk = 1 << 20;
  try {
    for (;;) {
      if (z.avail_in == 0 && consumed < size) {
        const std::size_t want = std::size_t(std::min<std::uint64_t>(in.size(), size - consumed));
        FileBytes(fd, size, label).read(consumed, want, reinterpret_cast<char*>(in.data()));
        consumed += want;
        z.next_in = in.data();
        z.avail_in = uInt(want);
      }
      if (member_done) {
        if (z.avail_in == 0) break;  // end of the last member
        inflateReset(&z);            // concatenated gzip members (RFC 1952 allows them)
        member_done = false;
      }
      const std::size_t old = image->bytes.size();
      if (old + chunk > limits.max_image_bytes)
        throw Error(label + ": decompresses to more than the memory budget of " + std::to_string(limits.max_image_bytes) +
                    " bytes");
      image->bytes.resize(old + chunk);
      z.next_out = reinterpret_cast<unsigned char*>(image->bytes.data() + old);
      z.avail_out = uInt(chunk);
      rc = inflate(&z, Z_NO_FLUSH);
      image->bytes.resize(old + chunk - z.avail_out);
      if (rc == Z_STREAM_END) {
        member_done = true;
        continue;
      }
      if (rc == Z_BUF_ERROR && z.avail_in == 0 && consumed >= size)
        throw Error(label + ": the gzip stream is cut short (truncated download?)");
      if (rc != Z_OK && rc != Z_BUF_ERROR)
        throw Error(label + ": corrupt gzip data (zlib: " + (z.msg ? z.msg : "error") + ")");
    }
  } catch (...) {
    inflateEnd(&z);
    throw;
  }
  inflateEnd(&z);
  image->bytes.shrink_to_fit();
  image->pointer = image->bytes.data();
  image->size = image->bytes.size();
  return image;
}

class Descriptor {
 public:
  explicit Descriptor(int fd) : fd_(fd) {}
  ~Descriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

}  // namespace

void check_fits_bytes(const char* data, std::size_t size, const std::string& label, const GuardLimits& limits) {
  check_structure(MemoryBytes(data, size), label, limits);
}

std::unique_ptr<MemoryImage> guard_fits_file(const std::string& path, const GuardLimits& limits) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused below.
  const Descriptor fd(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));
  if (fd.get() < 0) throw Error(path + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) throw Error(path + ": cannot stat: " + std::strerror(errno));
  if (S_ISDIR(st.st_mode)) throw Error(path + ": is a directory, not a FITS file");
  if (!S_ISREG(st.st_mode))
    throw Error(path + ": is not a regular file (" +
                (S_ISFIFO(st.st_mode)  ? std::string("a FIFO")
                 : S_ISCHR(st.st_mode) ? std::string("a character device")
                 : S_ISBLK(st.st_mode) ? std::string("a block device")
                 : S_ISSOCK(st.st_mode) ? std::string("a socket")
                                        : std::string("not a plain file")) +
                "); the reader opens plain files only");
  const std::uint64_t size = std::uint64_t(st.st_size);
  unsigned char magic[4] = {0, 0, 0, 0};
  const std::size_t magic_bytes = std::size_t(std::min<std::uint64_t>(size, 4));
  FileBytes file(fd.get(), size, path);
  if (magic_bytes) file.read(0, magic_bytes, reinterpret_cast<char*>(magic));
  const std::string compression = compression_of(magic, magic_bytes);
  if (compression == "gzip") {
    auto image = gunzip_file(fd.get(), size, path, limits);
    check_structure(MemoryBytes(image->bytes.data(), image->bytes.size()), path + " (decompressed)", limits);
    return image;
  }
  if (!compression.empty())
    throw Error(path + ": is " + compression + "-compressed, which this reader does not open; decompress it first "
                "(gzip-compressed FITS and tile-compressed HDUs are read directly)");
  check_structure(file, path, limits);
  return nullptr;
}

}  // namespace shiftstack::io::detail
