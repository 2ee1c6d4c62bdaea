// bench_cache: the unified cache's hit and miss paths against two baselines
// written from their published designs (benchmarks/baselines/):
//   onednn_style  one global reader-writer lock, atomic timestamps, O(n) eviction
//   mutex_lru     std::mutex + unordered_map + list splice
// Benchmark names carry the implementation; run with threads 1..16 on a
// 16-core host for the scaling figures. Also measures the handle path (one
// atomic load) and the cache's bookkeeping bytes per entry.
#include <benchmark/benchmark.h>
#include <malloc.h>

#include <atomic>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "baselines/mutex_lru_cache.hpp"
#include "baselines/onednn_style_cache.hpp"
#include "unicache/cache.hpp"
#include "util/epoch.hpp"

#pragma GCC diagnostic ignored "-Wmismatched-new-delete"  // malloc'd by our own new

// Live heap bytes, as the allocator counts them (usable size), for the
// memory figure. Counting costs two relaxed atomics per allocation in this
// binary only.
namespace {
std::atomic<long long> g_live_bytes{0};
}
void* operator new(std::size_t n) {
  void* p = std::malloc(n ? n : 1);
  if (!p) throw std::bad_alloc();
  g_live_bytes.fetch_add(static_cast<long long>(malloc_usable_size(p)), std::memory_order_relaxed);
  return p;
}
void operator delete(void* p) noexcept {
  if (!p) return;
  g_live_bytes.fetch_sub(static_cast<long long>(malloc_usable_size(p)), std::memory_order_relaxed);
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept { operator delete(p); }
void* operator new(std::size_t n, std::align_val_t a) {
  void* p = std::aligned_alloc(static_cast<std::size_t>(a),
                               (n + static_cast<std::size_t>(a) - 1) & ~(static_cast<std::size_t>(a) - 1));
  if (!p) throw std::bad_alloc();
  g_live_bytes.fetch_add(static_cast<long long>(malloc_usable_size(p)), std::memory_order_relaxed);
  return p;
}
void operator delete(void* p, std::align_val_t) noexcept { operator delete(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { operator delete(p); }

namespace {

using namespace unicache;

constexpr int kKeys = 1024;
constexpr std::size_t kValueBytes = 1024;

// Keys shaped like a backend's kernel keys: ~56 bytes.
const std::vector<std::string>& keys() {
  static const std::vector<std::string> k = [] {
    std::vector<std::string> out;
    for (int i = 0; i < kKeys; ++i) {
      out.push_back("opencl/gemm/f32/tile=64x64x8/post=bias,gelu/opts=-cl-mad/#" + std::to_string(i));
    }
    return out;
  }();
  return k;
}

cache_future ready_future() {
  std::promise<cache_value> p;
  p.set_value(std::make_shared<int>(1));
  return p.get_future().share();
}

struct unicache_impl {
  unified_cache cache;
  explicit unicache_impl(std::size_t capacity_bytes)
      : cache([&] {
          cache_config c;
          c.cpu = {capacity_bytes >> 20, eviction_policy::lru};
          return c;
        }()) {}
  cache_future get_or_add(std::string_view key, std::size_t size, const cache_future& f) {
    return cache.get_or_add({engine_kind::cpu, 0, 0}, 1, key, size, 1000, f);
  }
};

// The baselines take the same arguments minus the scope (they have one).
template <typename Cache>
struct baseline_impl {
  Cache cache;
  explicit baseline_impl(std::size_t capacity_bytes) : cache(capacity_bytes) {}
  cache_future get_or_add(std::string_view key, std::size_t size, const cache_future& f) {
    return cache.get_or_add(key, size, f);
  }
};
using onednn_style_impl = baseline_impl<baselines::onednn_style_cache>;
using mutex_lru_impl = baseline_impl<baselines::mutex_lru_cache>;

// One populated instance per implementation, shared by the threads of a run.
template <typename Impl>
Impl& populated() {
  static Impl* impl = [] {
    auto* i = new Impl(std::size_t{1} << 30);
    // Each entry has its own value, as real entries do (one promise each).
    for (const auto& k : keys()) i->get_or_add(k, kValueBytes, ready_future());
    return i;
  }();
  return *impl;
}

std::uint64_t xorshift(std::uint64_t& s) {
  s ^= s << 13;
  s ^= s >> 7;
  s ^= s << 17;
  return s;
}

// Every thread looks up random keys of a working set that is all cached.
template <typename Impl>
void BM_hit(benchmark::State& state) {
  Impl& impl = populated<Impl>();
  const cache_future mine = ready_future();  // per thread: no shared refcount
  const auto& k = keys();
  std::uint64_t rng = 0x9E3779B97F4A7C15ull * (state.thread_index() + 1);
  for (auto _ : state) {
    cache_future f = impl.get_or_add(k[xorshift(rng) & (kKeys - 1)], kValueBytes, mine);
    benchmark::DoNotOptimize(f);
  }
  state.SetItemsProcessed(state.iterations());
}

// The same shared working set through lookup(), the hit path that borrows
// the value instead of copying a shared_future: what a backend does before
// it launches a cached kernel.
void BM_lookup_unicache(benchmark::State& state) {
  unicache_impl& impl = populated<unicache_impl>();
  const auto& k = keys();
  std::uint64_t rng = 0x9E3779B97F4A7C15ull * (state.thread_index() + 1);
  long long sum = 0;
  for (auto _ : state) {
    if (auto v = impl.cache.lookup<const int>({engine_kind::cpu, 0, 0}, 1, k[xorshift(rng) & (kKeys - 1)])) sum += *v;
    benchmark::DoNotOptimize(sum);
  }
  state.SetItemsProcessed(state.iterations());
}

// lookup() with every thread on one key.
void BM_lookup_one_key_unicache(benchmark::State& state) {
  unicache_impl& impl = populated<unicache_impl>();
  const std::string& key = keys()[7];
  long long sum = 0;
  for (auto _ : state) {
    if (auto v = impl.cache.lookup<const int>({engine_kind::cpu, 0, 0}, 1, key)) sum += *v;
    benchmark::DoNotOptimize(sum);
  }
  state.SetItemsProcessed(state.iterations());
}

// Every thread looks up random keys of its own working set (no key shared):
// what the cache itself costs when callers do not share values.
template <typename Impl>
void BM_hit_private_keys(benchmark::State& state) {
  static Impl* impl = [] {
    auto* i = new Impl(std::size_t{1} << 32);
    for (int t = 0; t < 16; ++t) {
      for (const auto& k : keys()) i->get_or_add(std::to_string(t) + k, kValueBytes, ready_future());
    }
    return i;
  }();
  std::vector<std::string> mine;
  for (const auto& k : keys()) mine.push_back(std::to_string(state.thread_index()) + k);
  const cache_future f = ready_future();
  std::uint64_t rng = 0x9E3779B97F4A7C15ull * (state.thread_index() + 1);
  for (auto _ : state) {
    cache_future got = impl->get_or_add(mine[xorshift(rng) & (kKeys - 1)], kValueBytes, f);
    benchmark::DoNotOptimize(got);
  }
  state.SetItemsProcessed(state.iterations());
}

// Every thread looks up the same key: the worst case for shared state.
template <typename Impl>
void BM_hit_one_key(benchmark::State& state) {
  Impl& impl = populated<Impl>();
  const cache_future mine = ready_future();
  const std::string& key = keys()[7];
  for (auto _ : state) {
    cache_future f = impl.get_or_add(key, kValueBytes, mine);
    benchmark::DoNotOptimize(f);
  }
  state.SetItemsProcessed(state.iterations());
}

// The handle path: a backend keeps the handle of
// its packed weight and checks valid() before each use.
void BM_handle_one_key_unicache(benchmark::State& state) {
  static unified_cache cache;
  static cache_handle<int> shared_handle = cache.get_or_build<int>(
      {engine_kind::cpu, 0, 0}, 1, keys()[7], kValueBytes, [] { return std::make_shared<int>(5); });
  const cache_handle<int> handle = shared_handle;  // each thread's backend holds its copy
  long long sum = 0;
  for (auto _ : state) {
    if (handle.valid()) sum += *handle;
    benchmark::DoNotOptimize(sum);
  }
  state.SetItemsProcessed(state.iterations());
}

// No cache at all: each thread hashes its own counter. How far this host
// scales a loop that shares nothing; the ceiling for every figure above.
void BM_parallel_ceiling(benchmark::State& state) {
  std::uint64_t x = 0x9E3779B97F4A7C15ull * (state.thread_index() + 1);
  for (auto _ : state) {
    for (int i = 0; i < 8; ++i) x = xorshift(x);
    benchmark::DoNotOptimize(x);
  }
  state.SetItemsProcessed(state.iterations());
}

// No cache either: each thread reads 5 random cache lines of its own 512 KB
// buffer per iteration, about what a hit touches in a private working set.
// How far the host scales L2-bound work that shares nothing.
void BM_parallel_ceiling_memory(benchmark::State& state) {
  constexpr std::size_t kLines = (512 * 1024) / 64;
  std::vector<std::uint64_t> buffer(kLines * 8, 1);
  std::uint64_t x = 0x9E3779B97F4A7C15ull * (state.thread_index() + 1);
  std::uint64_t sum = 0;
  for (auto _ : state) {
    for (int i = 0; i < 5; ++i) sum += buffer[(xorshift(x) % kLines) * 8];
    benchmark::DoNotOptimize(sum);
  }
  state.SetItemsProcessed(state.iterations());
}

// A full cache where every request is a new key: miss, insert, evict one.
template <typename Impl>
void BM_miss_evict(benchmark::State& state) {
  static Impl* impl = nullptr;  // set by thread 0 before the start barrier
  if (state.thread_index() == 0) {
    impl = new Impl(std::size_t{kKeys} * kValueBytes);  // holds kKeys entries
    for (const auto& k : keys()) impl->get_or_add(k, kValueBytes, ready_future());
  }
  const cache_future mine = ready_future();
  char key[96] = "opencl/gemm/f32/tile=64x64x8/post=bias,gelu/miss/";
  const std::size_t prefix = std::char_traits<char>::length(key);
  std::uint64_t n = static_cast<std::uint64_t>(state.thread_index()) << 40;
  for (auto _ : state) {
    auto end = std::to_chars(key + prefix, key + sizeof key, ++n).ptr;
    cache_future f = impl->get_or_add(std::string_view(key, end - key), kValueBytes, mine);
    benchmark::DoNotOptimize(f);
  }
  state.SetItemsProcessed(state.iterations());
  // The instance is leaked on purpose: other threads may still be leaving
  // the loop when thread 0 returns.
}

// Bookkeeping bytes per entry: heap growth of the cache while inserting N
// entries, minus the keys and minus what the caller allocated (futures).
void BM_memory_per_entry_unicache(benchmark::State& state) {
  const int kEntries = static_cast<int>(state.range(0));
  constexpr std::size_t kKeyBytes = 32;
  double per_entry = 0;
  for (auto _ : state) {
    std::vector<std::string> ks;
    ks.reserve(kEntries);
    for (int i = 0; i < kEntries; ++i) {
      std::string s(kKeyBytes, 'k');
      std::to_chars(s.data(), s.data() + kKeyBytes, i);
      ks.push_back(std::move(s));
    }
    const cache_future f = ready_future();
    auto* cache = new unified_cache();
    const long long before = g_live_bytes.load();
    for (const auto& k : ks) cache->get_or_add({engine_kind::cpu, 0, 0}, 1, k, 16, 1000, f);
    const long long after = g_live_bytes.load();
    per_entry = static_cast<double>(after - before) / kEntries - static_cast<double>(kKeyBytes);
    delete cache;
  }
  state.counters["bookkeeping_bytes_per_entry"] = per_entry;
}

void threads_1_to_16(benchmark::internal::Benchmark* b) { b->ThreadRange(1, 16)->UseRealTime(); }
void threads_1_and_4(benchmark::internal::Benchmark* b) { b->Threads(1)->Threads(4)->UseRealTime(); }

BENCHMARK(BM_hit<unicache_impl>)->Name("BM_hit/unicache")->Apply(threads_1_to_16);
BENCHMARK(BM_hit<onednn_style_impl>)->Name("BM_hit/onednn_style")->Apply(threads_1_to_16);
BENCHMARK(BM_hit<mutex_lru_impl>)->Name("BM_hit/mutex_lru")->Apply(threads_1_to_16);
BENCHMARK(BM_lookup_unicache)->Name("BM_lookup/unicache")->Apply(threads_1_to_16);
BENCHMARK(BM_lookup_one_key_unicache)->Name("BM_lookup_one_key/unicache")->Apply(threads_1_to_16);
BENCHMARK(BM_hit_private_keys<unicache_impl>)->Name("BM_hit_private_keys/unicache")->Apply(threads_1_to_16);
BENCHMARK(BM_hit_private_keys<onednn_style_impl>)->Name("BM_hit_private_keys/onednn_style")->Apply(threads_1_to_16);
BENCHMARK(BM_hit_private_keys<mutex_lru_impl>)->Name("BM_hit_private_keys/mutex_lru")->Apply(threads_1_to_16);
BENCHMARK(BM_hit_one_key<unicache_impl>)->Name("BM_hit_one_key/unicache")->Apply(threads_1_to_16);
BENCHMARK(BM_hit_one_key<onednn_style_impl>)->Name("BM_hit_one_key/onednn_style")->Apply(threads_1_to_16);
BENCHMARK(BM_hit_one_key<mutex_lru_impl>)->Name("BM_hit_one_key/mutex_lru")->Apply(threads_1_to_16);
BENCHMARK(BM_handle_one_key_unicache)->Name("BM_handle_one_key/unicache")->Apply(threads_1_to_16);
BENCHMARK(BM_parallel_ceiling)->Name("BM_parallel_ceiling/no_cache")->Apply(threads_1_to_16);
BENCHMARK(BM_parallel_ceiling_memory)->Name("BM_parallel_ceiling/no_cache_memory")->Apply(threads_1_to_16);
BENCHMARK(BM_miss_evict<unicache_impl>)->Name("BM_miss_evict/unicache")->Apply(threads_1_and_4);
BENCHMARK(BM_miss_evict<onednn_style_impl>)->Name("BM_miss_evict/onednn_style")->Apply(threads_1_and_4);
BENCHMARK(BM_miss_evict<mutex_lru_impl>)->Name("BM_miss_evict/mutex_lru")->Apply(threads_1_and_4);
BENCHMARK(BM_memory_per_entry_unicache)
    ->Name("BM_memory_per_entry/unicache")
    ->Arg(1000)->Arg(10000)->Arg(50000)->Arg(100000)->Arg(300000)->Arg(1000000)
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);

// --help (Google Benchmark calls it, then exits 0).
void print_usage() {
  std::fputs(
      "usage: bench_cache [Google Benchmark options]\n"
      "\n"
      "The unified cache's hit and miss paths against two baselines written from\n"
      "their published designs (onednn_style: one global reader-writer lock, O(n)\n"
      "eviction; mutex_lru: std::mutex, unordered_map and list), on 1 to 16\n"
      "threads; the handle path (one atomic load); and the cache's bookkeeping\n"
      "bytes per entry. Benchmark names carry the implementation.\n"
      "\n"
      "Google Benchmark options:\n",
      stdout);
  benchmark::PrintDefaultHelp();
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::AddCustomContext(
      "unicache_epoch_reader_fence",
      unicache::detail::epoch_domain::instance().asymmetric() ? "membarrier (compiler barrier on reads)"
                                                              : "xchg on reads");
  benchmark::Initialize(&argc, argv, print_usage);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
