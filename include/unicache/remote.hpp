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
#include "unicache/storage_tier.hpp"

namespace unicache {

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

// Parses a redis:// URL. Throws invalid_argument naming what is wrong
// (never quoting the password): another scheme, an empty or malformed host,
// a port, database or option value out of range, an unknown option, a prefix
// with other characters, a bad percent-escape, or a URL over 4096 bytes.
redis_config parse_redis_url(std::string_view url);

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

}  // namespace unicache
