// One store directory in use: its format root (<directory>/v2) held open,
// with each shard's lock and size record, whether writes still work, and the
// warnings it has printed. Every operation on the directory, from any thread, shares
// one (std::shared_ptr); the store opens another when its directory changes.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include <array>

#include "store/shard_record.hpp"
#include "store/store_layout.hpp"
#include "store/store_permissions.hpp"
#include "unicache/store.hpp"
#include "util/directory_handle.hpp"
#include "util/lock_file.hpp"
#include "util/mutex.hpp"
#include "util/stable_hash.hpp"

namespace unicache::detail {

// The error of a directory the store does not trust (see store_permissions).
inline constexpr int kUntrusted = EPERM;

class store_directory {
 public:
  // Opens `directory` and its format root, creating what is missing. Returns
  // nullptr, after one warning, when they cannot be used or are not trusted.
  static std::shared_ptr<store_directory> open(const std::string& directory, bool shared);

  const std::string& path() const { return path_; }  // "<directory>/v2", for messages
  const directory_handle& root() const { return root_; }
  const store_permissions& permissions() const { return permissions_; }
  // Shard `shard`'s lock (held for every publish, removal and record
  // update in the shard) and size record. Only valid when writable() was
  // true at opening; a read-only store has neither.
  lock_file& lock(int shard) { return *locks_[static_cast<std::size_t>(shard)]; }
  const shard_record& record(int shard) const { return *records_[static_cast<std::size_t>(shard)]; }
  // Whether the shards' records can be read (a read-only store may have
  // them without the locks).
  bool has_records() const { return records_[0] != nullptr; }

  // Whether writes still work: a failed write turns them off for the rest
  // of the process (with one warning).
  bool writable() const { return writable_.load(std::memory_order_relaxed); }
  void write_failed(int err, const std::string& what) noexcept;

  // Whether something with `status`, at `relative_dir`/`name` below the root,
  // may be loaded from. If not, warns (once for this directory; the path is
  // built only then) and returns false.
  bool trusts(const struct stat& status, std::string_view relative_dir, std::string_view name = {}) noexcept;

  // The directory of `key` for `device`: <device>/<kk>/<key>, each a real
  // directory (never a link) that the store trusts; missing ones are
  // created when `create`. On failure the handle's error says why: ENOENT
  // (absent), ENOTDIR (a link or something else in the way), kUntrusted, or
  // the errno of a failed mkdir (also reported through write_failed).
  directory_handle open_key_directory(const hash128& device, const hash128& key, bool create);

  // Writes `description` and a newline as <device>/device.txt if it is
  // missing (once per process and device; nothing when `description` is
  // empty).
  void describe_device(const hash128& device_hash, std::string_view description);

  store_directory(const std::string& path, directory_handle root, bool shared);

 private:
  // The device directory <root>/<name>, opened (created when `create`) and
  // trusted, from the cache when it is there; a handle that holds an error
  // otherwise.
  std::shared_ptr<const directory_handle> device_directory(const std::string& name, bool create);

  std::string path_;
  directory_handle root_;
  store_permissions permissions_;
  directory_handle shards_;
  std::array<std::unique_ptr<lock_file>, kShards> locks_;
  std::array<std::unique_ptr<shard_record>, kShards> records_;
  std::atomic<bool> writable_{false};
  std::atomic<bool> warned_write_{false};
  std::atomic<bool> warned_trust_{false};
  mutex devices_mu_;
  absl::flat_hash_set<std::string> described_devices_ ABSL_GUARDED_BY(devices_mu_);
  // The device directories opened so far, held open (at most
  // kCachedDeviceDirectories): a key directory is opened below its
  // device's, two components instead of three. Each use checks the handle
  // again (fstat: still linked, still trusted); one removed since (clear)
  // is dropped and opened again.
  static constexpr std::size_t kCachedDeviceDirectories = 16;
  mutex device_dirs_mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<const directory_handle>> device_dirs_
      ABSL_GUARDED_BY(device_dirs_mu_);
};

}  // namespace unicache::detail
