// cache_demo: what a backend does with the unified cache.
//
// Eight threads execute a small three-layer model many times. Each layer's
// weight must be packed (here: transposed into the layout a kernel wants)
// before use. Through the cache, each weight is packed exactly once, by the
// first thread that needs it, while the others wait for that result instead
// of packing it again; later executions keep a handle and check valid() (one
// atomic load) instead of looking the weight up. Shrinking the capacity
// evicts weights; the backend's eviction callback is told, and the next
// execution packs them again.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "example_usage.hpp"
#include "unicache/cache.hpp"

namespace {

using namespace unicache;

constexpr owner_id kDemoOwner = 1;

struct weight {
  std::string name;
  int rows, cols;
  std::vector<float> data;  // row-major, as the framework owns it
};

// The packed copy a kernel reads: column-major.
struct packed_weight {
  std::vector<float> data;
};

std::shared_ptr<packed_weight> pack(const weight& w) {
  auto out = std::make_shared<packed_weight>();
  out->data.resize(w.data.size());
  for (int r = 0; r < w.rows; ++r) {
    for (int c = 0; c < w.cols; ++c) out->data[c * w.rows + r] = w.data[r * w.cols + c];
  }
  return out;
}

const char* const kUsage =
    "usage: cache_demo\n"
    "\n"
    "What a backend does with the unified cache: eight threads run a small\n"
    "three-layer model, and each weight is packed once, by the first thread\n"
    "that needs it. Then the CPU capacity shrinks, evicting weights (the\n"
    "backend's eviction callback is told), and the next run packs only those\n"
    "again. Prints what the cache did. Takes no options.\n"
    "\n"
    "exit codes: 0 each weight was packed once per eviction; 1 it was not;\n"
    "2 usage error.\n";


}  // namespace

int main(int argc, char** argv) {
  if (argc > 1) return unicache::examples::answer_argument("cache_demo", kUsage, argv[1]);
  // An independent cache for the demo; applications normally use
  // unicache::constant_tensor_cache(), configured from the environment.
  cache_config config;
  config.cpu = {64, eviction_policy::library_default};
  unified_cache cache(config);
  const cache_scope scope{engine_kind::cpu, /*device_id=*/0, /*context_id=*/0};

  std::vector<weight> model;
  for (auto [name, rows, cols] : {std::tuple{"fc1", 768, 3072}, {"fc2", 3072, 768}, {"head", 768, 768}}) {
    weight w{name, rows, cols, std::vector<float>(static_cast<std::size_t>(rows) * cols)};
    for (std::size_t i = 0; i < w.data.size(); ++i) w.data[i] = static_cast<float>(i % 97) * 0.01f;
    model.push_back(std::move(w));
  }

  std::atomic<int> packs{0}, evictions{0};
  cache.add_eviction_callback(kDemoOwner, [&](const eviction_event& e) {
    evictions.fetch_add(1);
    std::printf("  eviction callback: %s left the cache\n", std::string(e.key).c_str());
  });

  std::atomic<long long> handle_checks{0};
  auto get_packed = [&](const weight& w) {
    // The key names what decides the packed bytes: which weight, its shape,
    // the layout. (Backends with many fields use unicache::cache_key.)
    const std::string key = w.name + "/" + std::to_string(w.rows) + "x" + std::to_string(w.cols) + "/col-major";
    return cache.get_or_build<packed_weight>(scope, kDemoOwner, key, w.data.size() * sizeof(float),
                                             [&] {
                                               packs.fetch_add(1);
                                               return pack(w);
                                             });
  };

  auto run = [&](int executions) {
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t) {
      threads.emplace_back([&] {
        std::vector<cache_handle<packed_weight>> held(model.size());
        for (int i = 0; i < executions; ++i) {
          for (std::size_t layer = 0; layer < model.size(); ++layer) {
            handle_checks.fetch_add(1, std::memory_order_relaxed);
            if (!held[layer].valid()) held[layer] = get_packed(model[layer]);  // handle path
            volatile float sink = held[layer]->data[layer];
            (void)sink;
          }
        }
      });
    }
    for (auto& t : threads) t.join();
  };

  std::printf("unicache demo: 8 threads x 500 executions of a 3-layer model (weights %.1f MB)\n",
              (768.0 * 3072 * 2 + 768.0 * 768) * 4 / (1 << 20));
  auto start = std::chrono::steady_clock::now();
  run(500);
  auto ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  cache_stats s = cache.stats(scope);
  std::printf("  packs: %d (one per weight)   handle checks: %lld   lookups: %llu hits, %llu waits, %llu misses\n",
              packs.load(), handle_checks.load(), static_cast<unsigned long long>(s.hits),
              static_cast<unsigned long long>(s.waits), static_cast<unsigned long long>(s.misses));
  std::printf("  cached: %llu entries, %.1f MB, in %.1f ms\n", static_cast<unsigned long long>(s.entries),
              static_cast<double>(s.bytes) / (1 << 20), ms);

  std::printf("shrinking the CPU capacity to 12 MB (the policy keeps what costs most to rebuild per byte):\n");
  cache.set_capacity(engine_kind::cpu, 12);
  std::printf("growing it back to 64 MB and running again: only evicted weights are packed again\n");
  cache.set_capacity(engine_kind::cpu, 64);
  run(100);
  s = cache.stats(scope);
  std::printf("  packs: %d in all   evictions: %llu   cached: %llu entries, %.1f MB\n", packs.load(),
              static_cast<unsigned long long>(s.evictions), static_cast<unsigned long long>(s.entries),
              static_cast<double>(s.bytes) / (1 << 20));
  return packs.load() == 3 + evictions.load() ? 0 : 1;
}
