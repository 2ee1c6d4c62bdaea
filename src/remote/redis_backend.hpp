// The Redis backend of the remote tier (store/remote_backend.hpp): values,
// leases and counters in one Redis server, over a pool of connections with
// redis_client's bounds and timeouts, or in a Redis Cluster, each key on
// the master of its slot (redis_cluster.hpp). The remote tier around it brings the
// breaker, the write queue, signing and the waiting for leases.
//
// Keys, under the configuration's prefix P:
//   P:1:<device hash>:<key hash>          an entry's value (the full key inside it decides)
//   {P:1:<device hash>:<key hash>}:lease  its build lease: SET NX PX with the holder's token,
//                                         ended by a compare-and-delete script; the hash tag
//                                         keeps it in its value's cluster slot
//   P:stats:1                             the counters the fleet adds up (HINCRBY)
//   {P:stats:1}:report:<token>            the last report number a tier applied (a day)
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "remote/redis_client.hpp"
#include "remote/redis_cluster.hpp"
#include "store/remote_backend.hpp"
#include "unicache/remote.hpp"
#include "util/mutex.hpp"
#include "util/stable_hash.hpp"

namespace unicache::redis {

// What it uses of the core's internals.
using detail::counter_delta;
using detail::hash128;
using detail::mutex;
using detail::remote_backend;
using detail::remote_reply;

class redis_backend final : public remote_backend {
 public:
  explicit redis_backend(redis_config config);
  ~redis_backend() override;

  std::string url() const override { return config_.to_string(); }
  std::string scope() const override { return config_.prefix; }
  bool read_only() const override { return config_.read_only; }
  std::chrono::seconds first_backoff() const override { return std::chrono::seconds(config_.breaker_s); }
  std::chrono::milliseconds lease_ttl() const override {
    return std::chrono::milliseconds(config_.lease ? config_.lease_ms : 0);
  }

  remote_reply get(const device_identity& device, std::string_view key, std::size_t max_bytes) override;
  remote_reply set(const device_identity& device, std::string_view key, byte_span value) override;
  remote_reply remove(const device_identity& device, std::string_view key) override;
  remote_reply report(std::string_view token, std::uint64_t seq, std::span<const counter_delta> deltas) override;
  remote_reply acquire_lease(const device_identity& device, std::string_view key, std::string_view token) override;
  remote_reply release_lease(const device_identity& device, std::string_view key, std::string_view token) override;

  const redis_config& config() const { return config_; }
  // The keys above.
  std::string entry_key(const device_identity& device, std::string_view key) const;
  std::string entry_key_of(const hash128& device_hash, std::string_view key) const;
  std::string lease_key(const device_identity& device, std::string_view key) const;
  std::string stats_key() const { return config_.prefix + ":stats:1"; }
  std::string report_key(std::string_view token) const;

  // Commands by Redis key, on the server or on the master of the key's
  // slot (maintenance uses them too).
  redis_result get_value(std::string_view key, std::size_t max_bytes);
  redis_result set_value(std::string_view key, byte_span value);
  redis_result delete_value(std::string_view key);
  redis_result hgetall(std::string_view key, std::vector<std::string>& pairs);
  redis_result command(std::string_view key, const std::vector<std::string_view>& args);
  // Each server that holds keys (SCAN and INFO walk one server): the one
  // server, or a cluster's masters (empty when none answered).
  std::vector<redis_config> servers();

 private:
  // `op` on a pooled connection; one that failed is dropped, not pooled.
  template <typename Op>
  redis_result pooled(Op op);
  std::unique_ptr<redis_connection> take_connection();
  void give_back(std::unique_ptr<redis_connection> c);

  const redis_config config_;
  const std::unique_ptr<redis_cluster> cluster_;  // a cluster's router, or null
  mutex pool_mu_;
  std::vector<std::unique_ptr<redis_connection>> idle_ ABSL_GUARDED_BY(pool_mu_);
};

// redis_status as a backend's reply.
remote_reply to_reply(redis_result r);

}  // namespace unicache::redis
