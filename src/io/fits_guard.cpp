// FITS structure checks before cfitsio sees a file (fits_guard.hpp says why). The rules follow
// the FITS standard 4.0 (sections 4 and 7) and the tiled-image convention (section 10); where
// cfitsio 4.2 reads a keyword with a default, the default is reproduced so both agree on sizes.
#include "io/fits_guard.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <optional>
#include <map>
#include <set>

#include "io/fits_guard_internal.hpp"
#include "shiftstack/error.hpp"
#include "shiftstack/limits.hpp"

namespace shiftstack::io::detail {

GuardLimits default_guard_limits() { return {memory_budget_bytes()}; }

namespace {

constexpr std::size_t block_size = 2880;  // FITS logical record
constexpr std::size_t card_size = 80;
using namespace guard;

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
    // Control bytes (a NUL ends the card for every C reader) and string values without their
    // closing quote are damage in any card: wcslib 7.12's header parser overflows a buffer on
    // such a string (WCSNAME = 'abc, with no closing quote, aborts the process).
    for (int k = 0; k < int(card_size); ++k) {
      const unsigned char c = static_cast<unsigned char>(raw[k]);
      if (c < 0x20 || c == 0x7f) {
        char hex[8];
        std::snprintf(hex, sizeof hex, "0x%02X", c);
        throw Error(label_ + ": " + h.where + ": header card " + std::to_string(card.number) + " holds the control " +
                    "byte " + hex + " at column " + std::to_string(k + 1) + "; the header is corrupt");
      }
    }
    if (card.has_value && card.is_string && card.malformed)
      throw Error(label_ + ": " + h.where + ": keyword " + card.key + " has a string value without its closing " +
                  "quote (card " + std::to_string(card.number) + "); the header is corrupt");
    // The values that decide sizes and decompression must be clean printable ASCII (FITS 4.2);
    // other values may carry Latin-1 text, which the reader does not interpret.
    if (!card.has_value || !structural(card.key)) return;
    const std::string& v = card.value;
    const bool ascii = std::all_of(v.begin(), v.end(), [](char c) { return c >= 0x20 && c < 0x7f; });
    if (!ascii)
      throw Error(label_ + ": " + h.where + ": keyword " + card.key + " has a malformed value '" + printable(v) +
                  "' (card " + std::to_string(card.number) + "); the header is corrupt");
  }

  const Bytes& bytes_;
  std::string label_;
};

std::uint64_t checked_product(const Keys& keys, u128 value, const std::string& what) {
  if (value > u128(std::numeric_limits<std::int64_t>::max())) keys.fail(what + " overflows 64 bits");
  return std::uint64_t(value);
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
