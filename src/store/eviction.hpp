// Size accounting and eviction of a store directory, shard by shard.
//
// Every publish and removal updates its shard's size record under the
// shard's lock. A shard over its share of the limit (a sixteenth of it) or
// due its daily walk is cleaned by clean_shard, which walks that shard alone
// without the lock and removes what it chose in short batches, each under the
// lock: a put into the shard waits for one batch at most, never for a walk.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "store/store_directory.hpp"
#include "store/store_walk.hpp"
#include "unicache/store.hpp"

namespace unicache::detail {

// Whether puts keep the store within config.max_size_bytes: size eviction
// is on and there is a limit (0 means none).
bool limits_size(const store_config& config);

// A shard's share of the limit (UINT64_MAX without one).
std::uint64_t shard_limit(const store_config& config);

// The shard's totals, rebuilt first (by walking the shard) when the record
// is missing, damaged, or was left mid-batch by an evictor that died.
shard_totals read_totals_locked(store_directory& d, int shard);

// Adds a publish or removal (already done on disk) to the shard's record;
// a record that needs rebuilding is recounted instead. Returns whether the
// shard now needs clean_shard: over its share of the limit, or its last
// walk more than a day ago while entries expire by age.
bool account_locked(store_directory& d, int shard, const store_config& config, std::int64_t delta_bytes,
                    std::int64_t delta_entries);

// Walks the shard (under its lock, which the caller holds) and writes the
// record from what is there; also removes empty key directories.
shard_totals recount_shard_locked(store_directory& d, int shard);

// Cleans one shard: entries unused for more than config.threshold_days,
// then, when the shard is over its share, least recently used entries until
// it holds half its share (never `keep`, a path relative to the root), and
// temporary files of writers that died. Walks without the lock; removes in
// batches under it; stops between batches when `stop` is set. Returns how
// many entries it removed.
std::uint64_t clean_shard(store_directory& d, int shard, const store_config& config, const std::string& keep,
                          const std::atomic<bool>* stop);

// clean_shard for `first`, then for every other shard whose record says it
// is over its share or due its daily walk. What the evictor thread runs.
std::uint64_t clean_shards(store_directory& d, int first, const store_config& config, const std::string& keep,
                           const std::atomic<bool>* stop);

// Explicit maintenance over the whole store: removes entries unused for more
// than `max_age_days` (0: none), then least recently used entries (across
// every shard) until at most `max_bytes` remain, then recounts every shard.
// Returns how many entries it removed.
std::uint64_t prune_store(store_directory& d, std::uint64_t max_bytes, std::uint32_t max_age_days);

// Removes the key directory at `relative` (<device>/<kk>/<key>, below
// `root`) if it is empty.
void remove_key_directory_if_empty(const directory_handle& root, const std::string& relative);

// Recounts every shard's record under its lock (verify --fix).
void recount_store(store_directory& d);

}  // namespace unicache::detail
