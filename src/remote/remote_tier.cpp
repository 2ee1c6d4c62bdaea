// remote_tier (remote/remote_tier.hpp).
#include "remote/remote_tier.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <system_error>

#include "store/entry_format.hpp"
#include "unicache/remote.hpp"
#include "util/log.hpp"
#include "util/stable_hash.hpp"

namespace unicache::detail {
namespace {

constexpr std::size_t kMacBytes = remote_tier::kMacBytes;
constexpr std::int64_t kLongestBackoffNs = std::int64_t{3600} * 1'000'000'000;
constexpr std::size_t kMaxIdleConnections = 8;

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// HMAC-SHA256 under `secret` of the prefix, a zero byte and the entry: a
// value signed for one prefix is no value of another's. nullopt if OpenSSL
// fails (the value is then neither signed nor accepted).
std::optional<std::array<unsigned char, kMacBytes>> mac_of(const std::string& secret, const std::string& prefix,
                                                           byte_span entry) {
  static EVP_MAC* const hmac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
  if (!hmac) return std::nullopt;
  std::unique_ptr<EVP_MAC_CTX, decltype(&EVP_MAC_CTX_free)> ctx(EVP_MAC_CTX_new(hmac), &EVP_MAC_CTX_free);
  char digest[] = "SHA256";
  const OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string("digest", digest, 0), OSSL_PARAM_construct_end()};
  const unsigned char zero = 0;
  std::array<unsigned char, kMacBytes> out{};
  std::size_t length = 0;
  if (!ctx ||
      !EVP_MAC_init(ctx.get(), reinterpret_cast<const unsigned char*>(secret.data()), secret.size(), params) ||
      !EVP_MAC_update(ctx.get(), reinterpret_cast<const unsigned char*>(prefix.data()), prefix.size()) ||
      !EVP_MAC_update(ctx.get(), &zero, 1) || !EVP_MAC_update(ctx.get(), entry.data(), entry.size()) ||
      !EVP_MAC_final(ctx.get(), out.data(), &length, out.size()) || length != kMacBytes) {
    return std::nullopt;
  }
  return out;
}

// 32 hex digits from the system's random source (the time, pid and an
// address where it has none): what tells one tier's counter reports from
// another's.
std::string random_token() {
  hash128 bytes{};
  try {
    std::random_device source;
    for (std::size_t i = 0; i < bytes.size(); i += 4) {
      const unsigned int v = source();
      for (std::size_t j = 0; j < 4; ++j) bytes[i + j] = static_cast<unsigned char>(v >> (8 * j));
    }
  } catch (...) {
    const auto t = static_cast<std::uint64_t>(now_ns()) ^ (static_cast<std::uint64_t>(::getpid()) << 32);
    const auto a = reinterpret_cast<std::uintptr_t>(&bytes);
    for (std::size_t j = 0; j < 8; ++j) {
      bytes[j] = static_cast<unsigned char>(t >> (8 * j));
      bytes[8 + j] = static_cast<unsigned char>(a >> (8 * j));
    }
  }
  return to_hex(bytes);
}

// The largest value a get reads: an entry of the largest binary the remote
// tier writes, plus a MAC.
std::size_t max_value_bytes(std::string_view key) {
  return max_entry_file_bytes(key.size(), remote_tier::kMaxBinaryBytes) + kMacBytes;
}

}  // namespace

remote_tier::remote_tier(redis_config config, std::string secret)
    : config_(std::move(config)), secret_(std::move(secret)), owner_(::getpid()), report_token_(random_token()) {
  if (config_.read_only) return;
  try {
    writer_ = std::thread([this] { writer_loop(); });
  } catch (const std::system_error& e) {
    // No thread to be had (a process at its limit): the library's own error.
    throw remote_error(std::string("remote tier: cannot start its writer thread: ") + e.what());
  }
}

remote_tier::~remote_tier() {
  {
    scoped_lock l(&queue_mu_);
    stopping_ = true;
    stop_deadline_ = std::chrono::steady_clock::now() + std::chrono::seconds(2);  // for what is still queued
  }
  queue_cv_.notify_all();
  if (writer_.joinable() && in_owner()) writer_.join();
  if (writer_.joinable()) writer_.detach();  // a child of fork(): the thread is not there
}

bool remote_tier::in_owner() const { return ::getpid() == owner_; }

std::string remote_tier::redis_key(const device_identity& device, std::string_view key) const {
  return config_.prefix + ":1:" + to_hex(device_hash(device)) + ":" + to_hex(key_hash(key));
}

byte_vector remote_tier::encode(const device_identity& device, std::string_view key, byte_span binary) const {
  byte_vector value = encode_entry(device_hash(device), key, binary, ::time(nullptr));
  if (!secret_.empty()) {
    const auto mac = mac_of(secret_, config_.prefix, value);
    if (!mac) return {};  // not written (put drops an empty value)
    value.insert(value.end(), mac->begin(), mac->end());
  }
  return value;
}

std::optional<byte_span> remote_tier::signed_entry(byte_span value) const {
  if (secret_.empty()) return value;
  if (value.size() < kMacBytes) return std::nullopt;
  const byte_span entry = value.first(value.size() - kMacBytes);
  const auto mac = mac_of(secret_, config_.prefix, entry);
  if (!mac || CRYPTO_memcmp(mac->data(), value.data() + entry.size(), kMacBytes) != 0) return std::nullopt;
  return entry;
}

std::optional<byte_vector> remote_tier::decode(const device_identity& device, std::string_view key,
                                               byte_span value) const {
  const std::optional<byte_span> entry = signed_entry(value);
  if (!entry) return std::nullopt;
  const hash128 d = device_hash(device);
  const parsed_entry e = parse_entry(*entry, &d);
  if (!e.ok() || e.key != key) return std::nullopt;
  return byte_vector(e.binary.begin(), e.binary.end());
}

bool remote_tier::breaker_open() const { return now_ns() < open_until_ns_.load(std::memory_order_acquire); }

bool remote_tier::admit() {
  const std::int64_t until = open_until_ns_.load(std::memory_order_acquire);
  if (until == 0) return true;           // closed
  if (now_ns() < until) return false;    // open
  bool expected = false;                 // the back-off is over: one probe
  return probing_.compare_exchange_strong(expected, true, std::memory_order_acq_rel);
}

void remote_tier::abandon_probe() { probing_.store(false, std::memory_order_release); }

void remote_tier::record_failure(const redis_result& r) {
  (r.status == redis_status::timeout ? counters_.timeouts : counters_.errors).fetch_add(1, std::memory_order_relaxed);
  // A call that raced with the one that opened the breaker does not extend it.
  if (breaker_open()) return;
  std::int64_t backoff = backoff_ns_.load(std::memory_order_relaxed);
  backoff = backoff == 0 ? std::int64_t{config_.breaker_s} * 1'000'000'000 : std::min(backoff * 2, kLongestBackoffNs);
  backoff_ns_.store(backoff, std::memory_order_relaxed);
  open_until_ns_.store(now_ns() + backoff, std::memory_order_release);
  probing_.store(false, std::memory_order_release);  // a failed probe: open again, for longer
  if (!warned_.exchange(true)) {
    warn("remote kernel cache: " + r.message + "; no remote calls for " + std::to_string(backoff / 1'000'000'000) +
         " s (longer while it keeps failing), the local store keeps working");
  }
}

void remote_tier::record_success() {
  backoff_ns_.store(0, std::memory_order_relaxed);
  open_until_ns_.store(0, std::memory_order_release);
  probing_.store(false, std::memory_order_release);
}

std::unique_ptr<redis_connection> remote_tier::take_connection() {
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

void remote_tier::give_back(std::unique_ptr<redis_connection> c) {
  scoped_lock l(&pool_mu_);
  if (idle_.size() < kMaxIdleConnections) idle_.push_back(std::move(c));
}

tier_result remote_tier::get(const device_identity& device, std::string_view key) noexcept {
  try {
    if (!in_owner()) return {tier_status::skipped, std::nullopt};  // a child of fork(): its sockets are the parent's
    if (!admit()) {
      counters_.skipped.fetch_add(1, std::memory_order_relaxed);
      return {tier_status::skipped, std::nullopt};
    }
    redis_result r;
    std::unique_ptr<redis_connection> c;
    try {
      c = take_connection();
      r = c->get(redis_key(device, key), max_value_bytes(key));
    } catch (...) {
      abandon_probe();  // no answer either way (out of memory)
      throw;
    }
    if (r.status == redis_status::refused && r.message.find("WRONGTYPE") != std::string::npos) {
      // Something else stored under the key (a hash, a list): a value that
      // fails the checks, not a server that fails.
      record_success();
      give_back(std::move(c));
      counters_.rejected.fetch_add(1, std::memory_order_relaxed);
      return {tier_status::miss, std::nullopt};
    }
    if (r.status == redis_status::error || r.status == redis_status::timeout || r.status == redis_status::refused) {
      record_failure(r);
      return {r.status == redis_status::timeout ? tier_status::timeout : tier_status::error, std::nullopt};
    }
    give_back(std::move(c));
    record_success();
    if (r.status != redis_status::hit) {
      (r.message.empty() ? counters_.misses : counters_.rejected).fetch_add(1, std::memory_order_relaxed);
      return {tier_status::miss, std::nullopt};
    }
    counters_.bytes_read.fetch_add(r.value.size(), std::memory_order_relaxed);
    std::optional<byte_vector> binary = decode(device, key, r.value);
    (binary ? counters_.hits : counters_.rejected).fetch_add(1, std::memory_order_relaxed);
    return {binary ? tier_status::hit : tier_status::miss, std::move(binary)};
  } catch (...) {
    counters_.errors.fetch_add(1, std::memory_order_relaxed);
    return {tier_status::error, std::nullopt};
  }
}

tier_result remote_tier::put(const device_identity& device, std::string_view key, byte_span binary) noexcept {
  if (config_.read_only || !in_owner()) return {tier_status::skipped, std::nullopt};
  if (binary.size() > kMaxBinaryBytes || key.size() > kMaxKeyBytes) return {tier_status::skipped, std::nullopt};
  try {
    write w{redis_key(device, key), encode(device, key, binary)};
    if (w.value.empty()) return {tier_status::error, std::nullopt};
    scoped_lock l(&queue_mu_);
    // stopping_: being destroyed, or the writer gave up (out of memory):
    // nothing would take the write off the queue.
    if (stopping_ || queue_.size() >= kQueueLimit || queued_bytes_ + w.value.size() > kQueueBytes ||
        breaker_open()) {
      counters_.dropped.fetch_add(1, std::memory_order_relaxed);
      return {tier_status::skipped, std::nullopt};
    }
    queued_bytes_ += w.value.size();
    queue_.push_back(std::move(w));
    queue_cv_.notify_all();
    return {tier_status::done, std::nullopt};
  } catch (...) {
    counters_.dropped.fetch_add(1, std::memory_order_relaxed);
    return {tier_status::error, std::nullopt};
  }
}

tier_result remote_tier::remove(const device_identity& device, std::string_view key) noexcept {
  if (config_.read_only || !in_owner()) return {tier_status::skipped, std::nullopt};
  try {
    write w{redis_key(device, key), {}};
    scoped_lock l(&queue_mu_);
    if (stopping_ || queue_.size() >= kQueueLimit) return {tier_status::skipped, std::nullopt};
    queue_.push_back(std::move(w));
    queue_cv_.notify_all();
    return {tier_status::done, std::nullopt};
  } catch (...) {
    return {tier_status::error, std::nullopt};
  }
}

remote_stats remote_tier::statistics() const {
  remote_stats out;
  const remote_counters& n = counters_;
  out.enabled = true;
  out.url = config_.to_string();
  out.hits = n.hits.load();
  out.misses = n.misses.load();
  out.errors = n.errors.load();
  out.timeouts = n.timeouts.load();
  out.rejected = n.rejected.load();
  out.skipped = n.skipped.load();
  out.puts = n.puts.load();
  out.dropped = n.dropped.load();
  out.bytes_read = n.bytes_read.load();
  out.bytes_written = n.bytes_written.load();
  return out;
}

bool remote_tier::flush(std::chrono::milliseconds limit) {
  if (config_.read_only || !in_owner()) return true;  // no writer here
  scoped_lock l(&queue_mu_);
  if (!stopping_) {
    queue_.push_back(write{});  // a report of the counters, then the queue is done
    queue_cv_.notify_all();
  }
  auto done = [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return queue_.empty() && !writing_; };
  if (limit == std::chrono::milliseconds::max()) {
    queue_mu_.wait(queue_cv_, done);
    return true;
  }
  return queue_mu_.wait_for(queue_cv_, limit, done);
}

namespace {

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

}  // namespace

void remote_tier::report(redis_connection& c) {
  static constexpr std::array<const char*, 10> kFields{"hits", "misses", "rejected", "errors", "timeouts",
                                                      "skipped", "puts", "dropped", "bytes_read", "bytes_written"};
  const std::array<const std::atomic<std::uint64_t>*, 10> counts{
      &counters_.hits,    &counters_.misses, &counters_.rejected, &counters_.errors,     &counters_.timeouts,
      &counters_.skipped, &counters_.puts,   &counters_.dropped,  &counters_.bytes_read, &counters_.bytes_written};
  // A report left from a failure goes first, then one of what came since.
  for (int round = 0; round < 2 && reporting_; ++round) {
    if (!pending_) {
      pending_report p;
      bool any = false;
      for (std::size_t i = 0; i < counts.size(); ++i) {
        const std::uint64_t now = counts[i]->load(std::memory_order_relaxed);
        p.deltas[i] = now - reported_[i];
        reported_[i] = now;
        any = any || p.deltas[i] != 0;
      }
      if (!any) return;
      p.seq = ++report_seq_;
      pending_ = p;
    }
    if (!admit()) return;  // with something to send: a probe gets an answer
    const std::string seq = std::to_string(pending_->seq);
    const std::string stats = stats_key(), mine = report_key();
    std::vector<std::string> deltas;
    deltas.reserve(kFields.size());  // never moved: args views them
    std::vector<std::string_view> args{"EVAL", kReportScript, "2", stats, mine, seq, kReportKeySeconds};
    for (std::size_t i = 0; i < kFields.size(); ++i) {
      if (pending_->deltas[i] == 0) continue;
      args.push_back(kFields[i]);
      args.push_back(deltas.emplace_back(std::to_string(pending_->deltas[i])));
    }
    const redis_result r = c.command(args);
    if (r.status == redis_status::refused) {
      // Not allowed (an ACL without EVAL or HINCRBY, scripts off) or not
      // possible: counters are a convenience, never a reason to stop using
      // the server.
      record_success();
      reporting_ = false;
      pending_.reset();
      return;
    }
    if (r.status != redis_status::ok) {
      record_failure(r);  // sent again, with its number, at the next report
      return;
    }
    record_success();
    pending_.reset();
  }
}

void remote_tier::writer_loop() {
  try {
    redis_connection c(config_);
    for (;;) {
      write w;
      {
        scoped_lock l(&queue_mu_);
        // Idle for a while: the counts go out anyway.
        const bool woke = queue_mu_.wait_for(queue_cv_, std::chrono::seconds(5), [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
          return stopping_ || !queue_.empty();
        });
        if (stopping_ && (queue_.empty() || std::chrono::steady_clock::now() > stop_deadline_)) return;
        if (woke) {
          w = std::move(queue_.front());
          queue_.pop_front();
          queued_bytes_ -= w.value.size();
        }
        writing_ = true;
      }
      write_one(c, w);
      scoped_lock l(&queue_mu_);
      writing_ = false;
      queue_cv_.notify_all();
    }
  } catch (...) {
    // Out of memory: the tier stops writing; reads go on.
    scoped_lock l(&queue_mu_);
    stopping_ = true;
    writing_ = false;
    queue_.clear();
    queued_bytes_ = 0;
    queue_cv_.notify_all();
  }
}

void remote_tier::write_one(redis_connection& c, const write& w) {
  if (w.key.empty()) {
    report(c);  // idle, or flush() asked
    return;
  }
  if (!admit()) {
    counters_.dropped.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  redis_result r;
  try {
    r = w.value.empty() ? c.del(w.key) : c.set(w.key, w.value);
  } catch (...) {
    abandon_probe();
    throw;
  }
  if (r.status == redis_status::ok) {
    record_success();
    if (!w.value.empty()) {
      counters_.puts.fetch_add(1, std::memory_order_relaxed);
      counters_.bytes_written.fetch_add(w.value.size(), std::memory_order_relaxed);
    }
  } else if (r.status == redis_status::refused) {
    // The server refuses this write (OOM under noeviction, NOPERM for a
    // read-only ACL user, READONLY on a replica): dropped and said once;
    // reads go on.
    record_success();  // the server answered
    counters_.dropped.fetch_add(1, std::memory_order_relaxed);
    if (!warned_.exchange(true)) warn("remote kernel cache: " + r.message + "; writes are dropped, reads go on");
  } else {
    record_failure(r);
  }
}

}  // namespace unicache::detail
