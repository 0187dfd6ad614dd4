// shiftstack.Stack: exposures from numpy arrays (checked, copied once into the library's planes)
// or from FITS files, with their likelihood maps and encodings kept for later searches; and the
// benchmark kit's workloads.
#include <chrono>
#include <cmath>
#include <cstring>
#include <optional>

#include "bindings.hpp"
#include "shiftstack/io/config.hpp"
#include "shiftstack/io/wcs.hpp"
#include "shiftstack/synth.hpp"

namespace shiftstack::python {

namespace {

std::string dtype_name(const py::array& a) { return py::str(a.dtype()).cast<std::string>(); }

char dtype_kind(const py::array& a) { return a.dtype().kind(); }

std::string shape_text(const py::array& a) {
  std::string s = "(";
  for (py::ssize_t i = 0; i < a.ndim(); ++i) s += (i ? ", " : "") + std::to_string(a.shape(i));
  return s + (a.ndim() == 1 ? ",)" : ")");
}

py::array as_array(const py::handle& value, const std::string& name) {
  try {
    return py::array::ensure(value);
  } catch (const py::error_already_set&) {
  }
  throw py::value_error(name + ": expected a numpy array");
}

// The 2-D planes of one argument: a 3-D array (exposures, height, width) or a sequence of 2-D
// arrays. `kinds` lists the accepted numpy dtype kinds ('f' float, 'i'/'u' integer, 'b' bool).
std::vector<py::array> planes_of(const py::handle& value, const std::string& name, const std::string& kinds,
                                 const std::string& accepted) {
  std::vector<py::array> planes;
  auto check_kind = [&](const py::array& a, const std::string& label) {
    if (kinds.find(dtype_kind(a)) == std::string::npos)
      throw py::value_error(label + ": dtype " + dtype_name(a) + " is not accepted (" + accepted + ")");
  };
  if (py::isinstance<py::array>(value) || !py::isinstance<py::sequence>(value)) {
    const py::array a = as_array(value, name);
    check_kind(a, name);
    if (a.ndim() != 3)
      throw py::value_error(name + ": expected a 3-D array (exposures, height, width) or a list of 2-D arrays, got shape " +
                            shape_text(a));
    const py::object take = a.attr("__getitem__");
    for (py::ssize_t e = 0; e < a.shape(0); ++e) planes.push_back(take(py::int_(e)).cast<py::array>());
    return planes;
  }
  const py::sequence items = value.cast<py::sequence>();
  for (std::size_t e = 0; e < items.size(); ++e) {
    const std::string label = name + "[" + std::to_string(e) + "]";
    const py::array a = as_array(items[e], label);
    check_kind(a, label);
    if (a.ndim() != 2)
      throw py::value_error(name + "[" + std::to_string(e) + "]: expected a 2-D array, got shape " + shape_text(a));
    planes.push_back(a);
  }
  return planes;
}

// Copies a 2-D array into an Image (the one copy the stack makes), converting the element type.
template <typename T>
Image<T> image_of(const py::array& plane) {
  const auto contiguous = py::array_t<T, py::array::c_style | py::array::forcecast>::ensure(plane);
  if (!contiguous) throw py::error_already_set();
  Image<T> image(int(contiguous.shape(1)), int(contiguous.shape(0)));
  if (image.size()) std::memcpy(image.pixels.data(), contiguous.data(), image.size() * sizeof(T));
  return image;
}

Image<std::uint8_t> mask_of(const py::array& plane) {
  // Nonzero = masked, whatever the integer width: compare in numpy, then copy the bytes.
  const py::array flags = plane.attr("__ne__")(0).attr("astype")("uint8");
  return image_of<std::uint8_t>(flags);
}

// One value per exposure from a scalar or a sequence of `count`.
std::vector<double> per_exposure(const py::handle& value, const std::string& name, std::size_t count) {
  const py::array a = as_array(value, name);
  if (std::string("fiu").find(dtype_kind(a)) == std::string::npos)
    throw py::value_error(name + ": expected numbers, got dtype " + dtype_name(a));
  const auto values = py::array_t<double, py::array::c_style | py::array::forcecast>::ensure(a);
  if (values.ndim() == 0) return std::vector<double>(count, *values.data());
  if (values.ndim() != 1 || std::size_t(values.shape(0)) != count)
    throw py::value_error(name + ": expected one value per exposure (" + std::to_string(count) + "), got shape " +
                          shape_text(a));
  return std::vector<double>(values.data(), values.data() + count);
}

// Header text of one WCS: an astropy WCS (to_header), an astropy Header (tostring), or text.
std::string header_text(const py::handle& w, const std::string& name) {
  if (w.is_none()) return {};
  if (py::isinstance<py::str>(w)) return w.cast<std::string>();
  if (py::hasattr(w, "to_header")) return w.attr("to_header")(py::arg("relax") = true).attr("tostring")().cast<std::string>();
  if (py::hasattr(w, "tostring")) return w.attr("tostring")().cast<std::string>();
  throw py::value_error(name + ": expected an astropy WCS or Header, header text, or None");
}

// wcs: None, one WCS for every exposure (one pixel grid), or one per exposure.
std::vector<std::string> header_texts(const py::object& wcs, std::size_t count) {
  if (wcs.is_none()) return {};
  const bool one = py::isinstance<py::str>(wcs) || py::hasattr(wcs, "to_header") || py::hasattr(wcs, "tostring") ||
                   !py::isinstance<py::sequence>(wcs);
  if (one) return std::vector<std::string>(count, header_text(wcs, "wcs"));
  const py::sequence items = wcs.cast<py::sequence>();
  if (items.size() != count)
    throw py::value_error("wcs: " + std::to_string(items.size()) + " entries for " + std::to_string(count) + " exposures");
  std::vector<std::string> texts;
  for (std::size_t e = 0; e < count; ++e) texts.push_back(header_text(items[e], "wcs[" + std::to_string(e) + "]"));
  return texts;
}

std::shared_ptr<Stack> stack_from_arrays(const py::object& science, const py::object& variance, const py::object& mask,
                                         const py::object& epochs, const py::object& psf, const py::object& psf_sigma,
                                         const py::object& throughput, const py::object& curve,
                                         const py::object& wcs) {
  const std::string floats = "float16, float32 or float64";
  const std::vector<py::array> sci = planes_of(science, "science", "f", floats);
  const std::vector<py::array> var = planes_of(variance, "variance", "f", floats);
  const std::size_t E = sci.size();
  if (E == 0) throw py::value_error("science: no exposures");
  if (var.size() != E)
    throw py::value_error("variance: " + std::to_string(var.size()) + " exposures, science has " + std::to_string(E));
  std::vector<py::array> msk;
  if (!mask.is_none()) {
    msk = planes_of(mask, "mask", "biu", "bool or integers, nonzero = masked");
    if (msk.size() != E)
      throw py::value_error("mask: " + std::to_string(msk.size()) + " exposures, science has " + std::to_string(E));
  }
  const auto same_shape = [&](const py::array& a, const std::string& what, std::size_t e) {
    if (a.shape(0) != sci[0].shape(0) || a.shape(1) != sci[0].shape(1))
      throw py::value_error(what + " " + std::to_string(e) + " has shape " + shape_text(a) + ", science 0 has " +
                            shape_text(sci[0]) + " (every plane must be on one pixel grid)");
  };
  for (std::size_t e = 0; e < E; ++e) {
    same_shape(sci[e], "science", e);
    same_shape(var[e], "variance", e);
    if (!msk.empty()) same_shape(msk[e], "mask", e);
  }

  // PSFs: kernels (one shared 2-D array, or one per exposure) or Gaussian sigmas.
  if (psf.is_none() == psf_sigma.is_none())
    throw py::value_error("give exactly one of psf (kernels) and psf_sigma (Gaussian sigma in pixels)");
  std::vector<Image<float>> psfs;
  if (!psf.is_none()) {
    if (py::isinstance<py::array>(psf) && py::array(psf.cast<py::array>()).ndim() == 2) {
      const py::array k = psf.cast<py::array>();
      if (dtype_kind(k) != 'f') throw py::value_error("psf: dtype " + dtype_name(k) + " is not accepted (" + floats + ")");
      psfs.assign(E, image_of<float>(k));
    } else {
      for (const py::array& k : planes_of(psf, "psf", "f", floats)) psfs.push_back(image_of<float>(k));
      if (psfs.size() != E)
        throw py::value_error("psf: " + std::to_string(psfs.size()) + " kernels for " + std::to_string(E) + " exposures");
    }
  } else {
    for (double sigma : per_exposure(psf_sigma, "psf_sigma", E)) {
      if (!(sigma > 0) || !std::isfinite(sigma))
        throw py::value_error("psf_sigma: must be finite and > 0, got " + std::to_string(sigma));
      psfs.push_back(gaussian_psf(sigma));
    }
  }

  io::LoadedStack loaded;
  const std::vector<double> t = per_exposure(epochs, "epochs", E);
  const std::vector<double> a = throughput.is_none() ? std::vector<double>(E, 1.0)
                                                     : per_exposure(throughput, "throughput", E);
  if (!curve.is_none()) {
    const py::array c = as_array(curve, "curve");
    const auto offsets = py::array_t<double, py::array::c_style | py::array::forcecast>::ensure(c);
    if (std::string("fiu").find(dtype_kind(c)) == std::string::npos || offsets.ndim() != 2 ||
        std::size_t(offsets.shape(0)) != E || offsets.shape(1) != 2)
      throw py::value_error("curve: expected an array of shape (" + std::to_string(E) +
                            ", 2) of common-curve offsets (x, y) in pixels, got " + shape_text(c) + " " + dtype_name(c));
    for (std::size_t e = 0; e < E; ++e) {
      loaded.curve_x.push_back(offsets.at(e, 0));
      loaded.curve_y.push_back(offsets.at(e, 1));
    }
  }
  const std::vector<std::string> wcs_headers = header_texts(wcs, E);

  loaded.stack.exposures.resize(E);
  {
    // Under the GIL: converting dtypes makes numpy temporaries.
    for (std::size_t e = 0; e < E; ++e) {
      Exposure& x = loaded.stack.exposures[e];
      x.science = image_of<float>(sci[e]);
      x.variance = image_of<float>(var[e]);
      if (!msk.empty()) x.mask = mask_of(msk[e]);
      x.psf = psfs[e];
      x.epoch = t[e];
      x.throughput = a[e];
      x.label = "array exposure " + std::to_string(e);
    }
  }
  for (std::size_t e = 0; e < wcs_headers.size(); ++e) {
    if (wcs_headers[e].empty()) {
      loaded.wcs.emplace_back();
      continue;
    }
    try {
      loaded.wcs.push_back(io::Wcs::from_header(wcs_headers[e], "wcs " + std::to_string(e)));
    } catch (const Error& error) {
      throw py::value_error(error.what());
    }
  }
  try {
    validate(loaded.stack);
  } catch (const Error& error) {
    throw py::value_error(error.what());  // same message, as the ValueError numpy users expect
  }
  return std::make_shared<Stack>(std::move(loaded));
}

// A read-only numpy view of one plane, kept alive by the Stack that owns it.
template <typename T>
py::array plane_view(const std::shared_ptr<Stack>& stack, const Image<T>& image) {
  py::array view(py::dtype::of<T>(), {py::ssize_t(image.height), py::ssize_t(image.width)},
                 {py::ssize_t(image.width * sizeof(T)), py::ssize_t(sizeof(T))}, image.pixels.data(), py::cast(stack));
  view.attr("setflags")(py::arg("write") = false);
  return view;
}

const Exposure& exposure_at(const Stack& s, int e) {
  const int E = s.exposures().size();
  if (e < 0) e += E;
  if (e < 0 || e >= E) throw py::index_error("exposure " + std::to_string(e) + " of " + std::to_string(E));
  return s.exposures().exposures[std::size_t(e)];
}

py::array doubles(const std::vector<double>& values) { return py::array_t<double>(py::ssize_t(values.size()), values.data()); }

struct Kit {
  std::shared_ptr<Stack> stack;
  MotionBank bank;
  Truth truth;
  KitOptions options;
};

KitOptions kit_options(const std::string& name, std::uint64_t seed, const std::string& shifts, const py::dict& overrides) {
  KitOptions o = workload(name);
  o.seed = seed;
  if (shifts != "integer" && shifts != "fractional")
    throw py::value_error("shifts: 'integer' or 'fractional', got '" + shifts + "'");
  o.shift_mode = shifts == "integer" ? ShiftMode::integer : ShiftMode::fractional;
  for (const auto& [key, value] : overrides) {
    const std::string k = key.cast<std::string>();
    auto as_int = [&] {
      const int v = value.cast<int>();
      if (v <= 0) throw py::value_error(k + ": must be > 0");
      return v;
    };
    if (k == "exposures") o.exposures = as_int();
    else if (k == "width") o.width = as_int();
    else if (k == "height") o.height = as_int();
    else if (k == "vx") o.vx_count = as_int();
    else if (k == "vy") o.vy_count = as_int();
    else if (k == "snr") o.injected_snr = value.cast<double>();
    else if (k == "inject") o.inject = value.cast<bool>();
    else if (k == "noise") o.noise = value.cast<bool>();
    else if (k == "masks") o.masked_holes = o.bad_column = value.cast<bool>();
    else if (k == "curve") o.common_curve = value.cast<bool>();
    else throw py::value_error("kit: unknown option '" + k + "' (exposures, width, height, vx, vy, snr, inject, noise, masks, curve)");
  }
  if (overrides.size()) o.name = "custom";
  return o;
}

}  // namespace

// ---- Stack ------------------------------------------------------------------------------------

Stack::Stack(io::LoadedStack loaded) : loaded_(std::move(loaded)) {
  // What the in-memory pipeline run fills in for stacks that do not come from files.
  const std::size_t E = loaded_.stack.exposures.size();
  if (loaded_.curve_x.empty()) loaded_.curve_x.assign(E, 0.0);
  if (loaded_.curve_y.empty()) loaded_.curve_y.assign(E, 0.0);
  if (loaded_.wcs.empty()) loaded_.wcs.resize(E);
  if (loaded_.info.empty()) {
    loaded_.info.resize(E);
    for (std::size_t e = 0; e < E; ++e) {
      const Exposure& x = loaded_.stack.exposures[e];
      loaded_.info[e].file = x.label;
      loaded_.info[e].epoch = x.epoch;
      loaded_.info[e].epoch_keyword = "(in memory)";
      loaded_.info[e].throughput = x.throughput;
      loaded_.info[e].has_wcs = bool(loaded_.wcs[e]);
    }
  }
}

namespace {
double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}
}  // namespace

std::shared_ptr<const LikelihoodStack> Stack::likelihood(bool covariances, double* seconds) {
  std::lock_guard guard(lock_);
  auto& slot = maps_[covariances];
  if (!slot) {
    const auto start = std::chrono::steady_clock::now();
    slot = std::make_shared<const LikelihoodStack>(compute_likelihood(loaded_.stack, covariances));
    if (seconds) *seconds = seconds_since(start);
  }
  return slot;
}

std::shared_ptr<const EncodedStack> Stack::encoded(Encoding encoding, bool covariances, double* seconds) {
  const auto maps = likelihood(covariances);
  std::lock_guard guard(lock_);
  auto& slot = cubes_[{encoding, covariances}];
  if (!slot) {
    const auto start = std::chrono::steady_clock::now();
    slot = std::make_shared<const EncodedStack>(encode(*maps, encoding));
    if (seconds) *seconds = seconds_since(start);
  }
  return slot;
}

void Stack::clear_cache() {
  std::lock_guard guard(lock_);
  maps_.clear();
  cubes_.clear();
}

std::size_t Stack::cached_bytes() const {
  std::lock_guard guard(lock_);
  std::size_t bytes = 0;
  for (const auto& [key, m] : maps_)
    bytes += (m->psi.size() + m->phi.size() + m->cov_right.size() + m->cov_down.size() + m->cov_diag.size() +
              m->cov_antidiag.size()) * sizeof(float);
  for (const auto& [key, c] : cubes_)
    bytes += c->fp32.size() * sizeof(float) + c->fp16.size() * 2 + c->int8.size() +
             c->exceptions.size() * sizeof(EncodingException) +
             (c->cov_right.size() + c->cov_down.size() + c->cov_diag.size() + c->cov_antidiag.size()) * sizeof(float);
  return bytes;
}

void bind_stack(py::module_& m) {
  py::class_<Stack, std::shared_ptr<Stack>>(m, "Stack", R"(A stack of exposures on one pixel grid.

Stack(science, variance, mask=None, *, epochs, psf=None, psf_sigma=None, throughput=None,
      curve=None, wcs=None)

science, variance: 3-D arrays (exposures, height, width) or lists of 2-D arrays, floating point.
mask: the same shape, bool or integers (nonzero = masked), or None.
epochs: one time per exposure (days, e.g. MJD). psf: one odd-sized kernel (2-D, shared) or one
per exposure; or psf_sigma: a Gaussian sigma in pixels (a number or one per exposure).
throughput: relative throughput per exposure (default 1). curve: (exposures, 2) common-curve
offsets in pixels. wcs: an astropy WCS (or Header, or header text) for all exposures, or one
per exposure; it gives the results their RA/Dec columns. Bad input (dtype, shape, NaN where unmasked, variance <= 0, a PSF that does not
sum to 1, duplicate epochs) raises ValueError naming the exposure and pixel.

The pixels are copied once into the library's own planes; science(e), variance(e), mask(e) and
psf(e) are read-only views of those (no copy). The likelihood maps and encoded cubes of the
first search are kept for later ones (clear_cache() frees them).)")
      .def(py::init(&stack_from_arrays), py::arg("science"), py::arg("variance"), py::arg("mask") = py::none(),
           py::kw_only(), py::arg("epochs"), py::arg("psf") = py::none(), py::arg("psf_sigma") = py::none(),
           py::arg("throughput") = py::none(), py::arg("curve") = py::none(),
           py::arg("wcs") = py::none())
      .def("__len__", [](const Stack& s) { return s.exposures().size(); })
      .def_property_readonly("shape", [](const Stack& s) {
        return py::make_tuple(s.exposures().size(), s.exposures().height(), s.exposures().width());
      })
      .def_property_readonly("epochs", [](const Stack& s) {
        std::vector<double> t;
        for (const auto& x : s.exposures().exposures) t.push_back(x.epoch);
        return doubles(t);
      })
      .def_property_readonly("throughput", [](const Stack& s) {
        std::vector<double> a;
        for (const auto& x : s.exposures().exposures) a.push_back(x.throughput);
        return doubles(a);
      })
      .def_property_readonly("curve", [](const Stack& s) {
        const auto& l = s.loaded();
        py::array_t<double> c({py::ssize_t(l.curve_x.size()), py::ssize_t(2)});
        auto v = c.mutable_unchecked<2>();
        for (std::size_t e = 0; e < l.curve_x.size(); ++e) v(e, 0) = l.curve_x[e], v(e, 1) = l.curve_y[e];
        return c;
      })
      .def_property_readonly("labels", [](const Stack& s) {
        std::vector<std::string> labels;
        for (const auto& info : s.loaded().info) labels.push_back(info.file);
        return labels;
      })
      .def_property_readonly("has_wcs", [](const Stack& s) {
        const auto& w = s.loaded().wcs;
        return !w.empty() && w.front() && w.back();
      })
      .def_property_readonly("warnings", [](const Stack& s) { return s.loaded().warnings; })
      .def("science", [](const std::shared_ptr<Stack>& s, int e) { return plane_view(s, exposure_at(*s, e).science); },
           py::arg("exposure"), "Read-only view of one exposure's science plane.")
      .def("variance", [](const std::shared_ptr<Stack>& s, int e) { return plane_view(s, exposure_at(*s, e).variance); },
           py::arg("exposure"))
      .def("mask", [](const std::shared_ptr<Stack>& s, int e) -> py::object {
             const Exposure& x = exposure_at(*s, e);
             if (x.mask.empty()) return py::none();
             return plane_view(s, x.mask);
           }, py::arg("exposure"), "Read-only view (nonzero = masked), or None when nothing is masked.")
      .def("psf", [](const std::shared_ptr<Stack>& s, int e) { return plane_view(s, exposure_at(*s, e).psf); },
           py::arg("exposure"))
      .def("write_workunit", [](const Stack& s, const std::string& path, bool compress) {
             py::gil_scoped_release released;
             io::write_workunit_fits(path, s.exposures(), compress);
           }, py::arg("path"), py::arg("compress") = false,
           "Write the exposures as one KBMOD WorkUnit file (SCI_i, VAR_i, MSK_i, PSF_i; atomically). "
           "Common-curve offsets and WCS are not part of that format.")
      .def("clear_cache", &Stack::clear_cache, "Free the likelihood maps and encoded cubes kept for later searches.")
      .def_property_readonly("cached_bytes", &Stack::cached_bytes)
      .def("__repr__", [](const Stack& s) {
        const auto& x = s.exposures();
        return "<shiftstack.Stack " + std::to_string(x.size()) + " exposures of " + std::to_string(x.width()) + "x" +
               std::to_string(x.height()) + ">";
      });

  m.def("read_fits", [](const std::vector<std::string>& inputs, const io::SearchConfig& config) {
        const io::ReadOptions options = config.read;
        io::LoadedStack loaded;
        {
          py::gil_scoped_release released;
          loaded = io::read_exposures(io::expand_inputs(inputs), options);
        }
        return std::make_shared<Stack>(std::move(loaded));
      }, py::arg("inputs"), py::arg("config"),
      "Read FITS exposures (files, directories, glob patterns, @lists) with the config's input keys.");

  py::class_<Kit>(m, "Kit", "A benchmark-kit stack (SPEC 3): exposures, its velocity bank and the injected truth.")
      .def_readonly("stack", &Kit::stack)
      .def_readonly("bank", &Kit::bank)
      .def_property_readonly("workload", [](const Kit& k) { return k.options.name; })
      .def_property_readonly("seed", [](const Kit& k) { return k.options.seed; })
      .def_property_readonly("shifts", [](const Kit& k) {
        return k.options.shift_mode == ShiftMode::integer ? "integer" : "fractional";
      })
      .def_property_readonly("truth", [](const Kit& k) {
        const Truth& t = k.truth;
        py::dict d;
        d["injected"] = t.injected;
        d["x"] = t.x;
        d["y"] = t.y;
        d["velocity"] = t.velocity;
        d["vx"] = t.vx;
        d["vy"] = t.vy;
        d["flux"] = t.flux;
        d["B"] = t.B;
        d["snr"] = t.snr;
        return d;
      })
      .def("__repr__", [](const Kit& k) {
        return "<shiftstack.Kit " + k.options.name + " seed " + std::to_string(k.options.seed) + ": " +
               std::to_string(k.stack->exposures().size()) + " exposures, " + std::to_string(k.bank.size()) +
               " velocities>";
      });

  m.def("kit", [](const std::string& workload_name, std::uint64_t seed, const std::string& shifts, const py::kwargs& overrides) {
        const KitOptions options = kit_options(workload_name, seed, shifts, overrides);
        KitStack made;
        {
          py::gil_scoped_release released;
          made = make_kit(options);
        }
        io::LoadedStack loaded;
        loaded.stack = std::move(made.stack);
        if (!made.bank.curve_x.empty()) {
          loaded.curve_x = made.bank.curve_x;
          loaded.curve_y = made.bank.curve_y;
        }
        return Kit{std::make_shared<Stack>(std::move(loaded)), std::move(made.bank), made.truth, options};
      }, py::arg("workload") = "ci", py::arg("seed") = 1, py::arg("shifts") = "integer",
      "A synthetic stack of a named workload (ci, kbmod, dense, deep) with one injected source; keyword "
      "options exposures, width, height, vx, vy, snr, inject, noise, masks, curve change its shape or features.");
  m.def("workloads", [] { return workload_names(); });
}

}  // namespace shiftstack::python
