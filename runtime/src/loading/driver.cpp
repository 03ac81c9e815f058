#include "loading/driver.hpp"

#include <dlfcn.h>

#include <mutex>

#include "aotinfer/error.hpp"

namespace aotinfer::detail {

namespace {
#define AOTINFER_STRINGIFY2(x) #x
#define AOTINFER_STRINGIFY(x) AOTINFER_STRINGIFY2(x)
}  // namespace

Driver Driver::open(const char* library) {
  void* handle = ::dlopen(library, RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* why = ::dlerror();
    throw Error(ErrorCode::no_driver, std::string("the CUDA driver could not be loaded (") + library + ": " +
                                          (why ? why : "unknown error") +
                                          "); install the NVIDIA driver, or check that the library is on the loader path");
  }
  Driver d;
  // cuda.h maps names like cuMemcpyDtoH to their current ABI versions (cuMemcpyDtoH_v2); the
  // expanded name is the symbol to look up.
#define AOTINFER_RESOLVE(name)                                                                         \
  d.name = reinterpret_cast<decltype(d.name)>(::dlsym(handle, AOTINFER_STRINGIFY(name)));               \
  if (!d.name)                                                                                          \
    throw Error(ErrorCode::no_driver, std::string("the CUDA driver in ") + library + " lacks " +       \
                                          AOTINFER_STRINGIFY(name) + "; update the NVIDIA driver (CUDA 12 or newer)");
  AOTINFER_DRIVER_FUNCTIONS(AOTINFER_RESOLVE)
#undef AOTINFER_RESOLVE
  return d;
}

const Driver& driver() {
  static std::once_flag once;
  static Driver instance;
  static std::string failure;
  static ErrorCode failure_code = ErrorCode::no_driver;
  std::call_once(once, [] {
    try {
      Driver d = Driver::open("libcuda.so.1");
      CUresult r = d.cuInit(0);
      if (r == CUDA_ERROR_NO_DEVICE) {
        failure = "no CUDA GPU is visible (cuInit: CUDA_ERROR_NO_DEVICE); check CUDA_VISIBLE_DEVICES and nvidia-smi";
        failure_code = ErrorCode::no_device;
      } else if (r != CUDA_SUCCESS) {
        failure = "the CUDA driver failed to initialise (cuInit returned " + std::to_string(int(r)) +
                  "); check the driver installation with nvidia-smi";
      } else {
        instance = d;
      }
    } catch (const Error& e) {
      failure = e.what();
      failure_code = e.code();
    }
  });
  if (!failure.empty()) throw Error(failure_code, failure);
  return instance;
}

void fail(CUresult result, const std::string& what) {
  const char* name = nullptr;
  const char* text = nullptr;
  driver().cuGetErrorName(result, &name);
  driver().cuGetErrorString(result, &text);
  throw Error(ErrorCode::cuda_error,
              what + ": " + (name ? name : std::to_string(int(result))) + ": " + (text ? text : "unknown error"));
}

CUcontext current_context() {
  const Driver& d = driver();
  CUcontext ctx = nullptr;
  check(d.cuCtxGetCurrent(&ctx), "cuCtxGetCurrent");
  if (ctx) return ctx;
  int count = 0;
  check(d.cuDeviceGetCount(&count), "cuDeviceGetCount");
  if (count == 0) throw Error(ErrorCode::no_device, "no CUDA GPU is visible; check CUDA_VISIBLE_DEVICES and nvidia-smi");
  CUdevice device = 0;
  check(d.cuDeviceGet(&device, 0), "cuDeviceGet(0)");
  check(d.cuDevicePrimaryCtxRetain(&ctx, device), "cuDevicePrimaryCtxRetain(device 0)");
  check(d.cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
  return ctx;
}

}  // namespace aotinfer::detail

namespace aotinfer::detail {

int current_device_ordinal() {
  current_context();
  CUdevice device = 0;
  check(driver().cuCtxGetDevice(&device), "cuCtxGetDevice");
  return int(device);
}

int current_device_sm_count() {
  current_context();
  CUdevice device = 0;
  check(driver().cuCtxGetDevice(&device), "cuCtxGetDevice");
  int count = 0;
  check(driver().cuDeviceGetAttribute(&count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device), "multiprocessor count");
  return count;
}

}  // namespace aotinfer::detail
