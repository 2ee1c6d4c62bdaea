// unicache/kernel_path.hpp — how every backend that compiles code gets a
// kernel: the kernel cache, then a preloaded binary, then the store, and only
// then a build from source. For: backend authors. The core owns the path; a
// backend writes the few functions of `kernel_builder` (build, load, read
// back, identity) and never calls the store itself. docs/writing-a-backend.md
// walks through one.
//
//   struct my_builder final : unicache::kernel_builder { ... };
//   auto k = unicache::get_or_build_kernel(my_backend.cache_owner(), engine.scope(), my_builder{engine}, source,
//                                          preloaded);
//   k->launch([&] { enqueue(k->program<my_program>(), stream, args); });
//
// The path, for one kernel_source on one engine:
//  1. the kernel cache (in memory, single-flight: concurrent callers of one
//     kernel build it once), keyed by the engine's scope and source.config;
//  2. a binary the caller preloaded (from a compiled-partition cache blob)
//     under the source's store key;
//  3. the persistent kernel store, under the builder's device identity and
//     the store key;
//  4. the builder's build from source.
// A binary the builder refuses to load (another driver build behind the
// same identity, a damaged file) is counted as rejected, removed from the
// store, and the kernel is built from source: never a failure, never a
// wrong kernel. A load that fails for another reason (the device is out of
// memory) throws, and the stored binary stays. A kernel built from source is
// put in the store after its first launch is enqueued (a driver that
// finishes compiling at the first launch, like PoCL, does it there); one
// from a preloaded binary is not (a blob is the application's to trust, not
// every user's of the store).
//
// Counters (kernel_path_stats) and UNICACHE_VERBOSE lines come from here,
// the same for every backend:
//   unicache_verbose,kernel_path,<build|load|reject|store>,backend=<name>,kernel=<name>,key=<16 hex>,ms=<time>
//
// Thread safety: everything here may be called from any thread; a kernel's
// launch() may run concurrently (the backend's run function serializes what
// it must, e.g. OpenCL's shared kernel arguments).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "unicache/backend.hpp"
#include "unicache/cache.hpp"
#include "unicache/store.hpp"

namespace unicache {

// What to build: generated source in one language, its compile options and
// the kernel's name.
struct kernel_source {
  // The kernel configuration's key (never shapes unless the kernel is
  // specialized for them): the kernel cache key within the engine's scope.
  std::string config;
  // The source language, e.g. "opencl-c" or "cuda-c": the store key's kind
  // (what `unicache-store list` shows).
  std::string language;
  std::string source;
  std::string options;
  std::string kernel_name;
  // The shapes the kernel is compiled for ("M=37 N=64 K=768"), or "" for a
  // kernel that runs every shape (sizes are arguments). The source says it
  // too; the key carries it apart so that a miss can name it.
  std::string shape_class;
  // The persistent store's key: everything that decides the binary
  // (language, kernel name, options, shape class, source), each a
  // cache_key text field in that order.
  std::string store_key() const;
};

// A backend's built kernel: its native objects (a cl_program and cl_kernel,
// a CUmodule and CUfunction). Owned by the core's `kernel`, destroyed when
// the kernel cache and every compiled partition let go of it.
class device_program {
 public:
  virtual ~device_program() = default;
  // The device binary as the driver has it now (what the store and blobs
  // keep); empty when the driver cannot give one back.
  virtual byte_vector binary() const = 0;
  // Its size, without copying it (what the kernel cache counts). The
  // default copies; backends whose driver tells the size override it.
  virtual std::size_t binary_size() const { return binary().size(); }
};

// What a backend implements for the kernel path, for one engine (a device
// and context). Called outside every lock of the core.
class kernel_builder {
 public:
  virtual ~kernel_builder() = default;
  // The backend's name, for verbose lines and errors.
  virtual const char* backend_name() const = 0;
  // What the binaries are valid for (the store's key directory).
  virtual device_identity identity() const = 0;
  // Builds `src` from source. Throws the backend's error (with the build
  // log) when it does not build.
  virtual std::unique_ptr<device_program> build(const kernel_source& src) const = 0;
  // The kernel from a binary made earlier, or nullptr when the driver
  // refuses it (the core then builds from source). Must not throw for a
  // refused binary; may throw for a failure that a rebuild cannot fix.
  virtual std::unique_ptr<device_program> load(const kernel_source& src, byte_span binary) const = 0;
  // Why this machine cannot run binaries made for identity(), naming what
  // it lacks ("driver 11040 (CUDA 11.4) cannot run ..."); "" when it can.
  // identity() holds what decides the binary, not what loads it (a CUDA
  // cubin is keyed by its architecture and compiler, not by the driver):
  // asked before a stored or preloaded binary is loaded, and a refusal is a
  // rejected binary, explained on stderr: the kernel is built here, and the
  // stored binary stays (the machines that can run it use it; the one built
  // here is not stored). The default: nothing is refused before load().
  virtual std::string load_refusal() const { return {}; }
  // false: the path never reads a stored or preloaded binary for this
  // builder, and builds every kernel from source (an engine that compiles
  // ahead of time, whose binaries must be its compiler's own).
  virtual bool reads_stored_binaries() const { return true; }
};

// Counters of the kernel path, per owner id (one per backend), since the
// process started.
struct kernel_path_stats {
  std::uint64_t from_source = 0;     // kernels built from source
  std::uint64_t from_binary = 0;     // kernels loaded from a stored or preloaded binary
  std::uint64_t rejected = 0;        // binaries the driver refused (then rebuilt)
  std::uint64_t stored = 0;          // binaries written to the persistent store
  std::uint64_t build_ns = 0;        // time building from source
  std::uint64_t load_ns = 0;         // time loading binaries (the store read included)
  std::uint64_t first_launch_ns = 0; // each kernel's first launch: a driver's last compile step plus the enqueue
};
// The counters of the backend whose cache owner id is `owner`.
namespace kernel_path {
kernel_path_stats stats(owner_id owner);
}  // namespace kernel_path

// Time this thread spent in first launches, so that a timing that contains
// one (packing a weight) can leave it out.
std::uint64_t first_launch_ns_this_thread() noexcept;

// Nanoseconds since construction on this thread, less the first launches
// it made meanwhile (those count as first_launch_ns): what a backend adds to
// its own timings, such as packing a weight with a kernel launched for the
// first time.
class time_without_first_launches {
 public:
  time_without_first_launches()
      : start_(std::chrono::steady_clock::now()), launches_before_(first_launch_ns_this_thread()) {}
  std::uint64_t ns() const {
    const auto elapsed =
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start_).count();
    return static_cast<std::uint64_t>(elapsed) - (first_launch_ns_this_thread() - launches_before_);
  }

 private:
  std::chrono::steady_clock::time_point start_;
  std::uint64_t launches_before_;
};

// One kernel on the path, shared by every compiled partition whose
// configuration it is. Immutable but for the one-shot flags.
class kernel {
 public:
  kernel(owner_id owner, std::unique_ptr<device_program> program, std::string name, std::string store_key,
         device_identity identity, bool store_after_first_launch);
  ~kernel();
  kernel(const kernel&) = delete;
  kernel& operator=(const kernel&) = delete;

  // The backend's program, as the type it built.
  template <typename Program>
  const Program& program() const {
    return static_cast<const Program&>(*program_);
  }
  // Runs `run` (which enqueues the kernel; it need not wait). The first
  // launch is timed as first_launch_ns; after it returns, a kernel built
  // from source has its binary put in the store.
  template <typename Run>
  void launch(Run&& run) const {
    if (!(first_launch_.load(std::memory_order_relaxed) && first_launch_.exchange(false))) {
      run();
      return;
    }
    const auto start = std::chrono::steady_clock::now();
    try {
      run();
    } catch (...) {
      first_launch_.store(true);  // not launched: the next launch is the first
      throw;
    }
    after_first_launch(start);
  }
  byte_vector binary() const { return program_->binary(); }
  // What the kernel cache counts for it: the device binary, its key and
  // name, and the object itself (the driver's own bookkeeping is not
  // visible to us and not counted).
  std::size_t cached_bytes() const { return cached_bytes_; }
  const std::string& store_key() const { return store_key_; }
  const std::string& name() const { return name_; }

 private:
  void after_first_launch(std::chrono::steady_clock::time_point start) const;

  owner_id owner_;
  std::unique_ptr<device_program> program_;
  std::string name_;
  std::string store_key_;
  device_identity identity_;
  std::size_t cached_bytes_ = 0;
  mutable std::atomic<bool> store_pending_;
  mutable std::atomic<bool> first_launch_{true};
};

// What a kernel counts against the kernel cache's capacity while it is
// being built; once built it counts kernel::cached_bytes().
inline constexpr std::size_t kernel_bytes_estimate = 128 * 1024;

// The kernel the kernel cache holds under `config` (a kernel_source's
// config), or nullptr: the kernel cache alone, what get_or_build_kernel
// looks for first, for a caller that can then skip generating the source.
std::shared_ptr<const kernel> kernel_if_cached(owner_id owner, const cache_scope& scope, const std::string& config);

// The whole kernel path (see the top of this file), a build from source
// last, for the backend whose cache owner id is `owner` (its kernels are
// entries of kernel_cache() under it).
// Throws what the builder's build() throws when a kernel does not build.
std::shared_ptr<const kernel> get_or_build_kernel(owner_id owner, const cache_scope& scope,
                                                  const kernel_builder& builder, const kernel_source& src,
                                                  const std::vector<kernel_binary>& preloaded);

// The kernel of `src` if it was built before: the kernel cache has it or
// the store holds its binary (then loaded, and cached, through
// get_or_build_kernel: the store is read twice, and a binary the driver
// rejects is rebuilt in line there, as always); nullptr when neither has
// it, building nothing. For a caller with
// an alternative to a build in line (a build can wait; a load takes a
// millisecond or two).
std::shared_ptr<const kernel> kernel_if_built(owner_id owner, const cache_scope& scope, const kernel_builder& builder,
                                              const kernel_source& src);

// Runs `task` on the background threads that build specialized kernels
// (specialize_settings::threads of them, at low priority): for a backend
// that gets a kernel through get_or_build_kernel before an execution needs it, so
// that the kernel cache has it then. Returns false, running nothing, where
// there are none (threads is 0), while the process exits, or in a child of
// fork(); the caller then does without (builds in line, say). A task that
// throws is ended quietly: it reports its own failures. A task holds what
// it captured (an engine) until it has run: wait_for_specializations(),
// which waits for queued tasks too, before destroying a context a task may
// build for (cuda::release_cached does).
bool build_in_background(std::function<void()> task);

// The binaries of `kernels` (null ones skipped), for compiled_kernel::binaries().
std::vector<kernel_binary> binaries_of(std::initializer_list<const kernel*> kernels);

}  // namespace unicache
