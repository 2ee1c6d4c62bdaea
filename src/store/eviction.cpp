// The store's size accounting and its walks: recount, age and LRU eviction.
#include "store/eviction.hpp"

#include <time.h>

#include <algorithm>

#include "store/store_walk.hpp"

namespace unicache::detail {
namespace {

constexpr std::int64_t kWalkIntervalS = 86400;    // age-based eviction at least daily
constexpr std::int64_t kStaleTemporaryS = 3600;   // temp files of writers that died

}  // namespace

bool limits_size(const store_config& config) { return config.size_eviction && config.max_size_bytes > 0; }

void account_locked(store_directory& d, const store_config& config, std::int64_t delta, const std::string& keep) {
  const std::uint64_t limit = limits_size(config) ? config.max_size_bytes : UINT64_MAX;
  std::optional<size_record> record = d.sizes().read();
  if (!record) {
    evict_locked(d, limit, config.threshold_days, false, keep);
    return;
  }
  record->bytes = static_cast<std::uint64_t>(
      std::max<std::int64_t>(0, static_cast<std::int64_t>(record->bytes) + delta));
  if (record->bytes > limit) {
    evict_locked(d, limit / 2, config.threshold_days, false, keep);  // to half: evictions stay rare
  } else if (config.threshold_days > 0 && ::time(nullptr) - record->last_walk_unix > kWalkIntervalS) {
    evict_locked(d, limit, config.threshold_days, false, keep);
  } else if (const int err = d.sizes().write(*record); err != 0) {
    d.write_failed(err, "writing the size file");
  }
}

std::uint64_t evict_locked(store_directory& d, std::uint64_t target, std::uint32_t max_age_days,
                           bool remove_empty_directories, const std::string& keep) {
  const std::int64_t now = ::time(nullptr);
  walk_result w = walk_store(d.root());
  std::uint64_t total = 0;
  for (const store_file& f : w.entries) total += f.bytes;
  std::uint64_t removed = 0;
  std::sort(w.entries.begin(), w.entries.end(),
            [](const store_file& a, const store_file& b) { return a.mtime < b.mtime; });
  const std::int64_t oldest_allowed = max_age_days > 0 ? now - std::int64_t{max_age_days} * 86400 : INT64_MIN;
  for (const store_file& f : w.entries) {
    if (total <= target && f.mtime >= oldest_allowed) break;
    if (!keep.empty() && f.relative_path() == keep) continue;
    if (const int err = remove_beneath(d.root(), f); err == 0 || err == ENOENT) {
      total -= f.bytes;
      ++removed;
    }
  }
  for (const store_file& t : w.temporaries) {
    if (now - t.mtime > kStaleTemporaryS) remove_beneath(d.root(), t);
  }
  if (remove_empty_directories) {
    for (const store_file& dir : w.key_directories) remove_if_empty(d.root(), dir);
  }
  if (const int err = d.sizes().write({total, now}); err != 0) d.write_failed(err, "writing the size file");
  return removed;
}

void recount_locked(store_directory& d, bool remove_empty_directories) {
  evict_locked(d, UINT64_MAX, 0, remove_empty_directories);
}

}  // namespace unicache::detail
