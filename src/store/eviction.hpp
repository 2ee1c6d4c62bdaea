// Size accounting and eviction of a store directory, under its lock: the
// size file follows every publish and removal, and a walk recounts it,
// removing entries when the store is over its size or unused for too long.
#pragma once

#include <cstdint>
#include <string>

#include "store/store_directory.hpp"
#include "unicache/store.hpp"

namespace unicache::detail {

// Whether puts keep the store within config.max_size_bytes: size eviction
// is on and there is a limit (0 means none).
bool limits_size(const store_config& config);

// Adds `delta` to the recorded size, walking (recounting, evicting) when the
// record is missing, over the limit (down to half of it), or a day old (age
// eviction). `keep`, a path relative to the root, is never evicted: the
// entry that the calling put has just published and reports as stored.
void account_locked(store_directory& d, const store_config& config, std::int64_t delta, const std::string& keep = "")
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(d.lock());

// Walks the store: removes entries unused for more than `max_age_days` (0:
// none), then least recently used entries until at most `target` bytes
// remain (never `keep`), and temporary files of writers that died; records
// the recount. Explicit maintenance also removes empty key directories;
// automatic eviction leaves them, because the next put of that key would
// only create them again. Returns how many entries it removed.
std::uint64_t evict_locked(store_directory& d, std::uint64_t target, std::uint32_t max_age_days,
                           bool remove_empty_directories, const std::string& keep = "")
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(d.lock());

// Recounts the size file (and drops dead writers' temporary files) without
// evicting anything.
void recount_locked(store_directory& d, bool remove_empty_directories = false) ABSL_EXCLUSIVE_LOCKS_REQUIRED(d.lock());

}  // namespace unicache::detail
