// What compile.cpp (compile() and execution) and cache_blob.cpp (compiled
// partitions' cache blobs) share: a compiled partition's state, how the
// entry points report a backend's foreign exceptions, and the blob key.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "compiler/adaptive_dispatch.hpp"
#include "unicache/compiler.hpp"

namespace unicache {
namespace detail {

// Runs the generic kernel `k` with `took.device` (a started device timer,
// stopped after it) or, where `host_clock`, the host's clock around it
// (read only then) filling took.host_ns.
inline void run_timed(const compiled_kernel& k, stream& s, const std::vector<tensor>& in, const std::vector<tensor>& out,
                      execution_time& took, bool host_clock) {
  const auto start = host_clock ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
  k.execute(s, in, out);
  if (took.device) {
    took.device->stop(s);
  } else if (host_clock) {
    took.host_ns = static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count());
  }
}

// Runs `f`, which calls into a backend: an exception that is not the
// library's (a foreign type from below the backend, such as dnnl::error)
// reaches the caller as compile_error, with it nested. The library's own
// errors and std::bad_alloc pass as they are.
template <typename F>
auto reporting_foreign(const char* what, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const error&) {
    throw;
  } catch (const std::bad_alloc&) {
    throw;
  } catch (const std::exception& err) {
    std::throw_with_nested(compile_error(std::string(what) + ": " + err.what()));
  }
}

// A partition compile() can take: one from a finalized graph (a default
// partition has no ops), on an engine with a backend.
inline void check_compilable(const char* what, const partition& p, const engine& e) {
  if (!e.get_backend()) throw compile_error(std::string(what) + ": the engine has no backend");
  if (p.ops().empty()) throw compile_error(std::string(what) + ": an empty partition (take one from graph::partitions())");
}

// What a compiled partition's cache blob is for: structure, backend and
// kernel configuration (the device identity is the blob's own field). Not
// the shapes: one blob serves every shape whose kernels are the same.
std::string blob_key(const partition& p, const std::vector<std::vector<std::int64_t>>& input_shapes, const engine& e);

}  // namespace detail

// compile() with the kernels' binaries a blob brought (empty: none).
compiled_partition compile_with(const partition& p, const std::vector<std::vector<std::int64_t>>& input_shapes,
                                const engine& e, const std::vector<kernel_binary>& preloaded);

struct compiled_partition::state {
  std::vector<logical_tensor> inputs;
  std::vector<logical_tensor> outputs;
  std::shared_ptr<const compiled_kernel> kernel;
  device_identity identity;  // of the engine it was compiled on
  std::string blob_key;
  // The engine it was compiled on: a stream of another engine's backend or
  // scope would run its kernels in a context they do not belong to.
  const backend* made_by = nullptr;
  cache_scope scope;
  // Adaptive mode: the partition's table of shape classes, and this shape's
  // class in it, found at the shape's first execution (resolve_class):
  // nullptr until then, no_class() where there is none (or not adaptive).
  std::shared_ptr<detail::class_table> family;
  mutable std::atomic<const detail::class_ref*> shape_class{nullptr};
  // The "no class" mark: never freed, so that an execution during exit
  // still reads a live object.
  static const detail::class_ref* no_class() {
    static const detail::class_ref* const none = new detail::class_ref();
    return none;
  }

  state() = default;
  state(const state&) = delete;
  state& operator=(const state&) = delete;
  ~state() {
    const detail::class_ref* c = shape_class.load(std::memory_order_relaxed);
    if (c != no_class()) delete c;
  }

  // This shape's class, found once; concurrent first executions may each
  // look it up, and one result is kept. A backend that throws naming it
  // gives the shape no class (warned once per table): adaptive dispatch
  // never fails an execution. Out of memory: no class for this execution,
  // and the next one looks again.
  const detail::class_ref& resolve_class(const engine& e) const {
    const detail::class_ref* found = no_class();
    std::unique_ptr<detail::class_ref> made;
    try {
      made = std::make_unique<detail::class_ref>(detail::class_in(family, e, inputs, outputs));
      if (*made) found = made.get();
    } catch (const std::bad_alloc&) {
      return *no_class();
    } catch (const std::exception& err) {
      detail::report_class_lookup_failure(*family, e, err.what());
    } catch (...) {
      detail::report_class_lookup_failure(*family, e, "an unknown exception");
    }
    const detail::class_ref* expected = nullptr;
    if (!shape_class.compare_exchange_strong(expected, found, std::memory_order_acq_rel, std::memory_order_acquire)) {
      return *expected;
    }
    if (found != no_class()) made.release();  // now owned by shape_class
    return *found;
  }

  // The shape's first execution while no class of the process is queued:
  // the generic kernel runs (timed as the family's backend times), then the
  // class is found, and the execution counted for it.
  void execute_before_class(stream& s, const std::vector<tensor>& in, const std::vector<tensor>& out) const {
    detail::execution_time took;
    took.deferred = true;
    bool host_clock = false;
    took.device = detail::start_deferred_timer(*family, s, &host_clock);
    detail::run_timed(*kernel, s, in, out, took, host_clock);
    const detail::class_ref& c = resolve_class(s.get_engine());
    if (c) detail::record_generic(c, std::move(took), s, inputs, outputs);
  }

  // What the kernel cache counts for it: this object, its tensors' shapes
  // and its blob key. Its kernel counts in entries of its own.
  std::size_t cached_bytes() const {
    std::size_t bytes = sizeof(state) + blob_key.size() + (family ? sizeof(detail::class_ref) : 0);
    for (const auto* list : {&inputs, &outputs}) {
      for (const logical_tensor& t : *list) bytes += sizeof(t) + t.shape.size() * sizeof(std::int64_t);
    }
    return bytes;
  }
};

}  // namespace unicache
