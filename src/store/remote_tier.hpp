// A remote tier of the kernel store: entries on a server that a fleet
// shares, whatever kind of server (a remote_backend: store/remote_backend.hpp)
// serves them. What every remote tier needs is here, once:
//
// - Bounds. Reads are synchronous and bounded by the backend's timeouts and
//   by the largest value the tier writes; binaries over kMaxBinaryBytes stay
//   local.
// - A background write queue. Writes (values, removals, lease releases,
//   counter reports) go out on one thread, in order, through a queue bounded
//   in entries and bytes; a put never waits for the network.
// - A circuit breaker. A failure means no remote call for a back-off period
//   (the backend's first_backoff, doubling to an hour while failures go on),
//   then one probe, whose answer closes it or opens it again (no other call
//   goes out meanwhile); one warning per process. The local store keeps
//   working throughout.
// - Signing. Values are the store's entry format (magic, version, device
//   hash, full key, checksum), followed, when a secret is configured, by an
//   HMAC-SHA256 of the backend's scope and the entry under the secret
//   (entry_signing.hpp). A
//   value that fails any check is a miss, counted as rejected, never served.
// - Counters, reported to the server's shared counters (when it keeps any)
//   every few seconds and at flush, each report numbered and applied once.
// - Build leases. After a miss, lease() asks the backend for a lease on
//   building the key; while another process holds it, it polls (5 ms,
//   doubling to 50 ms) for that process's value, or for the lease when
//   that process went without putting one. A holder that dies or hangs
//   loses the lease at its ttl, and the next caller builds: a caller waits
//   for at most the lease it found (one ttl) and the build of the next
//   holder, and never more than two ttls. With the breaker open, a failing
//   server or leases off, nobody waits.
#pragma once

#include <sys/types.h>

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "store/entry_signing.hpp"
#include "store/remote_backend.hpp"
#include "unicache/storage_tier.hpp"
#include "unicache/remote.hpp"
#include "unicache/store.hpp"
#include "util/mutex.hpp"

namespace unicache::detail {

struct remote_counters {
  std::atomic<std::uint64_t> hits{0}, misses{0}, errors{0}, timeouts{0}, rejected{0}, skipped{0};
  std::atomic<std::uint64_t> puts{0}, dropped{0}, bytes_read{0}, bytes_written{0};
  std::atomic<std::uint64_t> leases{0}, lease_waits{0}, lease_hits{0}, lease_wait_ms{0};
};

class remote_tier : public storage_tier {
 public:
  // `kind`: the URL scheme that made it (its name); `secret`: empty for
  // unsigned values. Throws remote_error when its writer thread cannot start.
  remote_tier(std::string kind, std::unique_ptr<remote_backend> backend, std::string secret);
  ~remote_tier() override;  // waits for queued writes, at most 2 s in all
  const char* name() const override { return kind_.c_str(); }
  remote_tier(const remote_tier&) = delete;
  remote_tier& operator=(const remote_tier&) = delete;

  // The binary stored under (device, key), verified: hit; miss (none, or a
  // value that failed a check: counted as rejected); skipped (the breaker
  // is open); error or timeout (the breaker opens). Never throws.
  tier_result get(const device_identity& device, std::string_view key) noexcept override;
  // Queues a write: done; skipped in read-only mode, with the breaker open
  // or the queue full (counted as dropped). Never waits for the network.
  tier_result put(const device_identity& device, std::string_view key, byte_span binary) noexcept override;
  // Queues a removal: done, or skipped (read-only, queue full).
  tier_result remove(const device_identity& device, std::string_view key) noexcept override;
  // Sends this process's counts to the server and waits until the queue is
  // empty (tests, tools, exit), or at most `limit`; returns whether it is.
  bool flush(std::chrono::milliseconds limit = std::chrono::milliseconds::max()) override;
  remote_stats statistics() const override;
  // See above; never throws.
  lease_result lease(const device_identity& device, std::string_view key) noexcept override;
  // Queued after the writes before it (the value goes out first).
  void release_lease(const device_identity& device, std::string_view key, const std::string& token) noexcept override;

  const remote_backend& backend() const { return *backend_; }
  const remote_counters& counters() const { return counters_; }
  // What tells this tier's counter reports and leases from another's:
  // random, this object's (pids are reused).
  const std::string& token() const { return token_; }
  // The value a put writes (the entry, signed when there is a secret).
  byte_vector encode(const device_identity& device, std::string_view key, byte_span binary) const;
  // `value`'s entry if its signature is right (all of it when there is no
  // secret); nullopt otherwise.
  std::optional<byte_span> signed_entry(byte_span value) const;
  // The binary in `value` if it passes every check for (device, key).
  std::optional<byte_vector> decode(const device_identity& device, std::string_view key, byte_span value) const;
  // The largest value a get reads for `key`: an entry of the largest
  // binary the tier writes, plus a MAC.
  static std::size_t max_value_bytes(std::size_t key_bytes);

  static constexpr std::size_t kMacBytes = entry_signer::kMacBytes;  // after the entry of a signed value
  static constexpr std::size_t kQueueLimit = 256;
  static constexpr std::size_t kQueueBytes = std::size_t{256} << 20;    // queued values, in all
  static constexpr std::size_t kMaxBinaryBytes = std::size_t{64} << 20;  // larger binaries stay local

 private:
  struct write {
    enum class kind : std::uint8_t { report, value, removal, release } what = kind::report;
    device_identity device;
    std::string key;
    byte_vector value;  // value: the encoded entry
    std::string token;  // release: the lease's
  };
  bool breaker_open() const;
  // Whether a remote call may go out now: the breaker is closed, or its
  // back-off is over and this caller is the one probe (until the probe's
  // answer closes or reopens it, every other call is skipped as while it
  // is open). Each admitted call ends in record_success, record_failure or
  // abandon_probe.
  bool admit();
  void abandon_probe();
  void record_failure(const remote_reply& r);
  void record_success();
  // Ends an admitted call by its reply's status: success for what the
  // server answered, failure for error and timeout (the breaker opens).
  // Returns whether the call failed: those, and unavailable (a part of the
  // server down: counted as an error, the breaker left closed).
  bool record(const remote_reply& r);
  bool enqueue(write w);
  // The verified value of (device, key) for lease(), or nullopt; `failed`
  // (if given) tells a plain miss (false) from a server that failed or a
  // value that failed a check (true).
  std::optional<byte_vector> fetch(const device_identity& device, std::string_view key, bool* failed = nullptr);
  void writer_loop();
  void write_one(const write& w);
  // Whether this is the process that made the tier (a child of fork() has
  // the parent's sockets and no writer thread: it leaves the tier alone).
  bool in_owner() const;
  // Adds what the counters gained since the last report to the server's
  // counters (the writer thread only), each report numbered so that one
  // sent again after a lost answer is not counted twice.
  void report();

  const std::string kind_;
  const std::unique_ptr<remote_backend> backend_;
  const entry_signer signer_;  // bound to backend_->scope()
  const bool read_only_;
  remote_counters counters_;

  // The breaker: remote calls are skipped until this time (steady clock ns).
  std::atomic<std::int64_t> open_until_ns_{0};
  std::atomic<std::int64_t> backoff_ns_{0};
  std::atomic<bool> probing_{false};
  std::atomic<bool> warned_{false};
  std::atomic<bool> leases_refused_{false};  // the server has none: not asked again
  std::atomic<std::uint64_t> lease_number_{0};

  mutex queue_mu_;
  std::condition_variable_any queue_cv_;
  std::deque<write> queue_ ABSL_GUARDED_BY(queue_mu_);
  bool writing_ ABSL_GUARDED_BY(queue_mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(queue_mu_) = false;
  std::size_t queued_bytes_ ABSL_GUARDED_BY(queue_mu_) = 0;
  std::chrono::steady_clock::time_point stop_deadline_ ABSL_GUARDED_BY(queue_mu_);
  const pid_t owner_;
  const std::string token_;
  bool reporting_ = true;  // the writer's: false once the server refused a report
  std::thread writer_;
  static constexpr std::size_t kReported = 14;        // the counters a report carries
  std::array<std::uint64_t, kReported> reported_{};  // the writer's: counters as of the last report made
  // The writer's: the report made and not yet answered (sent again, with
  // its sequence number, until it is), and the numbers' source.
  struct pending_report {
    std::uint64_t seq = 0;
    std::array<std::uint64_t, kReported> deltas{};
  };
  std::optional<pending_report> pending_;
  std::uint64_t report_seq_ = 0;
};

}  // namespace unicache::detail
