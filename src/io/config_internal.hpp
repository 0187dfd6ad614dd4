// Typed access to YAML configuration values, shared by the configuration's translation units.
// Every getter names the key in its error and never wraps or truncates a value: integers are
// range-checked in 64 bits before they are narrowed.
#pragma once
#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "shiftstack/io/config.hpp"

namespace shiftstack::io::detail {

std::string scalar_text(const YAML::Node& n, const std::string& key);
double get_double(const YAML::Node& n, const std::string& key);
// An integer in [lo, hi]; `0x...` accepted only where `hex` is set.
std::int64_t get_int(const YAML::Node& n, const std::string& key, std::int64_t lo, std::int64_t hi, bool hex = false);
std::uint64_t get_unsigned(const YAML::Node& n, const std::string& key);
bool get_bool(const YAML::Node& n, const std::string& key);
std::string get_string(const YAML::Node& n, const std::string& key);
std::string get_choice(const YAML::Node& n, const std::string& key, const std::vector<std::string>& choices);
std::vector<std::string> get_strings(const YAML::Node& n, const std::string& key);
std::vector<double> get_numbers(const YAML::Node& n, const std::string& key, std::size_t count);
// A whole number given as any YAML number (e.g. the step counts inside a list), in [lo, hi].
std::int64_t get_count(double value, const std::string& key, std::int64_t lo, std::int64_t hi);
bool is_null(const YAML::Node& n);

// The YAML value as JSON (scalars typed the way YAML would read them).
nlohmann::json to_json(const YAML::Node& n);

// Throws Error naming the first key that a mapping (at any depth) holds twice, with lines.
void check_duplicate_keys(const YAML::Node& n, const std::string& source, const std::string& path = "");

// generator_config (config_kbmod.cpp).
VelocityGenerator parse_generator(const YAML::Node& n);

// Edit distance, for "did you mean" suggestions.

}  // namespace shiftstack::io::detail
