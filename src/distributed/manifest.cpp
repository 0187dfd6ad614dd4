// The search-many manifest (YAML): defaults for every unit, then the units, listed one by one or
// one per match of a glob (`each`).
#include <glob.h>
#include <yaml-cpp/yaml.h>
#include <zlib.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "shiftstack/error.hpp"
#include "shiftstack/search_many.hpp"

namespace shiftstack::many {

namespace fs = std::filesystem;

namespace {

struct Defaults {
  std::string config;
  std::vector<std::string> overrides;
  std::string engine, encoding;
  double timeout = 0;
  bool fits = true, stamps = true;
};

std::string absolute_from(const std::string& base, const std::string& path) {
  if (path.empty() || fs::path(path).is_absolute()) return path;
  return (fs::path(base) / path).lexically_normal().string();
}

// An input as the pipeline takes it (@list files keep their '@').
std::string absolute_input(const std::string& base, const std::string& input) {
  if (input.empty() || input[0] != '@') return absolute_from(base, input);
  std::string list(1, '@');  // (append, not "@" + ...: GCC 12 warns falsely on that)
  list += absolute_from(base, input.substr(1));
  return list;
}

bool valid_name(const std::string& name) {
  if (name.empty() || name == "." || name == ".." || name == "records") return false;
  return std::all_of(name.begin(), name.end(), [](unsigned char c) {
    return std::isalnum(c) || c == '.' || c == '_' || c == '-';
  });
}

std::string sanitized(const std::string& text) {
  std::string out;
  for (unsigned char c : text) out += (std::isalnum(c) || c == '.' || c == '-') ? char(c) : '_';
  while (!out.empty() && out.front() == '_') out.erase(out.begin());
  while (!out.empty() && out.back() == '_') out.pop_back();
  return out;
}

std::string scalar(const YAML::Node& n, const std::string& where) {
  if (!n.IsScalar()) throw Error(where + ": expected a single value");
  return n.Scalar();
}

std::vector<std::string> strings(const YAML::Node& n, const std::string& where) {
  std::vector<std::string> out;
  if (n.IsScalar()) {
    out.push_back(n.Scalar());
  } else if (n.IsSequence()) {
    for (const auto& item : n) out.push_back(scalar(item, where));
  } else if (!n.IsNull()) {
    throw Error(where + ": expected a value or a list of values");
  }
  return out;
}

double seconds(const YAML::Node& n, const std::string& where) {
  try {
    const double v = n.as<double>();
    require(v >= 0 && std::isfinite(v), where + ": must be a number of seconds >= 0 (0: none)");
    return v;
  } catch (const YAML::Exception&) {
    throw Error(where + ": must be a number of seconds >= 0 (0: none)");
  }
}

bool boolean(const YAML::Node& n, const std::string& where) {
  try {
    return n.as<bool>();
  } catch (const YAML::Exception&) {
    throw Error(where + ": expected true or false");
  }
}

void check_keys(const YAML::Node& n, const std::set<std::string>& known, const std::string& where) {
  for (const auto& kv : n) {
    const std::string key = kv.first.Scalar();
    if (known.count(key)) continue;
    std::string list;
    for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
    throw Error(where + ": unknown key '" + key + "' (known: " + list + ")");
  }
}

// Reads the keys a unit entry and the top level share into `d`.
void read_settings(const YAML::Node& n, const std::string& base, const std::string& where, Defaults& d) {
  if (n["config"] && !n["config"].IsNull()) {
    d.config = absolute_from(base, scalar(n["config"], where + ".config"));
    require(fs::is_regular_file(d.config), where + ".config: " + d.config + " is not a file");
  }
  if (n["set"]) {
    for (const auto& o : strings(n["set"], where + ".set")) {
      require(o.find('=') != std::string::npos && o.front() != '=', where + ".set: '" + o + "' is not key=value");
      d.overrides.push_back(o);
    }
  }
  if (n["engine"]) d.engine = scalar(n["engine"], where + ".engine");
  if (n["encoding"]) {
    d.encoding = scalar(n["encoding"], where + ".encoding");
    require(d.encoding == "fp32" || d.encoding == "fp16" || d.encoding == "int8",
            where + ".encoding: fp32, fp16 or int8, got '" + d.encoding + "'");
  }
  if (n["timeout"]) d.timeout = seconds(n["timeout"], where + ".timeout");
  if (n["fits"]) d.fits = boolean(n["fits"], where + ".fits");
  if (n["stamps"]) d.stamps = boolean(n["stamps"], where + ".stamps");
}

Unit make_unit(const std::string& name, std::vector<std::string> inputs, const Defaults& d,
               const std::string& output_rel, const std::string& root) {
  Unit u;
  u.name = name;
  u.inputs = std::move(inputs);
  u.config = d.config;
  u.overrides = d.overrides;
  u.engine = d.engine;
  u.encoding = d.encoding;
  u.timeout = d.timeout;
  u.fits = d.fits;
  u.stamps = d.stamps;
  u.output_rel = fs::path(output_rel).lexically_normal().string();
  u.output_dir = (fs::path(root) / u.output_rel).lexically_normal().string();
  return u;
}

// The folder part of a glob pattern before its first wildcard.
std::string literal_prefix(const std::string& pattern) {
  const std::size_t wild = pattern.find_first_of("*?[");
  const std::string head = pattern.substr(0, wild);
  const std::size_t slash = head.rfind('/');
  return slash == std::string::npos ? std::string() : head.substr(0, slash);
}

std::vector<std::string> glob_matches(const std::string& pattern) {
  glob_t g{};
  const int rc = ::glob(pattern.c_str(), 0, nullptr, &g);
  std::vector<std::string> out;
  if (rc == 0)
    for (std::size_t i = 0; i < g.gl_pathc; ++i) out.push_back(g.gl_pathv[i]);
  globfree(&g);
  std::sort(out.begin(), out.end());
  return out;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  require(bool(in), path + ": cannot read");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

Manifest parse_manifest(const std::string& yaml, const std::string& base_dir, const std::string& source,
                        const std::string& output_root) {
  YAML::Node top;
  try {
    top = YAML::Load(yaml);
  } catch (const YAML::Exception& e) {
    throw Error(source + ": " + e.what());
  }
  require(top.IsMap(), source + ": expected a mapping with a `units` list");
  check_keys(top, {"output", "config", "set", "engine", "encoding", "timeout", "fits", "stamps", "units"}, source);
  Manifest m;
  m.path = source;
  const std::string base = fs::absolute(base_dir.empty() ? "." : base_dir).lexically_normal().string();
  std::string root = output_root;
  if (root.empty()) {
    require(top["output"] && top["output"].IsScalar(), source + ": `output` (the output root folder) is missing");
    root = absolute_from(base, top["output"].Scalar());
  }
  m.output_root = fs::absolute(root).lexically_normal().string();
  Defaults defaults;
  read_settings(top, base, source, defaults);

  require(top["units"] && top["units"].IsSequence() && top["units"].size() > 0, source + ": `units` must be a non-empty list");
  std::set<std::string> names, outputs;
  auto add = [&](Unit u, const std::string& where) {
    require(valid_name(u.name), where + ": unit name '" + u.name + "' must be letters, digits, '.', '_' or '-' (not 'records')");
    require(names.insert(u.name).second, where + ": unit name '" + u.name + "' is used twice");
    require(outputs.insert(u.output_dir).second, where + ": output folder " + u.output_dir + " is used twice");
    require(u.output_dir.rfind(m.output_root, 0) == 0, where + ": output folder " + u.output_dir + " is outside the output root");
    m.units.push_back(std::move(u));
  };
  std::size_t index = 0;
  for (const auto& entry : top["units"]) {
    const std::string where = source + ": units[" + std::to_string(index++) + "]";
    require(entry.IsMap(), where + ": expected a mapping (inputs or each, and optional name, output, config, set, ...)");
    check_keys(entry, {"name", "inputs", "each", "suffix", "output", "config", "set", "engine", "encoding", "timeout", "fits", "stamps"}, where);
    Defaults d = defaults;  // a unit's own `set` list is applied after the top-level one
    read_settings(entry, base, where, d);
    const bool each = bool(entry["each"]);
    require(each != bool(entry["inputs"]), where + ": give either `inputs` or `each`");
    const std::string suffix = entry["suffix"] ? scalar(entry["suffix"], where + ".suffix") : "";
    if (each) {
      require(!entry["name"] && !entry["output"], where + ": `each` names its units itself (use suffix)");
      const std::string pattern = absolute_from(base, scalar(entry["each"], where + ".each"));
      const std::vector<std::string> matches = glob_matches(pattern);
      require(!matches.empty(), where + ": `each` pattern " + pattern + " matches nothing");
      const std::string prefix = literal_prefix(pattern);
      for (const auto& match : matches) {
        std::string rel = prefix.empty() ? match : fs::path(match).lexically_relative(prefix).string();
        const std::string name = sanitized(rel) + suffix;
        add(make_unit(name, {match}, d, name, m.output_root), where + " (" + match + ")");
      }
      continue;
    }
    std::vector<std::string> inputs;
    for (const auto& in : strings(entry["inputs"], where + ".inputs")) inputs.push_back(absolute_input(base, in));
    require(!inputs.empty(), where + ": `inputs` is empty");
    std::string name;
    if (entry["name"]) {
      name = scalar(entry["name"], where + ".name");
    } else {
      name = sanitized(fs::path(inputs.front()).stem().string()) + suffix;
    }
    const std::string output = entry["output"] ? scalar(entry["output"], where + ".output") : name;
    require(!fs::path(output).is_absolute(), where + ".output: must be relative to the output root");
    add(make_unit(name, std::move(inputs), d, output, m.output_root), where);
  }
  return m;
}

Manifest load_manifest(const std::string& path, const std::string& output_root) {
  require(fs::is_regular_file(path), "manifest " + path + ": not a file");
  const std::string base = fs::absolute(path).parent_path().string();
  return parse_manifest(read_file(path), base, path, output_root);
}

std::string fingerprint(const Unit& u) {
  nlohmann::json j = {{"name", u.name},         {"inputs", u.inputs},     {"overrides", u.overrides},
                      {"engine", u.engine},     {"encoding", u.encoding}, {"output", u.output_rel},
                      {"fits", u.fits},         {"stamps", u.stamps}};
  j["config"] = u.config.empty() ? std::string() : read_file(u.config);
  const std::string text = j.dump();
  const uLong crc = crc32(crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(text.data()), uInt(text.size()));
  char hex[16];
  std::snprintf(hex, sizeof hex, "%08lx", static_cast<unsigned long>(crc));
  return hex;
}

std::string file_crc32(const std::string& path, std::uint64_t* bytes) {
  std::ifstream in(path, std::ios::binary);
  require(bool(in), path + ": cannot read");
  uLong crc = crc32(0L, Z_NULL, 0);
  std::uint64_t total = 0;
  std::vector<char> buffer(1 << 20);
  while (in) {
    in.read(buffer.data(), std::streamsize(buffer.size()));
    const std::streamsize n = in.gcount();
    if (n <= 0) break;
    crc = crc32(crc, reinterpret_cast<const Bytef*>(buffer.data()), uInt(n));
    total += std::uint64_t(n);
  }
  require(!in.bad(), path + ": read failed");
  if (bytes) *bytes = total;
  char hex[16];
  std::snprintf(hex, sizeof hex, "%08lx", static_cast<unsigned long>(crc));
  return hex;
}

}  // namespace shiftstack::many
