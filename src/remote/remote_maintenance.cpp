// The maintenance of a redis:// tier (tier_maintenance, unicache/
// storage_tier.hpp): the prefix's values walked with SCAN, read with a
// bound, checked as the tier checks them.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "remote/remote_settings.hpp"
#include "store/entry_format.hpp"
#include "store/key_description.hpp"
#include "unicache/remote.hpp"
#include "util/env.hpp"
#include "util/parse.hpp"
#include "util/stable_hash.hpp"

namespace unicache::redis {

using namespace unicache::detail;  // the core's store internals (entry format, tiers, utilities)
namespace {

class redis_maintenance final : public tier_maintenance {
 public:
  redis_maintenance(const redis_config& config, std::string secret)
      : read_only(config.read_only),
        has_secret(!secret.empty()),
        tier(make_redis_tier(read_only_copy(config), std::move(secret))),
        server(config) {}

  remote_summary stats() override;
  std::vector<remote_entry_info> list() override;
  std::vector<remote_entry_info> verify(bool fix) override;
  std::uint64_t clear() override;

 private:
  bool read_only;
  bool has_secret;
  std::unique_ptr<remote_tier> tier;  // read-only: its checks, no writer thread
  redis_backend server;               // the keys, and commands on the server (or a cluster's masters)

  static redis_config read_only_copy(redis_config c) {
    c.read_only = true;
    return c;
  }

  redis_result checked(redis_result r, const char* what) {
    if (r.status == redis_status::error || r.status == redis_status::timeout || r.status == redis_status::refused ||
        r.status == redis_status::unavailable) {
      throw remote_error(std::string("unicache-store: ") + what + ": " + r.message);
    }
    return r;
  }

  // The entries' keys: <prefix>:1:<32 hex>:<32 hex>, nothing else the
  // pattern matches. The walk stops after a million SCAN steps whatever
  // the server's cursors say.
  std::vector<std::string> keys() {
    const std::string head = server.config().prefix + ":1:";
    std::vector<std::string> found, out;
    const std::vector<redis_config> nodes = server.servers();
    if (nodes.empty()) throw remote_error("unicache-store: no node of the cluster " + server.url() + " answered");
    for (const redis_config& node : nodes) {  // a cluster's keys: each master's
      redis_connection connection(node);
      std::string cursor = "0";
      int steps = 0;
      do {
        redis_result r = checked(connection.scan(cursor, head + "*", found), "listing the remote keys");
        cursor.assign(r.value.begin(), r.value.end());
      } while (cursor != "0" && !cursor.empty() && ++steps < 1000000);
    }
    auto hex32 = [](std::string_view t) {
      return t.size() == 32 && t.find_first_not_of("0123456789abcdef") == std::string_view::npos;
    };
    for (std::string& k : found) {
      const std::string_view rest = std::string_view(k).substr(std::min(k.size(), head.size()));
      if (k.compare(0, head.size(), head) == 0 && rest.size() == 65 && rest[32] == ':' && hex32(rest.substr(0, 32)) &&
          hex32(rest.substr(33))) {
        out.push_back(std::move(k));
      }
    }
    return out;
  }

  remote_entry_info inspect(const std::string& redis_key) {
    remote_entry_info info;
    info.server_key = quoted(redis_key, 200);
    const std::size_t bound = max_entry_file_bytes(kMaxKeyBytes, remote_tier::kMaxBinaryBytes) + 64;
    redis_result r = server.get_value(redis_key, bound);
    if (r.status != redis_status::refused) r = checked(std::move(r), "reading a remote value");
    if (r.status == redis_status::refused) {
      info.problem = "not a string value (" + r.message + ")";
      return info;
    }
    if (r.status != redis_status::hit) {
      info.problem = r.message.empty() ? "gone (removed meanwhile)" : r.message;
      return info;
    }
    info.value_bytes = r.value.size();
    std::optional<byte_span> entry = tier->signed_entry(r.value);
    if (!entry) {
      info.problem = "unsigned, or signed with another secret";
      return info;
    }
    if (!has_secret && !parse_entry(*entry, nullptr).ok() && entry->size() > remote_tier::kMacBytes &&
        parse_entry(entry->first(entry->size() - remote_tier::kMacBytes), nullptr).ok()) {
      // A signed value, and no secret to check it with: described, never
      // called bad (verify --fix without the secret must not delete it).
      entry = entry->first(entry->size() - remote_tier::kMacBytes);
      info.signature_unchecked = true;
    }
    const parsed_entry e = parse_entry(*entry, nullptr);
    if (!e.ok()) {
      info.problem = describe(e.problem);
      return info;
    }
    info.device_hash = to_hex(e.device);
    const key_description d = describe_key(e.key);
    info.kind = d.kind;
    info.name = d.name;
    info.key_preview = d.preview;
    info.binary_bytes = e.binary.size();
    info.created_unix = e.created_unix;
    if (server.entry_key_of(e.device, e.key) != redis_key) {
      info.problem = "stored under another key's name";
      return info;
    }
    info.valid = true;
    return info;
  }

  void require_writable() const {
    if (read_only) throw remote_error("unicache-store: the remote is configured read_only=1");
  }
};

}  // namespace

remote_summary redis_maintenance::stats() {
  remote_summary s;
  s.url = server.url();
  for (const std::string& key : keys()) {
    redis_result r = server.command(key, {"STRLEN", key});
    if (r.status != redis_status::refused) r = checked(std::move(r), "sizing a remote value");  // WRONGTYPE: 0
    ++s.entries;
    const std::string n(r.value.begin(), r.value.end());
    s.bytes += parse_decimal(n, UINT64_MAX).value_or(0);
  }
  std::vector<std::string> pairs;
  redis_result counted = server.hgetall(server.stats_key(), pairs);
  if (counted.status != redis_status::refused) checked(std::move(counted), "reading the fleet's counters");
  for (std::size_t i = 0; i + 1 < pairs.size(); i += 2) {
    const std::optional<std::uint64_t> counted_value = parse_decimal(pairs[i + 1], UINT64_MAX);
    if (!counted_value) continue;
    const std::uint64_t n = *counted_value;
    const std::string& f = pairs[i];
    if (f == "hits") s.fleet.hits = n;
    if (f == "misses") s.fleet.misses = n;
    if (f == "rejected") s.fleet.rejected = n;
    if (f == "errors") s.fleet.errors = n;
    if (f == "timeouts") s.fleet.timeouts = n;
    if (f == "skipped") s.fleet.skipped = n;
    if (f == "puts") s.fleet.puts = n;
    if (f == "dropped") s.fleet.dropped = n;
    if (f == "bytes_read") s.fleet.bytes_read = n;
    if (f == "bytes_written") s.fleet.bytes_written = n;
    if (f == "leases") s.fleet.leases = n;
    if (f == "lease_waits") s.fleet.lease_waits = n;
    if (f == "lease_hits") s.fleet.lease_hits = n;
    if (f == "lease_wait_ms") s.fleet.lease_wait_ms = n;
  }
  // The servers' own figures: a cluster's added up over its masters (the
  // version and policy are the first one's).
  bool first = true;
  for (const redis_config& node : server.servers()) {
    redis_connection connection(node);
    const redis_result info = checked(connection.command({"INFO"}), "reading the server's INFO");
    const std::string text(info.value.begin(), info.value.end());
    auto field = [&](const std::string& name) -> std::string {
      const auto at = text.find("\n" + name + ":");
      if (at == std::string::npos) return "";
      const auto start = at + name.size() + 2;
      return text.substr(start, text.find_first_of("\r\n", start) - start);
    };
    // The server's figures are untrusted: anything but a number that fits is 0.
    auto number = [&](const std::string& name) -> std::uint64_t {
      return parse_decimal(field(name), UINT64_MAX).value_or(0);
    };
    if (first) {
      s.server_version = quoted(field("redis_version"), 32);
      s.maxmemory_policy = quoted(field("maxmemory_policy"), 32);
    }
    first = false;
    s.used_memory += number("used_memory");
    s.maxmemory += number("maxmemory");
    s.keyspace_hits += number("keyspace_hits");
    s.keyspace_misses += number("keyspace_misses");
  }
  return s;
}

std::vector<remote_entry_info> redis_maintenance::list() {
  std::vector<remote_entry_info> out;
  for (const std::string& key : keys()) out.push_back(inspect(key));
  return out;
}

std::vector<remote_entry_info> redis_maintenance::verify(bool fix) {
  if (fix) require_writable();
  std::vector<remote_entry_info> bad;
  for (const std::string& key : keys()) {
    remote_entry_info info = inspect(key);
    if (info.valid) continue;
    if (fix) checked(server.delete_value(key), "deleting a bad remote value");
    bad.push_back(std::move(info));
  }
  return bad;
}

std::uint64_t redis_maintenance::clear() {
  require_writable();
  std::uint64_t removed = 0;
  for (const std::string& key : keys()) {
    const redis_result r = checked(server.delete_value(key), "deleting a remote value");
    removed += r.value == byte_vector{'1'} ? 1 : 0;
  }
  return removed;
}

std::unique_ptr<tier_maintenance> make_redis_maintenance(std::string_view url, const std::string& secret_file) {
  const redis_config config = parse_redis_url(url);
  return std::make_unique<redis_maintenance>(config, tier_secret(secret_file));
}

}  // namespace unicache::redis
