// bench_remote: what a read from the remote tier costs, against the local
// store, on loopback. A redis-server is started on a free port; values of
// 64 KB and 1 MB are written once; then each is read --reads times through
// the remote tier (network, bounded read, entry check; with --secret, the
// signature too) and through a local store in a temporary directory (page
// cache warm). Prints p50 and p99 per size, in ms.
//
//   bench_remote [--reads N] [--secret] [--json FILE]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "redis_server.hpp"
#include "remote/remote_settings.hpp"
#include "unicache/store.hpp"

namespace {

using clock_type = std::chrono::steady_clock;

struct percentiles {
  double p50 = 0, p99 = 0;
};

percentiles of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  auto at = [&](double q) { return v[std::min(v.size() - 1, static_cast<std::size_t>(q * static_cast<double>(v.size())))]; };
  return {at(0.50), at(0.99)};
}

template <typename F>
std::vector<double> time_reads(int reads, F&& read) {
  std::vector<double> ms;
  for (int i = 0; i < reads; ++i) {
    const auto start = clock_type::now();
    if (!read()) {
      std::fprintf(stderr, "bench_remote: a read missed\n");
      std::exit(1);
    }
    ms.push_back(std::chrono::duration<double, std::milli>(clock_type::now() - start).count());
  }
  return ms;
}

const char* const kUsage =
    "usage: bench_remote [--reads N] [--secret] [--json FILE]\n"
    "\n"
    "What a read from the remote tier costs, against the local store, on\n"
    "loopback: starts a redis-server on a free port, writes values of 64 KB\n"
    "and 1 MB once, then reads each N times through the remote tier (network,\n"
    "bounded read, entry check) and through a local store in a temporary\n"
    "directory (page cache warm). Prints p50 and p99 per size, in ms.\n"
    "\n"
    "  --reads N    reads per size and tier, 1..1000000 (default 300)\n"
    "  --secret     sign the values, and check the signature on each read\n"
    "  --json FILE  write the figures to FILE as well\n";

}  // namespace

int main(int argc, char** argv) {
  int reads = 300;
  bool secret = false;
  std::string json;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--reads" && i + 1 < argc) {
      reads = std::atoi(argv[++i]);
    } else if (a == "--secret") {
      secret = true;
    } else if (a == "--json" && i + 1 < argc) {
      json = argv[++i];
    } else if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    } else {
      std::fputs(kUsage, stderr);
      return 2;
    }
  }
  if (reads < 1 || reads > 1000000) {
    std::fprintf(stderr, "bench_remote: --reads must be 1..1000000\n");
    return 2;
  }
  unicache::testing::redis_server server;
  if (!server.started()) {
    std::fprintf(stderr, "bench_remote: %s\n", unicache::testing::redis_server_binary().empty()
                                                   ? "no redis-server (apt-get install redis-server)"
                                                   : "redis-server did not start");
    return 1;
  }
  char tmpl[] = "/tmp/unicache-bench-remote-XXXXXX";
  const std::string dir = ::mkdtemp(tmpl);
  unicache::store_config local_config;
  local_config.directory = dir;
  unicache::kernel_store local(local_config);
  const std::unique_ptr<unicache::detail::remote_tier> tier = unicache::redis::make_redis_tier(
      unicache::parse_redis_url(server.url()), secret ? "a benchmark's secret, long enough" : "");
  unicache::detail::remote_tier& remote = *tier;
  const unicache::device_identity device{"bench", "remote", "1", "1"};

  std::printf("remote get on loopback (redis-server %d), %d reads per size%s\n", server.port(), reads,
              secret ? ", signed values" : "");
  std::printf("%-8s %12s %12s %12s %12s\n", "size", "remote p50", "remote p99", "local p50", "local p99");
  std::string rows;
  for (const std::size_t bytes : {std::size_t{64} << 10, std::size_t{1} << 20}) {
    const std::string key = "bench-remote " + std::to_string(bytes);
    unicache::byte_vector value(bytes);
    for (std::size_t i = 0; i < bytes; ++i) value[i] = static_cast<unsigned char>(i * 131 + 7);
    remote.put(device, key, value);
    remote.flush();
    local.put(device, key, value);
    const percentiles r = of(time_reads(reads, [&] { return remote.get(device, key).binary.has_value(); }));
    const percentiles l = of(time_reads(reads, [&] { return local.get(device, key).has_value(); }));
    const std::string size = bytes >= (1 << 20) ? std::to_string(bytes >> 20) + " MB" : std::to_string(bytes >> 10) + " KB";
    std::printf("%-8s %9.3f ms %9.3f ms %9.3f ms %9.3f ms\n", size.c_str(), r.p50, r.p99, l.p50, l.p99);
    char row[256];
    std::snprintf(row, sizeof row,
                  "%s    {\"bytes\": %zu, \"remote_p50_ms\": %.4f, \"remote_p99_ms\": %.4f, \"local_p50_ms\": %.4f, "
                  "\"local_p99_ms\": %.4f}",
                  rows.empty() ? "" : ",\n", bytes, r.p50, r.p99, l.p50, l.p99);
    rows += row;
  }
  std::filesystem::remove_all(dir);
  if (!json.empty()) {
    std::ofstream out(json);
    out << "{\n  \"benchmark\": \"bench_remote\",\n  \"reads\": " << reads << ",\n  \"signed\": "
        << (secret ? "true" : "false") << ",\n  \"sizes\": [\n" << rows << "\n  ]\n}\n";
  }
  return 0;
}
