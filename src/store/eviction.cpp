// The store's size accounting, its shard walks and its batched removals.
#include "store/eviction.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <signal.h>

#include <algorithm>
#include <charconv>
#include <array>
#include <chrono>
#include <optional>
#include <thread>

#include "util/unique_fd.hpp"

namespace unicache::detail {
namespace {

constexpr std::int64_t kWalkIntervalS = 86400;   // age-based eviction at least daily
constexpr std::int64_t kStaleTemporaryS = 3600;  // temp files of writers that died
// One batch of removals holds the shard's lock for at most this long, or
// this many removals, whichever comes first.
constexpr auto kBatchTime = std::chrono::milliseconds(8);
constexpr std::size_t kBatchFiles = 64;  // also the handles a batch holds (unlinked)
// Between batches the lock stays free for a quarter of the time the last
// batch held it, within these bounds: flock(2) hands a released lock to
// nobody in particular, and an evictor that took it again at once would
// keep a waiting put out for the whole cleanup. (A pause as long as the
// batch, tried, slowed eviction so much that on a fast disk another
// process's puts outran it: 213 s where it took about 30.)
constexpr std::chrono::steady_clock::duration kMinPause = std::chrono::microseconds(500);
constexpr std::chrono::steady_clock::duration kMaxPause = std::chrono::milliseconds(2);

// Saturating arithmetic: sizes come from disk and records that others wrote.
std::uint64_t sub(std::uint64_t a, std::uint64_t b) { return a > b ? a - b : 0; }
std::uint64_t add(std::uint64_t a, std::uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }
std::uint64_t apply(std::uint64_t value, std::int64_t delta) {
  return delta >= 0 ? add(value, static_cast<std::uint64_t>(delta)) : sub(value, 0 - static_cast<std::uint64_t>(delta));
}

bool walk_due(const store_config& config, const shard_totals& t, std::int64_t now) {
  return config.threshold_days > 0 && (t.last_walk_unix > now || now - t.last_walk_unix > kWalkIntervalS);
}

bool over_share(const store_config& config, const shard_totals& t) { return t.bytes > shard_limit(config); }

int write_totals(store_directory& d, int shard, const shard_totals& t) {
  const int err = d.record(shard).write(t);
  if (err != 0) d.write_failed(err, "writing a shard's size record");
  return err;
}

int shard_of_directory(const store_file& f) {
  // <device>/<kk>/<key>: the shard is kk's first digit.
  const std::size_t slash = f.directory.find('/');
  if (slash == std::string::npos || slash + 1 >= f.directory.size()) return -1;
  const char c = f.directory[slash + 1];
  return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

struct removal {
  std::uint64_t entries = 0;
  std::uint64_t bytes = 0;
  std::uint64_t batches = 0;
};

// What a batch unlinked, each still held by an O_PATH handle (which opens
// nothing, so a FIFO or device in the way is never opened), and the key
// directories that may now be empty. Released after the shard's lock: the
// last reference to an unlinked file frees its blocks, and on a filesystem
// mounted with online discard that waits for the device (7-48 ms a time
// measured on the dev VM while eviction ran), which puts waiting for the
// lock would otherwise wait for too. A key directory is removed only when
// empty, which it never is while a put's temporary file is in it, so its
// removal needs no lock either (a put that loses the race creates it again).
struct unlinked {
  std::vector<unique_fd> files;
  std::vector<std::string> directories;
  void release(const directory_handle& root) {
    files.clear();
    for (const std::string& dir : directories) remove_key_directory_if_empty(root, dir);
    directories.clear();
  }
};

// Unlinks victim `v` when it is still the file the walk saw (and, with
// `keep_used`, unused since): returns its size, or nullopt when it stays.
std::optional<std::uint64_t> unlink_victim(store_directory& d, const store_file& v, bool keep_used, unlinked& out) {
  const directory_handle dir = open_beneath(d.root(), v.directory);
  if (!dir.ok()) return std::nullopt;
  unique_fd held(::openat(dir.fd(), v.name.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC));
  struct stat st {};
  const int err = held ? ::fstat(held.get(), &st) : ::fstatat(dir.fd(), v.name.c_str(), &st, AT_SYMLINK_NOFOLLOW);
  if (err != 0) return std::nullopt;                                // gone (or out of handles and gone)
  if (!S_ISREG(st.st_mode) || st.st_ino != v.inode) return std::nullopt;  // another file in its place
  if (keep_used && (st.st_mtim.tv_sec != v.mtime || static_cast<std::uint64_t>(st.st_size) != v.bytes)) {
    return std::nullopt;  // used since the walk
  }
  if (::unlinkat(dir.fd(), v.name.c_str(), 0) != 0) return std::nullopt;
  if (held) out.files.push_back(std::move(held));  // else freed now: no handle to spare
  out.directories.push_back(v.directory);
  return static_cast<std::uint64_t>(st.st_size);
}

// Removes `victims` (all of one shard) in batches under the shard's lock.
// Each victim is checked again under the lock: one that is gone stays gone,
// one that is another file now (inode) stays, and with `keep_used`, one that
// was used since the walk saw it (mtime, size) stays. With `target`, stops
// once the record says the shard holds at most that many bytes and the next
// victim has not expired.
removal remove_in_batches(store_directory& d, int shard, const std::vector<store_file>& victims,
                          std::uint64_t target, std::int64_t oldest_allowed, bool keep_used,
                          const std::atomic<bool>* stop) {
  removal out;
  std::size_t i = 0;
  bool done = victims.empty();
  std::chrono::steady_clock::duration held{};
  unlinked batch;
  batch.files.reserve(kBatchFiles);
  batch.directories.reserve(kBatchFiles);
  while (!done && !(stop && stop->load(std::memory_order_relaxed))) {
    if (held.count() > 0) std::this_thread::sleep_for(std::clamp(held / 4, kMinPause, kMaxPause));
    std::chrono::steady_clock::time_point t0;
    {
      lock_file_holder l(&d.lock(shard));
      t0 = std::chrono::steady_clock::now();
      shard_totals t = read_totals_locked(d, shard);
      // Marked before the first removal: a holder that finds the mark knows
      // this batch died half done. Without the mark, no removal.
      t.pending_removal = 1;
      if (write_totals(d, shard, t) != 0) break;
      std::uint64_t bytes = 0, entries = 0;
      for (std::size_t n = 0; n < kBatchFiles && std::chrono::steady_clock::now() - t0 < kBatchTime; ++n) {
        if (i == victims.size()) {
          done = true;
          break;
        }
        const store_file& v = victims[i];
        if (sub(t.bytes, bytes) <= target && v.mtime >= oldest_allowed) {
          done = true;
          break;
        }
        ++i;
        if (const std::optional<std::uint64_t> size = unlink_victim(d, v, keep_used, batch)) {
          bytes = add(bytes, *size);
          ++entries;
        }
      }
      t.bytes = sub(t.bytes, bytes);
      t.entries = sub(t.entries, entries);
      t.generation += 1;
      t.pending_removal = 0;
      write_totals(d, shard, t);
      out.entries += entries;
      out.bytes = add(out.bytes, bytes);
      ++out.batches;
      held = std::chrono::steady_clock::now() - t0;
    }
    batch.release(d.root());
  }
  return out;
}

void remove_stale_temporaries(const store_directory& d, const walk_result& w, std::int64_t now) {
  for (const store_file& t : w.temporaries) {
    if (temporary_is_abandoned(t, now)) remove_beneath(d.root(), t);
  }
}

void sort_least_recently_used_first(std::vector<store_file>& entries) {
  std::sort(entries.begin(), entries.end(), [](const store_file& a, const store_file& b) { return a.mtime < b.mtime; });
}

}  // namespace

bool temporary_is_abandoned(const store_file& t, std::int64_t now) {
  if (t.mtime < now - kStaleTemporaryS) return true;  // (mtime comes from disk: no subtraction from it)
  // .tmp.<pid>.<n>: a writer of this machine that no longer runs.
  const std::string_view rest = std::string_view(t.name).substr(std::string_view(kTemporaryPrefix).size());
  pid_t pid = 0;
  const auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), pid);
  if (ec != std::errc() || end == rest.data() || *end != '.' || pid <= 0) return false;
  return ::kill(pid, 0) != 0 && errno == ESRCH;
}

void remove_key_directory_if_empty(const directory_handle& root, const std::string& relative) {
  const std::size_t slash = relative.rfind('/');
  if (slash == std::string::npos) return;
  const directory_handle parent = open_beneath(root, relative.substr(0, slash));
  if (parent.ok()) ::unlinkat(parent.fd(), relative.c_str() + slash + 1, AT_REMOVEDIR);
}

bool limits_size(const store_config& config) { return config.size_eviction && config.max_size_bytes > 0; }

std::uint64_t shard_limit(const store_config& config) {
  return limits_size(config) ? std::max<std::uint64_t>(1, config.max_size_bytes / kShards) : UINT64_MAX;
}

shard_totals recount_shard_locked(store_directory& d, int shard) {
  const walk_result w = walk_shard(d.root(), shard);
  shard_totals t;
  if (const std::optional<shard_totals> old = d.record(shard).read()) t.generation = old->generation;
  t.generation += 1;
  t.bytes = total_bytes(w.entries);
  t.entries = w.entries.size();
  t.last_walk_unix = ::time(nullptr);
  for (const store_file& dir : w.key_directories) remove_key_directory_if_empty(d.root(), dir.relative_path());
  write_totals(d, shard, t);
  return t;
}

shard_totals read_totals_locked(store_directory& d, int shard, bool* needs_walk) {
  std::optional<shard_totals> t = d.record(shard).read();
  if (!t) return recount_shard_locked(d, shard);
  if (t->pending_removal != 0) {
    t->pending_removal = 0;
    t->generation += 1;
    write_totals(d, shard, *t);
    if (needs_walk) *needs_walk = true;
  }
  return *t;
}

shard_need account_locked(store_directory& d, int shard, const store_config& config, std::int64_t delta_bytes,
                          std::int64_t delta_entries, bool estimate) {
  shard_need need;
  need.walk = estimate;
  std::optional<shard_totals> t = d.record(shard).read();
  if (!t) {
    // The recount sees the change this call records: it is on disk already.
    t = recount_shard_locked(d, shard);
    need.walk = false;
  } else {
    // A mark left by a batch that died: the record is off by at most that
    // batch until a walk in the background (read_totals_locked's rule, here
    // without reading and writing the record twice).
    if (t->pending_removal != 0) need.walk = true;
    t->pending_removal = 0;
    t->bytes = apply(t->bytes, delta_bytes);
    t->entries = apply(t->entries, delta_entries);
    t->generation += 1;
    write_totals(d, shard, *t);
  }
  need.clean = over_share(config, *t) || walk_due(config, *t, ::time(nullptr));
  return need;
}

std::uint64_t clean_shard(store_directory& d, int shard, const store_config& config, const std::string& keep,
                          bool walk, const std::atomic<bool>* stop) {
  shard_totals before;
  {
    lock_file_holder l(&d.lock(shard));
    before = read_totals_locked(d, shard, &walk);
  }
  const std::int64_t now = ::time(nullptr);
  // Another evictor (of this process or another) may have cleaned the
  // shard since the request.
  const bool due = walk_due(config, before, now);
  if (!walk && !due && !over_share(config, before)) return 0;

  walk_result w = walk_shard(d.root(), shard);
  const std::uint64_t walked_bytes = total_bytes(w.entries);
  const std::uint64_t limit = shard_limit(config);
  const std::uint64_t target = std::max(before.bytes, walked_bytes) > limit ? limit / 2 : UINT64_MAX;
  const std::int64_t oldest_allowed =
      config.threshold_days > 0 ? now - std::int64_t{config.threshold_days} * 86400 : INT64_MIN;

  // The victims, as the walk saw the shard: expired ones, then the least
  // recently used until the walk's total is down to the target.
  sort_least_recently_used_first(w.entries);
  std::vector<store_file> victims;
  std::uint64_t remaining = walked_bytes;
  for (const store_file& f : w.entries) {
    if (remaining <= target && f.mtime >= oldest_allowed) break;
    if (!keep.empty() && f.relative_path() == keep) continue;
    victims.push_back(f);
    remaining = sub(remaining, f.bytes);
  }
  const removal r = remove_in_batches(d, shard, victims, target, oldest_allowed, /*keep_used=*/true, stop);
  remove_stale_temporaries(d, w, now);

  // The record becomes the walk's count, less what was removed, when
  // nobody else changed the shard since the walk began (the generation
  // moved only by this cleanup's batches): that corrects what a writer
  // killed between publishing and recording, a batch killed mid-way, a
  // damaged entry's estimate or a file removed by hand left off. In a shard
  // that others changed meanwhile the walk's count is not exact (an entry
  // published or removed during the walk may or may not be in it), so the
  // record keeps its running totals until a quieter cleanup.
  lock_file_holder l(&d.lock(shard));
  shard_totals t = read_totals_locked(d, shard);
  if (t.generation == before.generation + r.batches) {
    t.bytes = sub(walked_bytes, r.bytes);
    t.entries = sub(w.entries.size(), r.entries);
  }
  // A cleanup stopped early has not done the walk's work: age expiry
  // stays due.
  if (!(stop && stop->load(std::memory_order_relaxed))) t.last_walk_unix = now;
  t.generation += 1;
  write_totals(d, shard, t);
  return r.entries;
}

std::uint64_t clean_shards(store_directory& d, const store_config& config, const shard_requests& requests,
                           const std::atomic<bool>* stop) {
  std::uint64_t removed = 0;
  auto stopped = [&] { return stop && stop->load(std::memory_order_relaxed); };
  for (int s = 0; s < kShards && !stopped(); ++s) {
    const auto i = static_cast<std::size_t>(s);
    if (requests.clean[i] || requests.walk[i]) {
      removed += clean_shard(d, s, config, requests.keep[i], requests.walk[i], stop);
    }
  }
  // A record read without the lock is the old one, the new one, or (rarely,
  // it is written in place) a torn mix that fails its checksum: skipped.
  const std::int64_t now = ::time(nullptr);
  for (int s = 0; s < kShards && !stopped(); ++s) {
    const auto i = static_cast<std::size_t>(s);
    if (requests.clean[i] || requests.walk[i]) continue;
    const std::optional<shard_totals> t = d.record(s).read();
    if (t && (over_share(config, *t) || walk_due(config, *t, now))) {
      removed += clean_shard(d, s, config, "", false, stop);
    }
  }
  return removed;
}

std::uint64_t prune_store(store_directory& d, std::uint64_t max_bytes, std::uint32_t max_age_days) {
  const std::int64_t now = ::time(nullptr);
  walk_result w = walk_store(d.root());
  const std::int64_t oldest_allowed = max_age_days > 0 ? now - std::int64_t{max_age_days} * 86400 : INT64_MIN;
  sort_least_recently_used_first(w.entries);
  std::array<std::vector<store_file>, kShards> victims;
  std::uint64_t remaining = total_bytes(w.entries);
  for (const store_file& f : w.entries) {
    if (remaining <= max_bytes && f.mtime >= oldest_allowed) break;
    const int shard = shard_of_directory(f);
    if (shard < 0) continue;
    victims[static_cast<std::size_t>(shard)].push_back(f);
    remaining = sub(remaining, f.bytes);
  }
  // clear() removes whatever it found; prune keeps what was used meanwhile.
  const bool keep_used = max_bytes > 0 || max_age_days > 0;
  std::uint64_t removed = 0;
  for (int s = 0; s < kShards; ++s) {
    removed += remove_in_batches(d, s, victims[static_cast<std::size_t>(s)], 0, INT64_MAX, keep_used, nullptr).entries;
  }
  remove_stale_temporaries(d, w, now);
  recount_store(d);
  return removed;
}

void recount_store(store_directory& d) {
  for (int s = 0; s < kShards; ++s) {
    lock_file_holder l(&d.lock(s));
    recount_shard_locked(d, s);
  }
}

}  // namespace unicache::detail
