// The CUDA driver API, opened with dlopen so that a machine without a driver gets a clear
// error instead of a loader failure. Internal to the runtime.
#pragma once
#include <cuda.h>

#include <string>

namespace aotinfer::detail {

struct Driver {
#define AOTINFER_DRIVER_FUNCTIONS(X)                                                              \
  X(cuInit) X(cuDriverGetVersion) X(cuGetErrorName) X(cuGetErrorString) X(cuDeviceGet)            \
  X(cuDeviceGetCount) X(cuDeviceGetAttribute) X(cuDevicePrimaryCtxRetain) X(cuCtxGetCurrent)      \
  X(cuCtxSetCurrent) X(cuCtxGetDevice) X(cuModuleLoadData) X(cuModuleUnload) X(cuModuleGetFunction) \
  X(cuModuleGetGlobal) X(cuMemcpyDtoH) X(cuLaunchKernel) X(cuFuncSetAttribute)                   \
  X(cuOccupancyMaxActiveBlocksPerMultiprocessor) X(cuMemHostAlloc) X(cuMemFreeHost) X(cuMemcpyHtoDAsync)  \
  X(cuEventCreate) X(cuEventRecord) X(cuEventSynchronize) X(cuEventDestroy) X(cuTensorMapEncodeTiled)
#define AOTINFER_DECLARE(name) decltype(&::name) name = nullptr;
  AOTINFER_DRIVER_FUNCTIONS(AOTINFER_DECLARE)
#undef AOTINFER_DECLARE

  // Throws Error(no_driver) naming the library and why it could not be used.
  static Driver open(const char* library);
};

// The process-wide driver (libcuda.so.1), opened and initialised once.
const Driver& driver();

// Throws Error(cuda_error) "<what>: <CUDA error name>: <description>".
[[noreturn]] void fail(CUresult result, const std::string& what);

// fail() unless result is success; the message is only made into a string on failure.
inline void check(CUresult result, const char* what) {
  if (result != CUDA_SUCCESS) fail(result, what);
}
inline void check(CUresult result, const std::string& what) {
  if (result != CUDA_SUCCESS) fail(result, what);
}

// The calling thread's context; when it has none, device 0's primary context is made current
// (what the CUDA runtime and PyTorch use, so modules are shared with them).
CUcontext current_context();

// The ordinal of the current context's device (what PyTorch calls cuda:N).
int current_device_ordinal();

// The multiprocessor count of the current context's device.
int current_device_sm_count();

}  // namespace aotinfer::detail
