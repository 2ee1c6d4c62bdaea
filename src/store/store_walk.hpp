// A walk over everything under a store's root, never following a link:
// the entries, the temporary files of writers, and whatever else is there
// (strays: a directory or FIFO where an entry goes, a link, a file the store
// never writes), which verify reports and verify --fix removes.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "util/directory_handle.hpp"

namespace unicache::detail {

struct store_file {
  std::string directory;   // relative to the root: names joined by '/' ("" for the root)
  std::string name;        // as found on disk (untrusted bytes for a stray)
  std::string device_hex;  // the device directory it is under, or ""
  mode_t mode = 0;
  std::uint64_t bytes = 0;
  std::int64_t mtime = 0;
  std::string problem;  // strays: why it does not belong
  ino_t inode = 0;      // with mtime and bytes: the same file as the walk saw

  std::string relative_path() const { return directory.empty() ? name : directory + "/" + name; }
};

struct walk_result {
  std::vector<store_file> entries;
  std::vector<store_file> temporaries;
  std::vector<store_file> strays;
  std::vector<store_file> key_directories;
  std::uint64_t devices = 0;
};

walk_result walk_store(const directory_handle& root);

// The same, for the key directories of one shard on every device (its
// entries, their temporary files and strays; nothing at the upper levels).
walk_result walk_shard(const directory_handle& root, int shard);

// The bytes of `files` (saturating: sizes come from disk).
std::uint64_t total_bytes(const std::vector<store_file>& files);

// The directory `relative` (a store_file's directory) below `root`, opened
// one real directory at a time.
directory_handle open_beneath(const directory_handle& root, const std::string& relative);

// Removes `file` (with everything in it, for a directory), never following
// a link. Returns 0 or errno.
int remove_beneath(const directory_handle& root, const store_file& file);

// Removes the directory `file` if it is empty. Returns 0 or errno.
int remove_if_empty(const directory_handle& root, const store_file& file);

// `root_path` + "/" + the file's relative path, each name as printable()
// shows it: a name another writer chose cannot rewrite a terminal.
std::string shown_path(const std::string& root_path, const store_file& file);

}  // namespace unicache::detail
