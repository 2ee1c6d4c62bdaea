// The remote tier of the kernel store: entries in a Redis server that a
// fleet shares. Reads are synchronous and bounded by the configuration's
// timeouts; writes go out on a background thread through a bounded queue.
// A failure opens a circuit breaker: no remote call for a back-off period
// (breaker_s, 60 s by default, doubling to an hour while failures go on),
// then one probe, whose answer closes it or opens it again (no other call
// goes out meanwhile), one warning per process;
// the local store keeps working throughout.
//
// Values are the store's entry format (magic, version, device hash, full
// key, checksum), followed, when a secret is configured, by an HMAC-SHA256 of
// the entry under the secret. A value that fails any check is a miss, counted
// as rejected, never served. Keys: <prefix>:1:<device hash>:<key hash>; the
// full key inside the value decides.
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
#include <vector>

#include "remote/redis_client.hpp"
#include "store/storage_tier.hpp"
#include "unicache/remote.hpp"
#include "unicache/store.hpp"
#include "util/mutex.hpp"

namespace unicache::detail {

struct remote_counters {
  std::atomic<std::uint64_t> hits{0}, misses{0}, errors{0}, timeouts{0}, rejected{0}, skipped{0};
  std::atomic<std::uint64_t> puts{0}, dropped{0}, bytes_read{0}, bytes_written{0};
};

class remote_tier final : public storage_tier {
 public:
  // `secret`: empty for unsigned values.
  remote_tier(redis_config config, std::string secret);
  ~remote_tier() override;  // waits for queued writes, at most the operation timeout each
  const char* name() const override { return "redis"; }
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

  const redis_config& config() const { return config_; }
  const remote_counters& counters() const { return counters_; }
  // The hash where the tier's processes add up their counters (HINCRBY):
  // what `unicache-store --remote stats` shows. Outside the entries' keys.
  std::string stats_key() const { return config_.prefix + ":stats:1"; }
  // Where this tier's last applied report number is (a day after its last
  // report): a random token's, not a process id's (pids are reused).
  std::string report_key() const { return config_.prefix + ":stats:1:report:" + report_token_; }
  // The Redis key of (device, key).
  std::string redis_key(const device_identity& device, std::string_view key) const;
  // The value a put writes (the entry, signed when there is a secret).
  byte_vector encode(const device_identity& device, std::string_view key, byte_span binary) const;
  // `value`'s entry if its signature is right (all of it when there is no
  // secret); nullopt otherwise.
  std::optional<byte_span> signed_entry(byte_span value) const;
  // The binary in `value` if it passes every check for (device, key).
  std::optional<byte_vector> decode(const device_identity& device, std::string_view key, byte_span value) const;

  static constexpr std::size_t kMacBytes = 32;  // HMAC-SHA256, after the entry of a signed value
  static constexpr std::size_t kQueueLimit = 256;
  static constexpr std::size_t kQueueBytes = std::size_t{256} << 20;    // queued values, in all
  static constexpr std::size_t kMaxBinaryBytes = std::size_t{64} << 20;  // larger binaries stay local

 private:
  struct write {
    std::string key;
    byte_vector value;  // empty: a removal (or, with an empty key, a report of the counters)
  };
  bool breaker_open() const;
  // Whether a remote call may go out now: the breaker is closed, or its
  // back-off is over and this caller is the one probe (until the probe's
  // answer closes or reopens it, every other call is skipped as while it
  // is open). Each admitted call ends in record_success, record_failure or
  // abandon_probe.
  bool admit();
  void abandon_probe();
  void record_failure(const redis_result& r);
  void record_success();
  std::unique_ptr<redis_connection> take_connection();
  void give_back(std::unique_ptr<redis_connection> c);
  void writer_loop();
  void write_one(redis_connection& c, const write& w);
  // Whether this is the process that made the tier (a child of fork() has
  // the parent's sockets and no writer thread: it leaves the tier alone).
  bool in_owner() const;
  // Adds what the counters gained since the last report to stats_key()
  // (the writer thread only), at most once: each report has a sequence
  // number, and a script applies it only if it is above the last this
  // tier's reports applied (report_key()), so a report sent again after a
  // lost answer, or retried by the client, is not counted twice.
  void report(redis_connection& c);

  const redis_config config_;
  const std::string secret_;
  remote_counters counters_;

  // The breaker: remote calls are skipped until this time (steady clock ns).
  std::atomic<std::int64_t> open_until_ns_{0};
  std::atomic<std::int64_t> backoff_ns_{0};
  std::atomic<bool> probing_{false};
  std::atomic<bool> warned_{false};

  mutex pool_mu_;
  std::vector<std::unique_ptr<redis_connection>> idle_ ABSL_GUARDED_BY(pool_mu_);

  mutex queue_mu_;
  std::condition_variable_any queue_cv_;
  std::deque<write> queue_ ABSL_GUARDED_BY(queue_mu_);
  bool writing_ ABSL_GUARDED_BY(queue_mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(queue_mu_) = false;
  std::size_t queued_bytes_ ABSL_GUARDED_BY(queue_mu_) = 0;
  std::chrono::steady_clock::time_point stop_deadline_ ABSL_GUARDED_BY(queue_mu_);
  const pid_t owner_;
  bool reporting_ = true;  // the writer's: false once the server refused a report
  std::thread writer_;
  std::array<std::uint64_t, 10> reported_{};  // the writer's: counters as of the last report made
  // The writer's: the report made and not yet answered (sent again, with
  // its sequence number, until it is), and the numbers' source.
  struct pending_report {
    std::uint64_t seq = 0;
    std::array<std::uint64_t, 10> deltas{};
  };
  std::optional<pending_report> pending_;
  std::uint64_t report_seq_ = 0;
  const std::string report_token_;  // random, this tier object's
};

}  // namespace unicache::detail
