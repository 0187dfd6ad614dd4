// Registration of the CUDA gather engines (called from register_cuda_engines in device.cu).
#pragma once

namespace shiftstack {

bool cuda_device_available();  // device.cu (engine_registry.hpp declares it only for CUDA clients)

void register_cuda_serial_engine();  // gather_serial.cu
void register_cuda_tiled_engine();   // gather_tiled.cu
void register_cuda_fast_engine();    // gather_fast.cu

}  // namespace shiftstack
