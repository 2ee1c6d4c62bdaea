// remote_tier (store/remote_tier.hpp).
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

lease_result remote_tier::lease(const device_identity& device, std::string_view key) noexcept {
  using std::chrono::milliseconds;
  try {
    const milliseconds ttl = backend_->lease_ttl();
    // A read-only process could not publish what it builds.
    // A key the tier does not store (over kMaxKeyBytes) could never be
    // published: nobody waits for it.
    if (read_only_ || !in_owner() || ttl.count() <= 0 || key.size() > kMaxKeyBytes ||
        leases_refused_.load(std::memory_order_relaxed)) {
      return {};
    }
    const std::string token = token_ + "." + std::to_string(lease_number_.fetch_add(1, std::memory_order_relaxed));
    const auto start = std::chrono::steady_clock::now();
    // The lease this caller found ends within a ttl; the next holder's
    // build, if that one goes too, within another.
    const auto deadline = start + 2 * ttl;
    milliseconds pause(5);
    bool waiting = false;
    auto waited = [&] {
      const auto ms = std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - start).count();
      counters_.lease_wait_ms.fetch_add(static_cast<std::uint64_t>(ms), std::memory_order_relaxed);
    };
    for (;;) {
      if (!admit()) return {};
      remote_reply r;
      try {
        r = backend_->acquire_lease(device, key, token);
      } catch (...) {
        abandon_probe();
        throw;
      }
      if (record(r)) return {};
      if (r.status == remote_status::ok) {
        // The holder before may have put its value and released between
        // the caller's miss and this lease: looked up once more.
        if (std::optional<byte_vector> binary = fetch(device, key)) {
          enqueue(write{write::kind::release, device, std::string(key), {}, token});
          counters_.lease_hits.fetch_add(1, std::memory_order_relaxed);
          if (waiting) waited();
          return {lease_status::hit, std::move(binary), {}};
        }
        counters_.leases.fetch_add(1, std::memory_order_relaxed);
        if (waiting) waited();
        return {lease_status::granted, std::nullopt, token};
      }
      if (r.status != remote_status::miss) {
        // No leases here (an ACL without the commands, scripts off, a
        // server without them): builds go on as without, from now on.
        // Anything else refused (OOM, LOADING, a failover, a spoiled lease
        // key): without a lease this time.
        if (r.message.find("NOPERM") != std::string::npos || r.message.find("unknown command") != std::string::npos ||
            r.message.find("has no leases") != std::string::npos) {
          leases_refused_.store(true, std::memory_order_relaxed);
        }
        if (waiting) waited();
        return {};
      }
      // Another process builds it: its value, once there, or the lease
      // again if that process goes without putting one.
      if (!waiting) counters_.lease_waits.fetch_add(1, std::memory_order_relaxed);
      waiting = true;
      const auto now = std::chrono::steady_clock::now();
      if (now >= deadline) {
        waited();
        return {};
      }
      std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(pause, deadline - now));
      pause = std::min(pause * 2, milliseconds(50));
      bool failed = false;
      if (std::optional<byte_vector> binary = fetch(device, key, &failed)) {
        counters_.lease_hits.fetch_add(1, std::memory_order_relaxed);
        waited();
        return {lease_status::hit, std::move(binary), {}};
      }
      if (failed) {  // the server failing, or a value that fails the checks: built here
        waited();
        return {};
      }
    }
  } catch (...) {
    counters_.errors.fetch_add(1, std::memory_order_relaxed);
    return {};
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

void remote_tier::release_lease(const device_identity& device, std::string_view key,
                                const std::string& token) noexcept {
  if (token.empty() || read_only_ || !in_owner()) return;
  try {
    // Not queued (full, stopping): the lease ends at its ttl.
    enqueue(write{write::kind::release, device, std::string(key), {}, token});
  } catch (...) {
  }
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

bool remote_tier::flush(std::chrono::milliseconds limit) {
  if (read_only_ || !in_owner()) return true;  // no writer here
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

void remote_tier::report() {
  static constexpr std::array<const char*, kReported> kFields{
      "hits",    "misses",     "rejected",      "errors", "timeouts",    "skipped",    "puts",
      "dropped", "bytes_read", "bytes_written", "leases", "lease_waits", "lease_hits", "lease_wait_ms"};
  const std::array<const std::atomic<std::uint64_t>*, kReported> counts{
      &counters_.hits,       &counters_.misses,        &counters_.rejected, &counters_.errors,
      &counters_.timeouts,   &counters_.skipped,       &counters_.puts,     &counters_.dropped,
      &counters_.bytes_read, &counters_.bytes_written, &counters_.leases,   &counters_.lease_waits,
      &counters_.lease_hits, &counters_.lease_wait_ms};
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
    std::vector<counter_delta> deltas;  // before admit(): an allocation that fails holds no probe
    for (std::size_t i = 0; i < kFields.size(); ++i) {
      if (pending_->deltas[i] != 0) deltas.emplace_back(kFields[i], pending_->deltas[i]);
    }
    if (!admit()) return;  // with something to send: a probe gets an answer
    remote_reply r;
    try {
      r = backend_->report(token_, pending_->seq, deltas);
    } catch (...) {
      abandon_probe();
      throw;
    }
    if (record(r)) return;  // sent again, with its number, at the next report
    if (r.status != remote_status::ok) {
      // Not allowed (an ACL without EVAL or HINCRBY, scripts off) or kept
      // by no such server: counters are a convenience, never a reason to
      // stop using the server.
      reporting_ = false;
    }
    pending_.reset();
  }
}

void remote_tier::writer_loop() {
  try {
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
      write_one(w);
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

void remote_tier::write_one(const write& w) {
  if (w.what == write::kind::report) {
    report();  // idle, or flush() asked
    return;
  }
  if (!admit()) {
    if (w.what == write::kind::value) counters_.dropped.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  remote_reply r;
  try {
    switch (w.what) {
      case write::kind::value: r = backend_->set(w.device, w.key, w.value); break;
      case write::kind::removal: r = backend_->remove(w.device, w.key); break;
      default: r = backend_->release_lease(w.device, w.key, w.token); break;
    }
  } catch (...) {
    abandon_probe();
    throw;
  }
  if (record(r)) return;
  if (r.status == remote_status::ok) {
    if (w.what == write::kind::value) {
      counters_.puts.fetch_add(1, std::memory_order_relaxed);
      counters_.bytes_written.fetch_add(w.value.size(), std::memory_order_relaxed);
    }
  } else if (w.what != write::kind::release) {
    // The server refuses this write (OOM under noeviction, NOPERM for a
    // read-only ACL user, READONLY on a replica): dropped and said once;
    // reads go on.
    counters_.dropped.fetch_add(1, std::memory_order_relaxed);
    if (!warned_.exchange(true)) warn("remote kernel cache: " + r.message + "; writes are dropped, reads go on");
  }
}

}  // namespace unicache::detail
