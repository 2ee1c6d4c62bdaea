// What one kind of remote server does for the kernel store: the bare
// operations on named values, and nothing else. Everything a remote tier
// needs beyond them (the circuit breaker, the background write queue, the
// bounds on sizes, entry signing, the counters and their reports, build
// leases' waiting) is remote_tier's (store/remote_tier.hpp), the same for
// every kind: a backend is a client of its server, as ccache's
// RemoteStorage backends are.
//
// Thread safety: any number of threads call a backend at once (it keeps its
// own connections). No call throws; each is bounded by the backend's own
// timeouts.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "unicache/device_identity.hpp"
#include "unicache/store.hpp"

namespace unicache::detail {

enum class remote_status : std::uint8_t {
  ok,         // done: stored, removed, reported, released; a lease granted
  hit,        // get: the value is in `value`
  miss,       // get: none; acquire_lease: another holder has it
  rejected,   // get: something that is no value of ours (too large, another type): a miss, the server is fine
  refused,    // the server will not do this (rights, memory, a read-only replica); it is fine otherwise
  error,      // the server failed (closed, unreachable, a protocol error)
  timeout,    // connect or the operation took longer than its timeout
  unavailable,  // the part of the server that holds this key is down, the rest answers (a cluster's node):
                // this call failed, and the tier's breaker stays closed for the other keys
};

struct remote_reply {
  remote_status status = remote_status::error;
  byte_vector value;    // get's value
  std::string message;  // what happened, for refused, error and timeout (never a password)
};

// A counter's name and how much it grew since the last report.
using counter_delta = std::pair<const char*, std::uint64_t>;

class remote_backend {
 public:
  virtual ~remote_backend() = default;

  // The server as it prints (no password): statistics and warnings name it.
  virtual std::string url() const = 0;
  // What a signature binds a value to, besides its entry: values signed
  // for one namespace of a server are no values of another's (Redis: the
  // key prefix).
  virtual std::string scope() const = 0;
  virtual bool read_only() const = 0;
  // The circuit breaker's first back-off after a failure.
  virtual std::chrono::seconds first_backoff() const = 0;
  // How long a build lease lasts unless released: 0 when leases are off.
  virtual std::chrono::milliseconds lease_ttl() const { return std::chrono::milliseconds(0); }

  // The value of (device, key): hit, miss, or rejected when it is larger
  // than `max_bytes` (read no further than that) or not a plain value.
  virtual remote_reply get(const device_identity& device, std::string_view key, std::size_t max_bytes) = 0;
  virtual remote_reply set(const device_identity& device, std::string_view key, byte_span value) = 0;
  virtual remote_reply remove(const device_identity& device, std::string_view key) = 0;

  // Adds `deltas` to the counters the fleet's processes share, at most once
  // per (token, seq): a report sent again after a lost answer with the same
  // number counts nothing twice. refused where the server keeps none.
  virtual remote_reply report(std::string_view /*token*/, std::uint64_t /*seq*/,
                              std::span<const counter_delta> /*deltas*/) {
    return {remote_status::refused, {}, "this server keeps no counters"};
  }

  // A lease on building (device, key) for lease_ttl(), held under `token`:
  // ok when granted, miss when another token holds it. refused where the
  // server has no leases.
  virtual remote_reply acquire_lease(const device_identity& /*device*/, std::string_view /*key*/,
                                     std::string_view /*token*/) {
    return {remote_status::refused, {}, "this server has no leases"};
  }
  // Ends the lease if `token` still holds it (one that expired and went to
  // another holder is left to that one).
  virtual remote_reply release_lease(const device_identity& /*device*/, std::string_view /*key*/,
                                     std::string_view /*token*/) {
    return {remote_status::ok, {}, {}};
  }
};

}  // namespace unicache::detail
