// bench_store --eviction N[,N...]: what an eviction costs a store of N
// entries of 4 KB, and what it costs another process meanwhile.
//
// For each N, and each shape of neighbour: fill a fresh store with N entries
// (size eviction off), then lower the limit to 90% of what it holds, so that
// the store is over its size everywhere. A second process (the neighbour)
// starts getting existing entries and putting new ones, each operation
// timed (it never evicts itself: its own limit is off, so whatever it waits
// for is another process's eviction); then this process puts one entry (the
// put that triggers eviction, timed) and waits until the eviction is over
// (it may go on in the background). The neighbour then stops and reports
// the longest, p99.9 and p50 put and get it saw. Last, stats, list and
// verify are timed on the evicted store.
//
// Then, as the baseline of the same run, the same again without the
// trigger: a fresh fill, the same neighbour for as long as the first
// neighbour ran, and nobody evicting (the row's trigger and eviction columns
// read "-"). What the neighbour sees there is what this machine gives its
// two threads anyway (scheduling, the disk's own writeback); the difference
// is the eviction's.
//
// The neighbour puts at most max(4 N, 10,000) new entries (then only
// gets): its own eviction is off, so an eviction slower than its puts would
// otherwise let it fill the disk. A run that reached the cap says so.
//
// The neighbour's shapes:
//   alternating  one thread, a get then a put, in turn;
//   concurrent   two threads on one kernel_store, one getting and one
//                putting, each as fast as it can (a server whose loader
//                threads read while a compile thread writes).
#include "store_eviction.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>
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

enum class shape { alternating, concurrent };
const char* name_of(shape s) { return s == shape::alternating ? "alternating" : "concurrent"; }

// What the second process measured.
struct neighbour_report {
  double max_put_ms = 0, p999_put_ms = 0, p50_put_ms = 0;
  double max_get_ms = 0, p999_get_ms = 0, p50_get_ms = 0;
  std::uint64_t puts = 0;
  std::uint64_t gets = 0;
  std::uint64_t wrong = 0;  // a get that returned another binary
  bool capped = false;      // stopped putting at put_cap
};

// How many new entries the neighbour may put into a store of `entries`.
std::uint64_t put_cap(std::uint64_t entries) { return std::max<std::uint64_t>(4 * entries, 10000); }

// The q-quantile (nearest rank) of `v`, reordering it.
double quantile(std::vector<double>& v, double q) {
  if (v.empty()) return 0;
  const auto rank = std::min(v.size() - 1, static_cast<std::size_t>(q * static_cast<double>(v.size())));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(rank), v.end());
  return v[rank];
}

// One thread's timings of one kind of operation.
struct timings {
  std::vector<double> ms;
  timings() { ms.reserve(1 << 20); }
  void add(double t) { ms.push_back(t); }
  void report(double* max, double* p999, double* p50, std::uint64_t* count) {
    *count = ms.size();
    *max = ms.empty() ? 0 : *std::max_element(ms.begin(), ms.end());
    *p999 = quantile(ms, 0.999);
    *p50 = quantile(ms, 0.5);
  }
};

bool stopped(int stop_fd) {
  char c;
  return ::read(stop_fd, &c, 1) == 1;  // non-blocking
}

// A get of a random existing entry, timed; a wrong binary counted.
void timed_get(kernel_store& store, std::mt19937_64& rng, std::uint64_t entries, timings& t, std::uint64_t* wrong) {
  const std::uint64_t k = rng() % entries;
  const auto t0 = clock_type::now();
  const std::optional<byte_vector> got = store.get(kDevice, fill_key(k));
  t.add(ms_since(t0));
  if (got && *got != binary_of(k)) ++*wrong;
}

// A put of a new entry, timed.
void timed_put(kernel_store& store, std::uint64_t entries, std::uint64_t n, timings& t) {
  const auto t0 = clock_type::now();
  store.put(kDevice, "neighbour/" + std::to_string(n), binary_of(entries + n));
  t.add(ms_since(t0));
}

// The second process: gets existing entries and puts new ones, in the
// given shape, until `stop_fd` becomes readable, then writes its report to
// `out_fd`.
[[noreturn]] void neighbour(shape how, const store_config& config, std::uint64_t entries, int ready_fd, int stop_fd,
                            int out_fd) {
  store_config own = config;
  own.size_eviction = false;
  kernel_store store(own);
  neighbour_report r;
  timings gets, puts;
  const char ready = 1;
  (void)!::write(ready_fd, &ready, 1);
  if (how == shape::alternating) {
    std::mt19937_64 rng(12345);
    for (std::uint64_t n = 0; !stopped(stop_fd); ++n) {
      timed_get(store, rng, entries, gets, &r.wrong);
      if (n < put_cap(entries)) timed_put(store, entries, n, puts);
    }
  } else {
    std::atomic<bool> stop{false};
    std::uint64_t wrong = 0;
    std::thread getter([&] {
      std::mt19937_64 rng(12345);
      while (!stop.load(std::memory_order_relaxed)) timed_get(store, rng, entries, gets, &wrong);
    });
    std::thread putter([&] {
      for (std::uint64_t n = 0; n < put_cap(entries) && !stop.load(std::memory_order_relaxed); ++n) {
        timed_put(store, entries, n, puts);
      }
    });
    while (!stopped(stop_fd)) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    stop = true;
    getter.join();
    putter.join();
    r.wrong = wrong;
  }
  gets.report(&r.max_get_ms, &r.p999_get_ms, &r.p50_get_ms, &r.gets);
  puts.report(&r.max_put_ms, &r.p999_put_ms, &r.p50_put_ms, &r.puts);
  r.capped = r.puts >= put_cap(entries);
  (void)!::write(out_fd, &r, sizeof r);
  ::_exit(0);
}

struct row {
  std::uint64_t entries = 0;
  shape how = shape::alternating;
  bool evicts = true;  // false: the baseline, nobody evicting
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

// With `baseline_s`, the baseline: no trigger, the neighbour runs that long
// (plus the pauses an evicting row has around its trigger).
row measure(const std::string& root, std::uint64_t entries, shape how, std::optional<double> baseline_s) {
  row out;
  out.entries = entries;
  out.how = how;
  out.evicts = !baseline_s;
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
    neighbour(how, config, entries, ready[1], stop[0], report[1]);
  }
  ::close(ready[1]);
  ::close(stop[0]);
  ::close(report[1]);
  char c;
  (void)!::read(ready[0], &c, 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  if (baseline_s) {
    std::this_thread::sleep_for(std::chrono::duration<double>(*baseline_s) + std::chrono::milliseconds(300));
  } else {
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
  if (baseline_s) return out;

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
      "| entries | neighbour | fill s | trigger put ms | eviction done after s | neighbour's put ms: max | p99.9 | p50 "
      "| get ms: max | p99.9 | p50 | puts | gets | wrong | stats ms | list ms | verify ms | entries after "
      "| key dirs after |\n");
  std::printf("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
              "| ---: | ---: | ---: |\n");
  int status = 0;
  auto print = [&](const row& r) {
    const neighbour_report& b = r.neighbour;
    std::string trigger = "-", done = "-", after = "| - | - | - | - | - |";
    if (r.evicts) {
      char buf[160];
      std::snprintf(buf, sizeof buf, "%.2f", r.trigger_put_ms);
      trigger = buf;
      std::snprintf(buf, sizeof buf, "%.2f", r.eviction_s);
      done = buf;
      std::snprintf(buf, sizeof buf, "| %.1f | %.1f | %.1f | %llu | %llu |", r.stats_ms, r.list_ms, r.verify_ms,
                    static_cast<unsigned long long>(r.entries_after),
                    static_cast<unsigned long long>(r.key_directories_after));
      after = buf;
    }
    std::printf("| %llu | %s%s | %.1f | %s | %s | %.2f | %.2f | %.3f | %.2f | %.2f | %.3f | %llu%s | %llu | %llu %s\n",
                static_cast<unsigned long long>(r.entries), name_of(r.how), r.evicts ? "" : ", nobody evicting", r.fill_s,
                trigger.c_str(), done.c_str(), b.max_put_ms, b.p999_put_ms, b.p50_put_ms, b.max_get_ms, b.p999_get_ms,
                b.p50_get_ms, static_cast<unsigned long long>(b.puts), b.capped ? " (cap)" : "",
                static_cast<unsigned long long>(b.gets), static_cast<unsigned long long>(b.wrong), after.c_str());
    std::fflush(stdout);
    if (b.wrong != 0 || b.gets == 0) status = 1;
    std::error_code ignored;
    std::filesystem::remove_all(root + "/evict-" + std::to_string(r.entries), ignored);
  };
  for (const std::uint64_t n : sizes) {
    for (const shape how : {shape::alternating, shape::concurrent}) {
      const row evicting = measure(root, n, how, std::nullopt);
      print(evicting);
      print(measure(root, n, how, evicting.eviction_s));
    }
  }
  return status;
}

}  // namespace unicache::bench
