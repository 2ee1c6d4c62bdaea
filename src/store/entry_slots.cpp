// Reading a key directory's slots as every reader does, and publishing an
// entry into the first free one.
#include "store/entry_slots.hpp"

#include <fcntl.h>
#include <unistd.h>

#include "store/background_evictor.hpp"
#include "store/eviction.hpp"
#include "store/store_layout.hpp"

namespace unicache::detail {

std::string key_directory_relative_path(const hash128& device, const hash128& key) {
  const auto names = key_directory_names(device, key);
  return names[0] + "/" + names[1] + "/" + names[2];
}

slot read_slot(store_directory& d, const directory_handle& dir, const std::string& relative_dir, int n,
               const hash128& device, std::string_view key, const store_config& config) {
  slot s;
  const std::string name = entry_name(n);
  const int err = open_regular_file(dir, name, s.file);
  if (err == ENOENT) return s;
  s.what = slot::state::skipped;
  if (err != 0 || !d.trusts(s.file.status, relative_dir, name)) return s;
  if (read_contents(s.file, max_entry_file_bytes(key.size(), config.max_entry_bytes), s.bytes) != 0) return s;
  s.entry = parse_entry(s.bytes, &device);
  s.what = !s.entry.ok() ? slot::state::damaged : s.entry.key == key ? slot::state::this_key : slot::state::other_key;
  return s;
}

entry_size_problem check_entry_size(const store_config& config, std::uint64_t key_bytes, std::uint64_t binary_bytes) {
  if (binary_bytes < config.min_entry_bytes) return entry_size_problem::binary_too_small;
  if (binary_bytes > config.max_entry_bytes) return entry_size_problem::binary_too_large;
  if (key_bytes > kMaxKeyBytes) return entry_size_problem::key_too_long;
  // An entry larger than its shard's share of the store would be evicted
  // by the next put into the shard.
  if (max_entry_file_bytes(key_bytes, binary_bytes) > shard_limit(config)) {
    return entry_size_problem::larger_than_shard_share;
  }
  return entry_size_problem::none;
}

publish_result publish_entry(const std::shared_ptr<store_directory>& directory, const store_config& config,
                             const hash128& device, const hash128& key_hash, std::string_view key, byte_span entry,
                             std::string_view device_description) {
  store_directory& d = *directory;
  // ENOENT: an evictor or explicit maintenance removed the (then empty)
  // key directory after it was created or opened; create it again. Never
  // a write failure: it only means the race was lost three times.
  directory_handle dir;
  std::string temp;
  int write_err = ENOENT;
  for (int attempt = 0; attempt < 3 && write_err == ENOENT; ++attempt) {
    dir = d.open_key_directory(device, key_hash, /*create=*/true);
    if (!dir.ok() && dir.error() == ENOENT) continue;
    if (!dir.ok()) return publish_result::failed;  // in the way, not trusted, or a failed mkdir (reported)
    write_err = write_temp_file(dir, entry, d.permissions().file_mode(), temp);
  }
  if (write_err == ENOENT) return publish_result::failed;
  if (write_err != 0) {
    d.write_failed(write_err, "writing an entry");
    return publish_result::failed;
  }
  d.describe_device(device, device_description);

  const std::string relative_dir = key_directory_relative_path(device, key_hash);
  const int shard = shard_of(key_hash);
  publish_result result = publish_result::no_slot;
  shard_need need;
  std::string published;
  int err = 0;
  {
    // Publishing and accounting happen together under the shard's lock,
    // so a walk under it never sees a published entry the record does not
    // count yet. The slots are read as get reads them, never blocking.
    lock_file_holder l(&d.lock(shard));
    int broken_removed = 0;
    for (int n = 0; n < kMaxCollisions; ++n) {
      err = publish_no_replace(dir, temp, entry_name(n));
      if (err == 0) {
        const shard_need published_need = account_locked(d, shard, config, static_cast<std::int64_t>(entry.size()), 1);
        need.clean |= published_need.clean;
        need.walk |= published_need.walk;
        published = relative_dir + "/" + entry_name(n);
        result = publish_result::stored;
        break;
      }
      if (err != EEXIST) break;
      // Taken: by this key (another writer was first), by a damaged entry
      // (removed, and the slot retried), by another key with the same hash
      // (a collision), or by something get skips too: try n + 1.
      const slot taken = read_slot(d, dir, relative_dir, n, device, key, config);
      if (taken.what == slot::state::this_key) {
        ::unlinkat(dir.fd(), temp.c_str(), 0);
        return publish_result::already_present;
      }
      if (taken.what == slot::state::damaged && broken_removed < kMaxCollisions &&
          ::unlinkat(dir.fd(), entry_name(n).c_str(), 0) == 0) {
        // As get does for a damaged entry (read under this lock: no writer
        // can have replaced it).
        const shard_need removed_need = account_locked(
            d, shard, config, -static_cast<std::int64_t>(taken.file.status.st_size), -1, /*estimate=*/true);
        need.clean |= removed_need.clean;
        need.walk |= removed_need.walk;
        ++broken_removed;
        --n;  // retry the slot it occupied
      }
    }
  }
  if (result != publish_result::stored) {
    ::unlinkat(dir.fd(), temp.c_str(), 0);
    remove_key_directory_if_empty(d.root(), relative_dir);
    if (err != 0 && err != EEXIST) {
      d.write_failed(err, "publishing an entry");
      result = publish_result::failed;
    }
  }
  // Over its share, or due its daily walk: the shard is cleaned in the
  // background, never by this put.
  if (need.clean || need.walk) background_evictor::instance().request(directory, config, shard, published, need.walk);
  return result;
}

}  // namespace unicache::detail
