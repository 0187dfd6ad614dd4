// Typed, range-checked access to YAML values (config_internal.hpp).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>

#include "io/config_internal.hpp"
#include "shiftstack/error.hpp"

namespace shiftstack::io::detail {

std::string scalar_text(const YAML::Node& n, const std::string& key) {
  if (!n || !n.IsScalar()) throw Error("config key " + key + ": expected a single value");
  return n.Scalar();
}

bool is_null(const YAML::Node& n) { return !n || n.IsNull(); }

double get_double(const YAML::Node& n, const std::string& key) {
  const std::string text = scalar_text(n, key);
  try {
    std::size_t used = 0;
    const double v = std::stod(text, &used);
    if (used == text.size() && std::isfinite(v)) return v;
  } catch (const std::exception&) {
  }
  throw Error("config key " + key + ": expected a finite number, got '" + text + "'");
}

std::int64_t get_int(const YAML::Node& n, const std::string& key, std::int64_t lo, std::int64_t hi, bool hex) {
  const std::string text = scalar_text(n, key);
  const auto range = [&] {
    return "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  };
  long long v = 0;
  try {
    std::size_t used = 0;
    v = std::stoll(text, &used, hex ? 0 : 10);
    if (used != text.size()) throw std::invalid_argument(text);
  } catch (const std::out_of_range&) {
    throw Error("config key " + key + ": " + text + " is out of range " + range());
  } catch (const std::exception&) {
    throw Error("config key " + key + ": expected an integer, got '" + text + "'");
  }
  if (v < lo || v > hi) throw Error("config key " + key + ": " + text + " is out of range " + range());
  return v;
}

std::uint64_t get_unsigned(const YAML::Node& n, const std::string& key) {
  const std::string text = scalar_text(n, key);
  try {
    std::size_t used = 0;
    if (!text.empty() && text[0] != '-') {
      const unsigned long long v = std::stoull(text, &used, 0);  // base 0: 0x... is hexadecimal
      if (used == text.size()) return v;
    }
  } catch (const std::out_of_range&) {
    throw Error("config key " + key + ": " + text + " does not fit in 64 bits");
  } catch (const std::exception&) {
  }
  throw Error("config key " + key + ": expected a non-negative integer (0x... allowed), got '" + text + "'");
}

bool get_bool(const YAML::Node& n, const std::string& key) {
  const std::string text = scalar_text(n, key);
  if (text == "true" || text == "True" || text == "TRUE" || text == "yes") return true;
  if (text == "false" || text == "False" || text == "FALSE" || text == "no") return false;
  throw Error("config key " + key + ": expected true or false, got '" + text + "'");
}

std::string get_string(const YAML::Node& n, const std::string& key) { return scalar_text(n, key); }

std::string get_choice(const YAML::Node& n, const std::string& key, const std::vector<std::string>& choices) {
  const std::string v = get_string(n, key);
  if (std::find(choices.begin(), choices.end(), v) != choices.end()) return v;
  std::string list;
  for (const auto& c : choices) list += (list.empty() ? "" : ", ") + c;
  throw Error("config key " + key + ": '" + v + "' is not one of " + list);
}

std::vector<std::string> get_strings(const YAML::Node& n, const std::string& key) {
  if (!n || !n.IsSequence()) throw Error("config key " + key + ": expected a list, e.g. [A, B]");
  std::vector<std::string> out;
  for (const auto& item : n) out.push_back(scalar_text(item, key));
  return out;
}

std::vector<double> get_numbers(const YAML::Node& n, const std::string& key, std::size_t count) {
  if (!n || !n.IsSequence() || n.size() != count)
    throw Error("config key " + key + ": expected a list of " + std::to_string(count) + " numbers");
  std::vector<double> out;
  for (const auto& item : n) out.push_back(get_double(item, key));
  return out;
}

std::int64_t get_count(double value, const std::string& key, std::int64_t lo, std::int64_t hi) {
  const auto range = "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  if (value != std::floor(value)) throw Error("config key " + key + ": a step count must be a whole number, got " + std::to_string(value));
  // Compared as doubles first so that 1e10 is reported, not converted.
  if (!(value >= double(lo) && value <= double(hi))) {
    char text[40];
    std::snprintf(text, sizeof text, "%.17g", value);
    throw Error("config key " + key + ": " + text + " is out of range " + range);
  }
  return std::int64_t(value);
}

nlohmann::json to_json(const YAML::Node& n) {
  if (!n || n.IsNull()) return nullptr;
  if (n.IsSequence()) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& item : n) out.push_back(to_json(item));
    return out;
  }
  if (n.IsMap()) {
    nlohmann::json out = nlohmann::json::object();
    for (const auto& kv : n) out[kv.first.Scalar()] = to_json(kv.second);
    return out;
  }
  const std::string text = n.Scalar();
  // Quoted scalars are strings whatever they look like.
  if (n.Tag() == "!") return text;
  if (text == "true" || text == "True" || text == "TRUE") return true;
  if (text == "false" || text == "False" || text == "FALSE") return false;
  if (text == "~" || text == "null" || text == "Null" || text == "NULL") return nullptr;
  try {
    std::size_t used = 0;
    const long long i = std::stoll(text, &used, 10);
    if (used == text.size()) return i;
  } catch (const std::exception&) {
  }
  try {
    std::size_t used = 0;
    const double d = std::stod(text, &used);
    if (used == text.size()) return d;
  } catch (const std::exception&) {
  }
  return text;
}

void check_duplicate_keys(const YAML::Node& n, const std::string& source, const std::string& path) {
  if (!n) return;
  if (n.IsSequence()) {
    for (const auto& item : n) check_duplicate_keys(item, source, path);
    return;
  }
  if (!n.IsMap()) return;
  std::map<std::string, int> first_line;
  for (const auto& kv : n) {
    const std::string key = kv.first.IsScalar() ? kv.first.Scalar() : std::string("(complex key)");
    const int line = kv.first.Mark().line + 1;
    const auto [it, inserted] = first_line.emplace(key, line);
    if (!inserted)
      throw Error(source + " line " + std::to_string(line) + ": duplicate key '" + path + key + "' (first given at line " +
                  std::to_string(it->second) + "); each key may appear once");
    check_duplicate_keys(kv.second, source, path + key + ".");
  }
}

}  // namespace shiftstack::io::detail
