// remote_tier (store/remote_tier.hpp): its construction, the value
// format it stores, the breaker, get, put and remove, and its statistics.
// Build leases: remote_tier_leases.cpp; the background writer and flush:
// remote_tier_writer.cpp.
#include "store/remote_tier.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <system_error>
#include <thread>

#include "store/entry_format.hpp"
#include "unicache/remote.hpp"
#include "util/log.hpp"
#include "util/stable_hash.hpp"

namespace unicache::detail {
namespace {

constexpr std::int64_t kLongestBackoffNs = std::int64_t{3600} * 1'000'000'000;

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
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

}  // namespace

std::size_t remote_tier::max_value_bytes(std::size_t key_bytes) {
  return max_entry_file_bytes(key_bytes, kMaxBinaryBytes) + kMacBytes;
}

remote_tier::remote_tier(std::string kind, std::unique_ptr<remote_backend> backend, std::string secret)
    : kind_(std::move(kind)),
      backend_(std::move(backend)),
      signer_(std::move(secret), backend_->scope()),
      read_only_(backend_->read_only()),
      owner_(::getpid()),
      token_(random_token()) {
  if (read_only_) return;
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

byte_vector remote_tier::encode(const device_identity& device, std::string_view key, byte_span binary) const {
  return signer_.sign(encode_entry(device_hash(device), key, binary, ::time(nullptr)));  // empty: not written
}

std::optional<byte_span> remote_tier::signed_entry(byte_span value) const { return signer_.verify(value); }

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

void remote_tier::record_failure(const remote_reply& r) {
  (r.status == remote_status::timeout ? counters_.timeouts : counters_.errors).fetch_add(1, std::memory_order_relaxed);
  // A call that raced with the one that opened the breaker does not extend it.
  if (breaker_open()) return;
  std::int64_t backoff = backoff_ns_.load(std::memory_order_relaxed);
  const std::int64_t first = std::chrono::duration_cast<std::chrono::nanoseconds>(backend_->first_backoff()).count();
  backoff = backoff == 0 ? first : std::min(backoff * 2, kLongestBackoffNs);
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

bool remote_tier::record(const remote_reply& r) {
  if (r.status == remote_status::error || r.status == remote_status::timeout) {
    record_failure(r);
    return true;
  }
  if (r.status != remote_status::unavailable) {
    record_success();
    return false;
  }
  // A part of the server down: this call failed, the breaker is left as it
  // was (the answer may be the backend's own, with no server asked).
  abandon_probe();
  counters_.errors.fetch_add(1, std::memory_order_relaxed);
  if (!warned_.exchange(true)) warn("remote kernel cache: " + r.message + "; the local store keeps working");
  return true;
}

tier_result remote_tier::get(const device_identity& device, std::string_view key) noexcept {
  try {
    if (!in_owner()) return {tier_status::skipped, std::nullopt};  // a child of fork(): its sockets are the parent's
    if (!admit()) {
      counters_.skipped.fetch_add(1, std::memory_order_relaxed);
      return {tier_status::skipped, std::nullopt};
    }
    remote_reply r;
    try {
      r = backend_->get(device, key, max_value_bytes(key.size()));
    } catch (...) {
      abandon_probe();  // no answer either way (out of memory)
      throw;
    }
    if (r.status == remote_status::refused) {
      // A server that refuses reads (NOPERM, LOADING) is of no use for now.
      r.status = remote_status::error;
    }
    if (record(r)) return {r.status == remote_status::timeout ? tier_status::timeout : tier_status::error, std::nullopt};
    if (r.status != remote_status::hit) {
      (r.status == remote_status::miss ? counters_.misses : counters_.rejected).fetch_add(1, std::memory_order_relaxed);
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

bool remote_tier::enqueue(write w) {
  scoped_lock l(&queue_mu_);
  // stopping_: being destroyed, or the writer gave up (out of memory):
  // nothing would take the write off the queue. A lease's release (a few
  // bytes; without it others wait out the ttl) is never left out for room.
  const bool full = queue_.size() >= kQueueLimit || queued_bytes_ + w.value.size() > kQueueBytes;
  if (stopping_ || (full && w.what != write::kind::release)) return false;
  queued_bytes_ += w.value.size();
  queue_.push_back(std::move(w));
  queue_cv_.notify_all();
  return true;
}

tier_result remote_tier::put(const device_identity& device, std::string_view key, byte_span binary) noexcept {
  if (read_only_ || !in_owner()) return {tier_status::skipped, std::nullopt};
  if (binary.size() > kMaxBinaryBytes || key.size() > kMaxKeyBytes) return {tier_status::skipped, std::nullopt};
  try {
    write w{write::kind::value, device, std::string(key), encode(device, key, binary), {}};
    if (w.value.empty()) return {tier_status::error, std::nullopt};
    if (breaker_open() || !enqueue(std::move(w))) {
      counters_.dropped.fetch_add(1, std::memory_order_relaxed);
      return {tier_status::skipped, std::nullopt};
    }
    return {tier_status::done, std::nullopt};
  } catch (...) {
    counters_.dropped.fetch_add(1, std::memory_order_relaxed);
    return {tier_status::error, std::nullopt};
  }
}

tier_result remote_tier::remove(const device_identity& device, std::string_view key) noexcept {
  if (read_only_ || !in_owner()) return {tier_status::skipped, std::nullopt};
  try {
    const bool queued = enqueue(write{write::kind::removal, device, std::string(key), {}, {}});
    return {queued ? tier_status::done : tier_status::skipped, std::nullopt};
  } catch (...) {
    return {tier_status::error, std::nullopt};
  }
}


std::optional<byte_vector> remote_tier::fetch(const device_identity& device, std::string_view key, bool* failed) {
  if (failed) *failed = true;
  if (!admit()) return std::nullopt;
  remote_reply r;
  try {
    r = backend_->get(device, key, max_value_bytes(key.size()));
  } catch (...) {
    abandon_probe();
    throw;
  }
  if (r.status == remote_status::refused) r.status = remote_status::error;
  if (record(r)) return std::nullopt;
  if (r.status != remote_status::hit) {
    if (failed) *failed = r.status == remote_status::rejected;
    if (r.status == remote_status::rejected) counters_.rejected.fetch_add(1, std::memory_order_relaxed);
    return std::nullopt;
  }
  counters_.bytes_read.fetch_add(r.value.size(), std::memory_order_relaxed);
  std::optional<byte_vector> binary = decode(device, key, r.value);
  if (!binary) {
    counters_.rejected.fetch_add(1, std::memory_order_relaxed);  // never served
    return std::nullopt;
  }
  if (failed) *failed = false;
  return binary;
}


remote_stats remote_tier::statistics() const {
  remote_stats out;
  const remote_counters& n = counters_;
  out.enabled = true;
  out.tier = kind_;
  out.url = backend_->url();
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
  out.leases = n.leases.load();
  out.lease_waits = n.lease_waits.load();
  out.lease_hits = n.lease_hits.load();
  out.lease_wait_ms = n.lease_wait_ms.load();
  return out;
}

}  // namespace unicache::detail
