// unicache-store's commands on the remote tier (--remote).
#include <cstdio>
#include <string>
#include <vector>

#include "store_tool.hpp"

namespace unicache_store {

// The remote tier's commands (--remote), one function each (run_remote makes
// the remote_maintenance, through the URL's registered scheme).

int stats_remote(unicache::remote_maintenance& remote, const options&) {
  const unicache::remote_summary s = remote.stats();
  std::printf("tier:             %s\n", s.url.c_str());
  std::printf("entries:          %llu\n", static_cast<unsigned long long>(s.entries));
  std::printf("bytes:            %llu\n", static_cast<unsigned long long>(s.bytes));
  if (!s.server_version.empty()) {
    const std::string scheme = s.url.substr(0, s.url.find("://"));
    std::printf("server:           %s %s, used memory %llu, maxmemory %llu (%s)\n", scheme.c_str(),
                s.server_version.c_str(), static_cast<unsigned long long>(s.used_memory),
                static_cast<unsigned long long>(s.maxmemory), s.maxmemory_policy.c_str());
  }
  const unicache::remote_stats& f = s.fleet;
  std::printf("fleet counters:   (added up by the processes that write to this prefix)\n");
  std::printf("  hits:           %llu\n", static_cast<unsigned long long>(f.hits));
  std::printf("  misses:         %llu\n", static_cast<unsigned long long>(f.misses));
  std::printf("  rejected:       %llu (values that failed a check: never loaded)\n",
              static_cast<unsigned long long>(f.rejected));
  std::printf("  errors:         %llu\n", static_cast<unsigned long long>(f.errors));
  std::printf("  timeouts:       %llu\n", static_cast<unsigned long long>(f.timeouts));
  std::printf("  skipped:        %llu (the breaker was open)\n", static_cast<unsigned long long>(f.skipped));
  std::printf("  writes:         %llu, dropped %llu\n", static_cast<unsigned long long>(f.puts),
              static_cast<unsigned long long>(f.dropped));
  std::printf("  bytes:          %llu read, %llu written\n", static_cast<unsigned long long>(f.bytes_read),
              static_cast<unsigned long long>(f.bytes_written));
  std::printf("  build leases:   %llu granted; %llu waits for another's build, %llu of them ended with its value, "
              "%llu ms waited\n",
              static_cast<unsigned long long>(f.leases), static_cast<unsigned long long>(f.lease_waits),
              static_cast<unsigned long long>(f.lease_hits), static_cast<unsigned long long>(f.lease_wait_ms));
  std::printf("server hits:      %llu (every client and prefix)\n", static_cast<unsigned long long>(s.keyspace_hits));
  std::printf("server misses:    %llu\n", static_cast<unsigned long long>(s.keyspace_misses));
  return kOk;
}

static void print_remote_list(const std::vector<unicache::remote_entry_info>& entries) {
  for (const auto& e : entries) {
    if (e.valid) {
      std::printf("%s  device %.12s  %10llu B  %s%s\n", utc(e.created_unix).c_str(), e.device_hash.c_str(),
                  static_cast<unsigned long long>(e.binary_bytes), what_it_is(e).c_str(),
                  e.signature_unchecked ? "  (signed; give --secret-file to check it)" : "");
    } else {
      std::printf("BAD: %s: %s\n", e.problem.c_str(), e.server_key.c_str());
    }
  }
}

static void print_remote_list_json(const std::vector<unicache::remote_entry_info>& entries) {
  std::printf("{\"entries\": [");
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const auto& e = entries[i];
    std::printf("%s\n  {\"key\": %s, \"device_hash\": %s, \"kind\": %s, \"name\": %s, \"key_preview\": %s, "
                "\"value_bytes\": %llu, \"binary_bytes\": %llu, \"created_unix\": %lld, \"valid\": %s, "
                "\"signature_unchecked\": %s, \"problem\": %s}",
                i == 0 ? "" : ",", json_string(e.server_key).c_str(), json_string(e.device_hash).c_str(),
                json_string(e.kind).c_str(), json_string(e.name).c_str(), json_string(e.key_preview).c_str(),
                static_cast<unsigned long long>(e.value_bytes), static_cast<unsigned long long>(e.binary_bytes),
                static_cast<long long>(e.created_unix), e.valid ? "true" : "false",
                e.signature_unchecked ? "true" : "false", json_string(e.problem).c_str());
  }
  std::printf("\n]}\n");
}

int list_remote(unicache::remote_maintenance& remote, const options& o) {
  const auto entries = remote.list();
  if (o.json) {
    print_remote_list_json(entries);
  } else {
    print_remote_list(entries);
  }
  return kOk;
}

int verify_remote(unicache::remote_maintenance& remote, const options& o) {
  const auto bad = remote.verify(o.fix);
  for (const auto& e : bad) {
    std::printf("%s %s: %s\n", o.fix ? "removed" : "bad", e.server_key.c_str(), e.problem.c_str());
  }
  return verify_summary(bad.size(), o.fix);
}

int clear_remote(unicache::remote_maintenance& remote, const options&) {
  const std::uint64_t removed = remote.clear();
  std::printf("%llu remote entries removed\n", static_cast<unsigned long long>(removed));
  return kOk;
}

}  // namespace unicache_store
