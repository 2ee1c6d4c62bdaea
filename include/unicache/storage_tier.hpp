// unicache/storage_tier.hpp — the kernel store's tiers, for authors of a
// kind of remote tier (as unicache/gpu.hpp is for authors of a GPU
// backend) and for users reading what a tier did.
//
// The kernel store asks a chain of tiers: its local directory, then the
// remote tiers the URLs in UNICACHE_REMOTE_CACHE name, nearest first (as
// ccache's storage backends). A hit is written to the tiers before it; put
// and remove go to all of them. Entries describe themselves: a tier stores
// and returns bytes, and the store checks what it reads.
//
// "Remote" names the tier, whatever serves it. The remote component
// implements redis:// (unicache/remote.hpp); a tier of another kind
// registers its scheme here.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "unicache/bytes.hpp"
#include "unicache/device_identity.hpp"
#include "unicache/error.hpp"

namespace unicache {

// The remote server could not be used (maintenance API only: the kernel
// store's own remote calls never throw).
class remote_error : public error {
 public:
  using error::error;
};

// What the remote tier did in this process (kernel_store::remote_tier_stats).
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

// --- The tier interface ----------------------------------------------------------

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

// One tier of the chain. Its members are called from any thread at once
// (the store's requests and its background writer); none throws: a failure
// is a result, which the store counts and moves past.
class storage_tier {
 public:
  virtual ~storage_tier() = default;
  virtual const char* name() const = 0;
  // None of these throws.
  virtual tier_result get(const device_identity& device, std::string_view key) noexcept = 0;
  virtual tier_result put(const device_identity& device, std::string_view key, byte_span binary) noexcept = 0;
  virtual tier_result remove(const device_identity& device, std::string_view key) noexcept = 0;
  // What it did in this process, for kernel_store::remote_tier_stats (a
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

// --- Maintenance -----------------------------------------------------------------

// One value of a remote tier, as the maintenance tool sees it. Every string
// is printable ASCII (keys and values are untrusted).
struct remote_entry_info {
  std::string server_key;   // where the value is on the server (a Redis key), quoted
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

// A remote tier's contents and figures (tier_maintenance::stats).
struct remote_summary {
  std::string url;            // no password
  std::uint64_t entries = 0;  // values under the prefix
  std::uint64_t bytes = 0;    // their sizes
  // What the processes using the prefix counted, added up on the server
  // (each reports its counters every few seconds and at flush or exit;
  // read-only processes write nothing, so they report nothing).
  remote_stats fleet;
  // The server's own (Redis: INFO), every client and prefix together;
  // empty and 0 where a tier's server reports none.
  std::string server_version;
  std::uint64_t used_memory = 0;
  std::uint64_t maxmemory = 0;  // 0: no limit
  std::string maxmemory_policy;
  std::uint64_t keyspace_hits = 0;
  std::uint64_t keyspace_misses = 0;
};

// What a tier's maintenance does (unicache-store --remote): a scheme that
// offers it registers a maintenance_factory beside its tier_factory. Each
// member may throw remote_error when the server fails; list and verify
// describe each value, whatever it holds, in printable ASCII.
class tier_maintenance {
 public:
  virtual ~tier_maintenance() = default;
  virtual remote_summary stats() = 0;
  virtual std::vector<remote_entry_info> list() = 0;
  // The values that fail a check; `fix` deletes them (a read-only
  // configuration: remote_error).
  virtual std::vector<remote_entry_info> verify(bool fix) = 0;
  // Deletes every value; returns how many (read-only: remote_error).
  virtual std::uint64_t clear() = 0;
};

// --- The scheme registry -------------------------------------------------------
// The kernel store makes the tier a URL names (UNICACHE_REMOTE_CACHE,
// kernel_store::set_remote) through a table of scheme -> factory, and knows
// no tier by name. A new kind of tier is a class that implements
// storage_tier (and, for unicache-store --remote, tier_maintenance) and one
// registration, before the first URL of that scheme:
//
//   std::shared_ptr<unicache::storage_tier> make_my_tier(std::string_view url, const std::string& secret_file);
//   unicache::register_tier_scheme("mine", &make_my_tier, &make_my_maintenance);
//
// The core registers none: the remote component registers redis://
// (unicache::register_redis_tiers, unicache/remote.hpp).

// Makes the tier of `url` (its scheme the one registered), signed with the
// secret in `secret_file` ("" for none). Throws invalid_argument naming
// what is wrong, never quoting a password or the secret.
using tier_factory = std::shared_ptr<storage_tier> (*)(std::string_view url, const std::string& secret_file);
// The same for the tier's maintenance.
using maintenance_factory = std::unique_ptr<tier_maintenance> (*)(std::string_view url,
                                                                   const std::string& secret_file);

// Registers `make` (and `maintain`, or nullptr: the scheme has no
// maintenance) for URLs "<scheme>://...". Registering the same factories
// again does nothing. Throws invalid_argument for a scheme taken by other
// factories, or one that is not [a-z][a-z0-9+.-]* of at most 32
// characters, or a null `make`. Thread-safe.
void register_tier_scheme(const std::string& scheme, tier_factory make, maintenance_factory maintain = nullptr);

// The registered schemes, sorted.
std::vector<std::string> tier_schemes();

// Maintenance of the values one remote tier URL names (unicache-store
// --remote), through its scheme's registered maintenance. Throws
// invalid_argument for a URL of no registered scheme, a scheme without
// maintenance, or bad settings (as kernel_store::set_remote); each call
// throws remote_error when the server fails or times out. One thread at a
// time.
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
  std::unique_ptr<tier_maintenance> impl_;
};

}  // namespace unicache
