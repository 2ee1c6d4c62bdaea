// redis_backend (remote/redis_backend.hpp).
#include "remote/redis_backend.hpp"

#include <string>

#include "store/entry_format.hpp"
#include "util/stable_hash.hpp"

namespace unicache::redis {

using namespace unicache::detail;  // the core's store internals (entry format, tiers, utilities)
namespace {

constexpr std::size_t kMaxIdleConnections = 8;

// A report, applied at most once: KEYS[1] the counters' hash, KEYS[2] the
// reporting tier's last applied sequence number; ARGV[1] this report's,
// ARGV[2] KEYS[2]'s expiry in seconds, then field and delta pairs.
constexpr const char* kReportScript = R"LUA(
local last = tonumber(redis.call('GET', KEYS[2]) or '0')
if tonumber(ARGV[1]) <= last then return 0 end
redis.call('SET', KEYS[2], ARGV[1], 'EX', ARGV[2])
for i = 3, #ARGV, 2 do redis.call('HINCRBY', KEYS[1], ARGV[i], ARGV[i + 1]) end
return 1
)LUA";

// How long a tier's last sequence number stays on the server after its
// last report: far beyond any resend.
constexpr const char* kReportKeySeconds = "86400";

// Takes a lease: KEYS[1] the lease, ARGV[1] the token, ARGV[2] its ttl in
// ms. A command tried again (the client retries after an error) finds its
// own token and is granted still.
constexpr const char* kAcquireScript = R"LUA(
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end
if redis.call('GET', KEYS[1]) == ARGV[1] then return 1 end
return 0
)LUA";

// Ends a lease only for the token that holds it: KEYS[1] the lease, ARGV[1]
// the token.
constexpr const char* kReleaseScript = R"LUA(
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
)LUA";

}  // namespace

remote_reply to_reply(redis_result r) {
  remote_reply out;
  out.value = std::move(r.value);
  out.message = std::move(r.message);
  switch (r.status) {
    case redis_status::ok: out.status = remote_status::ok; break;
    case redis_status::hit: out.status = remote_status::hit; break;
    // A value over the bound is a miss with a message: no value of ours.
    case redis_status::miss: out.status = out.message.empty() ? remote_status::miss : remote_status::rejected; break;
    case redis_status::error: out.status = remote_status::error; break;
    case redis_status::timeout: out.status = remote_status::timeout; break;
    case redis_status::unavailable: out.status = remote_status::unavailable; break;
    case redis_status::refused:
      // Something else stored under the key (a hash, a list): a value that
      // fails the checks, not a server that fails.
      out.status = out.message.find("WRONGTYPE") != std::string::npos ? remote_status::rejected : remote_status::refused;
      break;
  }
  return out;
}

redis_backend::redis_backend(redis_config config)
    : config_(std::move(config)), cluster_(config_.cluster ? std::make_unique<redis_cluster>(config_) : nullptr) {}

redis_backend::~redis_backend() = default;

std::string redis_backend::entry_key(const device_identity& device, std::string_view key) const {
  return entry_key_of(device_hash(device), key);
}

std::string redis_backend::entry_key_of(const hash128& device, std::string_view key) const {
  return config_.prefix + ":1:" + to_hex(device) + ":" + to_hex(key_hash(key));
}

std::string redis_backend::lease_key(const device_identity& device, std::string_view key) const {
  return "{" + entry_key(device, key) + "}:lease";
}

std::string redis_backend::report_key(std::string_view token) const {
  return "{" + stats_key() + "}:report:" + std::string(token);
}

std::unique_ptr<redis_connection> redis_backend::take_connection() {
  {
    scoped_lock l(&pool_mu_);
    if (!idle_.empty()) {
      std::unique_ptr<redis_connection> c = std::move(idle_.back());
      idle_.pop_back();
      return c;
    }
  }
  return std::make_unique<redis_connection>(config_);
}

void redis_backend::give_back(std::unique_ptr<redis_connection> c) {
  scoped_lock l(&pool_mu_);
  if (idle_.size() < kMaxIdleConnections) idle_.push_back(std::move(c));
}

template <typename Op>
redis_result redis_backend::pooled(Op op) {
  std::unique_ptr<redis_connection> c = take_connection();
  redis_result r = op(*c);
  if (r.status != redis_status::error && r.status != redis_status::timeout) give_back(std::move(c));
  return r;
}

redis_result redis_backend::get_value(std::string_view key, std::size_t max_bytes) {
  if (cluster_) return cluster_->get(key, max_bytes);
  return pooled([&](redis_connection& c) { return c.get(key, max_bytes); });
}

redis_result redis_backend::set_value(std::string_view key, byte_span value) {
  if (cluster_) return cluster_->set(key, value);
  return pooled([&](redis_connection& c) { return c.set(key, value); });
}

redis_result redis_backend::delete_value(std::string_view key) {
  if (cluster_) return cluster_->del(key);
  return pooled([&](redis_connection& c) { return c.del(key); });
}

redis_result redis_backend::command(std::string_view key, const std::vector<std::string_view>& args) {
  if (cluster_) return cluster_->command(key, args);
  return pooled([&](redis_connection& c) { return c.command(args); });
}

redis_result redis_backend::hgetall(std::string_view key, std::vector<std::string>& pairs) {
  if (cluster_) return cluster_->hgetall(key, pairs);
  return pooled([&](redis_connection& c) { return c.hgetall(key, pairs); });
}

std::vector<redis_config> redis_backend::servers() {
  if (cluster_) return cluster_->masters();
  return {config_};
}

remote_reply redis_backend::get(const device_identity& device, std::string_view key, std::size_t max_bytes) {
  return to_reply(get_value(entry_key(device, key), max_bytes));
}

remote_reply redis_backend::set(const device_identity& device, std::string_view key, byte_span value) {
  return to_reply(set_value(entry_key(device, key), value));
}

remote_reply redis_backend::remove(const device_identity& device, std::string_view key) {
  return to_reply(delete_value(entry_key(device, key)));
}

remote_reply redis_backend::report(std::string_view token, std::uint64_t seq, std::span<const counter_delta> deltas) {
  const std::string stats = stats_key(), mine = report_key(token), number = std::to_string(seq);
  std::vector<std::string> values;
  values.reserve(deltas.size());  // never moved: args views them
  std::vector<std::string_view> args{"EVAL", kReportScript, "2", stats, mine, number, kReportKeySeconds};
  for (const counter_delta& d : deltas) {
    args.push_back(d.first);
    args.push_back(values.emplace_back(std::to_string(d.second)));
  }
  return to_reply(command(stats, args));
}

remote_reply redis_backend::acquire_lease(const device_identity& device, std::string_view key,
                                          std::string_view token) {
  const std::string where = lease_key(device, key), ttl = std::to_string(config_.lease_ms);
  remote_reply r = to_reply(command(where, {"EVAL", kAcquireScript, "1", where, token, ttl}));
  // 1: granted (now, or by this command's earlier try); 0: another holds it.
  if (r.status == remote_status::ok && r.value != byte_vector{'1'}) r.status = remote_status::miss;
  return r;
}

remote_reply redis_backend::release_lease(const device_identity& device, std::string_view key,
                                          std::string_view token) {
  const std::string where = lease_key(device, key);
  return to_reply(command(where, {"EVAL", kReleaseScript, "1", where, token}));
}

}  // namespace unicache::redis
