// unicache/onednn_cpu.hpp — the CPU backend, on oneDNN primitives.
// For: users of the CPU backend.
//
//   unicache::engine eng = unicache::onednn_cpu::make_engine();
//   unicache::stream strm = unicache::make_stream(eng);
//
// Fused MatMul -> (Add|Multiply)* -> eltwise* partitions become one oneDNN
// matmul with post-ops (or, where this oneDNN cannot fuse a broadcast, a
// matmul followed by binary primitives); Add/Multiply, eltwise ops and
// Softmax become their own primitives. With kernel_shapes::agnostic (the
// default, see config.hpp) the fused matmul has runtime dims
// (DNNL_RUNTIME_DIM_VAL) for everything but K and N, so one primitive
// serves every M and batch; the other primitives are made per shape.
// Primitives are cached in the kernel cache with their measured creation
// cost. A fused MatMul's primitive is created with format_tag::any for a
// constant weight; where it picks another layout than the user's (the
// shape-specialized primitives on AVX-512 machines, for instance), the
// weight is reordered once into that layout and kept in the constant tensor
// cache, in the engine's scope, keyed by the weight's contents (a
// fingerprint, see constant_check in config.hpp) and the layout. The
// runtime-dims primitives of the agnostic mode usually take the user's
// layout, and then nothing is packed.
#pragma once

#include "unicache/backend.hpp"
#include "unicache/cache.hpp"

namespace unicache::onednn_cpu {

// The owner id of this backend's cache entries (primitives, packed weights):
// what its backend::cache_owner() returns.
inline constexpr owner_id cache_owner_id = 0x0D0E0001;

// The engine of CPU device `index` (oneDNN has one CPU device: 0). Every
// call with one index returns the same underlying dnnl::engine, so that
// cached primitives and packed weights are always used with the engine that
// made them. Registers the backend on first use. Throws compile_error if
// oneDNN refuses. Thread-safe.
engine make_engine(int index = 0);

// Process-wide counters of this backend, for tests, benchmarks and demos.
struct backend_stats {
  std::uint64_t primitives_created = 0;  // oneDNN primitives created (cache misses)
  std::uint64_t create_ns = 0;           // time spent creating them
  std::uint64_t weights_packed = 0;      // constant weights reordered into a primitive's layout
  std::uint64_t pack_ns = 0;             // time spent packing them
};
// Thread-safe; each field is read atomically (the set need not be a snapshot).
backend_stats stats();

}  // namespace unicache::onednn_cpu
