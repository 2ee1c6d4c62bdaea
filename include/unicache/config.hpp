// unicache/config.hpp — configuration of the unified caches, and the parser of
// the environment variables that set it.
// For: users.
//
// The process-wide caches read their configuration once, on first use:
//
//   ONEDNN_GRAPH_CONSTANT_TENSOR_CACHE_CAPACITY=cpu:10240:NO_EVICT;gpu:2048:LRU
//   ONEDNN_GRAPH_CONSTANT_TENSOR_CACHE=0|1
//   UNICACHE_KERNEL_CACHE_CAPACITY=cpu:256;gpu:512:COST
//   UNICACHE_KERNEL_CACHE=0|1
//   UNICACHE_VERBOSE=0|1
//   UNICACHE_KERNEL_SHAPES=adaptive|agnostic|specialized
//   UNICACHE_SPECIALIZE_THREADS=1, UNICACHE_SPECIALIZE_MAX=32, UNICACHE_SPECIALIZE_THRESHOLD=1
//
// A capacity is in MB and is the budget of each device of that engine kind;
// the policy is optional and names are case-insensitive. A malformed value is
// reported on stderr in one line naming the variable and the bad token, the
// whole variable is ignored (the defaults stay) and nothing aborts. API calls
// on a cache override what the environment said.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace unicache {

enum class engine_kind : std::uint8_t { cpu = 0, gpu = 1 };
inline constexpr int engine_kind_count = 2;
std::string_view to_string(engine_kind kind);

// What a device does when an entry does not fit.
enum class eviction_policy : std::uint8_t {
  // Refuse the new entry and keep everything (oneDNN's constant tensor cache).
  no_evict,
  // Evict the least recently used entries.
  lru,
  // Evict the entries whose loss costs least per byte freed: priority is
  // inflation + uses * build cost / size (GreedyDual-Size-Frequency), new
  // entries on probation in a small window. Aging is bounded: nothing is
  // evicted for a newcomer that is worth more than 128 times it per byte
  // (uses x cost / size), in caches of any number of entries; the newcomer
  // is turned away instead (docs/design.md).
  cost,
  // The library's choice, today `cost`: rebuild costs of kernels and packed
  // weights differ by orders of magnitude and so do their sizes, and a policy
  // that ignores both evicts a one-second compile to keep a microsecond copy.
  library_default,
};
std::string_view to_string(eviction_policy policy);
// `library_default` resolved to the policy it stands for.
eviction_policy effective_policy(eviction_policy policy);

// The largest capacity in MB, for an API call or an environment variable:
// one whose byte count fits in a size_t. Larger values are rejected, never
// saturated.
inline constexpr std::size_t max_capacity_mb = std::numeric_limits<std::size_t>::max() >> 20;

// Budget of every device of one engine kind.
struct kind_capacity {
  std::size_t capacity_mb = 0;
  eviction_policy policy = eviction_policy::library_default;
};

struct cache_config {
  bool enabled = true;
  kind_capacity cpu{2048, eviction_policy::library_default};
  kind_capacity gpu{1024, eviction_policy::library_default};
  // One stderr line per miss and per eviction (UNICACHE_VERBOSE=1).
  bool verbose = false;
  // What verbose lines call this cache ("constant_tensor_cache" and
  // "kernel_cache" for the process-wide ones).
  std::string name = "unified_cache";

  kind_capacity& of(engine_kind kind) { return kind == engine_kind::cpu ? cpu : gpu; }
  const kind_capacity& of(engine_kind kind) const {
    return kind == engine_kind::cpu ? cpu : gpu;
  }

  // Defaults of the process-wide constant tensor cache, then the variables
  // ONEDNN_GRAPH_CONSTANT_TENSOR_CACHE_CAPACITY, ONEDNN_GRAPH_CONSTANT_TENSOR_CACHE
  // and UNICACHE_VERBOSE applied on top. Malformed values are reported on
  // stderr and ignored.
  static cache_config constant_tensor_cache_from_environment();
  // Same for the kernel cache: defaults cpu:256, gpu:256, then
  // UNICACHE_KERNEL_CACHE_CAPACITY, UNICACHE_KERNEL_CACHE and UNICACHE_VERBOSE.
  static cache_config kernel_cache_from_environment();
};

// How backends key the kernels they build (process-wide).
enum class kernel_shapes : std::uint8_t {
  // One kernel per configuration (data types, transposes, fused post-ops,
  // tiles): sizes are runtime arguments, so every shape of a dynamic
  // workload runs the kernel built for the first (oneDNN's
  // DNNL_RUNTIME_DIM_VAL on the CPU, size arguments in OpenCL C).
  agnostic,
  // One kernel per configuration and shape, with the sizes compiled in: what
  // oneDNN's primitive cache gives. A new shape costs a new compile; a static
  // workload may run slightly faster.
  specialized,
  // The default: every shape runs at once on the shape-agnostic (generic)
  // kernel, and a shape class that is used enough for a kernel chosen for it
  // to repay its build gets one, built in the background and swapped in
  // (see specialize_settings). Executions never wait for a build.
  adaptive,
};
std::string_view to_string(kernel_shapes mode);
// The mode backends use for kernels compiled from now on: set_kernel_shapes()
// if called, else UNICACHE_KERNEL_SHAPES=adaptive|agnostic|specialized (read
// once; a malformed value gets one warning and the default, adaptive).
// Thread-safe; kernels already compiled stay as they are. set_kernel_shapes
// throws invalid_argument for a value outside the enum.
kernel_shapes current_kernel_shapes();
void set_kernel_shapes(kernel_shapes mode);
// Parses "adaptive", "agnostic" or "specialized", case-insensitively;
// nullopt otherwise.
std::optional<kernel_shapes> parse_kernel_shapes(std::string_view text);
// Whether kernels compiled in `mode` take their sizes as arguments (one
// generic kernel serves every shape): agnostic and adaptive.
inline bool shape_agnostic(kernel_shapes mode) { return mode != kernel_shapes::specialized; }

// When and how adaptive mode builds specialized kernels (process-wide).
//
// The cost model: each compiled partition counts, per shape class (what a
// backend's specialized kernel serves, e.g. "M 257..512, N 768, K 768"), the
// executions that ran on the generic kernel and their measured time. A class
// is specialized once
//     generic time spent in the class x expected_saving >= threshold x build cost
// where the build cost is the mean measured time of the backend's
// specializations so far in this process (before the first, the longest
// measured build of one of its generic kernels), and expected_saving is the fraction of
// the generic kernel's time a specialized one is expected to save. With the
// defaults a class is specialized once the time its generic runs would have
// saved equals what building costs: a rent-or-buy rule that never spends more
// than twice the best choice made in hindsight. A class whose kernel the
// persistent store holds costs a load, and is specialized at its first use.
struct specialize_settings {
  // Background threads that build specialized kernels: a oneTBB arena of
  // this many threads at low priority, beside the callers' threads. 0 turns
  // specialization off (adaptive runs like agnostic), and a GPU GEMM's other
  // split-K variant is then built in line when a shape needs it. Up to 64.
  unsigned threads = 1;
  // At most this many specialized variants (shape classes) per compiled
  // partition; classes beyond it stay on the generic kernel. Up to 1024.
  unsigned max_variants = 32;
  // The rent-or-buy factor above: larger waits longer; 0 specializes a
  // class at its first use (a warm-up phase, tests). Up to 1e6.
  double threshold = 1.0;
  double expected_saving = 0.5;
};
// The settings: set_specialize_settings() if called, else the defaults with
// UNICACHE_SPECIALIZE_THREADS, UNICACHE_SPECIALIZE_MAX and
// UNICACHE_SPECIALIZE_THRESHOLD applied (read once;
// a malformed value gets one warning and its default). The thread count is
// taken when the first specialization starts; later changes of it are
// ignored. Thread-safe.
specialize_settings current_specialize_settings();
// Throws invalid_argument for threads > 64, max_variants > 1024, a
// threshold outside [0, 1e6] or a saving outside [0, 1].
void set_specialize_settings(const specialize_settings& settings);

// How a backend makes sure a packed constant (a weight) still matches the
// tensor it was packed from (process-wide). A constant is identified by its
// contents, never by its address alone: a weight freed and allocated again
// at the same address with other values is packed again, not served stale.
enum class constant_check : std::uint8_t {
  // A full fingerprint (XXH3-128) of the weight when it is first packed, then
  // at every execution a hash of 16 strided 64-byte blocks (1 KB, the whole
  // weight when it is smaller) compared with the one taken at packing; a
  // mismatch fingerprints and packs again. Catches a different tensor at the
  // same address; an in-place edit that touches no sampled block is missed:
  // bump tensor::version for those. On a GPU stream the engine made (only
  // unicache enqueues there), the sampled blocks are read without waiting
  // for the stream's queued work: a constant input must not be written by
  // work still queued on that stream (a partition's output fed to a later
  // partition as a constant). On a caller's own stream (cuda::make_stream
  // over a CUstream) they are read in stream order, which waits.
  sampled,
  // The full fingerprint at every execution: exact, costs reading the whole
  // weight each time.
  full,
  // No check: address and tensor::version identify the contents (the
  // caller guarantees a constant never changes without a version bump).
  none,
};
std::string_view to_string(constant_check mode);
// The check backends apply from now on: set_constant_check() if called,
// else UNICACHE_CONSTANT_CHECK=sampled|full|none (read once; a malformed
// value gets one warning and the default, sampled). Thread-safe.
// set_constant_check throws invalid_argument for a value outside the enum.
constant_check current_constant_check();
void set_constant_check(constant_check mode);
// Parses "sampled", "full" or "none", case-insensitively. nullopt otherwise.
std::optional<constant_check> parse_constant_check(std::string_view text);

// One `kind:size[:policy]` part of a capacity specification.
struct capacity_setting {
  engine_kind kind;
  std::size_t capacity_mb;
  std::optional<eviction_policy> policy;
};

// The outcome of parsing a capacity specification: either settings, or an
// error that names the offending token.
struct capacity_spec {
  std::vector<capacity_setting> settings;
  std::string error;      // empty when the specification is valid
  std::string bad_token;  // the part of the input the error is about

  bool ok() const { return error.empty(); }
};

// Parses `kind:size[:policy](;kind:size[:policy])*`. Kinds are `cpu` and
// `gpu`, sizes are decimal MB up to max_capacity_mb, policies are
// NO_EVICT, LRU, COST and DEFAULT; names are case-insensitive and spaces
// around a token are ignored. Empty parts, a kind named twice, signs and
// anything else are errors. Never throws.
capacity_spec parse_capacity_spec(std::string_view text);

// Parses an on/off switch: "0" or "1" (spaces around ignored). Returns
// nullopt for anything else.
std::optional<bool> parse_switch(std::string_view text);

// Parses a policy name, case-insensitively. Returns nullopt for anything else.
std::optional<eviction_policy> parse_policy(std::string_view text);

}  // namespace unicache
