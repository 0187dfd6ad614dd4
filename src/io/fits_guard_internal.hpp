// Pieces of the FITS structure guard (fits_guard.hpp) shared by its two translation units:
// fits_guard.cpp walks headers and HDUs, fits_guard_tiles.cpp checks tile-compressed images.
#pragma once
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "io/fits_guard.hpp"
#include "io/fits_util.hpp"
#include "shiftstack/error.hpp"

namespace shiftstack::io::detail::guard {

using u128 = unsigned __int128;

// ---- bytes --------------------------------------------------------------------------------

class Bytes {
 public:
  virtual ~Bytes() = default;
  virtual std::uint64_t size() const = 0;
  virtual void read(std::uint64_t offset, std::size_t n, char* out) const = 0;  // within size()
};

// Header text for messages: printable, and cut to a readable length.
inline std::string printable(const std::string& s) {
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

// Checks a BINTABLE HDU with ZIMAGE = T: keywords, table, heap descriptors, bounded tiles.
void check_tile_compressed(const Bytes& bytes, const Keys& keys, const HduHeader& h, std::uint64_t naxis1,
                           std::uint64_t naxis2, std::uint64_t pcount, const GuardLimits& limits);

}  // namespace shiftstack::io::detail::guard
