// A directory held open by descriptor, and the names beneath it reached only
// through real directories: no name below it is ever followed as a symbolic
// link, so nothing another writer plants under the persistent store's root
// leads out of it. Errors are errno values, never exceptions.
#pragma once

#include <sys/stat.h>

#include <cerrno>
#include <string>
#include <vector>

#include "util/unique_fd.hpp"

namespace unicache::detail {

class directory_handle {
 public:
  directory_handle() = default;  // no directory (error() is EBADF)
  // A handle that failed with `error`.
  static directory_handle failure(int error) noexcept;

  // Opens the directory `path`. Links within `path` are followed: the
  // configured root may legitimately be reached through one (~/.cache on
  // another disk); what lies beneath it is reached with open_subdirectory.
  static directory_handle open(const std::string& path) noexcept;
  // Opens `path`, first creating it and any missing parent with exactly
  // `mode` (the umask does not apply). ENOTDIR: a file is in the way.
  static directory_handle open_or_create(const std::string& path, mode_t mode) noexcept;

  // Another handle on this same directory.
  directory_handle duplicate() const noexcept;

  // The directory `name` (one component) in this one. A symbolic link, or
  // anything else that is not a directory, is refused (ENOTDIR), as is a
  // name that is not a single component (EINVAL). Never blocks.
  directory_handle open_subdirectory(const std::string& name) const noexcept;
  // Creates the directory `name` in this one with exactly `mode`. Returns
  // 0, EEXIST when something of that name exists (of any type), or errno.
  int create_subdirectory(const std::string& name, mode_t mode) const noexcept;
  // create_subdirectory (if missing), then open_subdirectory.
  directory_handle make_subdirectory(const std::string& name, mode_t mode) const noexcept;

  bool ok() const noexcept { return static_cast<bool>(fd_); }
  int error() const noexcept { return error_; }
  int fd() const noexcept { return fd_.get(); }
  // Owner, mode and times as fstat saw them when the handle was opened.
  const struct stat& status() const noexcept { return status_; }

 private:
  static directory_handle adopt(int fd) noexcept;

  unique_fd fd_;
  int error_ = EBADF;
  struct stat status_ {};
};

// The names in `dir` except "." and ".."; empty when it cannot be read.
std::vector<std::string> directory_names(const directory_handle& dir);

// Removes `name` from `dir` whatever it is: a file, a symbolic link (not
// what it points to), a FIFO, or a directory with everything in it, never
// following a link on the way. Returns 0 or errno.
int remove_tree(const directory_handle& dir, const std::string& name) noexcept;

}  // namespace unicache::detail
