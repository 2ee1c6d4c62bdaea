// unicache/gpu.hpp — the generated-kernel GPU backend core, and the small
// device interface a GPU API implements to get it. For: authors of a GPU
// backend (CUDA, OpenCL; HIP or Level Zero would be one more), and users
// reading the statistics every such backend reports.
//
// The core owns everything the GPU backends do alike: the compiled kernels
// of each partition kind (a tiled GEMM with its fused epilogue, binary and
// unary ops, softmax) from the kernel generator, constant weights packed on
// the device once, the constant check, retrying an allocation after
// evicting packed weights, split-K workspaces, the generic and specialized
// GEMM choice and its tuning, the counters, and the lifetime of everything
// it caches on a device. A GPU API implements `device` (allocate, free,
// fill, read, launch, stream, event, wait, identity, the kernel path's
// builder) and calls register_device once:
//
//   class my_device final : public unicache::gpu::device { ... };
//   unicache::backend* the_backend() {
//     static unicache::backend* const b = unicache::gpu::register_device(std::make_unique<my_device>());
//     return b;
//   }
//
// docs/design.md lists what a new API's folder holds.
//
// Execution is asynchronous and stream-ordered: compiled_partition::execute
// enqueues the partition's kernels on the caller's stream and returns;
// stream::wait() is where the caller waits, once per request. A device
// object the core caches (a packed weight, a split-K workspace, a kernel's
// module) remembers an event of each stream that used it and is freed only
// once those events complete (a deferred release, never a wait: see
// deferred_release below). A weight packed on one stream and used on
// another makes the second stream wait for the packing, on the device.
//
// Thread safety: a device's members are called from any thread, on
// engines and streams of that device; a stream is used by one thread at a
// time (as everywhere in unicache).
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "unicache/backend.hpp"
#include "unicache/kernel_generator.hpp"
#include "unicache/kernel_path.hpp"

namespace unicache::gpu {

namespace detail {
class stream_access;
}  // namespace detail

// A GPU API's call failed; each API's error type (cuda_error,
// opencl_error) derives from it. `code()` is the API's status (a CUresult,
// a cl_int), 0 when the error is not one of the API's statuses.
class api_error : public error {
 public:
  api_error(const std::string& what, int code) : error(what), code_(code) {}
  int code() const noexcept { return code_; }

 private:
  int code_;
};

// Device memory as the API names it, and as a tensor's `data` holds it: a
// CUdeviceptr or a cl_mem, cast to void*.
using buffer = void*;

// A kernel's arguments: each a buffer, a 32-bit or a 64-bit integer or a
// float, in order, as the generated kernels declare them.
class kernel_args {
 public:
  kernel_args& add(buffer b) { return put(&b, sizeof b); }
  kernel_args& add(std::int32_t v) { return put(&v, sizeof v); }
  kernel_args& add(std::int64_t v) { return put(&v, sizeof v); }
  kernel_args& add(float v) { return put(&v, sizeof v); }
  int count() const { return count_; }
  // The i-th value's bytes and size (what clSetKernelArg takes).
  const void* value(int i) const { return &slots_[i]; }
  std::size_t size(int i) const { return sizes_[i]; }
  // A pointer to each value (what cuLaunchKernel takes), into this object.
  void** pointers() const {
    for (int i = 0; i < count_; ++i) pointers_[i] = const_cast<std::uint64_t*>(&slots_[i]);
    return pointers_;
  }

  static constexpr int max_count = 64;

 private:
  kernel_args& put(const void* v, std::size_t n);
  std::uint64_t slots_[max_count];
  std::uint8_t sizes_[max_count];
  mutable void* pointers_[max_count];
  int count_ = 0;
};

// A launch of `global` work-items in work-groups of `local`, per dimension
// (unused dimensions 1); OpenCL's NDRange, CUDA's grid times block.
struct launch_dims {
  std::array<std::size_t, 3> global{1, 1, 1};
  std::array<std::size_t, 3> local{1, 1, 1};
  bool empty() const { return global[0] == 0 || global[1] == 0 || global[2] == 0; }
};

// A point on one stream: complete once the device has finished everything
// enqueued on the stream before it. Made by device::record; the API's
// object is released when the last holder lets go.
class event {
 public:
  enum class state { pending, complete, failed };
  virtual ~event() = default;
  // Never waits.
  virtual state query() const = 0;
  // Waits on the host until it is no longer pending (used only where the
  // host must: the bounded deferred-release list, out of memory).
  virtual void synchronize() const = 0;
  // Device time from `start` (an earlier event of the same stream, both
  // recorded with device::record_timed) to this one, once both are
  // complete; nullopt otherwise.
  virtual std::optional<std::uint64_t> ns_since(const event& /*start*/) const { return std::nullopt; }
};

// What the core keeps per stream, inside the API's stream state: a serial
// that no other stream of the process has, the split-K workspace the
// stream's GEMMs share (they run in order), and the events of its recent
// executions (a failure among them is reported once, at the next execute
// or at wait()).
class stream_resources {
 public:
  stream_resources();
  // The workspace is released after the final event (set_final_event), else
  // after the stream's last execution.
  ~stream_resources();
  stream_resources(const stream_resources&) = delete;
  stream_resources& operator=(const stream_resources&) = delete;

  std::uint64_t serial() const { return serial_; }
  // Whether it holds device memory (a workspace): the API's stream
  // destructor then records the final event.
  bool holds_memory() {
    std::lock_guard lock(mu_);
    return workspace_ != nullptr;
  }
  // For the API's stream destructor: the event after which nothing of the
  // stream uses the workspace (recorded while the stream still exists).
  void set_final_event(std::shared_ptr<const event> e);
  // Whether only unicache enqueues work on the stream (one the engine made,
  // not a caller's native stream): then the constant check reads a
  // constant's sampled blocks without waiting for the stream's queued work,
  // which never writes a constant input. Set by the API's make_stream.
  void set_only_unicache_work(bool only) { only_unicache_work_ = only; }
  bool only_unicache_work() const { return only_unicache_work_; }
  // Whether the caller declared that constant inputs of work on this stream
  // change only with a tensor::version bump (a framework that counts its
  // parameters' in-place changes, and keeps them alive): then address and
  // version identify a constant, and no execution reads it from the device
  // for the contents check (constant_check::none for this stream's work).
  void set_versioned_constants(bool versioned) { versioned_constants_ = versioned; }
  bool versioned_constants() const { return versioned_constants_; }

 private:
  friend class detail::stream_access;
  std::uint64_t serial_;
  bool only_unicache_work_ = false;
  bool versioned_constants_ = false;
  std::mutex mu_;
  const class device* device_ = nullptr;  // the workspace's, set with it
  engine engine_;
  buffer workspace_ = nullptr;
  std::size_t workspace_bytes_ = 0;
  std::vector<std::shared_ptr<const event>> unchecked_;  // executions not known to have succeeded
  bool failed_ = false;                                 // one of them failed, not reported yet
  std::shared_ptr<const event> last_, final_;
};

// Facts about an engine that the core plans kernels with.
struct engine_facts {
  device_identity identity;
  kernels::gemm_tiles gemm;     // the generic GEMM's tiles (its split-K: kernels::gemm_splits)
  int vector_work_group = 256;  // eltwise, binary, softmax, packing (a power of two)
  int compute_units = 0;        // SMs, OpenCL compute units (0: unknown, no split-K)
  std::size_t local_memory_bytes = 48 * 1024;  // per work-group (CUDA's static shared memory on every GPU)
};

// What a GPU API implements. Every member may throw the API's error type
// (derived from unicache::error) with the failing call and its status.
class device {
 public:
  // The backend's name ("cuda"), its cache owner id, and the dialect of the
  // generated kernels.
  device(const char* name, owner_id owner, kernels::dialect dialect)
      : name_(name), owner_(owner), dialect_(dialect) {}
  virtual ~device() = default;
  device(const device&) = delete;
  device& operator=(const device&) = delete;

  // --- Who it is ------------------------------------------------------------
  const char* name() const { return name_; }
  owner_id cache_owner() const { return owner_; }
  kernels::dialect dialect() const { return dialect_; }
  // Throws the API's error for an engine of another backend.
  virtual const engine_facts& facts(const engine& e) const = 0;

  // --- The kernel path (kernel_builder's build and load, for the engine) ---
  // Builds `src` from source; throws the API's error with the build log.
  virtual std::unique_ptr<device_program> build(const engine& e, const kernel_source& src) const = 0;
  // The kernel from a binary made earlier, or nullptr when the driver
  // refuses it (the core then builds from source); throws only for a
  // failure a rebuild cannot fix (out of memory).
  virtual std::unique_ptr<device_program> load(const engine& e, const kernel_source& src, byte_span binary) const = 0;
  // Why this machine cannot run binaries made for the engine's identity
  // (kernel_builder::load_refusal); "" when it can.
  virtual std::string load_refusal(const engine& /*e*/) const { return {}; }
  // kernel_builder::reads_stored_binaries, for the engine.
  virtual bool reads_stored_binaries(const engine& /*e*/) const { return true; }
  // A launch's limits, checked when a kernel is compiled (so that the error
  // is a compile error): throws the API's error naming `what` beyond them.
  virtual void check_launch(const launch_dims& /*dims*/, const char* /*what*/) const {}

  // --- Memory ------------------------------------------------------------------
  // `bytes` (at least 1) of device memory in the engine's context for
  // `what` ("packed weight"). Out of memory: nullptr, unless `last_try`
  // (the core releases packed weights and tries again before that); then,
  // and for any other failure, throws naming `what` and the size.
  virtual buffer allocate(const engine& e, std::size_t bytes, const char* what, bool last_try) const = 0;
  // Frees at once: the core calls it only when no enqueued work uses `b`.
  virtual void free(const engine& e, buffer b) const noexcept = 0;
  // Enqueues zeroing `bytes` of `b`.
  virtual void fill_zero(const stream& s, buffer b, std::size_t bytes) const = 0;
  // Copies `count` blocks of `block` bytes, the i-th at byte first + i *
  // stride of `src`, to `out`, and returns when they are there: the
  // constant check's read-back. `in_stream_order`: after the work queued on
  // `s` (a wait for it); else at once, on a queue of the API's own that
  // waits for nothing of `s`'s (a stream only unicache enqueues to, whose
  // work never writes a constant input).
  virtual void read_blocks(const stream& s, buffer src, std::size_t first, std::size_t block, std::size_t stride,
                           std::size_t count, void* out, bool in_stream_order) const = 0;

  // --- Execution ---------------------------------------------------------------
  // A stream of the engine the backend owns; its state holds a stream_resources.
  virtual stream make_stream(const engine& e) const = 0;
  virtual stream_resources& resources(const stream& s) const = 0;
  // Enqueues `k` (a kernel of this API on the kernel path) on the stream,
  // through k.launch(); never waits (reading a binary back for the store,
  // after the first launch, may). `dims` is not empty.
  virtual void launch(const kernel& k, const stream& s, const kernel_args& args, const launch_dims& dims) const = 0;
  // An event at the stream's current end.
  virtual std::shared_ptr<const event> record(const stream& s) const = 0;
  // The same, able to tell the device time between two of them (event::
  // ns_since): what adaptive mode's cost model times executions with.
  // nullptr where the stream cannot time its work.
  virtual std::shared_ptr<const event> record_timed(const stream& s) const = 0;
  // Makes the stream's later work wait, on the device, for `e` (of another
  // stream of the same context).
  virtual void wait_for(const stream& s, const event& e) const = 0;
  // Waits on the host until the stream has finished its work; throws the
  // API's error for a failure of that work.
  virtual void wait(const stream& s) const = 0;

 private:
  const char* name_;
  owner_id owner_;
  kernels::dialect dialect_;
};

// Makes the generated-kernel backend over `d` (which lives as long as the
// process) and registers it (register_backend): the one call a GPU API
// makes, before it hands out its first engine. Returns the backend.
backend* register_device(std::unique_ptr<device> d);
// The device a backend made by register_device runs on, or nullptr for any
// other backend.
const device* device_of(const backend* b);
// Waits for the work of every deferred release (device memory or modules
// that queued work still used when the caches let go of them) and runs
// them: for an API's function that frees what an engine's context holds
// before its caller destroys the context.
void finish_deferred_releases();

// The kernel path (kernel_path.hpp) for `src` on the engine's device: what
// the core's kernels run, and what tests of an API's programs use.
std::shared_ptr<const kernel> get_program(const engine& e, const kernel_source& src,
                                          const std::vector<kernel_binary>& preloaded);
// The same without a build: nullptr unless the kernel cache or the store
// has it (kernel_if_built).
std::shared_ptr<const kernel> find_program(const engine& e, const kernel_source& src);
// Device memory of `bytes` for `what` through the engine's device, retried
// once after releasing the device's packed weights when it is out of
// memory: what an API's buffer helpers use. Throws the API's error, or
// invalid_argument for an engine of no GPU backend.
buffer allocate(const engine& e, std::size_t bytes, const char* what);

// The process's engine on the device `key` names, made by `make()` on the
// first call for that key and returned by every later one (an API's
// make_engine(): one context per device, whose kernels every caller shares).
// Each call site keeps its own engines. Thread-safe; `make` runs under the
// site's lock, and an exception from it leaves nothing behind.
template <typename Key, typename Make>
engine engine_per_device(const Key& key, Make&& make) {
  static std::mutex mu;
  static auto* const engines = new std::map<Key, engine>();  // never freed: engines outlive static destructors
  std::lock_guard lock(mu);
  if (auto it = engines->find(key); it != engines->end()) return it->second;
  return engines->emplace(key, make()).first->second;
}

// --- What every API's engine shares -------------------------------------------
// An API lists its devices, selects one, and saves its engine info as a
// blob alike; only the calls that query a device differ.

// One device as an API lists it: the label a user selects it by ("0",
// "1:0") and its description (its name, or "platform / device").
struct listed_device {
  std::string label;
  std::string description;
  bool preferred = false;  // chosen when nothing else is (OpenCL: a GPU)
};
// The index in `devices` (not empty) that the environment variable
// `variable` selects: the device whose label equals its value, else the
// first whose description contains it (case-insensitive; a value of digits
// and colons only matches labels). Unset: the first
// preferred device, else the first. A value that selects nothing warns once,
// naming every device, and falls back the same way. Never throws for the
// value. `api` names the API in the warning ("CUDA").
std::size_t select_device(const char* api, const char* variable, const std::vector<listed_device>& devices);

// An engine cache blob for the device `identity` holding `payload` (the
// API's encoded engine info) under `format` ("cuda-engine-info/1").
byte_vector make_engine_blob(const device_identity& identity, const char* format, std::string_view payload);
// The payload of a blob made by make_engine_blob for `identity` and
// `format`. Throws invalid_argument with the reason (another device, a
// failed checksum, truncation, another format); the API prefixes it and
// throws its own error.
std::string read_engine_blob(const device_identity& identity, const char* format, byte_span blob);

// Process-wide counters of one GPU backend, for tests, benchmarks and the demo.
struct backend_stats {
  std::uint64_t probe_builds = 0;          // probe kernels built at engine creation (OpenCL)
  std::uint64_t programs_from_source = 0;  // kernels built from generated source
  std::uint64_t programs_from_binary = 0;  // kernels loaded from a stored or blob binary
  std::uint64_t binaries_rejected = 0;     // stored binaries the driver refused (then rebuilt)
  std::uint64_t binaries_stored = 0;       // binaries written to the persistent store
  std::uint64_t weights_packed = 0;        // constant weights packed on a device
  std::uint64_t weights_released = 0;      // packed weights whose device memory was freed
  std::uint64_t out_of_memory_retries = 0; // allocations retried after releasing packed weights
  std::uint64_t deferred_releases = 0;     // device memory or kernels released later, after the work that used them
  // Generic GEMMs compiled onto their configuration's other split-K variant
  // (1 or kernels::kGenericSplitK parts) while the one their shapes ask for was
  // built in the background.
  std::uint64_t split_variants_deferred = 0;
  std::uint64_t build_ns = 0;              // building kernels from source
  std::uint64_t load_ns = 0;               // loading stored/blob binaries (store read included)
  std::uint64_t pack_ns = 0;               // enqueueing the packing of constant weights (a first launch excluded)
  std::uint64_t first_launch_ns = 0;       // each kernel's first launch (a driver's last compile step)
};
// The counters of the backend over the device whose cache owner id is `owner`.
backend_stats stats(owner_id owner);
// For an API's own counters (OpenCL's probe): added to stats(owner).
void count_probe_build(owner_id owner);

}  // namespace unicache::gpu
