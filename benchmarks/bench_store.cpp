// bench_store: the persistent kernel store against the physical floor of
// the same I/O, measured in the same run.
//
//   BM_store_get_64k      kernel_store::get of a 64 KB binary (warm page cache)
//   BM_floor_read_64k     open + read + close of the same entry file
//   BM_store_put_64k      kernel_store::put of a new 64 KB binary
//   BM_floor_write_64k    write a temporary file + rename it (what any atomic put costs)
//   BM_store_get_processes/N  N processes doing gets at once: aggregate rate
//
// bench_store --eviction 1000,10000,100000 instead runs the eviction mode
// (store_eviction.cpp): what evicting a store of that many 4 KB entries
// costs the put that triggers it and another process's gets and puts.
//
// Per-operation latency is timed one operation at a time; p50 and p99 are
// reported as counters (microseconds) beside the mean.
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "store_eviction.hpp"
#include "unicache/store.hpp"

namespace {

using namespace unicache;
using clock_type = std::chrono::steady_clock;

constexpr std::size_t kBinaryBytes = 64 * 1024;
const device_identity kDevice{"bench platform", "bench device", "OpenCL 3.0", "1.0"};

std::string bench_root() {
  static const std::string root = [] {
    const char* base = std::getenv("TMPDIR");
    std::string pattern = std::string(base && *base ? base : "/tmp") + "/unicache-bench-XXXXXX";
    return std::string(::mkdtemp(pattern.data()));
  }();
  return root;
}

store_config config_in(const std::string& sub) {
  store_config c;
  c.directory = bench_root() + "/" + sub;
  c.max_size_bytes = std::uint64_t{4} << 30;
  return c;
}

byte_vector binary(std::size_t n, unsigned seed) {
  byte_vector b(n);
  for (std::size_t i = 0; i < n; ++i) b[i] = static_cast<unsigned char>(i * 31 + seed);
  return b;
}

// Times `op` once per iteration and reports p50/p99 in microseconds.
template <typename Op>
void timed(benchmark::State& state, Op op) {
  std::vector<double> us;
  us.reserve(100000);
  for (auto _ : state) {
    const auto t0 = clock_type::now();
    op();
    const double seconds = std::chrono::duration<double>(clock_type::now() - t0).count();
    state.SetIterationTime(seconds);
    us.push_back(seconds * 1e6);
  }
  std::sort(us.begin(), us.end());
  if (!us.empty()) {
    state.counters["p50_us"] = us[us.size() / 2];
    state.counters["p99_us"] = us[std::min(us.size() - 1, us.size() * 99 / 100)];
  }
}

std::string entry_path_of(const std::string& dir) {
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (e.path().extension() == ".entry") return e.path().string();
  }
  return "";
}

void BM_store_get_64k(benchmark::State& state) {
  kernel_store store(config_in("get"));
  store.put(kDevice, "kernel/get", binary(kBinaryBytes, 1));
  timed(state, [&] { benchmark::DoNotOptimize(store.get(kDevice, "kernel/get")); });
}

void BM_floor_read_64k(benchmark::State& state) {
  kernel_store store(config_in("floor_read"));
  store.put(kDevice, "kernel/floor", binary(kBinaryBytes, 2));
  const std::string path = entry_path_of(config_in("floor_read").directory);
  std::vector<unsigned char> buffer(kBinaryBytes + 4096);
  timed(state, [&] {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    ssize_t n = ::read(fd, buffer.data(), buffer.size());
    benchmark::DoNotOptimize(n);
    ::close(fd);
  });
}

void BM_store_put_64k(benchmark::State& state) {
  kernel_store store(config_in("put"));
  const byte_vector b = binary(kBinaryBytes, 3);
  std::uint64_t n = 0;
  timed(state, [&] { store.put(kDevice, "kernel/put/" + std::to_string(++n), b); });
  store.clear();
}

void BM_floor_write_64k(benchmark::State& state) {
  const std::string dir = config_in("floor_write").directory;
  std::filesystem::create_directories(dir);
  const byte_vector b = binary(kBinaryBytes + 64, 4);
  std::uint64_t n = 0;
  timed(state, [&] {
    // As the store does: a new temporary name, then a new final name.
    const std::string temp = dir + "/.tmp." + std::to_string(++n);
    const std::string final_path = dir + "/" + std::to_string(n);
    const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    ssize_t w = ::write(fd, b.data(), b.size());
    benchmark::DoNotOptimize(w);
    ::close(fd);
    ::rename(temp.c_str(), final_path.c_str());
  });
  std::filesystem::remove_all(dir);
}

// N processes each get random entries of 64 for a fixed time; the
// aggregate rate is reported, to compare with one process.
void BM_store_get_processes(benchmark::State& state) {
  const int processes = static_cast<int>(state.range(0));
  constexpr int kKeys = 64;
  const store_config c = config_in("processes");
  {
    kernel_store store(c);
    for (int k = 0; k < kKeys; ++k) store.put(kDevice, "k" + std::to_string(k), binary(kBinaryBytes, k));
  }
  for (auto _ : state) {
    std::vector<std::pair<pid_t, int>> children;
    for (int p = 0; p < processes; ++p) {
      int fds[2];
      if (::pipe(fds) != 0) break;
      const pid_t pid = ::fork();
      if (pid == 0) {
        ::close(fds[0]);
        kernel_store store(c);
        std::uint64_t ops = 0, x = 88172645463325252ull + static_cast<unsigned>(p);
        const auto end = clock_type::now() + std::chrono::milliseconds(500);
        while (clock_type::now() < end) {
          x ^= x << 13, x ^= x >> 7, x ^= x << 17;
          if (store.get(kDevice, "k" + std::to_string(x % kKeys))) ++ops;
        }
        (void)!::write(fds[1], &ops, sizeof ops);
        ::_exit(0);
      }
      ::close(fds[1]);
      children.emplace_back(pid, fds[0]);
    }
    std::uint64_t total = 0;
    for (auto [pid, fd] : children) {
      std::uint64_t ops = 0;
      if (::read(fd, &ops, sizeof ops) == sizeof ops) total += ops;
      ::close(fd);
      ::waitpid(pid, nullptr, 0);
    }
    state.SetIterationTime(0.5);
    state.counters["gets_per_second"] = static_cast<double>(total) / 0.5;
  }
}

BENCHMARK(BM_store_get_64k)->UseManualTime()->Unit(benchmark::kMicrosecond)->MinTime(0.5);
BENCHMARK(BM_floor_read_64k)->UseManualTime()->Unit(benchmark::kMicrosecond)->MinTime(0.5);
BENCHMARK(BM_store_put_64k)->UseManualTime()->Unit(benchmark::kMicrosecond)->Iterations(500);
BENCHMARK(BM_floor_write_64k)->UseManualTime()->Unit(benchmark::kMicrosecond)->Iterations(500);
BENCHMARK(BM_store_get_processes)->Arg(1)->Arg(2)->Arg(4)->Arg(8)->Iterations(1)->UseManualTime()->Unit(benchmark::kMillisecond);

// --help, this program's own option and Google Benchmark's.
void print_usage() {
  std::fputs(
      "usage: bench_store [Google Benchmark options]\n"
      "       bench_store --eviction N[,N...]\n"
      "\n"
      "The persistent kernel store against the physical floor of the same I/O,\n"
      "measured in the same run: get and put of a 64 KB binary against open +\n"
      "read + close and write + rename of the same file, and N processes doing\n"
      "gets at once (BM_store_get_processes/N). p50 and p99 are counters\n"
      "(microseconds) beside the mean. The store lies under $TMPDIR (else /tmp).\n"
      "\n"
      "  --eviction N[,N...]  instead, for a store of each N 4 KB entries: what\n"
      "                       evicting it costs the put that triggers it and\n"
      "                       another process's gets and puts (which puts at\n"
      "                       most max(4 N, 10000) new entries); each row is\n"
      "                       followed by its baseline, the same neighbour with\n"
      "                       nobody evicting\n"
      "\n"
      "Google Benchmark options:\n",
      stdout);
  benchmark::PrintDefaultHelp();
}

}  // namespace

int main(int argc, char** argv) {
  // --help wins over --eviction (Google Benchmark would see it too late).
  for (int i = 1; i < argc; ++i) {
    if (std::string_view(argv[i]) == "--help") {
      print_usage();
      return 0;
    }
  }
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) != "--eviction") continue;
    std::vector<std::uint64_t> sizes;
    for (std::string list = argv[i + 1]; !list.empty();) {
      const std::size_t comma = std::min(list.find(','), list.size());
      sizes.push_back(std::strtoull(list.substr(0, comma).c_str(), nullptr, 10));
      list.erase(0, comma + 1);
    }
    if (sizes.empty() || std::find(sizes.begin(), sizes.end(), 0u) != sizes.end()) {
      std::fprintf(stderr, "bench_store: --eviction takes entry counts, such as 1000,10000,100000\n");
      return 2;
    }
    const int status = unicache::bench::run_eviction(bench_root(), sizes);
    std::error_code ignored;
    std::filesystem::remove_all(bench_root(), ignored);
    return status;
  }
  benchmark::Initialize(&argc, argv, print_usage);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  std::error_code ignored;
  std::filesystem::remove_all(bench_root(), ignored);
  return 0;
}
