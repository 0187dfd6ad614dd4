// Internal: how engine families join the registry (called once, from engines()).
#pragma once
#include "shiftstack/search.hpp"

namespace shiftstack {

void register_cpu_engines();  // src/cpu: reference, cpu
void register_tree_engines();  // src/tree: cpu-tree, cpu-tree-screen

#ifdef SHIFTSTACK_HAVE_CUDA
void register_cuda_engines();  // src/cuda/device.cu: every CUDA engine
bool cuda_device_available();
#endif

}  // namespace shiftstack
