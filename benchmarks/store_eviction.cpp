// bench_store --eviction N[,N...]: what an eviction costs a store of N
// entries of 4 KB, and what it costs another process meanwhile.
//
// For each N: fill a fresh store with N entries (size eviction off), then
// lower the limit to 90% of what it holds, so that the store is over its
// size everywhere. A second process starts getting existing entries and
// putting new ones, each operation timed (it never evicts itself: its own
// limit is off, so whatever it waits for is another process's eviction);
// then this process puts one entry
// (the put that triggers eviction, timed) and waits until the eviction is
// over (it may go on in the background). The second process then stops and reports the longest put and
// get it saw. Last, stats, list and verify are timed on the evicted store.
#include "store_eviction.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "unicache/store.hpp"

namespace unicache::bench {
namespace {

using clock_type = std::chrono::steady_clock;
constexpr std::size_t kBinaryBytes = 4096;
const device_identity kDevice{"bench platform", "bench device", "OpenCL 3.0", "1.0"};

double ms_since(clock_type::time_point t0) {
  return std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
}

byte_vector binary_of(std::uint64_t i) {
  byte_vector b(kBinaryBytes);
  for (std::size_t j = 0; j < b.size(); ++j) b[j] = static_cast<unsigned char>(j * 131 + i * 7);
  return b;
}

std::string fill_key(std::uint64_t i) { return "fill/" + std::to_string(i); }

// What the second process measured.
struct neighbour_report {
  double max_put_ms = 0;
  double max_get_ms = 0;
  double p50_put_ms = 0;
  double p50_get_ms = 0;
  std::uint64_t puts = 0;
  std::uint64_t gets = 0;
  std::uint64_t wrong = 0;  // a get that returned another binary
};

double p50(std::vector<double>& v) {
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

// The second process: alternates a get of an existing entry and a put of a
// new one until `stop_fd` becomes readable, then writes its report to `out_fd`.
[[noreturn]] void neighbour(const store_config& config, std::uint64_t entries, int ready_fd, int stop_fd, int out_fd) {
  store_config own = config;
  own.size_eviction = false;
  kernel_store store(own);
  std::mt19937_64 rng(12345);
  neighbour_report r;
  std::vector<double> puts, gets;
  puts.reserve(1 << 20);
  gets.reserve(1 << 20);
  const char ready = 1;
  (void)!::write(ready_fd, &ready, 1);
  for (std::uint64_t n = 0;; ++n) {
    char c;
    if (::read(stop_fd, &c, 1) == 1) break;  // non-blocking
    const std::uint64_t k = rng() % entries;
    auto t0 = clock_type::now();
    const std::optional<byte_vector> got = store.get(kDevice, fill_key(k));
    const double get_ms = ms_since(t0);
    if (got && *got != binary_of(k)) ++r.wrong;
    gets.push_back(get_ms);
    r.max_get_ms = std::max(r.max_get_ms, get_ms);
    t0 = clock_type::now();
    store.put(kDevice, "neighbour/" + std::to_string(n), binary_of(entries + n));
    const double put_ms = ms_since(t0);
    puts.push_back(put_ms);
    r.max_put_ms = std::max(r.max_put_ms, put_ms);
  }
  r.puts = puts.size();
  r.gets = gets.size();
  r.p50_put_ms = p50(puts);
  r.p50_get_ms = p50(gets);
  (void)!::write(out_fd, &r, sizeof r);
  ::_exit(0);
}

struct row {
  std::uint64_t entries = 0;
  double fill_s = 0;
  double trigger_put_ms = 0;
  double eviction_s = 0;
  neighbour_report neighbour;
  double stats_ms = 0;
  double list_ms = 0;
  double verify_ms = 0;
  std::uint64_t entries_after = 0;
  std::uint64_t key_directories_after = 0;
};

std::uint64_t count_key_directories(const std::string& dir) {
  // <dir>/v*/<device>/<kk>/<key>: directories three levels below a format root.
  std::uint64_t n = 0;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(dir, ec);
       it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) break;
    if (it->is_directory(ec) && it->path().filename().string().size() == 32 &&
        it->path().parent_path().filename().string().size() == 2 &&
        it->path().parent_path().parent_path().filename().string().size() == 32) {
      ++n;
    }
  }
  return n;
}

row measure(const std::string& root, std::uint64_t entries) {
  row out;
  out.entries = entries;
  store_config config;
  config.directory = root + "/evict-" + std::to_string(entries);
  config.max_size_bytes = std::uint64_t{1} << 40;
  config.size_eviction = false;
  {
    kernel_store store(config);
    const auto t0 = clock_type::now();
    for (std::uint64_t i = 0; i < entries; ++i) store.put(kDevice, fill_key(i), binary_of(i));
    out.fill_s = ms_since(t0) / 1000;
  }
  // Over the limit everywhere: 90% of what the store holds.
  std::uint64_t held = 0;
  {
    kernel_store store(config);
    held = store.stats().recorded_bytes;
  }
  config.size_eviction = true;
  config.max_size_bytes = held / 10 * 9;
  ::sync();  // the fill's dirty pages are not the eviction's cost

  int ready[2], stop[2], report[2];
  if (::pipe(ready) != 0 || ::pipe(stop) != 0 || ::pipe(report) != 0) return out;
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(ready[0]);
    ::close(stop[1]);
    ::close(report[0]);
    ::fcntl(stop[0], F_SETFL, O_NONBLOCK);
    neighbour(config, entries, ready[1], stop[0], report[1]);
  }
  ::close(ready[1]);
  ::close(stop[0]);
  ::close(report[1]);
  char c;
  (void)!::read(ready[0], &c, 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  {
    kernel_store store(config);
    const auto t0 = clock_type::now();
    store.put(kDevice, "trigger", binary_of(0));
    out.trigger_put_ms = ms_since(t0);
    // Until the eviction is over (it may run on in the background).
    store.finish_eviction();
    out.eviction_s = ms_since(t0) / 1000;
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
  (void)!::write(stop[1], &c, 1);
  if (::read(report[0], &out.neighbour, sizeof out.neighbour) != sizeof out.neighbour) out.neighbour = {};
  ::waitpid(pid, nullptr, 0);
  ::close(ready[0]);
  ::close(stop[1]);
  ::close(report[0]);

  kernel_store store(config);
  auto t0 = clock_type::now();
  out.entries_after = store.stats().entries;
  out.stats_ms = ms_since(t0);
  t0 = clock_type::now();
  const std::size_t listed = store.list().size();
  out.list_ms = ms_since(t0);
  t0 = clock_type::now();
  const std::size_t bad = store.verify(false).size();
  out.verify_ms = ms_since(t0);
  if (bad != 0) std::fprintf(stderr, "bench_store: verify found %zu bad files\n", bad);
  if (listed != out.entries_after) {
    std::fprintf(stderr, "bench_store: list shows %zu entries, stats %llu\n", listed,
                 static_cast<unsigned long long>(out.entries_after));
  }
  out.key_directories_after = count_key_directories(config.directory);
  return out;
}

}  // namespace

int run_eviction(const std::string& root, const std::vector<std::uint64_t>& sizes) {
  std::printf(
      "| entries | fill s | trigger put ms | eviction done after s | neighbour: max put ms | max get ms | p50 put ms "
      "| p50 get ms | ops | wrong | stats ms | list ms | verify ms | entries after | key dirs after |\n");
  std::printf("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  int status = 0;
  for (const std::uint64_t n : sizes) {
    const row r = measure(root, n);
    std::printf("| %llu | %.1f | %.2f | %.2f | %.2f | %.2f | %.3f | %.3f | %llu | %llu | %.1f | %.1f | %.1f | %llu | %llu |\n",
                static_cast<unsigned long long>(r.entries), r.fill_s, r.trigger_put_ms, r.eviction_s,
                r.neighbour.max_put_ms, r.neighbour.max_get_ms, r.neighbour.p50_put_ms, r.neighbour.p50_get_ms,
                static_cast<unsigned long long>(r.neighbour.puts + r.neighbour.gets),
                static_cast<unsigned long long>(r.neighbour.wrong), r.stats_ms, r.list_ms, r.verify_ms,
                static_cast<unsigned long long>(r.entries_after),
                static_cast<unsigned long long>(r.key_directories_after));
    std::fflush(stdout);
    if (r.neighbour.wrong != 0 || r.neighbour.gets == 0) status = 1;
    std::error_code ignored;
    std::filesystem::remove_all(root + "/evict-" + std::to_string(n), ignored);
  }
  return status;
}

}  // namespace unicache::bench
