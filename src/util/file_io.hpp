// The persistent store's file operations, relative to a directory handle:
// they report errno instead of throwing (the store's failures never reach a
// caller as exceptions), and never block on, follow or read unbounded a name
// that another writer may have planted.
#pragma once

#include <sys/stat.h>

#include <cstddef>
#include <string>

#include "unicache/store.hpp"
#include "util/directory_handle.hpp"
#include "util/unique_fd.hpp"

namespace unicache::detail {

// A regular file opened for reading, with its metadata at open time.
struct opened_file {
  unique_fd fd;
  struct stat status {};
};

// Opens `name` in `dir` for reading. A symbolic link is refused (ELOOP);
// the open never blocks (a FIFO opens at once, unread); then fstat refuses a
// directory (EISDIR) and a FIFO, socket or device (EINVAL). Returns 0 or errno.
// Reading it does not update its access time (O_NOATIME, where the file is
// ours): an atime update is a metadata write, which waits for the
// filesystem's journal when another process is removing thousands of files.
int open_regular_file(const directory_handle& dir, const std::string& name, opened_file& out) noexcept;
// The same for a path a user gave (a bundle): links on the way to its last
// component are followed, the last component itself never.
int open_regular_file(const std::string& path, opened_file& out) noexcept;

// Reads the whole of `file` into `out`, or nothing at all when it is larger
// than `max_bytes` (EFBIG). Returns 0 or errno (ENOMEM when out of memory).
int read_contents(const opened_file& file, std::size_t max_bytes, byte_vector& out) noexcept;
// Reads exactly `size` bytes of `file` at `offset` into `out`. Returns 0,
// errno, or EIO when the file is shorter.
int read_exactly(const opened_file& file, unsigned char* out, std::size_t size, std::uint64_t offset) noexcept;

// open_regular_file, then read_contents.
int read_regular_file(const directory_handle& dir, const std::string& name, std::size_t max_bytes,
                      byte_vector& out) noexcept;

// Whether the file's mtime (as opened) is at least `seconds` old: the
// store records a use at most that often.
bool older_than(const opened_file& file, long seconds) noexcept;
// Sets the mtime of the open file `fd` to now: the store's last-use record.
// Best effort (a read-only store still serves).
void set_mtime_now(int fd) noexcept;

// Writes `data` to a new file in `dir` with a unique temporary name
// (".tmp.<pid>.<n>") and exactly `mode` (the umask does not apply); on
// success `temp_name` names it. Returns 0 or errno; on failure nothing is
// left behind.
int write_temp_file(const directory_handle& dir, byte_span data, mode_t mode, std::string& temp_name) noexcept;

// Publishes `from` as `to`, both in `dir`, only if nothing is named `to`
// (renameat2 with RENAME_NOREPLACE, or link + unlink where the filesystem
// lacks it). Returns 0, EEXIST when `to` is taken (by anything, a link
// included), or another errno. Atomic: `to` is either absent or complete.
int publish_no_replace(const directory_handle& dir, const std::string& from, const std::string& to) noexcept;

// Replaces `to` with `from` atomically (rename); a link named `to` is
// replaced itself, never followed. Returns 0 or errno.
int publish_replace(const directory_handle& dir, const std::string& from, const std::string& to) noexcept;

}  // namespace unicache::detail
