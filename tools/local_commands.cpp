// unicache-store's commands on the local store, and the output helpers they
// share with the remote ones.
#include <time.h>

#include <cstdio>
#include <ctime>
#include <string>
#include <vector>

#include "store_tool.hpp"

namespace unicache_store {

std::string utc(std::int64_t unix_seconds) {
  const time_t t = static_cast<time_t>(unix_seconds);
  struct tm tm {};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// `text` as a JSON string. The library's strings are printable ASCII; the
// directory is the user's own and may be UTF-8: valid UTF-8 passes, any
// other byte becomes U+FFFD, so the output is always valid JSON.
std::string json_string(std::string_view text) {
  std::string out = "\"";
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7f) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\u%04x", c);
      out += escaped;
    } else if (c < 0x80) {
      out += static_cast<char>(c);
    } else {
      // A UTF-8 sequence: a lead byte, then 1-3 continuation bytes.
      const std::size_t length = c >= 0xf0 && c < 0xf5 ? 4 : c >= 0xe0 ? 3 : c >= 0xc2 ? 2 : 0;
      bool valid = length > 0 && length <= 4 && i + length <= text.size();
      for (std::size_t k = 1; valid && k < length; ++k) valid = (static_cast<unsigned char>(text[i + k]) & 0xc0) == 0x80;
      if (valid) {
        out.append(text.substr(i, length));
        i += length - 1;
      } else {
        out += "\\ufffd";
      }
    }
  }
  return out + "\"";
}

// The last line of verify, local or remote, and its exit code.
int verify_summary(std::size_t bad, bool fix) {
  std::printf("%zu bad entr%s%s\n", bad, bad == 1 ? "y" : "ies", fix && bad != 0 ? " removed" : "");
  return bad == 0 || fix ? kOk : kFailure;
}
// The local store's commands, one function each (run_local opens the store).

int stats_local(unicache::kernel_store& store, const unicache::store_config& config, const options& o) {
  const unicache::store_stats s = store.stats(o.recount);
  std::printf("directory:        %s\n", config.directory.c_str());
  std::printf("entries:          %llu%s\n", static_cast<unsigned long long>(s.entries), o.recount ? "" : " (recorded)");
  if (o.recount) std::printf("bytes on disk:    %llu\n", static_cast<unsigned long long>(s.bytes));
  std::printf("bytes recorded:   %llu\n", static_cast<unsigned long long>(s.recorded_bytes));
  if (config.max_size_bytes == 0 || !config.size_eviction) {
    std::printf("maximum:          none (%s)\n", config.max_size_bytes == 0 ? "no size limit" : "size eviction off");
  } else {
    std::printf("maximum:          %llu\n", static_cast<unsigned long long>(config.max_size_bytes));
  }
  std::printf("devices:          %llu\n", static_cast<unsigned long long>(s.devices));
  if (o.recount) std::printf("temporary files:  %llu\n", static_cast<unsigned long long>(s.temporary_files));
  return kOk;
}

static void print_list(const std::vector<unicache::store_entry_info>& entries) {
  std::string device;
  for (const auto& e : entries) {
    if (device != e.device_hash || &e == &entries.front()) {
      device = e.device_hash;
      std::printf("device %.12s  %s\n", e.device_hash.c_str(),
                  e.device_description.empty() ? "(no description)" : e.device_description.c_str());
    }
    if (e.valid) {
      std::printf("  %s  %10llu B  %s\n", utc(e.last_use_unix).c_str(), static_cast<unsigned long long>(e.binary_bytes),
                  what_it_is(e).c_str());
    } else {
      std::printf("  %s  BAD: %s: %s\n", utc(e.last_use_unix).c_str(), e.problem.c_str(), e.path.c_str());
    }
  }
}

static void print_list_json(const std::string& directory, const std::vector<unicache::store_entry_info>& entries) {
  std::printf("{\"directory\": %s, \"entries\": [", json_string(directory).c_str());
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const auto& e = entries[i];
    std::printf(
        "%s\n  {\"device_hash\": %s, \"device\": %s, \"kind\": %s, \"name\": %s, \"key_preview\": %s, "
        "\"key_bytes\": %llu, \"binary_bytes\": %llu, \"file_bytes\": %llu, \"last_use_unix\": %lld, "
        "\"last_use\": %s, \"valid\": %s, \"problem\": %s, \"path\": %s}",
        i == 0 ? "" : ",", json_string(e.device_hash).c_str(), json_string(e.device_description).c_str(),
        json_string(e.kind).c_str(), json_string(e.name).c_str(), json_string(e.key_preview).c_str(),
        static_cast<unsigned long long>(e.key_bytes), static_cast<unsigned long long>(e.binary_bytes),
        static_cast<unsigned long long>(e.file_bytes), static_cast<long long>(e.last_use_unix),
        json_string(utc(e.last_use_unix)).c_str(), e.valid ? "true" : "false", json_string(e.problem).c_str(),
        json_string(e.path).c_str());
  }
  std::printf("\n]}\n");
}

int list_local(unicache::kernel_store& store, const unicache::store_config& config, const options& o) {
  const auto entries = store.list();
  if (o.json) {
    print_list_json(config.directory, entries);
  } else {
    print_list(entries);
  }
  return kOk;
}

int verify_local(unicache::kernel_store& store, const unicache::store_config&, const options& o) {
  const auto bad = store.verify(o.fix);
  for (const auto& e : bad) std::printf("%s %s: %s\n", o.fix ? "removed" : "bad", e.path.c_str(), e.problem.c_str());
  return verify_summary(bad.size(), o.fix);
}

int prune_local(unicache::kernel_store& store, const unicache::store_config&, const options& o) {
  const std::uint64_t max_bytes = o.max_mb && *o.max_mb <= (UINT64_MAX >> 20) ? *o.max_mb << 20 : UINT64_MAX;
  const std::uint32_t older_than_days = o.older_than_days ? static_cast<std::uint32_t>(*o.older_than_days) : 0;
  const std::uint64_t removed = store.prune(max_bytes, older_than_days);
  std::printf("%llu entries removed\n", static_cast<unsigned long long>(removed));
  return kOk;
}

int clear_local(unicache::kernel_store& store, const unicache::store_config& config, const options&) {
  store.clear();
  std::printf("cleared %s\n", config.directory.c_str());
  return kOk;
}

int explain_local(unicache::kernel_store& store, const unicache::store_config&, const options& o) {
  const std::string& id = *o.miss_id;
  if (id.size() < 8 || id.size() > 32 || id.find_first_not_of("0123456789abcdef") != std::string::npos) {
    std::fprintf(stderr, "unicache-store: not a miss's id (8 to 32 lowercase hex digits, as the line shows)\n");
    return kUsage;
  }
  const std::optional<unicache::miss_explanation> e = store.explain_recorded_miss(id);
  if (!e) {
    std::fprintf(stderr,
                 "unicache-store: no recorded miss %s (a process records the misses it explains with "
                 "UNICACHE_EXPLAIN_MISSES=1)\n",
                 id.c_str());
    return kFailure;
  }
  std::printf("%s\n", e->line().c_str());
  return kOk;
}

}  // namespace unicache_store
