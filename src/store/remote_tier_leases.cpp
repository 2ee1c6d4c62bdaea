// remote_tier's build leases (store/remote_tier.hpp): asking the server for
// the lease on building a missed kernel, waiting for another process's
// value while it holds one, and ending a granted lease after the value's
// write is queued.
#include <chrono>
#include <thread>

#include "store/entry_format.hpp"
#include "store/remote_tier.hpp"

namespace unicache::detail {

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

void remote_tier::release_lease(const device_identity& device, std::string_view key,
                                const std::string& token) noexcept {
  if (token.empty() || read_only_ || !in_owner()) return;
  try {
    // Not queued (full, stopping): the lease ends at its ttl.
    enqueue(write{write::kind::release, device, std::string(key), {}, token});
  } catch (...) {
  }
}

}  // namespace unicache::detail
