// Shared pieces of the Python module: the Stack the module hands to Python (exposures plus the
// likelihood maps and encodings it keeps between searches), and each file's bind_* entry point.
#pragma once
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <atomic>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>

#include "interrupt.hpp"
#include "shiftstack/error.hpp"

#include "shiftstack/encoding.hpp"
#include "shiftstack/io/fits.hpp"
#include "shiftstack/likelihood.hpp"

namespace shiftstack::python {

namespace py = pybind11;

// An exposure stack held by Python. Its maps and encoded cubes are computed on first use and kept,
// so several searches of one Stack share them; the encoded cube's id stays the same, which is what
// the CUDA engines' device cache keys on (one upload for many searches).
class Stack {
 public:
  explicit Stack(io::LoadedStack loaded);

  const io::LoadedStack& loaded() const { return loaded_; }
  const ExposureStack& exposures() const { return loaded_.stack; }

  // Computed under a lock on first use (call without the GIL); covariances for fractional shifts.
  // `seconds`, when given, gets the time spent computing; untouched when the cache had it.
  std::shared_ptr<const LikelihoodStack> likelihood(bool covariances, double* seconds = nullptr);
  std::shared_ptr<const EncodedStack> encoded(Encoding encoding, bool covariances, double* seconds = nullptr);
  void clear_cache();
  std::size_t cached_bytes() const;

 private:
  io::LoadedStack loaded_;
  mutable std::mutex lock_;
  std::map<bool, std::shared_ptr<const LikelihoodStack>> maps_;
  std::map<std::pair<Encoding, bool>, std::shared_ptr<const EncodedStack>> cubes_;
};

// nlohmann::json <-> Python objects (through the json module: configs and reports are small).
py::object to_python(const nlohmann::json& value);
nlohmann::json from_python(const py::handle& value);

// Frees what the engines keep between calls (the CUDA engines' cached cube on the device, the kept
// engine objects). Called when a search fails, so a failed task leaves no device memory behind;
// skipped while another call of this process is still searching (it may be reading that cube).
void release_device_memory() noexcept;
std::atomic<int>& calls_in_flight();

// Runs work(stop_flag) without the GIL, inside a StopScope: Ctrl-C or the token stop it at the
// next boundary (KeyboardInterrupt or shiftstack.Cancelled), and any failure frees the device
// memory the engines keep before the error reaches Python.
template <class Work>
auto run_released(const CancelToken* token, Work&& work) -> decltype(work(nullptr)) {
  StopScope scope(token);
  struct InFlight {
    InFlight() { ++calls_in_flight(); }
    ~InFlight() { --calls_in_flight(); }
  };
  std::optional<decltype(work(nullptr))> result;
  std::string stop_message;
  std::exception_ptr failure;
  {
    py::gil_scoped_release released;
    InFlight in_flight;
    try {
      result.emplace(work(scope.flag()));
    } catch (const Cancelled& e) {
      stop_message = e.what();
      release_device_memory();
    } catch (...) {
      failure = std::current_exception();
      release_device_memory();
    }
  }
  scope.finish(stop_message.empty() ? nullptr : stop_message.c_str());
  if (failure) std::rethrow_exception(failure);
  return std::move(*result);
}

void bind_stack(py::module_& m);     // stack.cpp: Stack, arrays in, FITS readers, the kit
void bind_config(py::module_& m);    // config.cpp: Config
void bind_search(py::module_& m);    // search.cpp: search, scan, Bank, results
void bind_tools(py::module_& m);     // tools.cpp: digests, validation, engines, device state

}  // namespace shiftstack::python
