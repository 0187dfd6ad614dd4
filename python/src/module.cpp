// The extension module shiftstack._shiftstack; the package `shiftstack` (python/shiftstack)
// wraps it in the documented Python API.
#include "bindings.hpp"

PYBIND11_MODULE(_shiftstack, m) {
  namespace py = pybind11;
  using namespace shiftstack::python;
  m.doc() = "shiftstack's C++ core: stacks, configs, searches, digests (use the package `shiftstack`).";
  m.attr("__version__") = SHIFTSTACK_VERSION;
  m.attr("_pybind11_version") = py::make_tuple(PYBIND11_VERSION_MAJOR, PYBIND11_VERSION_MINOR, PYBIND11_VERSION_PATCH);
  // The library's errors keep their messages; a stopped search is a Cancelled error. Translators
  // are tried newest first, so Cancelled is caught before its base class.
  py::register_exception<shiftstack::Error>(m, "Error", PyExc_RuntimeError);
  py::register_exception<shiftstack::Cancelled>(m, "Cancelled", m.attr("Error").ptr());
  bind_interrupt(m);
  bind_stack(m);
  bind_config(m);
  bind_search(m);
  bind_tools(m);
}
