// The GPU engine a program gets by default, and the few buffer operations
// the examples need, over whichever GPU backend was chosen.
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

#include "unicache/backend.hpp"
#include "unicache/compiler.hpp"
#if UNICACHE_EXAMPLES_WITH_CUDA
#include "unicache/cuda.hpp"
#endif
#if UNICACHE_EXAMPLES_WITH_OPENCL
#include "unicache/opencl.hpp"
#endif

namespace unicache::examples {

struct gpu {
  std::string backend;  // "cuda" or "opencl"
  std::string device;   // what the backend calls the device
  engine eng;

  // Device memory of `bytes`, filled from `host` if given; the caller
  // releases it with release().
  void* make_buffer(std::size_t bytes, const void* host = nullptr) const {
#if UNICACHE_EXAMPLES_WITH_CUDA
    if (backend == "cuda") return reinterpret_cast<void*>(cuda::make_buffer(eng, bytes, host));
#endif
#if UNICACHE_EXAMPLES_WITH_OPENCL
    if (backend == "opencl") return opencl::make_buffer(eng, bytes, host);
#endif
    throw std::logic_error("no GPU backend");
  }
  void release(void* buffer) const {
#if UNICACHE_EXAMPLES_WITH_CUDA
    if (backend == "cuda") cuda::free_buffer(eng, reinterpret_cast<CUdeviceptr>(buffer));
#endif
#if UNICACHE_EXAMPLES_WITH_OPENCL
    if (backend == "opencl") clReleaseMemObject(static_cast<cl_mem>(buffer));
#endif
  }
  void read(const stream& s, void* buffer, void* host, std::size_t bytes) const {
#if UNICACHE_EXAMPLES_WITH_CUDA
    if (backend == "cuda") cuda::read_buffer(s, reinterpret_cast<CUdeviceptr>(buffer), host, bytes);
#endif
#if UNICACHE_EXAMPLES_WITH_OPENCL
    if (backend == "opencl") opencl::read_buffer(s, static_cast<cl_mem>(buffer), host, bytes);
#endif
  }
  // Kernels built from source and loaded from the store or a blob.
  std::pair<std::uint64_t, std::uint64_t> kernels_built_and_loaded() const {
#if UNICACHE_EXAMPLES_WITH_CUDA
    if (backend == "cuda") return {cuda::stats().programs_from_source, cuda::stats().programs_from_binary};
#endif
#if UNICACHE_EXAMPLES_WITH_OPENCL
    if (backend == "opencl") {
      const opencl::backend_stats s = opencl::stats();
      return {s.programs_from_source + s.probe_builds, s.programs_from_binary};
    }
#endif
    return {0, 0};
  }
};

inline gpu make_gpu(bool quiet = false) {
  const char* forced = std::getenv("UNICACHE_BACKEND");
  const std::string want = forced ? forced : "";
  if (!want.empty() && want != "cuda" && want != "opencl") {
    std::fprintf(stderr, "unicache: ignoring UNICACHE_BACKEND (expected cuda or opencl); choosing by default order\n");
  }
  std::string why_not_cuda = "the CUDA backend is not built";
#if UNICACHE_EXAMPLES_WITH_CUDA
  if (want != "opencl") {
    why_not_cuda = cuda::unavailable_reason();
    if (why_not_cuda.empty() || want == "cuda") {
      gpu g{"cuda", "", cuda::make_engine()};
      const cuda::device_info& i = cuda::info(g.eng);
      g.device = i.device_name + " (" + i.target + ")";
      if (!quiet) std::fprintf(stderr, "unicache: using the cuda backend on %s\n", g.device.c_str());
      return g;
    }
  } else {
    why_not_cuda = "UNICACHE_BACKEND=opencl";
  }
#endif
#if UNICACHE_EXAMPLES_WITH_OPENCL
  gpu g{"opencl", "", opencl::make_engine()};
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
