// Size accounting and eviction of a store directory, shard by shard.
//
// Every publish and removal updates its shard's size record under the
// shard's lock. A shard over its share of the limit (a sixteenth of it) or
// due its daily walk is cleaned by clean_shard, which walks that shard alone
// without the lock and removes what it chose in short batches, each under the
// lock: a put into the shard waits for a batch, never for a walk.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "store/store_directory.hpp"
#include "store/store_layout.hpp"
#include "store/store_walk.hpp"
#include "unicache/store.hpp"

namespace unicache::detail {

// Whether puts keep the store within config.max_size_bytes: size eviction
// is on and there is a limit (0 means none).
bool limits_size(const store_config& config);

// A shard's share of the limit (UINT64_MAX without one).
std::uint64_t shard_limit(const store_config& config);

// The shard's totals. A missing or damaged record is rebuilt first by
// walking the shard (under the lock the caller holds: a recovery path, for a
// record someone deleted). A record that a batch of removals left marked (its
// evictor died mid-batch) is off by at most that batch: its mark is cleared
// and `*needs_walk` set, so that the caller asks for a recount in the
// background.
shard_totals read_totals_locked(store_directory& d, int shard, bool* needs_walk = nullptr);

// What a change to a shard asks of the evictor.
struct shard_need {
  bool clean = false;  // over its share of the limit, or its daily walk is due
  bool walk = false;   // its record is an estimate until a walk corrects it
};

// Adds a publish or removal (already done on disk) to the shard's record
// and says what the shard now needs. `estimate`: the size removed is a guess
// (a damaged file's), so the record needs a walk.
shard_need account_locked(store_directory& d, int shard, const store_config& config, std::int64_t delta_bytes,
                          std::int64_t delta_entries, bool estimate = false);

// Walks the shard (under its lock, which the caller holds) and writes the
// record from what is there; also removes empty key directories.
shard_totals recount_shard_locked(store_directory& d, int shard);

// Cleans one shard: entries unused for more than config.threshold_days,
// then, when the shard is over its share, least recently used entries until
// it holds half its share (never an entry whose relative path is in
// `keep`), and temporary files of writers that died. Walks without the
// lock; removes in batches under it; stops between batches when `stop` is
// set. A shard that needs neither is not walked, unless `walk`. When nobody
// else changed the shard during the walk, the record becomes what the walk
// counted, less what was removed. Returns how many entries it removed.
std::uint64_t clean_shard(store_directory& d, int shard, const store_config& config, const std::string& keep,
                          bool walk, const std::atomic<bool>* stop);

// What the evictor was asked for one store directory.
struct shard_requests {
  std::array<bool, kShards> clean{};
  std::array<bool, kShards> walk{};
  std::array<std::string, kShards> keep;  // an entry a put reported as stored, per shard
};

// clean_shard for each requested shard, then for every other shard whose
// record says it is over its share or due its daily walk (keys spread
// evenly, so when one is over the others are about to be). What the
// evictor thread runs.
std::uint64_t clean_shards(store_directory& d, const store_config& config, const shard_requests& requests,
                           const std::atomic<bool>* stop);

// Explicit maintenance over the whole store: removes entries unused for more
// than `max_age_days` (0: none), then least recently used entries (across
// every shard) until at most `max_bytes` remain, then recounts every shard.
// Returns how many entries it removed.
std::uint64_t prune_store(store_directory& d, std::uint64_t max_bytes, std::uint32_t max_age_days);

// Removes the key directory at `relative` (<device>/<kk>/<key>, below
// `root`) if it is empty.
void remove_key_directory_if_empty(const directory_handle& root, const std::string& relative);

// Whether a temporary file belongs to no running writer: older than an
// hour, or named for a process of this machine that no longer exists.
bool temporary_is_abandoned(const store_file& temporary, std::int64_t now);

// Recounts every shard's record under its lock (verify --fix).
void recount_store(store_directory& d);

}  // namespace unicache::detail
