// The GPU backends through one interface, for the examples and the
// benchmarks: engines, device buffers, the kernel counters and a line naming
// the device. Each backend is compiled in under its definition
// (UNICACHE_GPU_WITH_OPENCL, UNICACHE_GPU_WITH_CUDA), which the CMake target
// unicache_gpu_backends sets for the backends the build has, so that any
// subset builds. Not part of the library: a helper of its programs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <string>
#include <vector>

#include "unicache/backend.hpp"
#include "unicache/compiler.hpp"
#if UNICACHE_GPU_WITH_OPENCL
#include "unicache/opencl.hpp"
#endif
#if UNICACHE_GPU_WITH_CUDA
#include "unicache/cuda.hpp"
#endif

namespace unicache::gpu_backends {

// What a backend's kernel path and weight packing did, from its counters.
struct kernel_counts {
  double built = 0, loaded = 0, stored = 0, probes = 0, packs = 0;
  double build_ms = 0, load_ms = 0, pack_ms = 0, first_launch_ms = 0;
};

// 13000 -> "13.0": how cuDriverGetVersion and nvrtcVersion numbers read.
inline std::string cuda_version(int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); }

// Why `Backend`'s process engine cannot be made, or "".
template <class Backend>
std::string engine_failure() {
  try {
    Backend::make_engine();
    return "";
  } catch (const std::exception& e) {
    return e.what();
  }
}

#if UNICACHE_GPU_WITH_OPENCL
struct opencl_backend {
  static constexpr const char* name = "opencl";
  using buffer = cl_mem;
  static engine make_engine() { return opencl::make_engine(); }
  static buffer make_buffer(const engine& e, std::size_t bytes, const void* host = nullptr) {
    return opencl::make_buffer(e, bytes, host);
  }
  static void free_buffer(const engine&, buffer b) { clReleaseMemObject(b); }
  static void read_buffer(const stream& s, buffer b, void* host, std::size_t bytes) {
    opencl::read_buffer(s, b, host, bytes);
  }
  static void write_buffer(const stream& s, buffer b, const void* host, std::size_t bytes) {
    opencl::write_buffer(s, b, host, bytes);
  }
  static void* data(buffer b) { return b; }
  static buffer from_data(void* p) { return static_cast<cl_mem>(p); }
  static std::string device_name(const engine& e) { return opencl::info(e).device_name; }
  // Platform, device and driver.
  static std::string device(const engine& e) {
    const opencl::device_info& i = opencl::info(e);
    return i.platform_name + " / " + i.device_name + " / " + i.driver_version;
  }
  static kernel_counts counts() {
    const opencl::backend_stats s = opencl::stats();
    return {double(s.programs_from_source), double(s.programs_from_binary), double(s.binaries_stored),
            double(s.probe_builds),         double(s.weights_packed),       s.build_ns / 1e6,
            s.load_ns / 1e6,                s.pack_ns / 1e6,                s.first_launch_ns / 1e6};
  }
  // OpenCL says nothing of availability but by failing to make an engine.
  static std::string unavailable_reason() { return engine_failure<opencl_backend>(); }
};
#endif

#if UNICACHE_GPU_WITH_CUDA
struct cuda_backend {
  static constexpr const char* name = "cuda";
  using buffer = CUdeviceptr;
  static engine make_engine() { return cuda::make_engine(); }
  static buffer make_buffer(const engine& e, std::size_t bytes, const void* host = nullptr) {
    return cuda::make_buffer(e, bytes, host);
  }
  static void free_buffer(const engine& e, buffer b) { cuda::free_buffer(e, b); }
  static void read_buffer(const stream& s, buffer b, void* host, std::size_t bytes) {
    cuda::read_buffer(s, b, host, bytes);
  }
  static void write_buffer(const stream& s, buffer b, const void* host, std::size_t bytes) {
    cuda::write_buffer(s, b, host, bytes);
  }
  static void* data(buffer b) { return reinterpret_cast<void*>(b); }
  static buffer from_data(void* p) { return reinterpret_cast<buffer>(p); }
  static std::string device_name(const engine& e) { return cuda::info(e).device_name; }
  // Device, architecture, compile target, driver and NVRTC.
  static std::string device(const engine& e) {
    const cuda::device_info& i = cuda::info(e);
    return i.device_name + " / sm_" + std::to_string(i.compute_major) + std::to_string(i.compute_minor) +
           " / target " + i.target + " / driver " + cuda_version(i.driver_version) + " / NVRTC " +
           cuda_version(i.nvrtc_version);
  }
  // No probe: a CUDA engine learns all it needs from device attributes.
  static kernel_counts counts() {
    const cuda::backend_stats s = cuda::stats();
    return {double(s.programs_from_source), double(s.programs_from_binary), double(s.binaries_stored),
            0,                              double(s.weights_packed),       s.build_ns / 1e6,
            s.load_ns / 1e6,                s.pack_ns / 1e6,                s.first_launch_ns / 1e6};
  }
  static std::string unavailable_reason() {
    return cuda::available() ? engine_failure<cuda_backend>() : cuda::unavailable_reason();
  }
};
#endif

// Device buffers of one backend, freed when this goes out of scope.
template <class Backend>
class buffers {
 public:
  explicit buffers(engine e) : eng_(std::move(e)) {}
  buffers(const buffers&) = delete;
  buffers& operator=(const buffers&) = delete;
  ~buffers() {
    for (typename Backend::buffer b : all_) Backend::free_buffer(eng_, b);
  }
  // `bytes` of device memory, filled from `host` if given: tensor::data.
  void* make(std::size_t bytes, const void* host = nullptr) {
    all_.push_back(Backend::make_buffer(eng_, bytes, host));
    return Backend::data(all_.back());
  }
  void* upload(const std::vector<float>& host) { return make(host.size() * sizeof(float), host.data()); }

 private:
  engine eng_;
  std::vector<typename Backend::buffer> all_;
};

}  // namespace unicache::gpu_backends
