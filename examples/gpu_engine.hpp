// The GPU engine a program gets by default, and the few buffer operations
// the examples need, over whichever GPU backend was chosen (gpu_backends.hpp).
//
// The order: UNICACHE_BACKEND=cuda|opencl forces one; otherwise CUDA where
// the NVIDIA driver reports a device (UNICACHE_CUDA_DEVICE picks which),
// else OpenCL (UNICACHE_OPENCL_DEVICE; a GPU before a CPU device such as
// PoCL). make_gpu() says on stderr which backend it chose and, when it is
// not CUDA, why not. Throws what the chosen backend's make_engine throws.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "gpu_backends.hpp"

namespace unicache::examples {

struct gpu {
  std::string backend;  // "cuda" or "opencl"
  std::string device;   // what the backend calls the device
  engine eng;
  // The chosen backend's buffer functions (gpu_backends.hpp), on void*.
  void* (*make)(const engine&, std::size_t, const void*) = nullptr;
  void (*free)(const engine&, void*) = nullptr;
  void (*read_back)(const stream&, void*, void*, std::size_t) = nullptr;
  gpu_backends::kernel_counts (*counts)() = nullptr;

  // Device memory of `bytes`, filled from `host` if given; the caller
  // releases it with release().
  void* make_buffer(std::size_t bytes, const void* host = nullptr) const { return make(eng, bytes, host); }
  void release(void* buffer) const { free(eng, buffer); }
  void read(const stream& s, void* buffer, void* host, std::size_t bytes) const { read_back(s, buffer, host, bytes); }
  // Kernels built from source (OpenCL: the engine's probe included) and
  // loaded from the store or a blob.
  std::pair<std::uint64_t, std::uint64_t> kernels_built_and_loaded() const {
    const gpu_backends::kernel_counts c = counts();
    return {static_cast<std::uint64_t>(c.built + c.probes), static_cast<std::uint64_t>(c.loaded)};
  }
};

// The process's engine of `Backend`, with its buffer functions.
template <class Backend>
gpu gpu_of() {
  engine e = Backend::make_engine();
  std::string device = Backend::device_name(e);
  return {Backend::name,
          std::move(device),
          std::move(e),
          [](const engine& en, std::size_t bytes, const void* host) {
            return Backend::data(Backend::make_buffer(en, bytes, host));
          },
          [](const engine& en, void* b) { Backend::free_buffer(en, Backend::from_data(b)); },
          [](const stream& s, void* b, void* host, std::size_t bytes) {
            Backend::read_buffer(s, Backend::from_data(b), host, bytes);
          },
          &Backend::counts};
}

inline gpu make_gpu(bool quiet = false) {
  const char* forced = std::getenv("UNICACHE_BACKEND");
  const std::string want = forced ? forced : "";
  if (!want.empty() && want != "cuda" && want != "opencl") {
    std::fprintf(stderr, "unicache: ignoring UNICACHE_BACKEND (expected cuda or opencl); choosing by default order\n");
  }
  std::string why_not_cuda = "the CUDA backend is not built";
#if UNICACHE_GPU_WITH_CUDA
  if (want != "opencl") {
    why_not_cuda = cuda::unavailable_reason();
    if (why_not_cuda.empty() || want == "cuda") {
      gpu g = gpu_of<gpu_backends::cuda_backend>();
      const cuda::device_info& i = cuda::info(g.eng);
      g.device = i.device_name + " (" + i.target + ")";
      if (!quiet) std::fprintf(stderr, "unicache: using the cuda backend on %s\n", g.device.c_str());
      return g;
    }
  } else {
    why_not_cuda = "UNICACHE_BACKEND=opencl";
  }
#endif
#if UNICACHE_GPU_WITH_OPENCL
  gpu g = gpu_of<gpu_backends::opencl_backend>();
  g.device = opencl::info(g.eng).platform_name + " / " + opencl::info(g.eng).device_name;
  if (!quiet) {
    std::fprintf(stderr, "unicache: using the opencl backend on %s (not cuda: %s)\n", g.device.c_str(),
                 why_not_cuda.c_str());
  }
  return g;
#else
  throw std::runtime_error("no GPU backend: " + why_not_cuda);
#endif
}

}  // namespace unicache::examples
