// unicache/remote.hpp — the remote tier of the kernel store: a Redis server
// that a fleet of machines shares, so that each kernel is compiled once.
//
// Configuration is a URL (UNICACHE_REMOTE_CACHE, or remote_config directly):
//
//   redis://[[user:]password@]host[:port][/db][?option=value&...]
//
//   host       a name, an IPv4 address, or an IPv6 address in brackets
//   port       1..65535 (default 6379)
//   db         the database number, 0..1000000 (default 0; SELECT)
//   user       an ACL user (Redis 6+); with only a password, the default user
//   password   AUTH's password; percent-encode ':', '@', '/', '?', '#', '%'
//   options    prefix=TEXT            key prefix, 1..64 of [A-Za-z0-9._-:] (default "unicache")
//              read_only=0|1          never write (default 0)
//              connect_timeout_ms=N   1..60000 (default 100)
//              timeout_ms=N           each operation, 1..60000 (default 1000)
//              ttl_s=N                expiry of written values, 0 (none, the default)..31536000
//
// The password is never printed: remote_config::to_string() and every error
// and warning show "***" in its place.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace unicache {

struct remote_config {
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

  // The URL that parses back to this configuration, with the password (if
  // any) shown as "***".
  std::string to_string() const;
};

// What the remote tier did in this process (kernel_store::remote_statistics).
struct remote_stats {
  bool enabled = false;
  std::string url;  // remote_config::to_string(): no password
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
};

// Parses a remote URL. Throws std::invalid_argument naming what is wrong
// (never quoting the password): another scheme, an empty or malformed host,
// a port, database or option value out of range, an unknown option, a prefix
// with other characters, a bad percent-escape, or a URL over 4096 bytes.
remote_config parse_remote_url(std::string_view url);

}  // namespace unicache
