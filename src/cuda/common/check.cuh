// CUDA error checks: throw shiftstack::Error with the failing call's text and file:line.
#pragma once
#include <cuda_runtime.h>

#include <string>

#include "shiftstack/error.hpp"

namespace shiftstack::cuda {

[[noreturn]] inline void throw_cuda_error(cudaError_t status, const char* call, const char* file,
                                          int line) {
  throw Error(std::string("CUDA error '") + cudaGetErrorString(status) + "' in " + call + " at " +
              file + ":" + std::to_string(line));
}

}  // namespace shiftstack::cuda

#define SHIFTSTACK_CUDA_CHECK(call)                                                    \
  do {                                                                                 \
    cudaError_t shiftstack_status_ = (call);                                           \
    if (shiftstack_status_ != cudaSuccess)                                             \
      ::shiftstack::cuda::throw_cuda_error(shiftstack_status_, #call, __FILE__, __LINE__); \
  } while (0)

// After every kernel launch: catches launch-configuration errors at once.
#define SHIFTSTACK_CUDA_CHECK_LAUNCH() SHIFTSTACK_CUDA_CHECK(cudaGetLastError())
