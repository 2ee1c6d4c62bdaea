#include <dirent.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <memory>

#include "absl/container/flat_hash_set.h"
#include "store/entry_format.hpp"
#include "store/size_file.hpp"
#include "store/store_testing.hpp"
#include "unicache/store.hpp"
#include "util/file_io.hpp"
#include "util/lock_file.hpp"
#include "util/log.hpp"
#include "util/mutex.hpp"

namespace unicache {

using namespace detail;

namespace {

// Directory of the current format: a new format lives beside the old one
// and never reads it.
constexpr char kFormatDirectory[] = "/v1";
constexpr int kMaxCollisions = 8;             // entries n = 0..7 under one key hash
constexpr long kTouchIntervalS = 60;          // last use is recorded at most once a minute
constexpr std::int64_t kWalkIntervalS = 86400;  // age-based eviction at least daily
constexpr std::int64_t kStaleTemporaryS = 3600;  // temp files of writers that died

std::int64_t now_unix() {
  struct timespec ts {};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return ts.tv_sec;
}

std::string error_text(int err) { return std::strerror(err); }

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// The files under the format directory, walked without following links.
struct walked_file {
  std::string path;
  std::string device_hex;
  std::uint64_t bytes = 0;
  std::int64_t mtime = 0;
};
struct walk_result {
  std::vector<walked_file> entries;
  std::vector<walked_file> temporaries;
  std::vector<std::string> key_directories;
  std::uint64_t devices = 0;
};

std::vector<std::string> subdirectory_names(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return names;
  while (const dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    if (e->d_type == DT_DIR || e->d_type == DT_UNKNOWN) names.emplace_back(e->d_name);
  }
  ::closedir(d);
  return names;
}

walk_result walk(const std::string& root) {
  walk_result out;
  for (const std::string& device : subdirectory_names(root)) {
    if (device.size() != 32) continue;
    ++out.devices;
    const std::string device_dir = root + "/" + device;
    for (const std::string& prefix : subdirectory_names(device_dir)) {
      const std::string prefix_dir = device_dir + "/" + prefix;
      for (const std::string& key : subdirectory_names(prefix_dir)) {
        const std::string key_dir = prefix_dir + "/" + key;
        out.key_directories.push_back(key_dir);
        DIR* d = ::opendir(key_dir.c_str());
        if (!d) continue;
        while (const dirent* e = ::readdir(d)) {
          const std::string_view name = e->d_name;
          const bool entry = ends_with(name, ".entry");
          const bool temporary = name.starts_with(".tmp.");
          if (!entry && !temporary) continue;
          walked_file f;
          f.path = key_dir + "/" + std::string(name);
          f.device_hex = device;
          struct stat st {};
          if (::lstat(f.path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
          f.bytes = static_cast<std::uint64_t>(st.st_size);
          f.mtime = st.st_mtim.tv_sec;
          (entry ? out.entries : out.temporaries).push_back(std::move(f));
        }
        ::closedir(d);
      }
    }
  }
  return out;
}

std::uint64_t total_bytes(const std::vector<walked_file>& files) {
  std::uint64_t sum = 0;
  for (const walked_file& f : files) sum += f.bytes;
  return sum;
}

}  // namespace

struct kernel_store::impl {
  explicit impl(store_config c) : config(std::move(c)), root(config.directory + kFormatDirectory) {}

  store_config config;
  std::string root;
  bool enabled = false;
  std::atomic<bool> writable{false};
  std::atomic<bool> warned{false};
  std::unique_ptr<lock_file> lock;
  std::unique_ptr<size_file> sizes;
  store_testing::key_hasher hasher = &key_hash;
  mutex devices_mu;
  absl::flat_hash_set<std::string> described_devices ABSL_GUARDED_BY(devices_mu);

  std::string entry_directory(const hash128& device, const hash128& key) const {
    const std::string k = to_hex(key);
    return root + "/" + to_hex(device) + "/" + k.substr(0, 2) + "/" + k;
  }
  static std::string entry_path(const std::string& dir, int n) {
    return dir + "/" + std::to_string(n) + ".entry";
  }

  // A write failed: say so once, then carry on without writes.
  void write_failed(int err, const std::string& what) {
    writable.store(false, std::memory_order_relaxed);
    if (!warned.exchange(true)) {
      warn("persistent kernel store " + config.directory + ": " + what + " failed (" +
           error_text(err) + "); continuing without persistence");
    }
  }

  // Under the lock: adds `delta` to the recorded size, walking (recounting,
  // evicting) when the record is missing, over the limit, or a day old.
  void account_locked(std::int64_t delta) ABSL_EXCLUSIVE_LOCKS_REQUIRED(*lock) {
    const std::int64_t now = now_unix();
    std::optional<size_record> record = sizes->read();
    if (!record) {
      evict_locked(config.max_size_bytes, config.threshold_days, now);
      return;
    }
    record->bytes = static_cast<std::uint64_t>(
        std::max<std::int64_t>(0, static_cast<std::int64_t>(record->bytes) + delta));
    if (record->bytes > config.max_size_bytes) {
      evict_locked(config.max_size_bytes / 2, config.threshold_days, now);  // seed 003: to half
    } else if (config.threshold_days > 0 && now - record->last_walk_unix > kWalkIntervalS) {
      evict_locked(config.max_size_bytes, config.threshold_days, now);
    } else if (const int err = sizes->write(*record); err != 0) {
      write_failed(err, "writing " + sizes->path());
    }
  }

  // Under the lock: walks the store, removes entries unused for more than
  // `max_age_days` (0: none) and then least recently used entries until at
  // most `target` bytes remain, removes temporary files of dead writers, and
  // records the recounted size. Explicit maintenance also removes empty key
  // directories; automatic eviction leaves them, because the next put of
  // that key would only create them again. Returns how many entries it removed.
  std::uint64_t evict_locked(std::uint64_t target, std::uint32_t max_age_days, std::int64_t now,
                             bool remove_empty_directories = false)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(*lock) {
    walk_result w = walk(root);
    std::uint64_t total = total_bytes(w.entries);
    std::uint64_t removed = 0;
    std::sort(w.entries.begin(), w.entries.end(),
              [](const walked_file& a, const walked_file& b) { return a.mtime < b.mtime; });
    const std::int64_t oldest_allowed =
        max_age_days > 0 ? now - std::int64_t{max_age_days} * 86400 : INT64_MIN;
    for (const walked_file& f : w.entries) {
      if (total <= target && f.mtime >= oldest_allowed) break;
      if (::unlink(f.path.c_str()) == 0 || errno == ENOENT) {
        total -= f.bytes;
        ++removed;
      }
    }
    for (const walked_file& t : w.temporaries) {
      if (now - t.mtime > kStaleTemporaryS) ::unlink(t.path.c_str());
    }
    if (remove_empty_directories) {
      for (const std::string& dir : w.key_directories) ::rmdir(dir.c_str());  // only if empty
    }
    if (const int err = sizes->write({total, now}); err != 0) {
      write_failed(err, "writing " + sizes->path());
    }
    return removed;
  }

  // Under the lock: recounts the size file (and drops dead writers'
  // temporary files and empty directories) without evicting anything.
  void recount_locked(bool remove_empty_directories = false) ABSL_EXCLUSIVE_LOCKS_REQUIRED(*lock) {
    evict_locked(UINT64_MAX, 0, now_unix(), remove_empty_directories);
  }

  void describe_device(const hash128& device_hash_value, const device_identity& device) {
    const std::string hex = to_hex(device_hash_value);
    {
      mutex_lock l(&devices_mu);
      if (described_devices.contains(hex)) return;
    }
    const std::string dir = root + "/" + hex;
    const std::string path = dir + "/device.txt";
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
      const std::string text = describe(device) + "\n";
      std::string temp;
      if (write_temp_file(dir, {reinterpret_cast<const unsigned char*>(text.data()), text.size()},
                          temp) == 0 &&
          publish_replace(temp, path) != 0) {
        ::unlink(temp.c_str());
      }
    }
    mutex_lock l(&devices_mu);
    described_devices.insert(hex);
  }

  void require_enabled() const {
    if (!enabled) throw store_error("the persistent kernel store is disabled (" + config.directory + ")");
  }
};

kernel_store::kernel_store(store_config config) : impl_(new impl(std::move(config))) {
  impl& s = *impl_;
  if (!s.config.enabled) return;
  if (s.config.directory.empty()) {
    warn("persistent kernel store: no directory (set UNICACHE_PERSISTENT_CACHE_DIR, XDG_CACHE_HOME or "
         "HOME); continuing without persistence");
    return;
  }
  if (const int err = make_directories(s.root); err != 0) {
    warn("persistent kernel store: cannot use " + s.root + " (" + error_text(err) +
         "); continuing without persistence");
    return;
  }
  s.enabled = true;
  s.sizes = std::make_unique<size_file>(s.root + "/size");
  s.lock = std::make_unique<lock_file>(s.root + "/lock");
  if (!s.lock->ok()) {
    // Readable but not writable (a read-only deployment): serve, never write.
    s.write_failed(s.lock->error(), "opening " + s.root + "/lock");
    return;
  }
  s.writable.store(true, std::memory_order_relaxed);
}

kernel_store::~kernel_store() { delete impl_; }

kernel_store& kernel_store::instance() {
  static kernel_store* const store = new kernel_store(store_config::from_environment());
  return *store;
}

bool kernel_store::enabled() const noexcept { return impl_->enabled; }
bool kernel_store::writable() const noexcept {
  return impl_->enabled && impl_->writable.load(std::memory_order_relaxed);
}
const store_config& kernel_store::config() const noexcept { return impl_->config; }

std::optional<byte_vector> kernel_store::get(const device_identity& device,
                                             std::string_view key) noexcept {
  impl& s = *impl_;
  if (!s.enabled) return std::nullopt;
  try {
    const hash128 device_h = device_hash(device);
    const std::string dir = s.entry_directory(device_h, s.hasher(key));
    byte_vector bytes;
    for (int n = 0; n < kMaxCollisions; ++n) {
      const std::string path = impl::entry_path(dir, n);
      struct stat st {};
      const int err = read_file(path, bytes, &st, kTouchIntervalS);
      if (err == ENOENT || err == ENOTDIR) {
        if (n == 0 && ::access(dir.c_str(), F_OK) != 0) return std::nullopt;  // no such key
        continue;  // an earlier collision entry was evicted; later ones may remain
      }
      if (err != 0) return std::nullopt;
      const parsed_entry e = parse_entry(bytes, &device_h);
      if (!e.ok()) {
        // A truncated, corrupt or foreign file is a miss, and goes. Its size
        // on disk need not be what the size file counted: recount.
        if (::unlink(path.c_str()) == 0 && s.writable.load(std::memory_order_relaxed)) {
          lock_file_holder l(s.lock.get());
          s.recount_locked();
        }
        continue;
      }
      if (e.key != key) continue;  // a hash collision: another key's entry
      return byte_vector(e.binary.begin(), e.binary.end());
    }
  } catch (...) {
    // Out of memory while reading: a miss, never the caller's problem.
  }
  return std::nullopt;
}

bool kernel_store::put(const device_identity& device, std::string_view key,
                       byte_span binary) noexcept {
  impl& s = *impl_;
  if (!s.enabled || !s.writable.load(std::memory_order_relaxed)) return false;
  if (binary.size() < s.config.min_entry_bytes || binary.size() > s.config.max_entry_bytes) {
    return false;
  }
  try {
    const hash128 device_h = device_hash(device);
    const std::string dir = s.entry_directory(device_h, s.hasher(key));
    const byte_vector bytes = encode_entry(device_h, key, binary, now_unix());

    // The key's directory usually exists when the key was stored before;
    // create it (or re-create it after an eviction removed it) on ENOENT.
    std::string temp;
    int err = write_temp_file(dir, bytes, temp);
    for (int attempt = 0; err == ENOENT && attempt < 2; ++attempt) {
      err = make_directories(dir);
      if (err == 0) err = write_temp_file(dir, bytes, temp);
    }
    if (err != 0) {
      s.write_failed(err, "writing an entry in " + dir);
      return false;
    }
    s.describe_device(device_h, device);

    bool stored = false;
    {
      // Publishing and accounting happen together under the lock, so a walk
      // never sees a published entry the size file does not count yet.
      lock_file_holder l(s.lock.get());
      byte_vector existing;
      int broken_removed = 0;
      for (int n = 0; n < kMaxCollisions && !stored; ++n) {
        const std::string path = impl::entry_path(dir, n);
        err = publish_no_replace(temp, path);
        if (err == 0) {
          s.account_locked(static_cast<std::int64_t>(bytes.size()));
          stored = true;
          break;
        }
        if (err != EEXIST) break;
        // Taken: by this key (another writer was first), by a broken file,
        // or by another key with the same hash (a collision: try n + 1).
        struct stat st {};
        const int read_err = read_file(path, existing, &st);
        if (read_err != 0) continue;
        const parsed_entry e = parse_entry(existing, &device_h);
        if (e.ok() && e.key == key) {
          ::unlink(temp.c_str());
          return true;
        }
        if (!e.ok() && broken_removed < kMaxCollisions && ::unlink(path.c_str()) == 0) {
          s.recount_locked();
          ++broken_removed;
          --n;  // retry the slot it occupied
        }
      }
    }
    if (!stored) {
      ::unlink(temp.c_str());
      if (err != 0 && err != EEXIST) s.write_failed(err, "publishing an entry in " + dir);
    }
    return stored;
  } catch (...) {
    return false;
  }
}

bool kernel_store::remove(const device_identity& device, std::string_view key) noexcept {
  impl& s = *impl_;
  if (!s.enabled || !s.writable.load(std::memory_order_relaxed)) return false;
  try {
    const hash128 device_h = device_hash(device);
    const std::string dir = s.entry_directory(device_h, s.hasher(key));
    byte_vector bytes;
    lock_file_holder l(s.lock.get());
    for (int n = 0; n < kMaxCollisions; ++n) {
      const std::string path = impl::entry_path(dir, n);
      struct stat st {};
      if (read_file(path, bytes, &st) != 0) continue;
      const parsed_entry e = parse_entry(bytes, &device_h);
      if (!e.ok() || e.key != key) continue;
      if (::unlink(path.c_str()) != 0) return false;
      s.account_locked(-static_cast<std::int64_t>(st.st_size));
      return true;
    }
  } catch (...) {
    // Out of memory while reading: nothing removed.
  }
  return false;
}

store_stats kernel_store::stats() const {
  impl_->require_enabled();
  const walk_result w = walk(impl_->root);
  store_stats out;
  out.entries = w.entries.size();
  out.bytes = total_bytes(w.entries);
  out.devices = w.devices;
  out.temporary_files = w.temporaries.size();
  if (auto record = impl_->sizes->read()) out.recorded_bytes = record->bytes;
  return out;
}

namespace {

store_entry_info inspect(const walked_file& f) {
  store_entry_info info;
  info.path = f.path;
  info.device_hash = f.device_hex;
  info.file_bytes = f.bytes;
  info.last_use_unix = f.mtime;
  byte_vector bytes;
  struct stat st {};
  if (const int err = read_file(f.path, bytes, &st); err != 0) {
    info.problem = "unreadable: " + error_text(err);
    return info;
  }
  const parsed_entry e = parse_entry(bytes, nullptr);
  if (!e.ok()) {
    info.problem = describe(e.problem);
    return info;
  }
  info.key_bytes = e.key.size();
  info.binary_bytes = e.binary.size();
  if (to_hex(e.device) != f.device_hex) {
    info.problem = "in the directory of another device";
    return info;
  }
  // The entry must sit under its own key's hash (the layout is the index).
  const std::string key_dir = f.path.substr(0, f.path.rfind('/'));
  if (key_dir.substr(key_dir.rfind('/') + 1) != to_hex(key_hash(e.key))) {
    info.problem = "in the directory of another key";
    return info;
  }
  info.valid = true;
  return info;
}

std::string read_device_description(const std::string& root, const std::string& device_hex) {
  byte_vector bytes;
  struct stat st {};
  if (read_file(root + "/" + device_hex + "/device.txt", bytes, &st) != 0) return "";
  std::string text(bytes.begin(), bytes.end());
  while (!text.empty() && text.back() == '\n') text.pop_back();
  return text;
}

}  // namespace

std::vector<store_entry_info> kernel_store::list() const {
  impl_->require_enabled();
  const walk_result w = walk(impl_->root);
  std::vector<store_entry_info> out;
  for (const walked_file& f : w.entries) {
    out.push_back(inspect(f));
    out.back().device_description = read_device_description(impl_->root, f.device_hex);
  }
  return out;
}

std::vector<store_entry_info> kernel_store::verify(bool fix) const {
  impl& s = *impl_;
  s.require_enabled();
  if (fix && !writable()) throw store_error("the store at " + s.config.directory + " is not writable");
  std::vector<store_entry_info> bad;
  auto check = [&] {
    walk_result w = walk(s.root);
    for (const walked_file& f : w.entries) {
      store_entry_info info = inspect(f);
      if (info.valid) continue;
      if (fix) ::unlink(f.path.c_str());
      bad.push_back(std::move(info));
    }
    if (fix) {
      for (const walked_file& t : w.temporaries) ::unlink(t.path.c_str());
    }
  };
  if (fix) {
    lock_file_holder l(s.lock.get());
    check();
    s.recount_locked(/*remove_empty_directories=*/true);
  } else {
    check();
  }
  return bad;
}

std::uint64_t kernel_store::prune(std::uint64_t max_bytes, std::uint32_t max_age_days) const {
  impl& s = *impl_;
  s.require_enabled();
  if (!writable()) throw store_error("the store at " + s.config.directory + " is not writable");
  lock_file_holder l(s.lock.get());
  return s.evict_locked(max_bytes, max_age_days, now_unix(), /*remove_empty_directories=*/true);
}

void kernel_store::clear() const {
  prune(0, 0);
}

// --- Blob API -------------------------------------------------------------

std::string blob_id(const device_identity& device, std::string_view key) {
  const hash128 d = device_hash(device);
  std::string material(reinterpret_cast<const char*>(d.data()), d.size());
  material.append(key);
  return to_hex(key_hash(material));
}

byte_vector serialize_blob(const device_identity& device, std::string_view key, byte_span binary) {
  return encode_entry(device_hash(device), key, binary, now_unix());
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
