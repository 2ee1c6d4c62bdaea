// Device memory the GPU core owns (packed weights, workspaces, tuning
// scratch), the backend's counters, and the per-stream state it keeps.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "lifetime.hpp"
#include "unicache/gpu.hpp"

namespace unicache::gpu::detail {

struct counters {
  std::atomic<std::uint64_t> probe_builds{0}, weights_packed{0}, weights_released{0}, out_of_memory_retries{0},
      deferred_releases{0}, pack_ns{0}, split_variants_deferred{0};
};
// The counters of the backend whose cache owner id is `owner` (made on first use).
counters& counters_of(owner_id owner);

// Allocates through `d`; out of memory, releases the device's packed
// weights (those still in use once their work is done) and tries once more.
buffer allocate(const device& d, const engine& e, std::size_t bytes, const char* what);

// A buffer of the core's: freed once the cache and every holder let go of
// it and the work of every stream that used it is done.
class device_memory {
 public:
  device_memory(const device& d, engine e, std::size_t bytes, const char* what)
      : device_(d), engine_(std::move(e)), memory_(allocate(d, engine_, bytes, what)) {}
  ~device_memory();
  device_memory(const device_memory&) = delete;
  device_memory& operator=(const device_memory&) = delete;

  buffer get() const { return memory_; }
  void note_use(std::uint64_t stream_serial, std::shared_ptr<const event> e) { uses_.note(stream_serial, std::move(e)); }
  // Counted when the memory is freed (packed weights count their releases).
  void count_release_in(std::atomic<std::uint64_t>* counter) { released_ = counter; }

 private:
  const device& device_;
  engine engine_;  // keeps the context (and so the memory's address) alive
  buffer memory_;
  use_list uses_;
  std::atomic<std::uint64_t>* released_ = nullptr;
};

// What the core does with a stream's resources.
class stream_access {
 public:
  // The stream's split-K workspace, at least `bytes` (grown as needed; the
  // old one is released after the work queued so far).
  static buffer workspace(const device& d, const stream& s, std::size_t bytes);
  // Throws stream_error, once, if work of an earlier execution on the
  // stream failed on the device: at the next execute, and at wait().
  static void report_failure(const device& d, const stream& s);
  // The event at the end of an execution's work on the stream.
  static void note_execution(const device& d, const stream& s, std::shared_ptr<const event> e);
};

}  // namespace unicache::gpu::detail
