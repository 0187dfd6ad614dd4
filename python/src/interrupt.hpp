// Stopping a long C++ call from Python. While the GIL is released, Python's own SIGINT handler
// only sets a flag that nobody reads until the call returns, so Ctrl-C would wait for the whole
// search. A StopScope, opened on the main thread, puts a handler in its place that sets the flag
// the engines poll (OutputPolicy::stop, RunOptions::stop) at their tile, band, row or stage
// boundaries; when the scope closes, the previous handler comes back and the interrupt is handed
// to Python, so KeyboardInterrupt (or the program's own handler) follows as usual.
#pragma once
#include <pybind11/pybind11.h>

#include <atomic>
#include <csignal>
#include <memory>

namespace shiftstack::python {

namespace py = pybind11;

// A flag another thread can raise to stop a search (shiftstack.CancelToken in Python).
struct CancelToken {
  std::shared_ptr<std::atomic<bool>> flag = std::make_shared<std::atomic<bool>>(false);
  void cancel() { flag->store(true); }
  bool cancelled() const { return flag->load(); }
};

class StopScope {
 public:
  // With the GIL held. `token` may be null.
  explicit StopScope(const CancelToken* token);
  ~StopScope();
  StopScope(const StopScope&) = delete;
  StopScope& operator=(const StopScope&) = delete;

  const std::atomic<bool>* flag() const { return flag_.get(); }

  // With the GIL held, after the call returned or threw. Restores the SIGINT handler and raises
  // KeyboardInterrupt when Ctrl-C came during the call (chained to `stop_message` when the call
  // stopped early because of it); else raises shiftstack.Cancelled when the call was cancelled.
  // Returns normally when nothing is to be raised.
  void finish(const char* stop_message);

 private:
  void restore();
  std::shared_ptr<std::atomic<bool>> flag_;
  bool installed_ = false;
  struct sigaction previous_ {};
};

// Registers shiftstack.CancelToken.
void bind_interrupt(py::module_& m);

}  // namespace shiftstack::python
