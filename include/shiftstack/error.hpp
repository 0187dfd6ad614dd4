// Errors raised at library boundaries: one exception type carrying a message that names
// the exposure, pixel or option at fault.
#pragma once
#include <stdexcept>
#include <string>

namespace shiftstack {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A search or run stopped on request (OutputPolicy::stop, RunOptions::stop) before it finished.
class Cancelled : public Error {
 public:
  using Error::Error;
};

// Throws Error(message) when the condition is false.
inline void require(bool condition, const std::string& message) {
  if (!condition) throw Error(message);
}

}  // namespace shiftstack
