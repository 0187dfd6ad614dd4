// Searches from Python: search() runs the whole pipeline (the command line's `search`, on a Stack
// in memory) and returns the results table's columns; scan() runs one engine over the whole bank
// and returns its digest (and, if asked, the trials above a threshold), as `bench` times it.
// Both release the GIL, stop on Ctrl-C or a CancelToken, and reuse the Stack's maps and cubes.
#include <chrono>
#include <map>
#include <mutex>

#include "bindings.hpp"
#include "shiftstack/digest.hpp"
#include "shiftstack/io/config.hpp"
#include "shiftstack/run.hpp"
#include "shiftstack/search.hpp"
#ifdef SHIFTSTACK_HAVE_CUDA
#include "cuda/common/device_stack.hpp"
#endif

namespace shiftstack::python {

namespace {

py::array doubles(const std::vector<double>& v) { return py::array_t<double>(py::ssize_t(v.size()), v.data()); }

// ---- engines: one per name and thread at a time, kept for the next scan ----------------------

class EnginePool {
 public:
  std::unique_ptr<Engine> take(const std::string& name) {
    {
      std::lock_guard guard(lock_);
      auto& idle = idle_[name];
      if (!idle.empty()) {
        auto engine = std::move(idle.back());
        idle.pop_back();
        return engine;
      }
    }
    return make_engine(name);
  }
  void give(std::unique_ptr<Engine> engine) {
    std::lock_guard guard(lock_);
    idle_[engine->name()].push_back(std::move(engine));
  }
  void clear() {
    std::lock_guard guard(lock_);
    idle_.clear();
  }

 private:
  std::mutex lock_;
  std::map<std::string, std::vector<std::unique_ptr<Engine>>> idle_;
};

EnginePool& pool() {
  static EnginePool* p = new EnginePool;  // never destroyed: engines may outlive CUDA at exit
  return *p;
}

// ---- the bank ---------------------------------------------------------------------------------

std::vector<double> values_of(const py::object& v, const char* name) {
  try {
    return v.cast<std::vector<double>>();
  } catch (const py::cast_error&) {
    throw py::value_error(std::string(name) + ": expected a sequence of numbers");
  }
}

ShiftMode shift_mode(const std::string& shifts) {
  if (shifts == "integer") return ShiftMode::integer;
  if (shifts == "fractional") return ShiftMode::fractional;
  throw py::value_error("shifts: 'integer' or 'fractional', got '" + shifts + "'");
}

MotionBank make_bank(const py::object& epochs, const py::object& t_ref, const py::object& curve, const std::string& shifts) {
  MotionBank bank;
  bank.epochs = values_of(epochs, "epochs");
  if (bank.epochs.empty()) throw py::value_error("epochs: no exposures");
  bank.t_ref = t_ref.is_none() ? mid_span(bank.epochs) : t_ref.cast<double>();
  if (!curve.is_none()) {
    const auto c = py::array_t<double, py::array::c_style | py::array::forcecast>::ensure(curve);
    if (!c || c.ndim() != 2 || std::size_t(c.shape(0)) != bank.epochs.size() || c.shape(1) != 2)
      throw py::value_error("curve: expected shape (" + std::to_string(bank.epochs.size()) + ", 2)");
    for (py::ssize_t e = 0; e < c.shape(0); ++e) {
      bank.curve_x.push_back(c.at(e, 0));
      bank.curve_y.push_back(c.at(e, 1));
    }
  }
  bank.mode = shift_mode(shifts);
  return bank;
}

void check_bank(const MotionBank& bank) {
  try {
    validate(bank, bank.exposures());
  } catch (const Error& e) {
    throw py::value_error(e.what());
  }
}

// The bank the pipeline searches for this stack and config (run.cpp's motion-bank stage).
MotionBank bank_for(const io::SearchConfig& config, const Stack& stack) {
  const io::LoadedStack& l = stack.loaded();
  MotionBank bank;
  for (const auto& x : l.stack.exposures) bank.epochs.push_back(x.epoch);
  if (config.reference_time == "mid") {
    bank.t_ref = mid_span(bank.epochs);
  } else if (config.reference_time == "first") {
    bank.t_ref = *std::min_element(bank.epochs.begin(), bank.epochs.end());
  } else {
    bank.t_ref = std::stod(config.reference_time);
  }
  bank.mode = config.shift_mode;
  const bool curve = std::any_of(l.curve_x.begin(), l.curve_x.end(), [](double v) { return v != 0; }) ||
                     std::any_of(l.curve_y.begin(), l.curve_y.end(), [](double v) { return v != 0; });
  if (curve) {
    bank.curve_x = l.curve_x;
    bank.curve_y = l.curve_y;
  }
  std::optional<double> ecliptic;
  for (const auto& w : l.wcs)
    if (w) {
      try {
        ecliptic = io::ecliptic_angle(*w, 0.5 * l.stack.width(), 0.5 * l.stack.height());
      } catch (const Error&) {
      }
      break;
    }
  io::fill_velocities(config.generator, bank, ecliptic);
  validate(bank, bank.exposures());
  return bank;
}

// ---- results as numpy columns -----------------------------------------------------------------

py::object column_array(const io::Column& c, std::size_t rows) {
  std::vector<py::ssize_t> shape = {py::ssize_t(rows)};
  for (int n : c.shape) shape.push_back(n);
  using T = io::Column::Type;
  auto fill = [&](auto tag, const auto& values) {
    using V = decltype(tag);
    py::array_t<V> a(shape);
    V* out = a.mutable_data();
    for (std::size_t i = 0; i < values.size(); ++i) out[i] = V(values[i]);
    return py::object(a);
  };
  switch (c.type) {
    case T::int32: return fill(std::int32_t{}, c.integers);
    case T::int64: return fill(std::int64_t{}, c.integers);
    case T::float32: return fill(float{}, c.reals);
    case T::float64: return fill(double{}, c.reals);
    case T::boolean: return fill(bool{}, c.integers);
    case T::string: {
      py::list items;
      for (const auto& s : c.strings) items.append(s);
      return py::module_::import("numpy").attr("array")(items, py::arg("dtype") = "U").attr("reshape")(shape);
    }
  }
  throw Error("internal: unknown column type of " + c.name);
}

py::dict digest_dict(const Digest& d) { return to_python(nlohmann::json::parse(to_json(d))).cast<py::dict>(); }

py::dict results_dict(const io::RunOutput& run, const io::SearchConfig& config) {
  const io::ResultTable table = io::make_result_table(run, config);
  py::dict columns, units, descriptions;
  for (const io::Column& c : table.columns) {
    columns[py::str(c.name)] = column_array(c, table.rows);
    units[py::str(c.name)] = c.unit;
    descriptions[py::str(c.name)] = c.description;
  }
  py::list stages;
  for (const auto& s : run.stages) stages.append(py::make_tuple(s.name, s.seconds, s.detail));
  py::dict counts;
  counts["threshold_crossings"] = run.threshold_crossings;
  counts["below_lh_level_after_clipping"] = run.filter.below_likelihood;
  counts["too_few_observations"] = run.filter.too_few_observations;
  counts["after_filtering"] = run.filter.kept;
  counts["after_clustering"] = run.detections.size();
  py::dict out;
  out["columns"] = columns;
  out["units"] = units;
  out["descriptions"] = descriptions;
  out["meta"] = to_python(table.meta);
  out["digest"] = digest_dict(run.digest);
  out["engine"] = run.engine;
  out["encoding"] = to_string(run.encoding);
  out["likelihood_device"] = run.likelihood_device;
  out["stages"] = stages;
  out["counts"] = counts;
  out["warnings"] = run.warnings;
  out["config"] = to_python(config.effective);
  return out;
}

py::dict candidate_columns(const std::vector<Candidate>& list, std::vector<py::ssize_t> shape) {
  auto column = [&](auto tag, auto field) {
    using V = decltype(tag);
    py::array_t<V> a(shape);
    V* out = a.mutable_data();
    for (std::size_t i = 0; i < list.size(); ++i) out[i] = V(field(list[i]));
    return a;
  };
  py::dict d;
  d["x"] = column(std::int32_t{}, [](const Candidate& c) { return c.x; });
  d["y"] = column(std::int32_t{}, [](const Candidate& c) { return c.y; });
  d["velocity"] = column(std::int32_t{}, [](const Candidate& c) { return c.velocity; });
  d["vx"] = column(float{}, [](const Candidate& c) { return c.vx; });
  d["vy"] = column(float{}, [](const Candidate& c) { return c.vy; });
  d["A"] = column(float{}, [](const Candidate& c) { return c.A; });
  d["B"] = column(float{}, [](const Candidate& c) { return c.B; });
  d["Z"] = column(float{}, [](const Candidate& c) { return c.Z; });
  d["flux"] = column(float{}, [](const Candidate& c) { return c.flux; });
  d["obs_count"] = column(std::int32_t{}, [](const Candidate& c) { return c.obs_count; });
  return d;
}

// The run saw the Stack's maps and cube as given; say where they came from and, when this call
// computed them, how long that took (the run's own stages then took no time).
void describe_kept_stages(io::RunOutput& run, double maps_seconds, double cube_seconds) {
  for (io::StageTime& s : run.stages) {
    const bool maps = s.name == "likelihood", cube = s.name == "encode";
    if (!maps && !cube) continue;
    const double computed = maps ? maps_seconds : cube_seconds;
    const std::string kept = " (kept from an earlier run)";
    if (s.detail.size() >= kept.size() && s.detail.compare(s.detail.size() - kept.size(), kept.size(), kept) == 0)
      s.detail.resize(s.detail.size() - kept.size());
    if (computed > 0) s.seconds += computed;
    s.detail += computed >= 0 ? " (computed for this Stack, kept for its next searches)"
                             : " (kept from an earlier search of this Stack)";
  }
}

// The encoding and shift mode a run uses, for the Stack's cache.
Encoding run_encoding(const io::SearchConfig& config, const std::optional<std::string>& encoding) {
  return encoding ? parse_encoding(*encoding) : config.encoding;
}

}  // namespace

std::atomic<int>& calls_in_flight() {
  static std::atomic<int> count{0};
  return count;
}

void release_device_memory() noexcept {
  if (calls_in_flight().load() > 1) return;
  try {
    pool().clear();
#ifdef SHIFTSTACK_HAVE_CUDA
    cuda::release_device_cache();
#endif
  } catch (...) {
  }
}

void bind_search(py::module_& m) {
  py::class_<MotionBank>(m, "Bank", R"(A velocity bank (SPEC 2): epochs, reference time, velocities and a common curve.

Bank(epochs, vx, vy, *, t_ref=None, curve=None, shifts="integer"): the Cartesian grid vx x vy
(pixels/day). Bank.from_velocities(epochs, velocities, ...): an explicit (V, 2) list.
Bank.from_config(config, stack): the bank a search of that stack with that config uses.
t_ref defaults to the middle of the epoch span; curve is (exposures, 2) offsets in pixels.)")
      .def(py::init([](const py::object& epochs, const py::object& vx, const py::object& vy, const py::object& t_ref,
                       const py::object& curve, const std::string& shifts) {
             MotionBank bank = make_bank(epochs, t_ref, curve, shifts);
             bank.vx_axis = values_of(vx, "vx");
             bank.vy_axis = values_of(vy, "vy");
             check_bank(bank);
             return bank;
           }),
           py::arg("epochs"), py::arg("vx"), py::arg("vy"), py::kw_only(), py::arg("t_ref") = py::none(),
           py::arg("curve") = py::none(), py::arg("shifts") = "integer")
      .def_static("from_velocities", [](const py::object& epochs, const py::object& velocities, const py::object& t_ref,
                                         const py::object& curve, const std::string& shifts) {
             MotionBank bank = make_bank(epochs, t_ref, curve, shifts);
             const auto v = py::array_t<double, py::array::c_style | py::array::forcecast>::ensure(velocities);
             if (!v || v.ndim() != 2 || v.shape(1) != 2) throw py::value_error("velocities: expected shape (V, 2)");
             for (py::ssize_t i = 0; i < v.shape(0); ++i) bank.velocity_list.push_back({v.at(i, 0), v.at(i, 1)});
             check_bank(bank);
             return bank;
           }, py::arg("epochs"), py::arg("velocities"), py::kw_only(), py::arg("t_ref") = py::none(),
           py::arg("curve") = py::none(), py::arg("shifts") = "integer")
      .def_static("from_config", [](const io::SearchConfig& config, const Stack& stack) { return bank_for(config, stack); },
                  py::arg("config"), py::arg("stack"))
      .def("__len__", &MotionBank::size)
      .def_property_readonly("epochs", [](const MotionBank& b) { return doubles(b.epochs); })
      .def_property_readonly("t_ref", [](const MotionBank& b) { return b.t_ref; })
      .def_property_readonly("cartesian", &MotionBank::is_cartesian)
      .def_property_readonly("vx", [](const MotionBank& b) { return doubles(b.vx_axis); }, "x axis of a Cartesian grid")
      .def_property_readonly("vy", [](const MotionBank& b) { return doubles(b.vy_axis); }, "y axis of a Cartesian grid")
      .def_property_readonly("velocities", [](const MotionBank& b) {
        py::array_t<double> v({py::ssize_t(b.size()), py::ssize_t(2)});
        auto out = v.mutable_unchecked<2>();
        for (std::size_t i = 0; i < b.size(); ++i) out(i, 0) = b.velocity(i).vx, out(i, 1) = b.velocity(i).vy;
        return v;
      }, "(V, 2) velocities in bank order (index v = iy * len(vx) + ix for a grid)")
      .def_property_readonly("curve", [](const MotionBank& b) -> py::object {
        if (b.curve_x.empty()) return py::none();
        py::array_t<double> c({py::ssize_t(b.curve_x.size()), py::ssize_t(2)});
        auto out = c.mutable_unchecked<2>();
        for (std::size_t e = 0; e < b.curve_x.size(); ++e) out(e, 0) = b.curve_x[e], out(e, 1) = b.curve_y[e];
        return c;
      })
      .def_property_readonly("shifts", [](const MotionBank& b) { return b.mode == ShiftMode::integer ? "integer" : "fractional"; })
      .def("__repr__", [](const MotionBank& b) {
        return "<shiftstack.Bank " + std::to_string(b.size()) + " velocities, " + std::to_string(b.exposures()) +
               " epochs, " + (b.mode == ShiftMode::integer ? "integer" : "fractional") + " shifts>";
      });

  m.def("_search", [](const std::shared_ptr<Stack>& stack, const io::SearchConfig& config,
                      const std::optional<std::string>& engine, const std::optional<std::string>& encoding,
                      const py::object& progress, const CancelToken* cancel) {
        io::RunOptions options;
        if (engine) options.engine = *engine;
        if (encoding) options.encoding = parse_encoding(*encoding);
        if (!progress.is_none())
          options.progress = [progress](const io::StageTime& s) {
            py::gil_scoped_acquire gil;
            progress(s.name, s.seconds, s.detail);
          };
        const Encoding chosen = run_encoding(config, encoding);
        double maps_seconds = -1, cube_seconds = -1;  // stay -1 when the Stack had them
        const bool fractional = config.shift_mode == ShiftMode::fractional;
        io::RunOutput run = run_released(cancel, [&](const std::atomic<bool>* stop) {
          options.stop = stop;
          io::SharedInputs inputs{&stack->loaded(), nullptr, nullptr};
          std::shared_ptr<const LikelihoodStack> maps;
          std::shared_ptr<const EncodedStack> cube;
          if (config.likelihood_device != "gpu") {  // the GPU path computes its maps on the device
            maps = stack->likelihood(fractional, &maps_seconds);
            cube = stack->encoded(chosen, fractional, &cube_seconds);
            inputs.likelihood = maps.get();
            inputs.encoded = cube.get();
          }
          io::RunOutput out = io::run_search(config, inputs, options);
          if (maps) describe_kept_stages(out, maps_seconds, cube_seconds);
          return out;
        });
        return results_dict(run, config);
      }, py::arg("stack"), py::arg("config"), py::arg("engine") = py::none(), py::arg("encoding") = py::none(),
      py::arg("progress") = py::none(), py::arg("cancel") = nullptr);

  m.def("_scan", [](const std::shared_ptr<Stack>& stack, const MotionBank& bank, const std::string& engine_name,
                    const std::string& encoding_name, const std::array<int, 4>& region, double alpha,
                    const std::optional<double>& candidate_threshold, int top_k,
                    const std::optional<std::int64_t>& max_candidates, const CancelToken* cancel) {
        const Encoding encoding = parse_encoding(encoding_name);
        OutputPolicy policy;
        policy.alpha = alpha;
        policy.top_k = top_k;
        if (max_candidates) policy.max_candidates = *max_candidates;
        if (candidate_threshold) {
          policy.collect_candidates = true;
          policy.candidate_threshold = *candidate_threshold;
        }
        const Region r{region[0], region[1], region[2], region[3]};
        double wall = 0;
        SearchResult result = run_released(cancel, [&](const std::atomic<bool>* stop) {
          policy.stop = stop;
          const auto cube = stack->encoded(encoding, bank.mode == ShiftMode::fractional);
          auto engine = pool().take(engine_name);
          const auto start = std::chrono::steady_clock::now();
          SearchResult r_ = search(*engine, *cube, bank, policy, r);
          wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
          pool().give(std::move(engine));  // only after success: a failed engine is dropped
          return r_;
        });
        py::dict out;
        out["digest"] = digest_dict(result.digest);
        out["engine"] = result.engine;
        out["encoding"] = encoding_name;
        out["seconds"] = result.seconds;
        out["wall_seconds"] = wall;
        out["candidates"] = candidate_columns(result.candidates, {py::ssize_t(result.candidates.size())});
        if (top_k > 0) {
          const py::ssize_t origins = py::ssize_t(result.top_k.size() / std::size_t(top_k));
          out["top_k"] = candidate_columns(result.top_k, {origins, py::ssize_t(top_k)});
        }
        return out;
      }, py::arg("stack"), py::arg("bank"), py::arg("engine"), py::arg("encoding"), py::arg("region"),
      py::arg("alpha"), py::arg("candidate_threshold"), py::arg("top_k"), py::arg("max_candidates"),
      py::arg("cancel") = nullptr);

  m.def("_release_engines", [] { pool().clear(); }, "Drop the engines kept between scans.");
}

}  // namespace shiftstack::python
