// Device discovery and the list of CUDA engines.
#include <cuda_runtime.h>

#include "engine_registry.hpp"

namespace shiftstack {

bool cuda_device_available() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

void register_cuda_engines() {
  // Each CUDA engine file adds its register_* call here.
}

}  // namespace shiftstack
