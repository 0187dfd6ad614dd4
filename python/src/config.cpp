// shiftstack.Config: the search configuration with KBMOD's key names, from YAML or a dict and back
// to a dict. Every value goes through the library's own parser (src/io/config.cpp), so Python and
// the command line accept exactly the same keys, values and errors.
#include <cmath>
#include <fstream>
#include <sstream>

#include "bindings.hpp"
#include "shiftstack/io/config.hpp"

namespace shiftstack::python {

py::object to_python(const nlohmann::json& value) {
  return py::module_::import("json").attr("loads")(value.dump());
}

nlohmann::json from_python(const py::handle& value) {
  if (value.is_none()) return nullptr;
  if (py::isinstance<py::bool_>(value)) return value.cast<bool>();
  if (py::isinstance<py::int_>(value)) return value.cast<std::int64_t>();
  if (py::isinstance<py::float_>(value)) {
    const double v = value.cast<double>();
    // 41.0 means 41: integer keys (vx_steps, num_obs, ...) refuse "41.0", number keys take "41".
    if (std::isfinite(v) && v == std::floor(v) && std::abs(v) < 9.0e15) return std::int64_t(v);
    return v;
  }
  if (py::isinstance<py::str>(value)) return value.cast<std::string>();
  if (py::isinstance<py::dict>(value)) {
    nlohmann::json out = nlohmann::json::object();
    for (const auto& [k, v] : value.cast<py::dict>()) out[py::str(k).cast<std::string>()] = from_python(v);
    return out;
  }
  if (py::hasattr(value, "item") && py::hasattr(value, "dtype") && py::len(value.attr("shape")) == 0)
    return from_python(value.attr("item")());  // a numpy scalar
  if (py::hasattr(value, "tolist")) return from_python(value.attr("tolist")());  // a numpy array
  if (py::isinstance<py::sequence>(value)) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& item : value.cast<py::sequence>()) out.push_back(from_python(item));
    return out;
  }
  throw py::value_error("config value " + py::repr(value).cast<std::string>() +
                        ": expected None, a bool, number, string, list or dict");
}

namespace {

// A mapping plus keyword arguments -> the library's config. Keys with a dot
// ("generator_config.vx_steps") are applied last, as the command line's --set does.
io::SearchConfig config_from(const py::object& mapping, const py::dict& keys, const std::string& source) {
  nlohmann::json top = nlohmann::json::object();
  std::vector<std::string> overrides;
  auto take = [&](const py::dict& d) {
    for (const auto& [k, v] : d) {
      const std::string key = py::str(k).cast<std::string>();
      if (key.find('.') != std::string::npos)
        overrides.push_back(key + "=" + from_python(v).dump());
      else
        top[key] = from_python(v);
    }
  };
  if (!mapping.is_none()) {
    if (!py::isinstance<py::dict>(mapping))
      throw py::value_error(source + ": expected a dict of configuration keys, got " +
                            py::str(mapping.get_type().attr("__name__")).cast<std::string>());
    take(mapping.cast<py::dict>());
  }
  take(keys);
  // JSON is YAML: the library's YAML parser reads it as written.
  return io::parse_config(top.dump(), source, overrides);
}

nlohmann::json differences(const nlohmann::json& config, const nlohmann::json& defaults) {
  nlohmann::json out = nlohmann::json::object();
  for (auto it = config.begin(); it != config.end(); ++it)
    if (!defaults.contains(it.key()) || defaults[it.key()] != it.value()) out[it.key()] = it.value();
  return out;
}

}  // namespace

void bind_config(py::module_& m) {
  py::class_<io::SearchConfig>(m, "Config", R"(A search configuration, with KBMOD's key names.

Config(mapping=None, /, **keys): keys over the defaults, e.g.
    Config(lh_level=6.5, generator_config={"name": "VelocityGridSearch", "vx_steps": 41,
           "min_vx": -20, "max_vx": 20, "vy_steps": 41, "min_vy": -20, "max_vy": 20})
A key with a dot sets one entry of generator_config: Config(**{"generator_config.vx_steps": 41}).
Config.from_yaml(text) and Config.load(path) read YAML; to_dict() gives every key back.
Unknown keys, and KBMOD keys shiftstack does not support, raise shiftstack.Error naming them;
Config.default_text() is the commented list of every key (`shiftstack dump-config`).)")
      .def(py::init([](const py::object& mapping, const py::kwargs& keys) {
             return config_from(mapping, keys, "Config(...)");
           }),
           py::arg("mapping") = py::none())
      .def_static("from_yaml", [](const std::string& text) { return io::parse_config(text, "Config.from_yaml"); },
                  py::arg("text"), "A configuration from YAML text.")
      .def_static("load", [](const std::string& path) { return io::load_config(path); }, py::arg("path"),
                  "A configuration from a YAML file.")
      .def_static("default_text", [] { return io::default_config_text(); },
                  "The default configuration file, with a comment per key.")
      .def("to_dict", [](const io::SearchConfig& c) { return to_python(c.effective); },
           "Every key with the value in force.")
      .def("replace", [](const io::SearchConfig& c, const py::kwargs& keys) {
             return config_from(to_python(c.effective), keys, "Config.replace(...)");
           }, "A copy with some keys changed.")
      .def("__getitem__", [](const io::SearchConfig& c, const std::string& key) {
        if (!c.effective.contains(key)) throw py::key_error(key);
        return to_python(c.effective.at(key));
      })
      .def("__contains__", [](const io::SearchConfig& c, const std::string& key) { return c.effective.contains(key); })
      .def("keys", [](const io::SearchConfig& c) {
        std::vector<std::string> keys;
        for (auto it = c.effective.begin(); it != c.effective.end(); ++it) keys.push_back(it.key());
        return keys;
      })
      .def("__eq__", [](const io::SearchConfig& a, const io::SearchConfig& b) { return a.effective == b.effective; })
      .def_property_readonly("encoding", [](const io::SearchConfig& c) { return to_string(c.encoding); })
      .def_property_readonly("engine", [](const io::SearchConfig& c) { return c.engine; })
      .def_property_readonly("shifts", [](const io::SearchConfig& c) {
        return c.shift_mode == ShiftMode::integer ? "integer" : "fractional";
      })
      .def("__repr__", [](const io::SearchConfig& c) {
        static const nlohmann::json defaults = io::default_config().effective;
        return "shiftstack.Config(" + differences(c.effective, defaults).dump() + ")";
      })
      // Pickled as its dict (Dask and Parsl ship configs to workers this way).
      .def(py::pickle([](const io::SearchConfig& c) { return to_python(c.effective); },
                      [](const py::object& keys) { return config_from(keys, py::dict(), "pickled Config"); }));
}

}  // namespace shiftstack::python
