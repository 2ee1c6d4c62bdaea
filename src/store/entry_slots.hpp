// The slots of a key's directory (0.entry .. 7.entry): how every reader
// reads one, so that get, put, remove and import always agree on which entry
// holds a key, and how an encoded entry is published into the first free one
// under its shard's lock (put, import_bundle).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "store/entry_format.hpp"
#include "store/store_directory.hpp"
#include "unicache/store.hpp"
#include "util/file_io.hpp"

namespace unicache::detail {

// Where a key's directory is, relative to the root (for messages, and to
// name the entry a put must not evict).
std::string key_directory_relative_path(const hash128& device, const hash128& key);

// One slot of a key's directory, opened and read the way every reader
// reads one: a regular file, trusted, no larger than an entry of `key` can
// be, parsed for `device`. Anything else is skipped by get, put and remove
// alike, so they always agree on which entry holds a key.
struct slot {
  enum class state { empty, skipped, damaged, other_key, this_key };
  state what = state::empty;
  opened_file file;
  byte_vector bytes;
  parsed_entry entry;  // views into `bytes` (a moved vector keeps its buffer)
};

slot read_slot(store_directory& d, const directory_handle& dir, const std::string& relative_dir, int n,
               const hash128& device, std::string_view key, const store_config& config);

// Why the store keeps no entry of a `key_bytes` key and a `binary_bytes`
// binary: outside the entry size limits, a key over kMaxKeyBytes, or an
// entry larger than a shard's share of the store (the next put into the
// shard would evict it).
enum class entry_size_problem { none, binary_too_small, binary_too_large, key_too_long, larger_than_shard_share };
entry_size_problem check_entry_size(const store_config& config, std::uint64_t key_bytes, std::uint64_t binary_bytes);

enum class publish_result {
  stored,           // published in a free slot (or one a damaged entry held)
  already_present,  // a slot holds this key already; left as it is
  no_slot,          // every slot holds another key or something no reader uses
  failed,           // the key's directory is in the way or not trusted, or a write failed (reported)
};

// Publishes `entry` (encoded with encode_entry: of `key`, for the device
// whose hash is `device`) as put does: written to a temporary file in the
// key's directory, then renamed into the first free slot and counted in
// the shard's record, both under the shard's lock. A new device directory
// gets `device_description` as its device.txt (none when empty). A shard
// then over its share, or due its daily walk, is cleaned in the background.
// The caller checked the sizes (check_entry_size) and that `directory` is
// writable. Throws std::bad_alloc only.
publish_result publish_entry(const std::shared_ptr<store_directory>& directory, const store_config& config,
                             const hash128& device, const hash128& key_hash, std::string_view key, byte_span entry,
                             std::string_view device_description);

}  // namespace unicache::detail
