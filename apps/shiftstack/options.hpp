// Option checks shared by `demo` and `bench`: each rejects a bad value with a message that names
// the option and the accepted values (CLI11 prefixes the option name).
#pragma once
#include <CLI/CLI.hpp>
#include <map>
#include <string>
#include <vector>

#include "shiftstack/encoding.hpp"
#include "shiftstack/motion.hpp"
#include "shiftstack/search.hpp"
#include "shiftstack/synth.hpp"

namespace shiftstack::cli {

inline std::vector<std::string> engine_names() {
  std::vector<std::string> names;
  for (const auto& info : engines()) names.push_back(info.name);
  return names;
}

inline std::vector<std::string> encoding_names() {
  std::vector<std::string> names;
  for (Encoding e : all_encodings()) names.push_back(to_string(e));
  return names;
}

// `extra` adds accepted words such as "all".
inline CLI::Validator one_of(std::vector<std::string> names, const std::vector<std::string>& extra = {}) {
  names.insert(names.end(), extra.begin(), extra.end());
  return CLI::IsMember(names);
}

inline const std::map<std::string, ShiftMode>& shift_modes() {
  static const std::map<std::string, ShiftMode> modes = {{"integer", ShiftMode::integer},
                                                         {"fractional", ShiftMode::fractional}};
  return modes;
}

inline std::vector<std::string> shift_mode_names() {
  std::vector<std::string> names;
  for (const auto& [name, mode] : shift_modes()) names.push_back(name);
  return names;
}

}  // namespace shiftstack::cli
