// The CUDA backend's side of the kernel path: NVRTC builds a cubin, and
// the driver loads one (refusing an image that is not for this device).
#include <array>
#include <string>

#include "cuda_internal.hpp"
#include "unicache/backend_support.hpp"

namespace unicache::cuda::detail {
namespace {

// The module's JIT error log, for a binary the driver refuses.
CUresult load_module(const byte_vector& image, CUmodule* module, std::string* log) {
  char error_log[4096] = {};
  CUjit_option options[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void* values[] = {error_log, reinterpret_cast<void*>(static_cast<std::uintptr_t>(sizeof error_log - 1))};
  const CUresult r = api().cuModuleLoadDataEx(module, image.data(), 2, options, values);
  if (log) *log = error_log;
  return r;
}

// The driver's verdict on the image itself (not a full device or a broken
// context): the stored binary is refused and rebuilt.
bool refused_image(CUresult r) {
  switch (r) {
    case CUDA_ERROR_INVALID_IMAGE:
    case CUDA_ERROR_NO_BINARY_FOR_GPU:
    case CUDA_ERROR_INVALID_PTX:
    case CUDA_ERROR_UNSUPPORTED_PTX_VERSION:
    case CUDA_ERROR_INVALID_VALUE:  // a malformed image
      return true;
    default:
      return false;
  }
}

// What the driver may be given: a cubin (an ELF image) or PTX (text the
// driver reads up to its NUL, which must be inside the buffer).
bool loadable_image(byte_span binary) {
  if (binary.size() >= 4 && binary[0] == 0x7f && binary[1] == 'E' && binary[2] == 'L' && binary[3] == 'F') return true;
  return !binary.empty() && binary.back() == '\0';
}

}  // namespace

program::~program() {
  if (!module_) return;  // compiled offline: never loaded
  try {
    context_guard guard(engine_->context);
    api().cuModuleUnload(module_);
  } catch (...) {
    // The context is gone, and its modules with it.
  }
}

std::unique_ptr<device_program> build_program(const engine& e, const kernel_source& src) {
  const engine_state& state = state_of(e);
  const device_info& info = state.info;
  const nvrtc_output out =
      nvrtc_compile(src.source, src.kernel_name + ".cu", info.compute_major, info.compute_minor, {src.options});
  if (out.ptx) {
    support::warn_once("cuda-ptx-fallback", "cuda: NVRTC " + std::to_string(nvrtc_version() / 1000) + "." +
                                                std::to_string(nvrtc_version() % 1000 / 10) + " cannot target " +
                                                info.device_name + " (sm_" + std::to_string(info.compute_major) +
                                                std::to_string(info.compute_minor) + "): kernels are compiled to PTX (" +
                                                out.arch + ") and the driver compiles them again in every process");
  }
  if (state.offline) {
    // Ahead of time: the binary is what is wanted, and there is no device to
    // load it on.
    return std::make_unique<program>(e.native_shared<const engine_state>(), nullptr, nullptr, std::move(out.binary));
  }
  context_guard guard(state.context);
  CUmodule module = nullptr;
  std::string log;
  const CUresult r = load_module(out.binary, &module, &log);
  if (r != CUDA_SUCCESS) {
    throw cuda_error("cuda: loading the " + src.kernel_name + " kernel NVRTC built for " + out.arch +
                         " failed: " + result_name(r) + (log.empty() ? std::string() : "\n" + log),
                     r);
  }
  CUfunction function = nullptr;
  const CUresult f = api().cuModuleGetFunction(&function, module, src.kernel_name.c_str());
  if (f != CUDA_SUCCESS) {
    api().cuModuleUnload(module);
    check(f, "cuModuleGetFunction(" + src.kernel_name + ")");
  }
  return std::make_unique<program>(e.native_shared<const engine_state>(), module, function, std::move(out.binary));
}

std::unique_ptr<device_program> load_program(const engine& e, const kernel_source& src, byte_span binary) {
  if (!loadable_image(binary)) return nullptr;
  device_state_of(e, "loading a binary");  // never asked of an offline engine: it reads no binaries
  byte_vector image(binary.begin(), binary.end());
  context_guard guard(state_of(e).context);
  CUmodule module = nullptr;
  if (const CUresult r = load_module(image, &module, nullptr); r != CUDA_SUCCESS) {
    if (refused_image(r)) return nullptr;
    check(r, "cuModuleLoadDataEx(" + src.kernel_name + ", a stored binary)");
  }
  CUfunction function = nullptr;
  if (const CUresult r = api().cuModuleGetFunction(&function, module, src.kernel_name.c_str()); r != CUDA_SUCCESS) {
    api().cuModuleUnload(module);
    if (r == CUDA_ERROR_NOT_FOUND) return nullptr;  // an image of something else
    check(r, "cuModuleGetFunction(" + src.kernel_name + ")");
  }
  return std::make_unique<program>(e.native_shared<const engine_state>(), module, function, std::move(image));
}

}  // namespace unicache::cuda::detail
