// One tier of the kernel store's chain (local directory, then remote
// server), as ccache's storage backends are: get, put and remove of
// self-describing entries, with results that tell a miss from an error and
// from a timeout. kernel_store asks its tiers in order; a hit is written to
// the tiers before it, and put and remove go to all of them.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "unicache/remote.hpp"
#include "unicache/store.hpp"

namespace unicache::detail {

enum class tier_status : std::uint8_t {
  hit,      // get: the value is in `binary`
  miss,     // get: none (or one that failed a check: never served)
  done,     // put, remove: done, or queued (a tier that writes in the background)
  skipped,  // not tried: off, full, read-only, or a breaker open
  error,
  timeout,
};

struct tier_result {
  tier_status status = tier_status::miss;
  std::optional<byte_vector> binary;
};

// What asking a tier for a build lease ended in (storage_tier::lease).
enum class lease_status : std::uint8_t {
  granted,  // this caller builds, puts, then releases
  hit,      // another process built it meanwhile: the value is in `binary`
  none,     // no lease to be had (the tier has none, is off or failing, or the wait ran out): build without
};

struct lease_result {
  lease_status status = lease_status::none;
  std::optional<byte_vector> binary;  // hit
  std::string token;                  // granted: what release_lease needs
};

class storage_tier {
 public:
  virtual ~storage_tier() = default;
  virtual const char* name() const = 0;
  // None of these throws.
  virtual tier_result get(const device_identity& device, std::string_view key) noexcept = 0;
  virtual tier_result put(const device_identity& device, std::string_view key, byte_span binary) noexcept = 0;
  virtual tier_result remove(const device_identity& device, std::string_view key) noexcept = 0;
  // What it did in this process, for kernel_store::remote_statistics (a
  // remote tier; the local one has its own statistics): `url` as it prints
  // (no password), and its counters.
  virtual remote_stats statistics() const { return {}; }
  // Waits until its queued writes are out, at most `limit`; whether they are.
  virtual bool flush(std::chrono::milliseconds /*limit*/) { return true; }

  // Build leases (kernel_store::get_or_lease), for a tier that processes
  // share: after a miss, a lease on building (device, key), or, while
  // another process holds it, the value once that one has put it (waiting
  // at most twice the lease's lifetime). release_lease ends a granted lease after
  // the value is on its way (a tier that writes in the background releases
  // it after the writes queued before). Neither throws.
  virtual lease_result lease(const device_identity& /*device*/, std::string_view /*key*/) noexcept { return {}; }
  virtual void release_lease(const device_identity& /*device*/, std::string_view /*key*/,
                             const std::string& /*token*/) noexcept {}
};

}  // namespace unicache::detail
