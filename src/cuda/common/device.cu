// Device discovery and the list of CUDA engines.
#include <cuda_runtime.h>

#include <string>

#include "cuda/gather/gather_engines.hpp"
#include "cuda/spectral/spectral_engine.hpp"
#include "cuda/tree/cuda_tree.hpp"
#include "core/engine_registry.hpp"

namespace shiftstack {

bool cuda_device_available() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

// The current device's name, for benchmark records (`shiftstack bench` declares it).
std::string cuda_device_name() {
  int device = 0;
  cudaDeviceProp prop{};
  if (cudaGetDevice(&device) != cudaSuccess || cudaGetDeviceProperties(&prop, device) != cudaSuccess)
    return "cuda: unknown device";
  return prop.name;
}

void register_cuda_engines() {
  // Each CUDA engine file adds its register_* call here.
  register_cuda_serial_engine();
  register_cuda_tiled_engine();
  register_cuda_fast_engine();
  cuda::register_fourier_engine();
  cuda::register_separable_gemm_engine();
  cuda::register_tensor_core_engine();
  cuda::register_cuda_tree_engines();
}

}  // namespace shiftstack
