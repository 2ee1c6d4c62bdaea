// oneDNN primitives as the backend's kernels use them: plain memory
// descriptors, the op-to-algorithm maps, a primitive in the kernel cache with
// its measured size, and the counters behind onednn_cpu::stats().
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <oneapi/dnnl/dnnl.hpp>
#include <unordered_map>
#include <vector>

#include "unicache/cache_key.hpp"
#include "unicache/onednn_cpu.hpp"

namespace unicache::onednn_cpu::detail {

using dims = dnnl::memory::dims;
using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;

// What a primitive holds (its JIT code and tables), which oneDNN does not
// report: measured once (benchmarks/onednn_primitive_bytes) as the
// resident-memory growth of 200 primitives held at once (oneDNN 2.6, the
// 2-core AMD EPYC dev VM, its primitive cache off), per kind. A matmul for one shape (brgemm: BERT-layer shapes with
// bias and GELU) 300 KB; with runtime dimensions (gemm:jit) 49 KB; an
// eltwise 28 KB. Counted once a primitive is built; the kernel cache then
// holds at most its capacity of them.
inline constexpr std::size_t kShapeMatmulBytes = 300 * 1024;
inline constexpr std::size_t kRuntimeMatmulBytes = 49 * 1024;
inline constexpr std::size_t kOtherPrimitiveBytes = 28 * 1024;
inline constexpr std::size_t kPrimitiveBytesEstimate = kShapeMatmulBytes;  // before it is built

struct counters {
  std::atomic<std::uint64_t> primitives_created{0}, create_ns{0}, weights_packed{0}, pack_ns{0};
};
counters& stats_counters();
std::uint64_t ns_since(std::chrono::steady_clock::time_point start);

tag plain_tag(std::size_t rank);
dnnl::memory::desc plain_md(const std::vector<std::int64_t>& shape);

// An eltwise op as oneDNN's algorithm and its alpha and beta (Rsqrt is
// pow(x, -0.5), SiLU is swish with alpha 1). Throws compile_error for an op
// that is not eltwise.
struct eltwise_spec {
  dnnl::algorithm algorithm;
  float alpha = 0.f;
  float beta = 0.f;
};
eltwise_spec eltwise_of(op_kind k);
dnnl::algorithm binary_algorithm(op_kind k);

void add_md(cache_key& key, const dnnl::memory::desc& md);

// The attributes every primitive of this backend is made with: the
// scratchpad in the backend's hands (scratchpad_mode::user). oneDNN's own
// (library) scratchpad is shared by the primitives of a thread, and oneDNN
// documents that mode as safe only for a primitive executed in the thread
// that made it; a compiled partition is executed from any thread, several
// at once (first executions from two threads computed wrong results with it).
// Callers add their post-ops to the result.
dnnl::primitive_attr primitive_attributes();

// Runs `p` on `strm` with `args`, adding the calling thread's scratchpad
// when the primitive needs one (made with primitive_attributes()): a buffer
// per thread, grown to the largest need and kept until the thread ends.
// Callers pass `args` moved: the map is not copied.
// Every execution of this backend goes through here. Throws dnnl::error, and
// execute_error when the scratchpad cannot grow.
void run_primitive(const dnnl::primitive& p, dnnl::stream& strm, std::unordered_map<int, dnnl::memory> args);

// A primitive in the kernel cache, with the descriptor facts execution needs.
struct cached_primitive {
  dnnl::primitive prim;
  dnnl::memory::desc weights_md;  // matmul: the layout the primitive wants B in

  // What the kernel cache counts for it (the measured sizes above).
  std::size_t cached_bytes() const;
};

// The primitive under `key`, made by `make` on a miss; `*built` (if given)
// tells whether this call made it.
template <typename MakePrimitive>
std::shared_ptr<const cached_primitive> primitive_for(const engine& e, const cache_key& key, MakePrimitive make,
                                                      bool* built = nullptr) {
  // A hit borrows and takes the one reference it keeps; a miss builds.
  if (auto hit = kernel_cache().lookup<const cached_primitive>(e.scope(), cache_owner_id, key.bytes())) {
    return hit.shared_value();
  }
  return kernel_cache()
      .get_or_build<const cached_primitive>(e.scope(), cache_owner_id, key.bytes(), kPrimitiveBytesEstimate,
                                            [&] {
                                              if (built) *built = true;
                                              const auto start = std::chrono::steady_clock::now();
                                              auto made = std::make_shared<const cached_primitive>(make());
                                              counters& c = stats_counters();
                                              c.primitives_created.fetch_add(1, std::memory_order_relaxed);
                                              c.create_ns.fetch_add(ns_since(start), std::memory_order_relaxed);
                                              return made;
                                            })
      .value();
}

}  // namespace unicache::onednn_cpu::detail
