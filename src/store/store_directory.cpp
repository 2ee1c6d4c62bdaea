// Opening a store directory (creating, trust-checking), its key directories,
// and its one-time warnings.
#include "store/store_directory.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "store/entry_format.hpp"
#include "store/eviction.hpp"
#include "store/store_layout.hpp"
#include "util/env.hpp"
#include "util/file_io.hpp"
#include "util/log.hpp"

namespace unicache::detail {
namespace {

constexpr std::size_t kShownPathBytes = 1024;

std::string shown(const std::string& path) { return quoted(path, kShownPathBytes); }

}  // namespace

std::shared_ptr<store_directory> store_directory::open(const std::string& directory, bool shared) {
  if (directory.empty()) {
    warn("persistent kernel store: no directory (set UNICACHE_PERSISTENT_CACHE_DIR, XDG_CACHE_HOME or "
         "HOME); continuing without persistence");
    return nullptr;
  }
  const store_permissions permissions(shared);
  const std::string path = directory + "/" + kFormatDirectory;
  auto cannot_use = [&](const std::string& what, int err) {
    warn("persistent kernel store: cannot use " + shown(what) + " (" + std::strerror(err) +
         "); continuing without persistence");
  };
  // The configured directory and the root are checked before anything is
  // created in them: another user able to write either could plant (or
  // swap in) every entry the store loads.
  auto untrusted = [&](const std::string& what, const directory_handle& d) {
    const std::string why = permissions.distrust(d.status());
    if (!why.empty()) {
      warn("persistent kernel store: not loading from " + shown(what) + ": " + why + "; " + permissions.remedy() +
           "; continuing without persistence");
    }
    return !why.empty();
  };
  const directory_handle base = directory_handle::open_or_create(directory, permissions.directory_mode());
  if (!base.ok()) {
    cannot_use(directory, base.error());
    return nullptr;
  }
  if (untrusted(directory, base)) return nullptr;
  directory_handle root = base.make_subdirectory(kFormatDirectory, permissions.directory_mode());
  if (!root.ok()) {
    cannot_use(path, root.error());
    return nullptr;
  }
  if (untrusted(path, root)) return nullptr;
  return std::make_shared<store_directory>(path, std::move(root), shared);
}

store_directory::store_directory(const std::string& path, directory_handle root, bool shared)
    : path_(path), root_(std::move(root)), permissions_(shared) {
  shards_ = root_.make_subdirectory(kShardsDirectory, permissions_.directory_mode());
  if (!shards_.ok()) {
    write_failed(shards_.error(), "opening " + shown(path_ + "/" + kShardsDirectory));
    return;
  }
  if (const std::string why = permissions_.distrust(shards_.status()); !why.empty()) {
    write_failed(kUntrusted, "trusting " + shown(path_ + "/" + kShardsDirectory) + " (" + why + ")");
    return;
  }
  for (int s = 0; s < kShards; ++s) {
    records_[static_cast<std::size_t>(s)] =
        std::make_unique<shard_record>(shards_, shard_record_name(s), permissions_.file_mode());
  }
  // Readable but not writable (a read-only deployment, no lock file to
  // open): serve, never write.
  for (int s = 0; s < kShards; ++s) {
    const auto i = static_cast<std::size_t>(s);
    locks_[i] = std::make_unique<lock_file>(shards_, shard_lock_name(s), permissions_.file_mode());
    if (!locks_[i]->ok()) {
      write_failed(locks_[i]->error(), "opening " + shown(path_ + "/" + kShardsDirectory + "/" + shard_lock_name(s)));
      return;
    }
  }
  writable_.store(true, std::memory_order_relaxed);
  // A shard without a valid record (a new store) gets one now, so that
  // stats never needs to walk a shard that nobody has written yet.
  for (int s = 0; s < kShards; ++s) {
    if (!records_[static_cast<std::size_t>(s)]->read()) {
      lock_file_holder l(locks_[static_cast<std::size_t>(s)].get());
      read_totals_locked(*this, s);
    }
  }
}

void store_directory::write_failed(int err, const std::string& what) noexcept {
  writable_.store(false, std::memory_order_relaxed);
  if (warned_write_.exchange(true)) return;
  try {
    warn("persistent kernel store " + shown(path_) + ": " + what + " failed (" + std::strerror(err) +
         "); continuing without persistence");
  } catch (...) {
    // Out of memory while formatting a diagnostic: drop it.
  }
}

bool store_directory::trusts(const struct stat& status, std::string_view relative_dir,
                             std::string_view name) noexcept {
  try {
    const std::string why = permissions_.distrust(status);
    if (why.empty()) return true;
    if (!warned_trust_.exchange(true)) {
      std::string relative(relative_dir);
      if (!name.empty()) relative.append("/").append(name);
      warn("persistent kernel store: not loading " + shown(path_ + "/" + relative) + ": " + why + "; " +
           permissions_.remedy());
    }
  } catch (...) {
    // Out of memory: trust nothing.
  }
  return false;
}

std::shared_ptr<const directory_handle> store_directory::device_directory(const std::string& name, bool create) {
  {
    mutex_lock l(&device_dirs_mu_);
    if (const auto it = device_dirs_.find(name); it != device_dirs_.end()) {
      std::shared_ptr<const directory_handle> cached = it->second;
      struct stat now {};
      if (::fstat(cached->fd(), &now) == 0 && now.st_nlink > 0 && permissions_.distrust(now).empty()) return cached;
      device_dirs_.erase(it);  // removed (clear), or no longer trusted: opened again below
    }
  }
  if (create) {
    const int err = root_.create_subdirectory(name, permissions_.directory_mode());
    if (err != 0 && err != EEXIST) {
      write_failed(err, "creating " + shown(path_ + "/" + name));
      return std::make_shared<const directory_handle>(directory_handle::failure(err));
    }
  }
  directory_handle opened = root_.open_subdirectory(name);
  if (opened.ok() && !trusts(opened.status(), name)) opened = directory_handle::failure(kUntrusted);
  auto handle = std::make_shared<const directory_handle>(std::move(opened));
  if (handle->ok()) {
    mutex_lock l(&device_dirs_mu_);
    if (device_dirs_.size() < kCachedDeviceDirectories) device_dirs_.emplace(name, handle);
  }
  return handle;
}

directory_handle store_directory::open_key_directory(const hash128& device, const hash128& key, bool create) {
  const std::array<std::string, 3> names = key_directory_names(device, key);
  const std::shared_ptr<const directory_handle> device_dir = device_directory(names[0], create);
  if (!device_dir->ok()) return directory_handle::failure(device_dir->error());
  std::string relative = names[0];
  directory_handle current;
  const directory_handle* parent = device_dir.get();
  for (std::size_t i = 1; i < names.size(); ++i) {
    const std::string& name = names[i];
    relative += "/" + name;
    if (create) {
      const int err = parent->create_subdirectory(name, permissions_.directory_mode());
      if (err != 0 && err != EEXIST) {
        write_failed(err, "creating " + shown(path_ + "/" + relative));
        return directory_handle::failure(err);
      }
    }
    directory_handle next = parent->open_subdirectory(name);
    if (!next.ok()) return next;
    if (!trusts(next.status(), relative)) return directory_handle::failure(kUntrusted);
    current = std::move(next);
    parent = &current;
  }
  return current;
}

void store_directory::describe_device(const hash128& device_hash_value, std::string_view description) {
  if (description.empty()) return;
  const std::string hex = to_hex(device_hash_value);
  {
    mutex_lock l(&devices_mu_);
    if (described_devices_.contains(hex)) return;
  }
  const directory_handle dir = root_.open_subdirectory(hex);
  struct stat st {};
  if (dir.ok() && ::fstatat(dir.fd(), kDeviceDescriptionName, &st, AT_SYMLINK_NOFOLLOW) != 0 && errno == ENOENT) {
    const std::string text = std::string(description) + "\n";
    std::string temp;
    if (write_temp_file(dir, {reinterpret_cast<const unsigned char*>(text.data()), text.size()},
                        permissions_.file_mode(), temp) == 0 &&
        publish_replace(dir, temp, kDeviceDescriptionName) != 0) {
      ::unlinkat(dir.fd(), temp.c_str(), 0);
    }
  }
  mutex_lock l(&devices_mu_);
  described_devices_.insert(hex);
}

}  // namespace unicache::detail
