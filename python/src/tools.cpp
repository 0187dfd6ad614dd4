// Digests and their comparison (SPEC 4), the sensitivity validation (SPEC 7), the engine list
// and the state of the CUDA device, for Python.
#include <omp.h>

#include "bindings.hpp"
#include "core/engine_registry.hpp"
#include "shiftstack/digest.hpp"
#include "shiftstack/search.hpp"
#include "shiftstack/synth.hpp"
#include "shiftstack/validation.hpp"
#include "validation/run_info.hpp"
#ifdef SHIFTSTACK_HAVE_CUDA
#include <cuda_runtime.h>

#include "cuda/common/device_stack.hpp"
#endif

namespace shiftstack::python {

namespace {

Digest digest_from(const py::dict& d) {
  Digest out;
  try {
    out.sumA = d["sumA"].cast<double>();
    out.sumB = d["sumB"].cast<double>();
    out.maxZ = d["maxZ"].cast<double>();
    const py::dict argmax = d["argmax"].cast<py::dict>();
    out.argmax_x = argmax["x"].cast<std::int64_t>();
    out.argmax_y = argmax["y"].cast<std::int64_t>();
    out.argmax_velocity = argmax["velocity"].cast<std::int64_t>();
    out.count = d["count"].cast<std::int64_t>();
    out.z_thr = d["z_thr"].cast<double>();
    out.scored = d["scored"].cast<std::int64_t>();
    out.trials = d["trials"].cast<std::int64_t>();
  } catch (const py::error_already_set& e) {
    throw py::value_error(std::string("not a digest (sumA, sumB, maxZ, argmax{x, y, velocity}, count, z_thr, scored, trials): ") +
                          e.what());
  }
  return out;
}

bool engine_is_gpu(const std::string& name) {
  const EngineInfo* e = find_engine(name);
  return e != nullptr && e->gpu;
}

NullWindowPlacement placement_of(const std::string& name) {
  if (name == "random") return NullWindowPlacement::random;
  if (name == "away") return NullWindowPlacement::away;
  throw py::value_error("null_window_placement: 'random' or 'away', got '" + name + "'");
}

}  // namespace

void bind_tools(py::module_& m) {
  m.def("engines", [] {
    py::list out;
    for (const auto& e : engines()) {
      py::dict d;
      d["name"] = e.name;
      d["description"] = e.description;
      d["gpu"] = e.gpu;
      d["available"] = e.available();
      d["preference"] = e.preference;
      d["reduced_arithmetic"] = e.reduced_arithmetic;
      out.append(d);
    }
    return out;
  }, "Every engine of this build: name, description, gpu, available here, preference.");
  m.def("best_engine", &best_available_engine, "The fastest engine available on this machine.");
  m.def("encodings", [] {
    std::vector<std::string> names;
    for (Encoding e : all_encodings()) names.push_back(to_string(e));
    return names;
  });
  m.def("bonferroni_threshold", &bonferroni_threshold, py::arg("alpha"), py::arg("trials"),
        "z_thr = Phi_bar^-1(alpha / trials) (SPEC 4).");
  m.def("compare_digests", [](const py::dict& reference, const py::dict& test, const std::string& tolerance,
                              std::int64_t near_threshold) {
        if (tolerance != "fp32" && tolerance != "reduced")
          throw py::value_error("tolerance: 'fp32' or 'reduced', got '" + tolerance + "'");
        const DigestComparison c = compare(digest_from(reference), digest_from(test),
                                           tolerance == "fp32" ? DigestTolerance::fp32() : DigestTolerance::reduced(),
                                           near_threshold);
        py::dict out;
        out["agrees"] = c.agrees;
        out["failures"] = c.failures;
        out["rel_sumA"] = c.rel_sumA;
        out["rel_sumB"] = c.rel_sumB;
        out["d_maxZ"] = c.d_maxZ;
        out["d_count"] = c.d_count;
        return out;
      }, py::arg("reference"), py::arg("test"), py::arg("tolerance") = "fp32", py::arg("near_threshold") = -1,
      "Compare two digests with SPEC 4's tolerances (fp32 or reduced); near_threshold = reference trials "
      "within 1e-4 of z_thr (-1: counts must be equal).");
  m.def("machine", &machine_name, py::arg("gpu") = false, "The CPU model (or the GPU's name) as benchmark records name it.");
  m.def("threads", [] { return omp_get_max_threads(); }, "CPU threads the engines use (OMP_NUM_THREADS).");

  m.def("_validate", [](const std::string& engine, const std::string& encoding, const std::string& baseline,
                        const std::string& workload_name, int pairs, std::uint64_t seed, const std::string& shifts,
                        int null_window, const std::string& placement, bool completeness, int bootstrap,
                        int first_pair) {
        ValidationOptions o;
        o.engine = engine;
        o.encoding = parse_encoding(encoding);
        o.baseline_engine = baseline;
        o.kit = workload(workload_name);
        if (shifts != "integer" && shifts != "fractional")
          throw py::value_error("shifts: 'integer' or 'fractional', got '" + shifts + "'");
        o.kit.shift_mode = shifts == "integer" ? ShiftMode::integer : ShiftMode::fractional;
        o.pairs = pairs;
        o.seed = seed;
        o.first_pair = first_pair;
        o.null_window = null_window;
        o.null_window_placement = placement_of(placement);
        if (!completeness) o.completeness_snr.clear();
        o.bootstrap_resamples = bootstrap;
        ValidationReport report;
        {
          py::gil_scoped_release released;
          validate(o);
          report = run_validation(o);
        }
        Provenance p;
        p.card = machine_name(engine_is_gpu(engine) || engine_is_gpu(baseline));
        p.commit = SHIFTSTACK_VERSION;
        p.date = utc_now();
        p.command = "shiftstack.validate (Python)";
        py::dict out = to_python(nlohmann::json::parse(to_json(report, {}, p))).cast<py::dict>();
        out["table"] = format_table(report);
        return out;
      }, py::arg("engine"), py::arg("encoding"), py::arg("baseline"), py::arg("workload"), py::arg("pairs"),
      py::arg("seed"), py::arg("shifts"), py::arg("null_window"), py::arg("null_window_placement"),
      py::arg("completeness"), py::arg("bootstrap"), py::arg("first_pair"));

  // ---- the CUDA device ----
  m.def("cuda_available", [] {
#ifdef SHIFTSTACK_HAVE_CUDA
    return cuda_device_available();
#else
    return false;
#endif
  }, "Whether this build has the CUDA engines and a device is present.");
  m.def("device_memory", []() -> py::object {
#ifdef SHIFTSTACK_HAVE_CUDA
    if (!cuda_device_available()) return py::none();
    std::size_t free = 0, total = 0;
    if (cudaMemGetInfo(&free, &total) != cudaSuccess) throw Error("cudaMemGetInfo failed");
    return py::make_tuple(free, total);
#else
    return py::none();
#endif
  }, "(free, total) bytes of the CUDA device, or None without one.");
  m.def("device_uploads", []() -> py::object {
#ifdef SHIFTSTACK_HAVE_CUDA
    const cuda::UploadStats s = cuda::upload_stats();
    py::dict d;
    d["uploads"] = s.uploads;
    d["bytes"] = s.bytes;
    d["reuses"] = s.reuses;
    d["tiled_searches"] = s.tiled_searches;
    d["tiles"] = s.tiles;
    return d;
#else
    return py::none();
#endif
  }, "Counts of cube uploads to the device and of scans served from the cached copy (None without CUDA).");
  m.def("release_device_cache", [] {
#ifdef SHIFTSTACK_HAVE_CUDA
    cuda::release_device_cache();
#endif
  }, "Free the cube the CUDA engines keep on the device (the next search uploads again).");
}

}  // namespace shiftstack::python
