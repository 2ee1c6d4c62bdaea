// Small POSIX file helpers that report errno instead of throwing, for the
// persistent store, whose failures must never reach a caller as exceptions.
#pragma once

#include <sys/stat.h>

#include <string>

#include "unicache/store.hpp"

namespace unicache::detail {

// Reads the whole of `path` into `out` and its metadata into `*info`;
// returns 0 or an errno value. With `touch_older_than_s` > 0, also sets the
// file's mtime to now if it is at least that many seconds old (the store's
// throttled last-use record). Never throws (bad_alloc is reported as ENOMEM).
int read_file(const std::string& path, byte_vector& out, struct stat* info,
              long touch_older_than_s = 0) noexcept;

// Writes `data` to a new file in `directory` with a unique temporary name
// (".tmp.<pid>.<n>"); on success `temp_path` names it. Returns 0 or errno;
// on failure nothing is left behind.
int write_temp_file(const std::string& directory, byte_span data, std::string& temp_path) noexcept;

// Publishes `from` as `to` only if `to` does not exist (renameat2 with
// RENAME_NOREPLACE, or link+unlink where the filesystem lacks it). Returns
// 0, EEXIST when `to` is taken, or another errno. Atomic: `to` is either
// absent or complete.
int publish_no_replace(const std::string& from, const std::string& to) noexcept;

// Replaces `to` with `from` atomically (rename). Returns 0 or errno.
int publish_replace(const std::string& from, const std::string& to) noexcept;

// mkdir -p; returns 0 or errno.
int make_directories(const std::string& path) noexcept;

}  // namespace unicache::detail
