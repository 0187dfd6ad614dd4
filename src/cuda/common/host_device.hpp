// SHIFTSTACK_HOST_DEVICE: small functions the kernels use that host code (and the CPU tests)
// compile too.
#pragma once

#if defined(__CUDACC__)
#define SHIFTSTACK_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define SHIFTSTACK_HOST_DEVICE inline
#endif
