// unicache/compiler.hpp — compiling partitions for concrete shapes, and
// running them.
// For: users.
//
//   unicache::engine eng = unicache::onednn_cpu::make_engine();  // a backend's engine
//   unicache::stream strm = unicache::make_stream(eng);
//   unicache::compiled_partition cp = unicache::compile(partition, {{batch, 768}, {768, 3072}}, eng);
//   cp.execute(strm, {{cp.inputs()[0], x_data}, {cp.inputs()[1], w_data}}, {{cp.outputs()[0], y_data}});
//
// Compiled partitions are cached in the process-wide kernel cache, in the
// engine's scope, under everything that decides the code that runs: the
// partition's fingerprint, the backend, its kernel configuration (options
// such as the kernel-shape mode) and the concrete shapes. Compiling a shape
// seen before costs one lookup.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <vector>

#include "unicache/backend.hpp"
#include "unicache/error.hpp"
#include "unicache/graph.hpp"

namespace unicache {

// compile() (or get_cache_blob_id, compile_from_cache_blob) failed: shapes that do not fit the partition, a partition the backend
// cannot compile, a build the driver refused, a bad blob. The message says
// which. Where a backend reported the failure with its own exception type
// (opencl_error with the OpenCL status, say), that exception is nested:
// std::rethrow_if_nested(e) reaches it.
class compile_error : public error {
 public:
  using error::error;
};

// compiled_partition::execute() failed: tensors that do not match the
// compiled shapes, or the device refused to run the kernel (the backend's
// exception, when it has its own type, is nested as for compile_error).
class execute_error : public error {
 public:
  using error::error;
};

// Work enqueued on the stream earlier (by an execute() that returned) failed
// on the device: reported by the next execute() on the stream or by
// stream::wait(), once. Not a failure of the execution that reports it.
class stream_error : public execute_error {
 public:
  using execute_error::execute_error;
};

class compiled_partition {
 public:
  compiled_partition() = default;
  // Concrete input and (inferred) output tensors, in the partition's order.
  const std::vector<logical_tensor>& inputs() const;
  const std::vector<logical_tensor>& outputs() const;
  // Runs the partition: on the CPU it returns finished; on a GPU it
  // enqueues on the stream and returns, and stream::wait() is where the
  // caller waits (inputs stay alive and unchanged, outputs unread, until
  // then). The tensors must match inputs()/outputs() in count and shape, and
  // the stream must be of an engine with the backend and scope (device and
  // context) it was compiled for (else execute_error). Thread-safe:
  // concurrent executions of one compiled partition are allowed, each with
  // its own stream. Throws execute_error if the work cannot be run or
  // enqueued (or the partition is empty), and stream_error if work enqueued
  // earlier on the stream failed on the device.
  void execute(stream& s, const std::vector<tensor>& inputs, const std::vector<tensor>& outputs) const;

  // Cache blobs, for applications that keep compiled kernels in their own
  // storage. The id is 32 hex digits naming (partition structure, backend,
  // kernel configuration, device identity, unicache build): the same as
  // get_cache_blob_id(partition, shapes, engine) before compiling. The kernel
  // configuration holds only what the kernels are specialized for: with
  // shape-agnostic kernels (the default) every shape of a partition has the
  // same id and the same blob, stored once. The blob holds the device
  // binaries of the partition's kernels (none on the CPU backend),
  // self-checking; compile_from_cache_blob() takes it.
  std::string get_cache_blob_id() const;
  byte_vector get_cache_blob() const;
  // The device binaries of its kernels, each with its store key (what the
  // blob holds; none on the CPU backend). Throws compile_error when empty.
  std::vector<kernel_binary> kernel_binaries() const;

  struct state;

 private:
  friend compiled_partition compile_with(const partition&, const std::vector<std::vector<std::int64_t>>&,
                                         const engine&, const std::vector<kernel_binary>&);
  std::shared_ptr<const state> state_;
};

// Compiles `p` for concrete input shapes (one per p.inputs(), no -1) on
// `e`. Throws compile_error if the shapes do not fit the partition.
compiled_partition compile(const partition& p, const std::vector<std::vector<std::int64_t>>& input_shapes,
                           const engine& e);

// The id of the cache blob of `p` compiled for `input_shapes` on `e`,
// without compiling: look it up in your storage first. Never throws for
// valid arguments; compile_error if the engine has no backend.
std::string get_cache_blob_id(const partition& p, const std::vector<std::vector<std::int64_t>>& input_shapes,
                              const engine& e);

// compile(), with the kernels created from the binaries in `blob` (a blob
// from get_cache_blob() of the same partition, kernel configuration and
// device identity, for any of its shapes) instead of being built. A binary
// the driver rejects is rebuilt from source. Throws compile_error naming the
// problem if the blob is not a unicache blob, is corrupt or truncated, was
// made for another device, driver or unicache build, or for another
// partition, backend or kernel configuration.
compiled_partition compile_from_cache_blob(const partition& p,
                                           const std::vector<std::vector<std::int64_t>>& input_shapes,
                                           const engine& e, byte_span blob);

stream make_stream(const engine& e);

// The owner id of compiled partitions in the kernel cache (the compiler's,
// whatever the backend: see owner_id in cache.hpp).
inline constexpr owner_id compiled_partition_owner = 0xC0DE0001;

// --- Ahead of time ---------------------------------------------------------------
//
// Fills the persistent store with the kernels a graph needs, where it was
// not built and with no device to run it: the kernels of every partition of
// `g` (finalized) for each request (graph.hpp's shape_request; none: each
// -1 dim of the inputs as 1 and as 4096, which reaches both split-K
// variants of a generic GEMM), compiled on `e` (an engine that compiles
// only, such as cuda::make_offline_engine(9, 0, 132), or any engine) in the
// current kernel_shapes mode, and put in kernel_store::instance() under the
// engine's identity, as the kernel path stores a kernel after its first
// launch. A process whose engine has that identity (the same architecture,
// compiler and unicache build) then loads them instead of building.
// Compiles in `e`'s scope, whose cached kernels it evicts at the end (an
// offline engine's scope is its own). Throws what compile() throws
// (compile_error naming the partition), graph_error for a request that does
// not fit, and store_error when the store is off or a binary cannot be
// stored. Thread-safe as compile() is.
struct precompile_report {
  std::uint64_t compiles = 0;        // partitions compiled (one per partition and request)
  std::uint64_t kernels = 0;         // distinct binaries among them
  std::uint64_t stored = 0;          // of those, written to the store
  std::uint64_t already_stored = 0;  // of those, the store held already
};
precompile_report precompile(const graph& g, const std::vector<shape_request>& requests, const engine& e);

}  // namespace unicache
