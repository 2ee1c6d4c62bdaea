// Walking the store's layout level by level with directory handles, sorting
// what is found into entries, temporary files and strays.
#include "store/store_walk.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <string_view>

#include "store/store_layout.hpp"
#include "util/printable.hpp"

namespace unicache::detail {
namespace {

const char* type_of(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device file";
  return "a special file";
}

// What the store keeps under a name ("an entry file"; nullptr: nothing, the
// store never writes that name), and whether it is a directory.
struct expectation {
  const char* what;
  bool directory;
};

bool is_shard_file_name(std::string_view name) {
  return name.size() == 6 && is_hex_name(name.substr(0, 1), 1) && (name.substr(1) == ".lock" || name.substr(1) == ".size");
}

class walker {
 public:
  walk_result out;
  int only_shard = -1;  // >= 0: only that shard's key directories

  void walk_root(const directory_handle& root) {
    for (const std::string& name : directory_names(root)) {
      if (only_shard >= 0 && !is_hex_name(name, kHashDigits)) continue;
      if (name == kShardsDirectory) {
        if (expect(root, "", name, "", {"the shards' directory", true}) && only_shard < 0) {
          walk_shards(root.open_subdirectory(name));
        }
      } else if (name == kMissesDirectory) {
        if (expect(root, "", name, "", {"the explained misses' directory", true}) && only_shard < 0) {
          walk_misses(root.open_subdirectory(name));
        }
      } else if (is_temporary_name(name)) {
        expect(root, "", name, "", {"a temporary file", false}, &out.temporaries);
      } else if (is_hex_name(name, kHashDigits)) {
        if (expect(root, "", name, "", {"a device directory", true})) {
          ++out.devices;
          walk_device(root.open_subdirectory(name), name);
        }
      } else {
        expect(root, "", name, "", {nullptr, false});
      }
    }
  }

 private:
  // Records of explained misses (<id>.miss): not entries, never counted.
  void walk_misses(const directory_handle& dir) {
    if (!dir.ok()) return;
    for (const std::string& name : directory_names(dir)) {
      if (name.size() == kHashDigits + 5 && name.ends_with(".miss") && is_hex_name(name.substr(0, kHashDigits), kHashDigits)) {
        expect(dir, kMissesDirectory, name, "", {"a recorded miss", false});
      } else if (is_temporary_name(name)) {
        expect(dir, kMissesDirectory, name, "", {"a temporary file", false}, &out.temporaries);
      } else {
        expect(dir, kMissesDirectory, name, "", {nullptr, false});
      }
    }
  }

  void walk_shards(const directory_handle& dir) {
    if (!dir.ok()) return;
    for (const std::string& name : directory_names(dir)) {
      if (is_shard_file_name(name)) {
        expect(dir, kShardsDirectory, name, "", {name.ends_with(".lock") ? "a shard's lock file" : "a shard's size record", false});
      } else if (is_temporary_name(name)) {
        expect(dir, kShardsDirectory, name, "", {"a temporary file", false}, &out.temporaries);
      } else {
        expect(dir, kShardsDirectory, name, "", {nullptr, false});
      }
    }
  }

  void walk_device(const directory_handle& dir, const std::string& device) {
    if (!dir.ok()) return;
    for (const std::string& name : directory_names(dir)) {
      if (only_shard >= 0 && !is_hex_name(name, kPrefixDigits)) continue;
      if (name == kDeviceDescriptionName) {
        expect(dir, device, name, device, {"the device's description", false});
      } else if (is_temporary_name(name)) {
        expect(dir, device, name, device, {"a temporary file", false}, &out.temporaries);
      } else if (is_hex_name(name, kPrefixDigits)) {
        if (only_shard >= 0 && name[0] != shard_digit(only_shard)) continue;
        if (expect(dir, device, name, device, {"a directory of key directories", true})) {
          walk_prefix(dir.open_subdirectory(name), device + "/" + name, name, device);
        }
      } else {
        expect(dir, device, name, device, {nullptr, false});
      }
    }
  }

  void walk_prefix(const directory_handle& dir, const std::string& relative, std::string_view prefix,
                   const std::string& device) {
    if (!dir.ok()) return;
    for (const std::string& name : directory_names(dir)) {
      if (is_hex_name(name, kHashDigits) && name.starts_with(prefix)) {
        if (expect(dir, relative, name, device, {"a key directory", true}, &out.key_directories)) {
          walk_key(dir.open_subdirectory(name), relative + "/" + name, device);
        }
      } else {
        expect(dir, relative, name, device, {nullptr, false});
      }
    }
  }

  void walk_key(const directory_handle& dir, const std::string& relative, const std::string& device) {
    if (!dir.ok()) return;
    for (const std::string& name : directory_names(dir)) {
      if (is_entry_name(name)) {
        expect(dir, relative, name, device, {"an entry file", false}, &out.entries);
      } else if (is_temporary_name(name)) {
        expect(dir, relative, name, device, {"a temporary file", false}, &out.temporaries);
      } else {
        expect(dir, relative, name, device, {nullptr, false});
      }
    }
  }

  // Files `name` (in `dir`, at `relative`) in `into` when it is what the
  // store keeps under that name, else as a stray. Returns whether it was as
  // expected (false also when it is gone meanwhile).
  bool expect(const directory_handle& dir, const std::string& relative, const std::string& name,
              const std::string& device, expectation expected, std::vector<store_file>* into = nullptr) {
    struct stat st {};
    if (::fstatat(dir.fd(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return false;
    store_file f{relative, name, device, st.st_mode, static_cast<std::uint64_t>(st.st_size), st.st_mtim.tv_sec, "",
                 st.st_ino};
    const bool as_expected = expected.what && (expected.directory ? S_ISDIR(st.st_mode) : S_ISREG(st.st_mode));
    if (!as_expected) {
      f.problem = expected.what ? std::string(type_of(st.st_mode)) + ", not " + expected.what
                                : std::string(type_of(st.st_mode)) + " that the store never writes";
      out.strays.push_back(std::move(f));
    } else if (into) {
      into->push_back(std::move(f));
    }
    return as_expected;
  }
};

}  // namespace

walk_result walk_store(const directory_handle& root) {
  walker w;
  w.walk_root(root);
  return std::move(w.out);
}

walk_result walk_shard(const directory_handle& root, int shard) {
  walker w;
  w.only_shard = shard;
  w.walk_root(root);
  return std::move(w.out);
}

std::uint64_t total_bytes(const std::vector<store_file>& files) {
  std::uint64_t total = 0;
  for (const store_file& f : files) total = f.bytes > UINT64_MAX - total ? UINT64_MAX : total + f.bytes;
  return total;
}

directory_handle open_beneath(const directory_handle& root, const std::string& relative) {
  directory_handle current = root.duplicate();
  for (std::size_t begin = 0; current.ok() && begin < relative.size();) {
    const std::size_t end = std::min(relative.find('/', begin), relative.size());
    current = current.open_subdirectory(relative.substr(begin, end - begin));
    begin = end + 1;
  }
  return current;
}

int remove_beneath(const directory_handle& root, const store_file& file) {
  const directory_handle dir = open_beneath(root, file.directory);
  if (!dir.ok()) return dir.error();
  return remove_tree(dir, file.name);
}

int remove_if_empty(const directory_handle& root, const store_file& file) {
  const directory_handle dir = open_beneath(root, file.directory);
  if (!dir.ok()) return dir.error();
  return ::unlinkat(dir.fd(), file.name.c_str(), AT_REMOVEDIR) == 0 ? 0 : errno;
}

std::string shown_path(const std::string& root_path, const store_file& file) {
  std::string out = root_path;
  const std::string relative = file.relative_path();
  for (std::size_t begin = 0; begin < relative.size();) {
    const std::size_t end = std::min(relative.find('/', begin), relative.size());
    out += "/" + printable(std::string_view(relative).substr(begin, end - begin));
    begin = end + 1;
  }
  return out;
}

}  // namespace unicache::detail
