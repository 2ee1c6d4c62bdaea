// Loading the CUDA driver and NVRTC with dlopen, and compiling CUDA C++ to a
// CUBIN (or PTX for a GPU newer than the NVRTC).
#include "cuda_api.hpp"

#include "unicache/cuda.hpp"

#include <dlfcn.h>
#include <link.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>

namespace unicache::cuda::detail {
namespace {

std::string last_dlerror() {
  const char* e = ::dlerror();
  return e ? e : "unknown error";
}

// Resolves symbols of one library into function pointers, remembering the
// first required one that is missing.
struct resolver {
  void* library;
  std::string missing;

  template <typename F>
  bool operator()(F& slot, const char* name, bool required = true) {
    slot = reinterpret_cast<F>(::dlsym(library, name));
    if (!slot && required && missing.empty()) missing = name;
    return slot != nullptr;
  }
};

// --- Driver ------------------------------------------------------------------

// cuGetErrorName, once libcuda is loaded: result_name reads it without going
// through driver(), which may be still initializing on this thread.
std::atomic<CUresult (*)(CUresult, const char**)> driver_error_name{nullptr};

struct driver_state {
  driver_api api{};
  bool ok = false;
  std::string why_not;
};

driver_state load_driver() {
  driver_state s;
  // RTLD_LOCAL: the driver's symbols must not satisfy another library's
  // references (a CUDA runtime linked into the same process).
  void* library = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!library) {
    s.why_not = "no NVIDIA driver: libcuda.so.1 cannot be loaded (" + last_dlerror() + ")";
    return s;
  }
  driver_api& a = s.api;
  resolver get{library, {}};
  get(a.cuGetErrorName, "cuGetErrorName");
  get(a.cuGetErrorString, "cuGetErrorString");
  get(a.cuInit, "cuInit");
  get(a.cuDriverGetVersion, "cuDriverGetVersion");
  get(a.cuDeviceGetCount, "cuDeviceGetCount");
  get(a.cuDeviceGet, "cuDeviceGet");
  get(a.cuDeviceGetName, "cuDeviceGetName");
  get(a.cuDeviceGetAttribute, "cuDeviceGetAttribute");
  get(a.cuDeviceGetPCIBusId, "cuDeviceGetPCIBusId");
  get(a.cuDeviceTotalMem, "cuDeviceTotalMem_v2");
  // _v2 (CUDA 11.4) gives a MIG instance's own UUID; both have one signature.
  if (!get(a.cuDeviceGetUuid, "cuDeviceGetUuid_v2", false)) get(a.cuDeviceGetUuid, "cuDeviceGetUuid", false);
  get(a.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
  get(a.cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2");
  get(a.cuCtxGetCurrent, "cuCtxGetCurrent");
  get(a.cuCtxSetCurrent, "cuCtxSetCurrent");
  get(a.cuCtxPushCurrent, "cuCtxPushCurrent_v2");
  get(a.cuCtxPopCurrent, "cuCtxPopCurrent_v2");
  get(a.cuCtxGetDevice, "cuCtxGetDevice");
  get(a.cuCtxSynchronize, "cuCtxSynchronize");
  get(a.cuStreamCreate, "cuStreamCreate");
  get(a.cuStreamDestroy, "cuStreamDestroy_v2");
  get(a.cuStreamSynchronize, "cuStreamSynchronize");
  get(a.cuStreamWaitEvent, "cuStreamWaitEvent");
  get(a.cuEventCreate, "cuEventCreate");
  get(a.cuEventDestroy, "cuEventDestroy_v2");
  get(a.cuEventRecord, "cuEventRecord");
  get(a.cuEventQuery, "cuEventQuery");
  get(a.cuEventSynchronize, "cuEventSynchronize");
  get(a.cuEventElapsedTime, "cuEventElapsedTime");
  get(a.cuMemAlloc, "cuMemAlloc_v2");
  get(a.cuMemFree, "cuMemFree_v2");
  get(a.cuMemcpyHtoD, "cuMemcpyHtoD_v2");
  get(a.cuMemcpyDtoH, "cuMemcpyDtoH_v2");
  get(a.cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2");
  get(a.cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2");
  get(a.cuMemcpy2D, "cuMemcpy2D_v2");
  get(a.cuMemcpy2DAsync, "cuMemcpy2DAsync_v2");
  get(a.cuMemsetD8, "cuMemsetD8_v2");
  get(a.cuMemsetD8Async, "cuMemsetD8Async");
  get(a.cuMemGetInfo, "cuMemGetInfo_v2");
  get(a.cuModuleLoadData, "cuModuleLoadData");
  get(a.cuModuleLoadDataEx, "cuModuleLoadDataEx");
  get(a.cuModuleUnload, "cuModuleUnload");
  get(a.cuModuleGetFunction, "cuModuleGetFunction");
  get(a.cuFuncSetAttribute, "cuFuncSetAttribute");
  get(a.cuLaunchKernel, "cuLaunchKernel");
  // Never unloaded, even when unusable: result_name keeps calling its
  // cuGetErrorName, and after cuInit the driver has threads of its own.
  if (a.cuGetErrorName) driver_error_name.store(a.cuGetErrorName, std::memory_order_release);
  if (!get.missing.empty()) {
    s.why_not = "unusable NVIDIA driver: libcuda.so.1 has no " + get.missing + " (the driver is too old)";
    return s;
  }
  if (const CUresult r = a.cuInit(0); r != CUDA_SUCCESS) {
    s.why_not = "cuInit failed: " + result_name(r);
    return s;
  }
  s.ok = true;
  return s;
}

const driver_state& the_driver() {
  static const driver_state s = load_driver();
  return s;
}

const char* builtin_result_name(CUresult r) {
  switch (r) {
    case 0: return "CUDA_SUCCESS";
    case 1: return "CUDA_ERROR_INVALID_VALUE";
    case 2: return "CUDA_ERROR_OUT_OF_MEMORY";
    case 3: return "CUDA_ERROR_NOT_INITIALIZED";
    case 4: return "CUDA_ERROR_DEINITIALIZED";
    case 34: return "CUDA_ERROR_STUB_LIBRARY";
    case 46: return "CUDA_ERROR_DEVICE_UNAVAILABLE";
    case 100: return "CUDA_ERROR_NO_DEVICE";
    case 101: return "CUDA_ERROR_INVALID_DEVICE";
    case 200: return "CUDA_ERROR_INVALID_IMAGE";
    case 201: return "CUDA_ERROR_INVALID_CONTEXT";
    case 209: return "CUDA_ERROR_NO_BINARY_FOR_GPU";
    case 218: return "CUDA_ERROR_INVALID_PTX";
    case 221: return "CUDA_ERROR_JIT_COMPILER_NOT_FOUND";
    case 222: return "CUDA_ERROR_UNSUPPORTED_PTX_VERSION";
    case 400: return "CUDA_ERROR_INVALID_HANDLE";
    case 500: return "CUDA_ERROR_NOT_FOUND";
    case 600: return "CUDA_ERROR_NOT_READY";
    case 700: return "CUDA_ERROR_ILLEGAL_ADDRESS";
    case 701: return "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES";
    case 719: return "CUDA_ERROR_LAUNCH_FAILED";
    case 801: return "CUDA_ERROR_NOT_SUPPORTED";
    case 803: return "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH";
    case 804: return "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE";
    case 999: return "CUDA_ERROR_UNKNOWN";
    default: return nullptr;
  }
}

// --- NVRTC -------------------------------------------------------------------

struct nvrtc_state {
  nvrtc_api api{};
  bool ok = false;
  std::string why_not;
  std::string library;  // as the dynamic loader found it
  int version = 0;
  std::vector<int> archs;  // the sm_XY it can target, as XY; empty if it cannot tell
};

// The file the dynamic loader opened for `handle` (a name without a slash
// is looked up in the library path), else `name`.
std::string loaded_path(void* handle, const std::string& name) {
  link_map* map = nullptr;
  if (name.find('/') == std::string::npos && ::dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map && map->l_name &&
      map->l_name[0] != '\0') {
    return map->l_name;
  }
  return name;
}

nvrtc_state load_nvrtc() {
  nvrtc_state s;
  std::vector<std::string> candidates;
  std::string tried;
  // secure_getenv: a setuid program must not load a library its user names.
  if (const char* env = ::secure_getenv("UNICACHE_NVRTC_LIBRARY"); env && *env) {
    if (env[0] == '/') {
      candidates.emplace_back(env);
    } else {
      tried = "UNICACHE_NVRTC_LIBRARY=\"" + std::string(env) + "\" ignored (not an absolute path); ";
    }
  }
  for (const char* name : {"libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2",
                           "/usr/local/cuda/lib64/libnvrtc.so"}) {
    candidates.emplace_back(name);
  }
  for (const std::string& name : candidates) {
    void* library = ::dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!library) {
      tried += last_dlerror() + "; ";
      continue;
    }
    // One that loads but lacks a symbol is left loaded, unused, and the
    // next candidate is tried.
    nvrtc_api a{};
    resolver get{library, {}};
    get(a.nvrtcVersion, "nvrtcVersion");
    get(a.nvrtcGetErrorString, "nvrtcGetErrorString");
    get(a.nvrtcCreateProgram, "nvrtcCreateProgram");
    get(a.nvrtcDestroyProgram, "nvrtcDestroyProgram");
    get(a.nvrtcCompileProgram, "nvrtcCompileProgram");
    get(a.nvrtcGetProgramLogSize, "nvrtcGetProgramLogSize");
    get(a.nvrtcGetProgramLog, "nvrtcGetProgramLog");
    get(a.nvrtcGetPTXSize, "nvrtcGetPTXSize");
    get(a.nvrtcGetPTX, "nvrtcGetPTX");
    // Optional: each pair is used only when both halves are there.
    get(a.nvrtcGetCUBINSize, "nvrtcGetCUBINSize", false);
    get(a.nvrtcGetCUBIN, "nvrtcGetCUBIN", false);
    if (!a.nvrtcGetCUBINSize || !a.nvrtcGetCUBIN) {
      a.nvrtcGetCUBINSize = nullptr;
      a.nvrtcGetCUBIN = nullptr;
    }
    get(a.nvrtcGetNumSupportedArchs, "nvrtcGetNumSupportedArchs", false);
    get(a.nvrtcGetSupportedArchs, "nvrtcGetSupportedArchs", false);
    if (!a.nvrtcGetNumSupportedArchs || !a.nvrtcGetSupportedArchs) {
      a.nvrtcGetNumSupportedArchs = nullptr;
      a.nvrtcGetSupportedArchs = nullptr;
    }
    if (!get.missing.empty()) {
      tried += name + ": no " + get.missing + "; ";
      continue;
    }
    int major = 0, minor = 0;
    if (a.nvrtcVersion(&major, &minor) != NVRTC_SUCCESS) {
      tried += name + ": nvrtcVersion failed; ";
      continue;
    }
    int count = 0;
    if (a.nvrtcGetNumSupportedArchs && a.nvrtcGetNumSupportedArchs(&count) == NVRTC_SUCCESS && count > 0) {
      s.archs.resize(static_cast<std::size_t>(count));
      if (a.nvrtcGetSupportedArchs(s.archs.data()) != NVRTC_SUCCESS) s.archs.clear();
      std::sort(s.archs.begin(), s.archs.end());
    }
    s.api = a;
    s.ok = true;
    s.library = loaded_path(library, name);
    s.version = major * 1000 + minor * 10;
    return s;
  }
  tried.resize(tried.size() - 2);  // the last "; "
  s.why_not = "no NVRTC (the CUDA runtime compiler) can be loaded: " + tried;
  return s;
}

const nvrtc_state& the_nvrtc() {
  static const nvrtc_state s = load_nvrtc();
  return s;
}

std::string nvrtc_error(const nvrtc_api& a, nvrtcResult r) {
  const char* text = a.nvrtcGetErrorString(r);
  return (text ? std::string(text) : "NVRTC error") + " (" + std::to_string(r) + ")";
}

std::string program_log(const nvrtc_api& a, nvrtcProgram p) {
  std::size_t size = 0;
  if (a.nvrtcGetProgramLogSize(p, &size) != NVRTC_SUCCESS || size == 0) return "";
  std::string log(size, '\0');
  if (a.nvrtcGetProgramLog(p, log.data()) != NVRTC_SUCCESS) return "";
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
  return log;
}

// Destroys the program on every path out of nvrtc_compile.
struct program_guard {
  const nvrtc_api& api;
  nvrtcProgram program = nullptr;
  ~program_guard() {
    if (program) api.nvrtcDestroyProgram(&program);
  }
};

}  // namespace

const driver_api* driver(std::string* why_not) {
  const driver_state& s = the_driver();
  if (!s.ok && why_not) *why_not = s.why_not;
  return s.ok ? &s.api : nullptr;
}

std::string result_name(CUresult result) {
  const char* name = nullptr;
  if (auto get_name = driver_error_name.load(std::memory_order_acquire)) {
    if (get_name(result, &name) != CUDA_SUCCESS) name = nullptr;
  }
  if (!name) name = builtin_result_name(result);
  return std::string(name ? name : "unknown CUresult") + " (" + std::to_string(result) + ")";
}

const nvrtc_api* nvrtc(std::string* why_not) {
  const nvrtc_state& s = the_nvrtc();
  if (!s.ok && why_not) *why_not = s.why_not;
  return s.ok ? &s.api : nullptr;
}

int nvrtc_version() { return the_nvrtc().version; }

std::string nvrtc_library() { return the_nvrtc().library; }

std::optional<nvrtc_target> nvrtc_target_for(int cc_major, int cc_minor, std::string* why_not) {
  const nvrtc_state& s = the_nvrtc();
  if (!s.ok) {
    if (why_not) *why_not = s.why_not;
    return std::nullopt;
  }
  // A CUBIN when this NVRTC knows the device's architecture (one that cannot
  // list them is trusted to), else PTX of the newest one not above it: the
  // driver JIT-compiles that for the device.
  const int cc = cc_major * 10 + cc_minor;
  const bool knows_cc = s.archs.empty() || std::binary_search(s.archs.begin(), s.archs.end(), cc);
  if (knows_cc && s.api.nvrtcGetCUBIN) return nvrtc_target{"sm_" + std::to_string(cc), false};
  int target = cc;
  if (!knows_cc) {
    const auto above = std::upper_bound(s.archs.begin(), s.archs.end(), cc);
    if (above == s.archs.begin()) {
      if (why_not) {
        *why_not = s.library + " supports sm_" + std::to_string(s.archs.front()) + " and newer";
      }
      return std::nullopt;
    }
    target = *(above - 1);
  }
  return nvrtc_target{"compute_" + std::to_string(target), true};
}

nvrtc_output nvrtc_compile(const std::string& source, const std::string& program_name, int cc_major, int cc_minor,
                           const std::vector<std::string>& options) {
  const nvrtc_state& s = the_nvrtc();
  if (!s.ok) throw cuda_error("cuda: nvrtc: cannot compile " + program_name + ": " + s.why_not, 0);
  const nvrtc_api& a = s.api;
  std::string why;
  const std::optional<nvrtc_target> target = nvrtc_target_for(cc_major, cc_minor, &why);
  if (!target) {
    throw cuda_error("cuda: nvrtc: cannot compile " + program_name + " for sm_" + std::to_string(cc_major) +
                             std::to_string(cc_minor) + ": " + why, 0);
  }
  nvrtc_output out;
  out.arch = target->arch;
  out.ptx = target->ptx;

  const std::string arch_option = "--gpu-architecture=" + out.arch;
  std::vector<const char*> argv{arch_option.c_str()};
  for (const std::string& o : options) argv.push_back(o.c_str());

  program_guard guard{a};
  nvrtcResult r = a.nvrtcCreateProgram(&guard.program, source.c_str(), program_name.c_str(), 0, nullptr, nullptr);
  if (r != NVRTC_SUCCESS) {
    guard.program = nullptr;
    throw cuda_error("cuda: nvrtc: compiling " + program_name + " for " + out.arch +
                             " failed: " + nvrtc_error(a, r) + "\n", 0);
  }
  r = a.nvrtcCompileProgram(guard.program, static_cast<int>(argv.size()), argv.data());
  out.log = program_log(a, guard.program);
  if (r != NVRTC_SUCCESS) {
    throw cuda_error("cuda: nvrtc: compiling " + program_name + " for " + out.arch + " failed: " +
                             nvrtc_error(a, r) + "\n" + out.log, 0);
  }

  std::size_t size = 0;
  r = out.ptx ? a.nvrtcGetPTXSize(guard.program, &size) : a.nvrtcGetCUBINSize(guard.program, &size);
  if (r == NVRTC_SUCCESS) {
    out.binary.resize(size);
    auto* data = reinterpret_cast<char*>(out.binary.data());
    r = out.ptx ? a.nvrtcGetPTX(guard.program, data) : a.nvrtcGetCUBIN(guard.program, data);
  }
  if (r != NVRTC_SUCCESS || out.binary.empty()) {
    throw cuda_error("cuda: nvrtc: reading the " + std::string(out.ptx ? "PTX" : "CUBIN") + " of " + program_name +
                             " for " + out.arch + " failed: " +
                             (r != NVRTC_SUCCESS ? nvrtc_error(a, r) : std::string("it is empty")), 0);
  }
  if (out.ptx && out.binary.back() != '\0') out.binary.push_back('\0');
  return out;
}

}  // namespace unicache::cuda::detail
