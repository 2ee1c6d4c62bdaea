// Internals of the OpenCL backend shared by its files (and its tests): the
// engine and stream states, status checking, counters, and the kernel path.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "unicache/opencl.hpp"

namespace unicache::opencl::detail {

// "CL_BUILD_PROGRAM_FAILURE (-11)".
std::string status_name(cl_int status);
// Throws opencl_error("<what>: <status name>") unless status is CL_SUCCESS.
void check(cl_int status, const std::string& what);

// Work-group shape and tiles of the generated kernels, chosen from the
// probed device info (so equal infos give equal kernels).
struct gemm_tiles {
  int bm = 64, bn = 64, bk = 16;  // the work-group's C tile and K step
  int rm = 4, rn = 4;             // each work-item's register block
  int local_x() const { return bn / rn; }
  int local_y() const { return bm / rm; }
};
struct kernel_plan {
  gemm_tiles gemm;
  int vector_work_group = 256;  // eltwise, binary, softmax (a power of two)
};
kernel_plan plan_for(const device_info& info);

struct engine_state {
  cl_device_id device = nullptr;
  cl_context context = nullptr;
  device_info info;
  device_identity identity;
  kernel_plan plan;
  ~engine_state();
};

struct stream_state {
  cl_command_queue queue = nullptr;
  ~stream_state();
};

struct counters {
  std::atomic<std::uint64_t> probe_builds{0}, programs_from_source{0}, programs_from_binary{0},
      binaries_rejected{0}, binaries_stored{0}, weights_packed{0}, weights_released{0}, build_ns{0}, load_ns{0},
      pack_ns{0}, first_launch_ns{0};
  // Nanoseconds since `start`.
  static std::uint64_t ns_since(std::chrono::steady_clock::time_point start) {
    return static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count());
  }
  // Adds the time since `start` to `total`.
  static void add_time(std::atomic<std::uint64_t>& total, std::chrono::steady_clock::time_point start) {
    total.fetch_add(ns_since(start), std::memory_order_relaxed);
  }
};
counters& stats_counters();
// This thread's share of first_launch_ns, so that timings that contain a
// first launch (packing a weight) can leave it out.
inline thread_local std::uint64_t first_launch_ns_this_thread = 0;

// The backend singleton (registered on first use).
backend* the_backend();
// Queries every field of device_info that needs no kernel.
device_info query_device(cl_device_id device);
device_identity identity_of(const device_info& info);

// --- Kernel path --------------------------------------------------------------

// What to build: generated OpenCL C, its options and the kernel's name.
// `config` is the kernel configuration's key (never shapes): the kernel
// cache key within the engine's scope.
struct kernel_source {
  std::string config;
  std::string source;
  std::string options;
  std::string kernel_name;
  // The persistent store's key: everything that decides the binary.
  std::string store_key() const;
};

// One built program with its kernel, shared by every compiled partition
// whose configuration it is.
class program {
 public:
  program(cl_program p, cl_kernel k, std::string store_key, device_identity identity, bool store_after_launch);
  ~program();
  program(const program&) = delete;
  program& operator=(const program&) = delete;

  // Sets the arguments and enqueues on the stream's queue (arguments and
  // enqueue under one lock: cl_kernel arguments are shared state), then
  // waits. After the program's first launch, stores the binary read back
  // then (on PoCL it holds the compiled work-group function).
  // (A template: a std::function of the kernels' capturing lambdas would
  // allocate on every execution.)
  template <typename SetArgs>
  void launch(const stream& s, SetArgs&& set_args, cl_uint dims, const std::size_t* global,
              const std::size_t* local) const {
    const bool first = first_launch_.load(std::memory_order_relaxed) && first_launch_.exchange(false);
    const auto start = std::chrono::steady_clock::now();
    {
      std::lock_guard lock(launch_mu_);
      set_args(kernel_);
      enqueue(s, dims, global, local);
    }
    finish(s);
    // Drivers finish compiling at the first launch (PoCL builds its
    // work-group function then): counted apart, execution included.
    if (first) {
      const std::uint64_t ns = counters::ns_since(start);
      stats_counters().first_launch_ns.fetch_add(ns, std::memory_order_relaxed);
      first_launch_ns_this_thread += ns;
    }
  }
  // The device binary as the driver has it now.
  byte_vector binary() const;
  const std::string& store_key() const { return store_key_; }

 private:
  void enqueue(const stream& s, cl_uint dims, const std::size_t* global, const std::size_t* local) const;
  // Waits for the queue; after the first launch, stores the binary.
  void finish(const stream& s) const;

  cl_program program_;
  cl_kernel kernel_;
  std::string store_key_;
  device_identity identity_;
  mutable std::mutex launch_mu_;
  mutable std::atomic<bool> store_pending_;
  mutable std::atomic<bool> first_launch_{true};
};

// The kernel path: the kernel cache (in memory, single-flight), then a
// preloaded binary (from a compiled-partition blob), then the persistent
// store, then clBuildProgram from source. A binary the driver rejects is
// dropped (and removed from the store) and the program is built from
// source. Build errors throw opencl_error with the build log.
std::shared_ptr<const program> get_program(const engine& e, const kernel_source& src,
                                           const std::vector<kernel_binary>& preloaded);

// Builds `source` on the engine's device (no cache, no store): the probe
// and get_program's last resort. Throws opencl_error with the build log.
cl_program build_from_source(const engine_state& s, const std::string& source, const std::string& options);

// clSetKernelArg with the status checked.
template <typename T>
void set_arg(cl_kernel k, cl_uint index, const T& value) {
  check(clSetKernelArg(k, index, sizeof(T), &value), "clSetKernelArg " + std::to_string(index));
}

}  // namespace unicache::opencl::detail
