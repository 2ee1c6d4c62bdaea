// kernel_store's operations: get, put and remove on the current directory,
// the run-time settings, and the blob API over the same entry format.
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <array>
#include <cstdlib>

#include "store/tier_registry.hpp"
#include "store/background_evictor.hpp"
#include "store/entry_format.hpp"
#include "store/entry_slots.hpp"
#include "store/eviction.hpp"
#include "store/kernel_store_impl.hpp"
#include "store/store_layout.hpp"
#include "store/store_testing.hpp"
#include "unicache/store.hpp"
#include "util/file_io.hpp"

namespace unicache {

using namespace detail;

namespace {

constexpr long kTouchIntervalS = 60;  // last use is recorded at most once a minute

// The binary of `key` for `device` in the open entry `file`, read straight
// into the vector returned (a get copies nothing), or nullopt when the file
// is anything but an intact entry of that key (read_slot then tells what).
std::optional<byte_vector> read_binary(const opened_file& file, std::string_view key, const hash128& device,
                                       const store_config& config) {
  const auto file_bytes = static_cast<std::uint64_t>(file.status.st_size);
  if (file.status.st_size < 0 || file_bytes > max_entry_file_bytes(key.size(), config.max_entry_bytes)) {
    return std::nullopt;
  }
  byte_vector head(kEntryHeaderBytes + key.size());
  if (file_bytes < head.size() || read_exactly(file, head.data(), head.size(), 0) != 0) return std::nullopt;
  const std::optional<std::uint64_t> size = binary_size_of(head, file_bytes, key, device);
  if (!size) return std::nullopt;
  byte_vector binary(static_cast<std::size_t>(*size));
  if (read_exactly(file, binary.data(), binary.size(), head.size()) != 0 || !binary_matches(head, binary)) {
    return std::nullopt;
  }
  return binary;
}

// A hit's last use, at most once a minute, recorded by the background
// thread: a get never waits for the filesystem's journal.
void record_use_if_due(const store_directory& d, opened_file& file) {
  if (d.writable() && older_than(file, kTouchIntervalS)) background_evictor::instance().record_use(std::move(file.fd));
}

}  // namespace

std::shared_ptr<const store_state> kernel_store::impl::require_enabled() const {
  std::shared_ptr<const store_state> s = state();
  if (!s->directory) {
    throw store_error("the persistent kernel store is disabled (" + s->config.directory + ")");
  }
  return s;
}

void kernel_store::impl::configure(store_config config, const store_state* current) {
  std::shared_ptr<store_directory> directory;
  const bool same_directory = current && current->config.enabled == config.enabled &&
                              current->config.directory == config.directory &&
                              current->config.shared == config.shared;
  if (same_directory) {
    directory = current->directory;
  } else if (config.enabled) {
    directory = store_directory::open(config.directory, config.shared);
  }
  auto next = std::make_shared<const store_state>(store_state{std::move(config), std::move(directory)});
  mutex_lock l(&state_mu);
  state_ = std::move(next);
}

kernel_store::kernel_store(store_config config) : impl_(new impl) {
  impl_->update([&](store_config& c) { c = std::move(config); });
}

kernel_store::~kernel_store() {
  // A cleanup of this store's directory in progress ends after its batch.
  if (background_evictor* e = background_evictor::existing()) {
    if (const std::shared_ptr<const store_state> s = impl_->state(); s && s->directory) e->forget(s->directory.get());
  }
  delete impl_;
}

kernel_store& kernel_store::instance() {
  static kernel_store* const store = [] {
    auto* s = new kernel_store(store_config::from_environment());
    s->impl_->set_remote(detail::tiers_from_environment());
    // Writes still queued at exit (from the environment's tier or one
    // set_remote made) get two seconds to go out: a process that compiled
    // and exits (a CI job filling the fleet's cache) would otherwise publish
    // nothing.
    std::atexit([] {
      try {
        if (const auto remotes = kernel_store::instance().impl_->remote()) {
          for (const auto& r : *remotes) r->flush(std::chrono::milliseconds(2000));
        }
      } catch (...) {
      }
    });
    return s;
  }();
  return *store;
}

void kernel_store::set_enabled(bool enabled) {
  impl_->update([&](store_config& c) { c.enabled = enabled; });
}
void kernel_store::set_directory(std::string directory) {
  impl_->update([&](store_config& c) { c.directory = std::move(directory); });
}
void kernel_store::set_capacity_mb(std::uint64_t capacity_mb) {
  // The bound UNICACHE_PERSISTENT_CACHE_MAX_SIZE has: rejected, never saturated.
  if (capacity_mb > (UINT64_MAX >> 20)) {
    throw store_error("persistent kernel store: capacity " + std::to_string(capacity_mb) +
                      " MB does not fit in bytes; the largest is " + std::to_string(UINT64_MAX >> 20) + " MB");
  }
  impl_->update([&](store_config& c) { c.max_size_bytes = capacity_mb << 20; });
}
void kernel_store::set_size_eviction(bool enabled) {
  impl_->update([&](store_config& c) { c.size_eviction = enabled; });
}

bool kernel_store::enabled() const noexcept { return impl_->state()->directory != nullptr; }
bool kernel_store::writable() const noexcept {
  const std::shared_ptr<const store_state> s = impl_->state();
  return s->directory && s->directory->writable();
}
store_config kernel_store::config() const { return impl_->state()->config; }

std::optional<byte_vector> kernel_store::impl::get_local(const device_identity& device, std::string_view key) noexcept {
  try {
    const std::shared_ptr<const store_state> s = state();
    if (!s->directory) return std::nullopt;
    store_directory& d = *s->directory;
    const hash128 device_h = device_hash(device);
    const hash128 key_h = hasher(key);
    const directory_handle dir = d.open_key_directory(device_h, key_h, /*create=*/false);
    if (!dir.ok()) return std::nullopt;
    const std::string relative_dir = key_directory_relative_path(device_h, key_h);
    // Every slot is tried: an earlier one may have been evicted, or hold
    // another key (a hash collision) or something that is not an entry.
    for (int n = 0; n < kMaxCollisions; ++n) {
      // The common case first: the slot holds this key, intact.
      opened_file file;
      const int open_err = open_regular_file(dir, entry_name(n), file);
      if (open_err == ENOENT) continue;
      if (open_err == 0 && d.trusts(file.status, relative_dir, entry_name(n))) {
        if (std::optional<byte_vector> binary = read_binary(file, key, device_h, s->config)) {
          record_use_if_due(d, file);
          return binary;
        }
      }
      // Anything else: read whole, as put and remove read it, to tell what.
      slot found = read_slot(d, dir, relative_dir, n, device_h, key, s->config);
      if (found.what == slot::state::this_key) {
        record_use_if_due(d, found.file);
        return byte_vector(found.entry.binary.begin(), found.entry.binary.end());
      }
      if (found.what == slot::state::damaged && d.writable()) {
        // A truncated, corrupt or foreign file is a miss, and goes, unless
        // a writer replaced it since it was read (another inode).
        const int shard = shard_of(key_h);
        shard_need need;
        {
          lock_file_holder l(&d.lock(shard));
          struct stat now {};
          const std::string name = entry_name(n);
          if (::fstatat(dir.fd(), name.c_str(), &now, AT_SYMLINK_NOFOLLOW) == 0 &&
              now.st_ino == found.file.status.st_ino && now.st_dev == found.file.status.st_dev &&
              ::unlinkat(dir.fd(), name.c_str(), 0) == 0) {
            remove_key_directory_if_empty(d.root(), relative_dir);
            // Its size on disk need not be what the record counted: the
            // record is an estimate until the shard is walked.
            need = account_locked(d, shard, s->config, -static_cast<std::int64_t>(now.st_size), -1,
                                  /*estimate=*/true);
          }
        }
        if (need.clean || need.walk) background_evictor::instance().request(s->directory, s->config, shard, "", need.walk);
      }
    }
  } catch (...) {
    // Out of memory while reading: a miss, never the caller's problem.
  }
  return std::nullopt;
}

bool kernel_store::impl::put_local(const device_identity& device, std::string_view key, byte_span binary) noexcept {
  try {
    const std::shared_ptr<const store_state> s = state();
    if (!s->directory || !s->directory->writable()) return false;
    if (check_entry_size(s->config, key.size(), binary.size()) != entry_size_problem::none) return false;
    const hash128 device_h = device_hash(device);
    const byte_vector bytes = encode_entry(device_h, key, binary, ::time(nullptr));
    const publish_result r = publish_entry(s->directory, s->config, device_h, hasher(key), key, bytes, describe(device));
    return r == publish_result::stored || r == publish_result::already_present;
  } catch (...) {
    return false;
  }
}

bool kernel_store::impl::remove_local(const device_identity& device, std::string_view key) noexcept {
  try {
    const std::shared_ptr<const store_state> s = state();
    if (!s->directory || !s->directory->writable()) return false;
    store_directory& d = *s->directory;
    const hash128 device_h = device_hash(device);
    const hash128 key_h = hasher(key);
    const directory_handle dir = d.open_key_directory(device_h, key_h, /*create=*/false);
    if (!dir.ok()) return false;
    const std::string relative_dir = key_directory_relative_path(device_h, key_h);
    const int shard = shard_of(key_h);
    lock_file_holder l(&d.lock(shard));
    for (int n = 0; n < kMaxCollisions; ++n) {
      const slot found = read_slot(d, dir, relative_dir, n, device_h, key, s->config);
      if (found.what != slot::state::this_key) continue;
      if (::unlinkat(dir.fd(), entry_name(n).c_str(), 0) != 0) return false;
      const shard_need need = account_locked(d, shard, s->config, -static_cast<std::int64_t>(found.file.status.st_size), -1);
      remove_key_directory_if_empty(d.root(), relative_dir);
      if (need.walk) background_evictor::instance().request(s->directory, s->config, shard, "", true);
      return true;
    }
  } catch (...) {
    // Out of memory while reading: nothing removed.
  }
  return false;
}

// The chain of tiers: the local store, then the remote ones if configured.
// get asks them in order and writes a hit to the tiers before the one that
// answered; put and remove go to every tier. The caller never knows which
// tier answered; the result is the local tier's (a remote write is queued).

std::optional<byte_vector> kernel_store::get(const device_identity& device, std::string_view key) noexcept {
  const impl::chain c = impl_->tiers();
  for (std::size_t i = 0; i < c.size(); ++i) {
    tier_result r = c[i]->get(device, key);
    if (r.status != tier_status::hit) continue;
    for (std::size_t earlier = 0; earlier < i; ++earlier) c[earlier]->put(device, key, *r.binary);
    return std::move(r.binary);
  }
  return std::nullopt;
}

namespace {

// What names a lease among those a process holds.
std::string lease_id(const device_identity& device, std::string_view key) {
  const hash128 d = device_hash(device);
  std::string id(reinterpret_cast<const char*>(d.data()), d.size());
  return id.append(key);
}

}  // namespace

kernel_store::lookup kernel_store::get_or_lease(const device_identity& device, std::string_view key) noexcept {
  const impl::chain c = impl_->tiers();
  bool clean_misses = true;  // a tier that failed or was skipped: nobody waits
  for (std::size_t i = 0; i < c.size(); ++i) {
    tier_result r = c[i]->get(device, key);
    if (r.status == tier_status::hit) {
      for (std::size_t earlier = 0; earlier < i; ++earlier) c[earlier]->put(device, key, *r.binary);
      return {std::move(r.binary), false};
    }
    if (i > 0 && r.status != tier_status::miss) clean_misses = false;
  }
  storage_tier* const leasing = c.leases();
  if (!leasing || !clean_misses) return {};
  try {
    lease_result l = leasing->lease(device, key);
    if (l.status == lease_status::hit) {
      c[0]->put(device, key, *l.binary);
      return {std::move(l.binary), false};
    }
    if (l.status != lease_status::granted) return {};
    impl_->hold_lease(lease_id(device, key), {c.remotes->front(), std::move(l.token)});
    return {std::nullopt, true};
  } catch (...) {
    return {};  // out of memory: built without a lease
  }
}

void kernel_store::release_lease(const device_identity& device, std::string_view key) noexcept {
  try {
    if (auto held = impl_->take_lease(lease_id(device, key))) held->tier->release_lease(device, key, held->token);
  } catch (...) {
    // Out of memory: the lease ends at its ttl.
  }
}

bool kernel_store::put(const device_identity& device, std::string_view key, byte_span binary) noexcept {
  const impl::chain c = impl_->tiers();
  bool stored = false;
  for (std::size_t i = 0; i < c.size(); ++i) {
    const tier_result r = c[i]->put(device, key, binary);
    if (i == 0) stored = r.status == tier_status::done;
  }
  release_lease(device, key);  // after the value it waited for is queued
  return stored;
}

bool kernel_store::remove(const device_identity& device, std::string_view key) noexcept {
  const impl::chain c = impl_->tiers();
  bool removed = false;
  for (std::size_t i = 0; i < c.size(); ++i) {
    const tier_result r = c[i]->remove(device, key);
    if (i == 0) removed = r.status == tier_status::done;
  }
  return removed;
}

void kernel_store::finish_eviction() const {
  if (background_evictor* e = background_evictor::existing()) e->wait_idle();
}

void kernel_store::set_remote(const std::string& url, const std::string& secret_file) {
  impl_->set_remote(detail::make_tiers(url, secret_file));
}

std::vector<remote_stats> kernel_store::tier_stats() const {
  std::vector<remote_stats> out;
  if (const auto remotes = impl_->remote()) {
    for (const auto& r : *remotes) out.push_back(r->statistics());
  }
  return out;
}

remote_stats kernel_store::remote_tier_stats() const {
  remote_stats sum;
  for (const remote_stats& t : tier_stats()) {
    sum.enabled = true;
    for (auto [to, from] : {std::pair{&sum.tier, &t.tier}, std::pair{&sum.url, &t.url}}) {
      *to += (to->empty() ? "" : " ") + *from;
    }
    for (auto [to, from] : {std::pair{&sum.hits, t.hits}, {&sum.misses, t.misses}, {&sum.rejected, t.rejected},
                            {&sum.errors, t.errors}, {&sum.timeouts, t.timeouts}, {&sum.skipped, t.skipped},
                            {&sum.puts, t.puts}, {&sum.dropped, t.dropped}, {&sum.bytes_read, t.bytes_read},
                            {&sum.bytes_written, t.bytes_written}, {&sum.leases, t.leases},
                            {&sum.lease_waits, t.lease_waits}, {&sum.lease_hits, t.lease_hits},
                            {&sum.lease_wait_ms, t.lease_wait_ms}}) {
      *to += from;
    }
  }
  return sum;
}

void kernel_store::flush_remote() {
  if (const auto remotes = impl_->remote()) {
    for (const auto& r : *remotes) r->flush(std::chrono::milliseconds::max());
  }
}

// --- Blob API -------------------------------------------------------------

std::string blob_id(const device_identity& device, std::string_view key) { return blob_id_of(device_hash(device), key); }

byte_vector serialize_blob(const device_identity& device, std::string_view key, byte_span binary) {
  return encode_entry(device_hash(device), key, binary, ::time(nullptr));
}

blob_contents deserialize_blob(const device_identity& device, byte_span blob) {
  const hash128 d = device_hash(device);
  const parsed_entry e = parse_entry(blob, &d);
  if (!e.ok()) throw store_error(std::string("unicache blob rejected: ") + describe(e.problem));
  return {std::string(e.key), byte_vector(e.binary.begin(), e.binary.end())};
}

void detail::store_access::use_key_hasher(kernel_store& store, store_testing::key_hasher hasher) {
  store.impl_->hasher = hasher;
}

}  // namespace unicache
