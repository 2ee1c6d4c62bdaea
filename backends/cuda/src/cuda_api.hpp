// The CUDA driver API and NVRTC, loaded at run time (dlopen): the backend
// builds without the CUDA toolkit, and a process on a machine with no NVIDIA
// driver gets a reason instead of a failure to start. The few declarations
// the backend uses are copied here, ABI-exact, from cuda.h and nvrtc.h.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

// The opaque handle types live in the global namespace, as cuda.h declares
// them: the typedefs below then name the same types as a user's cuda.h (and
// as the public header's repeated typedefs), whichever is included first.
struct CUctx_st;
struct CUmod_st;
struct CUfunc_st;
struct CUstream_st;
struct CUarray_st;

namespace unicache::cuda::detail {

// --- Driver API declarations (cuda.h) ----------------------------------------

// C enums are passed as int (their size and calling convention on Linux).
using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
typedef struct CUctx_st* CUcontext;
typedef struct CUmod_st* CUmodule;
typedef struct CUfunc_st* CUfunction;
typedef struct CUstream_st* CUstream;
typedef struct CUarray_st* CUarray;
typedef struct CUevent_st* CUevent;
using CUdevice_attribute = int;
using CUfunction_attribute = int;
using CUmemorytype = int;
using CUjit_option = int;

// CUresult
constexpr CUresult CUDA_SUCCESS = 0;
constexpr CUresult CUDA_ERROR_INVALID_VALUE = 1;
constexpr CUresult CUDA_ERROR_OUT_OF_MEMORY = 2;
constexpr CUresult CUDA_ERROR_NOT_INITIALIZED = 3;
constexpr CUresult CUDA_ERROR_NO_DEVICE = 100;
constexpr CUresult CUDA_ERROR_INVALID_DEVICE = 101;
constexpr CUresult CUDA_ERROR_INVALID_IMAGE = 200;
constexpr CUresult CUDA_ERROR_INVALID_CONTEXT = 201;
constexpr CUresult CUDA_ERROR_NO_BINARY_FOR_GPU = 209;
constexpr CUresult CUDA_ERROR_INVALID_PTX = 218;
constexpr CUresult CUDA_ERROR_UNSUPPORTED_PTX_VERSION = 222;
constexpr CUresult CUDA_ERROR_NOT_FOUND = 500;
constexpr CUresult CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES = 701;

// CUdevice_attribute
constexpr CUdevice_attribute CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 1;
constexpr CUdevice_attribute CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK = 8;
constexpr CUdevice_attribute CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16;
constexpr CUdevice_attribute CU_DEVICE_ATTRIBUTE_PCI_BUS_ID = 33;
constexpr CUdevice_attribute CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID = 34;
constexpr CUdevice_attribute CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID = 50;
constexpr CUdevice_attribute CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75;
constexpr CUdevice_attribute CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76;
constexpr CUdevice_attribute CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97;

// CUfunction_attribute
constexpr CUfunction_attribute CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8;

// CUmemorytype
// CUevent_flags
constexpr unsigned CU_EVENT_DEFAULT = 0;
constexpr unsigned CU_EVENT_DISABLE_TIMING = 2;
// CUstream_flags
constexpr unsigned CU_STREAM_NON_BLOCKING = 1;
constexpr CUresult CUDA_ERROR_NOT_READY = 600;

constexpr CUmemorytype CU_MEMORYTYPE_HOST = 1;
constexpr CUmemorytype CU_MEMORYTYPE_DEVICE = 2;

// CUjit_option: the JIT logs of cuModuleLoadDataEx (a PTX that fails to load).
constexpr CUjit_option CU_JIT_INFO_LOG_BUFFER = 3;
constexpr CUjit_option CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES = 4;
constexpr CUjit_option CU_JIT_ERROR_LOG_BUFFER = 5;
constexpr CUjit_option CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6;

struct CUuuid {
  char bytes[16];
};

// The layout of cuMemcpy2D_v2 (size_t offsets and pitches).
struct CUDA_MEMCPY2D {
  std::size_t srcXInBytes;
  std::size_t srcY;
  CUmemorytype srcMemoryType;
  const void* srcHost;
  CUdeviceptr srcDevice;
  CUarray srcArray;
  std::size_t srcPitch;

  std::size_t dstXInBytes;
  std::size_t dstY;
  CUmemorytype dstMemoryType;
  void* dstHost;
  CUdeviceptr dstDevice;
  CUarray dstArray;
  std::size_t dstPitch;

  std::size_t WidthInBytes;
  std::size_t Height;
};
static_assert(sizeof(CUDA_MEMCPY2D) == 128, "CUDA_MEMCPY2D must match cuda.h's CUDA_MEMCPY2D_v2");

// The driver's entry points. Each member holds the symbol cuda.h maps the
// name to (cuMemAlloc -> cuMemAlloc_v2, ...), so the signatures are those of
// the current API; the legacy (not per-thread) default stream is used.
struct driver_api {
  CUresult (*cuInit)(unsigned int flags);
  CUresult (*cuDriverGetVersion)(int* version);
  CUresult (*cuDeviceGetCount)(int* count);
  CUresult (*cuDeviceGet)(CUdevice* device, int ordinal);
  CUresult (*cuDeviceGetName)(char* name, int len, CUdevice dev);
  CUresult (*cuDeviceGetAttribute)(int* value, CUdevice_attribute attrib, CUdevice dev);
  CUresult (*cuDeviceGetPCIBusId)(char* bus_id, int len, CUdevice dev);
  CUresult (*cuDeviceTotalMem)(std::size_t* bytes, CUdevice dev);  // _v2
  // Optional (nullptr when the driver lacks it): _v2, else the original.
  CUresult (*cuDeviceGetUuid)(CUuuid* uuid, CUdevice dev);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext* ctx, CUdevice dev);
  CUresult (*cuDevicePrimaryCtxRelease)(CUdevice dev);  // _v2
  CUresult (*cuCtxGetCurrent)(CUcontext* ctx);
  CUresult (*cuCtxSetCurrent)(CUcontext ctx);
  CUresult (*cuCtxPushCurrent)(CUcontext ctx);   // _v2
  CUresult (*cuCtxPopCurrent)(CUcontext* ctx);   // _v2
  CUresult (*cuCtxGetDevice)(CUdevice* device);
  CUresult (*cuCtxSynchronize)();
  CUresult (*cuStreamCreate)(CUstream* stream, unsigned int flags);
  CUresult (*cuStreamDestroy)(CUstream stream);  // _v2
  CUresult (*cuStreamSynchronize)(CUstream stream);
  CUresult (*cuStreamWaitEvent)(CUstream stream, CUevent event, unsigned int flags);
  CUresult (*cuEventCreate)(CUevent* event, unsigned int flags);
  CUresult (*cuEventDestroy)(CUevent event);  // _v2
  CUresult (*cuEventRecord)(CUevent event, CUstream stream);
  CUresult (*cuEventQuery)(CUevent event);
  CUresult (*cuEventSynchronize)(CUevent event);
  CUresult (*cuEventElapsedTime)(float* ms, CUevent start, CUevent end);
  CUresult (*cuMemAlloc)(CUdeviceptr* ptr, std::size_t bytes);  // _v2
  CUresult (*cuMemFree)(CUdeviceptr ptr);                        // _v2
  CUresult (*cuMemcpyHtoD)(CUdeviceptr dst, const void* src, std::size_t bytes);  // _v2
  CUresult (*cuMemcpyDtoH)(void* dst, CUdeviceptr src, std::size_t bytes);        // _v2
  CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr dst, const void* src, std::size_t bytes, CUstream stream);  // _v2
  CUresult (*cuMemcpyDtoHAsync)(void* dst, CUdeviceptr src, std::size_t bytes, CUstream stream);        // _v2
  CUresult (*cuMemcpy2D)(const CUDA_MEMCPY2D* copy);                                  // _v2
  CUresult (*cuMemcpy2DAsync)(const CUDA_MEMCPY2D* copy, CUstream stream);            // _v2
  CUresult (*cuMemsetD8)(CUdeviceptr dst, unsigned char value, std::size_t count);    // _v2
  CUresult (*cuMemsetD8Async)(CUdeviceptr dst, unsigned char value, std::size_t count, CUstream stream);
  CUresult (*cuMemGetInfo)(std::size_t* free_bytes, std::size_t* total_bytes);        // _v2
  CUresult (*cuModuleLoadData)(CUmodule* module, const void* image);
  CUresult (*cuModuleLoadDataEx)(CUmodule* module, const void* image, unsigned int num_options,
                                 CUjit_option* options, void** option_values);
  CUresult (*cuModuleUnload)(CUmodule module);
  CUresult (*cuModuleGetFunction)(CUfunction* function, CUmodule module, const char* name);
  CUresult (*cuFuncSetAttribute)(CUfunction function, CUfunction_attribute attrib, int value);
  CUresult (*cuLaunchKernel)(CUfunction f, unsigned int grid_x, unsigned int grid_y, unsigned int grid_z,
                             unsigned int block_x, unsigned int block_y, unsigned int block_z,
                             unsigned int shared_bytes, CUstream stream, void** params, void** extra);
  CUresult (*cuGetErrorName)(CUresult error, const char** name);
  CUresult (*cuGetErrorString)(CUresult error, const char** text);
};

// The driver, loaded and initialized (cuInit(0)) on the first call, or
// nullptr with a one-line reason in *why_not (when why_not is not null),
// e.g. "no NVIDIA driver: libcuda.so.1 cannot be loaded (...)" or
// "cuInit failed: CUDA_ERROR_NO_DEVICE (100)". The outcome is computed once
// per process; thread-safe. The library stays loaded until exit.
const driver_api* driver(std::string* why_not);

// "CUDA_ERROR_OUT_OF_MEMORY (2)": the driver's name for the code once it is
// loaded, else a built-in table of the common codes.
std::string result_name(CUresult result);

// --- NVRTC declarations (nvrtc.h) --------------------------------------------

using nvrtcResult = int;
typedef struct nvrtcProgram_st* nvrtcProgram;  // nvrtc.h: struct _nvrtcProgram*
constexpr nvrtcResult NVRTC_SUCCESS = 0;

struct nvrtc_api {
  nvrtcResult (*nvrtcVersion)(int* major, int* minor);
  const char* (*nvrtcGetErrorString)(nvrtcResult result);
  nvrtcResult (*nvrtcCreateProgram)(nvrtcProgram* program, const char* source, const char* name, int num_headers,
                                    const char* const* headers, const char* const* include_names);
  nvrtcResult (*nvrtcDestroyProgram)(nvrtcProgram* program);
  nvrtcResult (*nvrtcCompileProgram)(nvrtcProgram program, int num_options, const char* const* options);
  nvrtcResult (*nvrtcGetProgramLogSize)(nvrtcProgram program, std::size_t* size);
  nvrtcResult (*nvrtcGetProgramLog)(nvrtcProgram program, char* log);
  nvrtcResult (*nvrtcGetPTXSize)(nvrtcProgram program, std::size_t* size);
  nvrtcResult (*nvrtcGetPTX)(nvrtcProgram program, char* ptx);
  // Optional (nullptr before NVRTC 11.1): without them only PTX comes out.
  nvrtcResult (*nvrtcGetCUBINSize)(nvrtcProgram program, std::size_t* size);
  nvrtcResult (*nvrtcGetCUBIN)(nvrtcProgram program, char* cubin);
  // Optional (nullptr before NVRTC 11.2).
  nvrtcResult (*nvrtcGetNumSupportedArchs)(int* count);
  nvrtcResult (*nvrtcGetSupportedArchs)(int* archs);
};

// NVRTC, loaded on the first call from the first of these that loads and
// has every required symbol: $UNICACHE_NVRTC_LIBRARY (only an absolute path;
// ignored in a setuid process), libnvrtc.so, libnvrtc.so.13, libnvrtc.so.12,
// libnvrtc.so.11.2, /usr/local/cuda/lib64/libnvrtc.so. nullptr with a
// one-line reason in *why_not (when not null) if none does. Computed once
// per process; thread-safe.
const nvrtc_api* nvrtc(std::string* why_not);
// The loaded NVRTC's version, major * 1000 + minor * 10 (11080 for 11.8), or
// 0 when NVRTC is unavailable.
int nvrtc_version();
// The path of the loaded NVRTC as the dynamic loader found it, or "".
std::string nvrtc_library();

struct nvrtc_output {
  // A CUBIN, or PTX text with its terminating NUL (cuModuleLoadData reads
  // PTX as a C string).
  std::vector<unsigned char> binary;
  bool ptx = false;
  std::string arch;  // "sm_90" or "compute_86"
  std::string log;   // NVRTC's log (warnings), possibly empty
};

// What NVRTC compiles to for a device of compute capability cc_major.cc_minor:
// "sm_XY" (a CUBIN) when it knows that architecture and can emit CUBINs, else
// PTX ("compute_XY", ptx true) for the newest architecture it knows not above
// the device's. nullopt, with the reason in *why_not, when NVRTC is
// unavailable or knows no architecture up to the device's.
struct nvrtc_target {
  std::string arch;
  bool ptx = false;
};
std::optional<nvrtc_target> nvrtc_target_for(int cc_major, int cc_minor, std::string* why_not);

// Compiles CUDA C++ `source` for a device of compute capability
// cc_major.cc_minor with "--gpu-architecture=sm_XY" followed by `options`,
// giving a CUBIN. When this NVRTC cannot emit a CUBIN for that architecture
// (a GPU newer than the NVRTC), gives PTX for the highest "compute_XY" it
// supports not above the device's, for the driver to JIT. Throws
// cuda_error (result 0) "cuda: nvrtc: compiling <program_name> for <arch> failed:
// <error>\n<log>", or with the reason when NVRTC is unavailable or supports
// no architecture up to the device's.
nvrtc_output nvrtc_compile(const std::string& source, const std::string& program_name, int cc_major, int cc_minor,
                           const std::vector<std::string>& options);

}  // namespace unicache::cuda::detail
