// unicache/remote.hpp — the remote tier of the kernel store: a server that a
// fleet of machines shares, so that each kernel is compiled once. For: users
// (configuration, statistics, maintenance).
//
// "Remote" names the tier, whatever serves it; what belongs to one kind of
// server is named after it. The one kind today is Redis: redis_config is its
// parsed URL, and the maintenance results report the server's own figures.
//
// Configuration is a URL (UNICACHE_REMOTE_CACHE, kernel_store::set_remote):
//
//   redis://[[user:]password@]host[:port][/db][?option=value&...]
//   redis://[[user:]password@]host[:port],host[:port],...[/0][?option=value&...]
//
//   host       a name, an IPv4 address, or an IPv6 address in brackets
//   port       1..65535 (default 6379)
//              Several host[:port], comma-separated (at most 64), are the
//              seed nodes of a Redis Cluster: any one that answers tells
//              where the others are.
//   db         the database number, 0..1000000 (default 0; SELECT); a
//              cluster has only database 0
//   user       an ACL user (Redis 6+); with only a password, the default user
//   password   AUTH's password; percent-encode ':', '@', '/', '?', '#', '%'
//   options    prefix=TEXT            key prefix, 1..64 of [A-Za-z0-9._-] (default "unicache")
//              read_only=0|1          never write (default 0)
//              connect_timeout_ms=N   1..60000 (default 100)
//              timeout_ms=N           each operation, 1..60000 (default 1000)
//              ttl_s=N                expiry of written values, 0 (none, the default)..31536000
//              breaker_s=N            the first back-off after a failure, 1..3600 (default 60);
//                                     it doubles while failures go on, up to an hour
//              cluster=0|1            a Redis Cluster (default 0; 1 with several hosts): keys
//                                     go to the node that serves their slot
//              lease=0|1              build leases (default 1): after a miss, one process of the
//                                     fleet builds a kernel and the others wait for its value
//              lease_ms=N             how long a lease lasts unless its holder ends it,
//                                     10..600000 (default 10000); a process waits for at most
//                                     the lease it found and the next holder's build, never
//                                     more than twice this
//
// The password is never printed: redis_config::to_string() and every error
// and warning show "***" in its place.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "unicache/error.hpp"

namespace unicache {

// The remote server could not be used (maintenance API only: the kernel
// store's own remote calls never throw).
class remote_error : public error {
 public:
  using error::error;
};

// A Redis server's address.
struct redis_node {
  std::string host;
  std::uint16_t port = 6379;
};

// A redis:// URL, parsed.
struct redis_config {
  // The server; in a cluster, the first seed node.
  std::string host;
  std::uint16_t port = 6379;
  std::uint32_t db = 0;
  std::string user;      // empty: the default user
  std::string password;  // empty: no AUTH
  std::string prefix = "unicache";
  bool read_only = false;
  std::uint32_t connect_timeout_ms = 100;
  std::uint32_t timeout_ms = 1000;
  std::uint32_t ttl_s = 0;  // 0: values do not expire
  std::uint32_t breaker_s = 60;
  // A Redis Cluster, and the nodes the URL names, in order (host and port
  // are the first). Empty when the URL is not a cluster's; a configuration
  // made by hand may leave it empty in a cluster too: then host and port
  // are the one seed.
  bool cluster = false;
  std::vector<redis_node> seeds;
  // Build leases (kernel_store::get_or_lease): on, and how long one lasts
  // unless its holder releases it.
  bool lease = true;
  std::uint32_t lease_ms = 10000;

  // The URL that parses back to this configuration, with the password (if
  // any) shown as "***".
  std::string to_string() const;
};

// What the remote tier did in this process (kernel_store::remote_statistics).
struct remote_stats {
  bool enabled = false;
  std::string tier;  // its kind: the URL's scheme ("redis")
  std::string url;   // as it prints: no password
  std::uint64_t hits = 0;           // values found and verified
  std::uint64_t misses = 0;         // no value
  std::uint64_t rejected = 0;       // values that failed a check (corrupt, foreign, unsigned, too large): never served
  std::uint64_t errors = 0;         // refused, closed, protocol or server errors
  std::uint64_t timeouts = 0;       // connect or operation timeouts
  std::uint64_t skipped = 0;        // reads not tried while the breaker was open
  std::uint64_t puts = 0;           // values written
  std::uint64_t dropped = 0;        // writes dropped (queue full, breaker open)
  std::uint64_t bytes_read = 0;
  std::uint64_t bytes_written = 0;
  // Build leases (kernel_store::get_or_lease): misses this process was
  // granted the lease on (and built for the fleet), misses it waited on
  // while another process built, how many of those waits ended with that
  // process's value, and the milliseconds spent waiting.
  std::uint64_t leases = 0;
  std::uint64_t lease_waits = 0;
  std::uint64_t lease_hits = 0;
  std::uint64_t lease_wait_ms = 0;
};

// Parses a redis:// URL. Throws invalid_argument naming what is wrong
// (never quoting the password): another scheme, an empty or malformed host,
// a port, database or option value out of range, an unknown option, a prefix
// with other characters, a bad percent-escape, or a URL over 4096 bytes.
redis_config parse_redis_url(std::string_view url);

// One value under the configuration's prefix, as the maintenance tool sees
// it. Every string is printable ASCII (keys and values are untrusted).
struct remote_entry_info {
  std::string server_key;  // where the value is on the server (a Redis key), quoted
  std::string device_hash;  // 32 hex digits, from the entry
  std::string kind;         // what the entry's key says it is, or ""
  std::string name;
  std::string key_preview;  // a key that does not describe itself
  std::uint64_t value_bytes = 0;
  std::uint64_t binary_bytes = 0;
  std::int64_t created_unix = 0;
  bool valid = false;
  std::string problem;  // why it is not valid
  // A signed value read without the secret: its entry is well formed but
  // its signature was not checked (verify leaves it alone).
  bool signature_unchecked = false;
};

struct remote_summary {
  std::string url;  // no password
  std::uint64_t entries = 0;  // values under the prefix
  std::uint64_t bytes = 0;    // their sizes
  // What the processes using the prefix counted, added up on the server
  // (each reports its counters every few seconds and at flush or exit;
  // read-only processes write nothing, so they report nothing).
  remote_stats fleet;
  // The server's own (INFO): every client and prefix together.
  std::string server_version;
  std::uint64_t used_memory = 0;
  std::uint64_t maxmemory = 0;  // 0: no limit
  std::string maxmemory_policy;
  std::uint64_t keyspace_hits = 0;
  std::uint64_t keyspace_misses = 0;
};

// Registers the redis:// scheme (one server, or a Redis Cluster) with the
// kernel store's tiers, so that UNICACHE_REMOTE_CACHE and
// kernel_store::set_remote take redis:// URLs. It is the remote component's
// (link unicache::remote, which brings hiredis): the core names no tier.
// libunicache_c (and with it the Python package) and unicache-store call it
// themselves; a C++ program calls it once, before the store's first use (a
// store that reads UNICACHE_REMOTE_CACHE before then warns once that the
// scheme is unknown and runs with the local store only). Idempotent;
// thread-safe.
void register_redis_tiers();

// Maintenance of the values under one prefix (unicache-store --remote).
// Each call walks the prefix with SCAN; throws remote_error when the server
// fails or times out, invalid_argument for bad settings (as
// kernel_store::set_remote).
class remote_maintenance {
 public:
  explicit remote_maintenance(const std::string& url, const std::string& secret_file = "");
  ~remote_maintenance();
  remote_maintenance(const remote_maintenance&) = delete;
  remote_maintenance& operator=(const remote_maintenance&) = delete;

  remote_summary stats();
  std::vector<remote_entry_info> list();
  // The values that fail a check (format, checksum, the key they are stored
  // under, the signature when there is a secret); `fix` deletes them
  // (never in read-only mode: remote_error).
  std::vector<remote_entry_info> verify(bool fix);
  // Deletes every value under the prefix; returns how many (read-only:
  // remote_error).
  std::uint64_t clear();

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace unicache
