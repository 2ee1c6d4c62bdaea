// unicache/backend.hpp — what a device backend implements, and how it
// registers itself. For: backend authors (users meet engine, stream and
// tensor here, which a backend's make_engine() hands them). The core (graph,
// compiler, caches) includes only this header; it never includes a backend.
//
// A backend compiles a partition for concrete shapes into a compiled_kernel
// and runs it on a stream. Backends create their engines (an engine names a
// device and a context, and carries the backend's native handles) and
// register themselves with register_backend(), one call, when they are first
// used. docs/writing-a-backend.md walks through one.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <typeinfo>
#include <vector>

#include "unicache/bytes.hpp"
#include "unicache/cache.hpp"
#include "unicache/config.hpp"
#include "unicache/device_identity.hpp"
#include "unicache/error.hpp"
#include "unicache/graph.hpp"

namespace unicache {

class engine;
class stream;

// A tensor with data: a concrete logical tensor and a pointer the caller
// owns. A constant's packed copies are found by its contents (see
// constant_check in config.hpp), so new values at the same address are never
// served stale; `version` is a hint that lets the check be skipped
// (constant_check::none trusts address and version alone) and catches an
// in-place edit the sampled check could miss: bump it when the data changes.
struct tensor {
  logical_tensor desc;
  void* data = nullptr;
  std::uint64_t version = 0;
};

// A device binary a kernel was built into, under its full store key (what
// the backend's persistent-store entry for it is called).
struct kernel_binary {
  std::string key;
  byte_vector binary;
};

// What a backend compiled for one partition and concrete shapes. execute()
// may be called concurrently from several threads (with different tensors).
// On a device with queues (a GPU), execute() enqueues its work on the
// stream and returns; the caller waits with stream::wait() (which calls the
// backend's wait()).
class compiled_kernel {
 public:
  virtual ~compiled_kernel() = default;
  // `inputs` and `outputs` follow the partition's order and the shapes it
  // was compiled for (the caller checked them).
  virtual void execute(stream& s, const std::vector<tensor>& inputs,
                       const std::vector<tensor>& outputs) const = 0;
  // The device binaries this kernel runs (for compiled-partition cache
  // blobs); empty for a backend whose kernels have none (oneDNN on the CPU).
  virtual std::vector<kernel_binary> binaries() const { return {}; }
  // True: this kernel was built for exactly the shapes it was compiled for,
  // although the mode is shape-agnostic (a backend may build the first shape
  // of a configuration that way, because it is ready soonest). Adaptive
  // dispatch then leaves these shapes alone: their executions count towards
  // no class and never run another class's specialized kernel.
  virtual bool built_for_its_shapes() const { return false; }
  // True: a stand-in, which runs these shapes rightly on another kernel of
  // its configuration than theirs while theirs is built in the background
  // (a GPU GEMM on its other split-K variant). compile() does not keep a
  // stand-in in the compiled-partition cache, so the same shapes compiled
  // later get their own kernel once it is built.
  virtual bool stand_in() const { return false; }
};

// The device time of work enqueued on a stream, for a backend whose
// execute() returns before the device is done: begun (backend::start_timer)
// before the work, stopped after it, and read once the device has finished
// it. Adaptive mode's cost model times executions with it. Never waits.
class device_timer {
 public:
  virtual ~device_timer() = default;
  // Marks the end of the timed work (enqueued on `s` since the start).
  virtual void stop(stream& s) = 0;
  // Whether the device has finished (or failed) the timed work.
  virtual bool done() const = 0;
  // The device time from start to stop, once done; nullopt before, or when
  // the device cannot tell (the work failed).
  virtual std::optional<std::uint64_t> elapsed_ns() const = 0;
};

// A shape class (kernel_shapes::adaptive): the shapes one specialized kernel
// of a backend serves, e.g. every M from 257 to 512 with N = 768, K = 768.
struct shape_class {
  // Bytes naming the class; equal keys (for one partition and engine) mean
  // one specialized kernel serves both shapes. Empty: no specialized kernel
  // exists for these shapes (they always run on the generic one).
  std::string key;
  // For verbose lines and statistics ("M 257..512 N 768 K 768").
  std::string description;
};

class backend {
 public:
  virtual ~backend() = default;
  // The backend's name: what find_backend() finds, what diagnostics print,
  // and the name of its cache owner id. Unique in the process.
  virtual const char* name() const = 0;
  // The kind of the backend's engines (an engine may say otherwise: see engine).
  virtual engine_kind kind() const = 0;
  // The owner id of the cache entries the backend makes itself (its kernels
  // in kernel_cache(), its packed weights in constant_tensor_cache(); see
  // cache.hpp): a constant of the backend, unique among backends.
  virtual owner_id cache_owner() const = 0;
  // Compiles `p` for concrete `inputs` (with inferred `outputs`). A kernel
  // whose store key is in `preloaded` is created from that binary (if the
  // driver accepts it) instead of being built. Throws compile_error (or a
  // backend error derived from it) if it cannot.
  virtual std::shared_ptr<const compiled_kernel> compile(const partition& p,
                                                         const std::vector<logical_tensor>& inputs,
                                                         const std::vector<logical_tensor>& outputs,
                                                         const engine& e,
                                                         const std::vector<kernel_binary>& preloaded) = 0;
  virtual stream make_stream(const engine& e) = 0;
  // Waits on the host until the work enqueued on `s` (a stream of this
  // backend's) is finished; throws execute_error (with the backend's error
  // nested) for a failure of that work. The default does nothing: a backend whose execute() finishes its
  // work before returning (oneDNN on the CPU) has nothing to wait for.
  virtual void wait(stream& s);
  // A timer of the device time of work about to be enqueued on `s`, or
  // nullptr (the default) when the host's clock around execute() measures
  // it: a backend whose execute() finishes its work before returning.
  virtual std::unique_ptr<device_timer> start_timer(stream& s);
  // What the engine's binaries are valid for: blobs made on one identity are
  // refused on another.
  virtual device_identity identity(const engine& e) const = 0;
  // The kernel configuration `p` needs for `input_shapes` on `e`: bytes that
  // decide which kernels compile() builds, i.e. the backend's options (such
  // as the kernel-shape mode) and the part of the shapes its kernels are
  // specialized for. Calls that return equal bytes must lead to the same
  // kernels: compiled partitions are cached under it (with the full shapes)
  // and a compiled-partition cache blob is identified by it, so one blob
  // serves every shape of one configuration. The default, every shape in
  // full, is always correct; a backend whose kernels take sizes as arguments
  // returns less.
  virtual std::string kernel_configuration(const partition& p,
                                           const std::vector<std::vector<std::int64_t>>& input_shapes,
                                           const engine& e) const;

  // --- Adaptive kernels (kernel_shapes::adaptive) -------------------------------
  // In adaptive mode compile() builds the generic, shape-agnostic kernel;
  // these three give the specialized kernels of shape classes. The default:
  // no specialized kernels.
  //
  // The class of `in` (concrete shapes; `out` the outputs at them) for `p`
  // on `e`. Called at a shape's first execution (just after its generic
  // kernel is enqueued while no class of the process was ever queued for
  // specialization, else before); must be cheap (no build, no I/O). An
  // exception gives the shape no class (it runs the generic kernel).
  virtual shape_class specialization_class(const partition& p, const std::vector<logical_tensor>& in,
                                           const std::vector<logical_tensor>& out, const engine& e) const;
  // Whether the backend already has what the kernel of the class of `in`
  // needs (e.g. the persistent store holds its tuning choice and binary):
  // building it is then a load, and the class is specialized at its first
  // use. Asked when the class is made (when its first shape is first
  // executed; concurrent first executions may each ask) and again by its build (a load
  // does not count as a build in the cost model); outside the dispatch's locks;
  // may read the store. An exception counts as false. The default: false.
  virtual bool specialization_ready(const partition& p, const std::vector<logical_tensor>& in,
                                    const std::vector<logical_tensor>& out, const engine& e) const;
  // Builds the specialized kernel of the class of `in` (`out` are the
  // outputs at these shapes). Its execute() must run every shape of the
  // class: it reads the sizes from the tensors' descriptors. Runs on a
  // background thread, never with a caller's stream (a backend that times
  // candidates makes its own). Throws compile_error if it cannot: the
  // class then stays on the generic kernel, reported once.
  virtual std::shared_ptr<const compiled_kernel> specialize(const partition& p, const std::vector<logical_tensor>& in,
                                                            const std::vector<logical_tensor>& out, const engine& e);
};

// The kernel configuration of a backend whose shape-agnostic kernels depend
// on the inputs' ranks only and whose specialized kernels on every size (the
// mode's name, then ranks or full shapes): what a backend built on
// current_kernel_shapes() returns from kernel_configuration().
std::string shape_mode_configuration(kernel_shapes mode, const std::vector<std::vector<std::int64_t>>& input_shapes);

// Registers a backend that lives as long as the process, and names its
// cache owner id b->cache_owner() after it (register_owner): the one call a
// backend makes, before it hands out its first engine. Thread-safe.
// Registering the same object again does nothing. Throws error, registering
// nothing, when another object is registered under the same name (a backend
// is never silently replaced) or the owner id is already another's (their
// cache entries would be each other's), the compiler's included. Compiled partitions are cached per
// backend object, so two backends never share one even when their engines
// have the same scope. A constant_registry the backend keeps subscribes to
// evictions when it is created: nothing else needs registering.
void register_backend(backend* b);
// The backend registered under `name`, or nullptr.
backend* find_backend(const std::string& name);

// --- Devices -----------------------------------------------------------------------
//
// Budgets and scopes name physical devices: an engine's device_id is the
// same for every API's view of one device, so the OpenCL and CUDA engines
// of one GPU share its budget, and an OpenCL device that is the host's CPU
// (PoCL) shares the CPU's.

// The host CPU's device id (engine_kind::cpu has one device).
inline constexpr int host_cpu_device_id = 0;

// The device id of the physical device `physical_key` names, e.g. its PCI
// address "pci:0000:17:00.0" (lower case), or its UUID: equal keys, equal
// ids; ids are given in the order devices are first seen, from 0. For
// engine_kind::cpu every key is the host: host_cpu_device_id. Thread-safe.
int physical_device_id(engine_kind kind, const std::string& physical_key);

namespace detail {
// A backend's native handle (an engine's or a stream's) with the type it was
// made with, so that reading it as another type is an error, not a cast.
class native_handle {
 public:
  native_handle() = default;
  template <typename T>
  explicit native_handle(std::shared_ptr<T> p) : ptr_(std::move(p)), type_(&typeid(T)) {}

  template <typename T>
  T* get(const char* holder) const {
    if (*type_ != typeid(T)) mismatch(holder, typeid(T));
    return static_cast<T*>(ptr_.get());
  }
  template <typename T>
  std::shared_ptr<T> shared(const char* holder) const {
    if (*type_ != typeid(T)) mismatch(holder, typeid(T));
    return std::static_pointer_cast<T>(ptr_);
  }

 private:
  [[noreturn]] void mismatch(const char* holder, const std::type_info& asked) const;
  std::shared_ptr<void> ptr_;
  const std::type_info* type_ = &typeid(void);
};
}  // namespace detail

// A device and context a backend runs on. Cheap to copy; `native` is the
// backend's own handle (e.g. a dnnl::engine), opaque to the core.
class engine {
 public:
  engine() = default;
  // An engine of the backend's kind. `native` is what native<T>() returns
  // (with T its type; nullptr for none).
  template <typename T>
  engine(backend* b, int device_id, std::uint64_t context_id, std::shared_ptr<T> native)
      : engine(b, b ? b->kind() : engine_kind::cpu, device_id, context_id, std::move(native)) {}
  engine(backend* b, int device_id, std::uint64_t context_id, std::nullptr_t)
      : engine(b, device_id, context_id, std::shared_ptr<void>()) {}
  // An engine of `kind` (a backend whose devices are of several kinds, as
  // OpenCL's GPUs and CPUs). `device_id` names the physical device
  // (physical_device_id).
  template <typename T>
  engine(backend* b, engine_kind kind, int device_id, std::uint64_t context_id, std::shared_ptr<T> native)
      : backend_(b), kind_(kind), device_id_(device_id), context_id_(context_id), native_(std::move(native)) {}
  engine(backend* b, engine_kind kind, int device_id, std::uint64_t context_id, std::nullptr_t)
      : engine(b, kind, device_id, context_id, std::shared_ptr<void>()) {}

  // The backend that made the engine (nullptr for a default engine).
  backend* get_backend() const { return backend_; }
  engine_kind kind() const { return kind_; }
  int device_id() const { return device_id_; }
  std::uint64_t context_id() const { return context_id_; }
  // The scope of everything this engine caches.
  cache_scope scope() const { return {kind(), device_id_, context_id_}; }
  // The backend's handle, as the type the backend made the engine with.
  // Throws invalid_argument for another type (an engine of another backend
  // given to this one, say): never a reinterpretation.
  template <typename T>
  T& native() const { return *native_.get<T>("engine"); }
  // The backend's handle, shared: what the engine's cached kernels and
  // weights hold to keep the device objects they need alive. Checked as
  // native() is.
  template <typename T>
  std::shared_ptr<T> native_shared() const {
    return native_.shared<T>("engine");
  }

 private:
  backend* backend_ = nullptr;
  engine_kind kind_ = engine_kind::cpu;
  int device_id_ = 0;
  std::uint64_t context_id_ = 0;
  detail::native_handle native_;
};

// An execution queue on an engine. One stream per thread.
//
// Work enqueued on a stream runs in order. On a GPU, execute() returns once
// the work is enqueued, and wait() is where the host waits (once per
// request, as with a CUDA stream or oneDNN's stream::wait()). Inputs must
// stay alive and unchanged, and outputs unread, until then. An asynchronous
// failure of enqueued work is thrown by wait(), or by the next execute() on
// the stream (as stream_error, an execute_error, with the backend's error
// nested where it has one).
class stream {
 public:
  stream() = default;
  // `native` is what native<T>() returns (with T its type; nullptr for none).
  template <typename T>
  stream(engine e, std::shared_ptr<T> native) : engine_(std::move(e)), native_(std::move(native)) {}
  stream(engine e, std::nullptr_t) : engine_(std::move(e)) {}
  const engine& get_engine() const { return engine_; }
  // The backend's handle, as the type the backend made the stream with;
  // throws invalid_argument for another type, as engine::native does.
  template <typename T>
  T& native() const { return *native_.get<T>("stream"); }
  // Waits until the work enqueued on the stream is finished; throws
  // execute_error (compiler.hpp), with the backend's error nested, if any of
  // it failed. Does
  // nothing on a stream of no backend, and on the CPU, where execute()
  // returns finished.
  void wait();

 private:
  engine engine_;
  detail::native_handle native_;
};

}  // namespace unicache
