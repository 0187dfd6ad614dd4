#include "interrupt.hpp"

#include <Python.h>

namespace shiftstack::python {

namespace {

// The flag of the open scope (one at a time: only the main thread opens one) and whether SIGINT
// arrived while it was open. Lock-free atomics: safe to touch from a signal handler.
std::atomic<std::atomic<bool>*> active_flag{nullptr};
std::atomic<bool> sigint_seen{false};
static_assert(std::atomic<std::atomic<bool>*>::is_always_lock_free && std::atomic<bool>::is_always_lock_free);

extern "C" void on_sigint(int) {
  sigint_seen.store(true);
  if (std::atomic<bool>* flag = active_flag.load()) flag->store(true);
}

bool on_main_thread() {
  const py::module_ threading = py::module_::import("threading");
  return threading.attr("current_thread")().is(threading.attr("main_thread")());
}

}  // namespace

StopScope::StopScope(const CancelToken* token)
    : flag_(token ? token->flag : std::make_shared<std::atomic<bool>>(false)) {
  // Signals reach Python's handlers on the main thread only; other threads stop by token alone.
  if (!on_main_thread()) return;
  std::atomic<bool>* none = nullptr;
  if (!active_flag.compare_exchange_strong(none, flag_.get())) return;  // a scope is open already
  struct sigaction current {};
  sigaction(SIGINT, nullptr, &current);
  // SIGINT ignored, or left to the system (Python started without its handlers): leave it so.
  if (current.sa_handler == SIG_IGN || current.sa_handler == SIG_DFL) {
    active_flag.store(nullptr);
    return;
  }
  struct sigaction ours {};
  ours.sa_handler = on_sigint;
  sigemptyset(&ours.sa_mask);
  ours.sa_flags = SA_ONSTACK;
  sigint_seen.store(false);
  sigaction(SIGINT, &ours, &previous_);
  installed_ = true;
}

StopScope::~StopScope() { restore(); }

void StopScope::restore() {
  if (!installed_) return;
  sigaction(SIGINT, &previous_, nullptr);
  active_flag.store(nullptr);
  installed_ = false;
}

void StopScope::finish(const char* stop_message) {
  const bool interrupted = installed_ && sigint_seen.load();
  restore();
  if (interrupted) {
    // Hand the interrupt to Python: its handler runs now (KeyboardInterrupt by default).
    PyErr_SetInterruptEx(SIGINT);
    if (PyErr_CheckSignals() != 0) {
      py::error_already_set error;
      if (stop_message) {
        // "The above exception was the direct cause": where the search stopped.
        py::object cause = py::module_::import("shiftstack._shiftstack").attr("Cancelled")(stop_message);
        PyException_SetCause(error.value().ptr(), cause.release().ptr());
      }
      throw error;
    }
  }
  if (stop_message) {
    const py::object cancelled = py::module_::import("shiftstack._shiftstack").attr("Cancelled");
    PyErr_SetString(cancelled.ptr(), stop_message);
    throw py::error_already_set();
  }
}

void bind_interrupt(py::module_& m) {
  py::class_<CancelToken>(m, "CancelToken", R"(A flag that stops a search from another thread.

Pass it as ``cancel=`` to search(), scan(), bench() or validate(); ``token.cancel()`` from any
thread makes the running call stop at its next tile, band, row or stage boundary and raise
shiftstack.Cancelled. A cancelled token stays cancelled (calls given it stop at once).)")
      .def(py::init<>())
      .def("cancel", &CancelToken::cancel, "Ask every call holding this token to stop.")
      .def_property_readonly("cancelled", &CancelToken::cancelled)
      .def("__repr__", [](const CancelToken& t) {
        return std::string("CancelToken(cancelled=") + (t.cancelled() ? "True" : "False") + ")";
      });
}

}  // namespace shiftstack::python
