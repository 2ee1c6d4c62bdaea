// Whom the persistent store trusts, and the modes of what it creates.
//
// A binary the store loads is code the process will run on its device, so
// (like ssh with its key files) the store loads nothing from a directory or
// file that another user owns or could have written:
//   private (the default): the owner must be this process's user or root,
//     and nothing may be writable by its group or by others; the store
//     creates directories 0700 and files 0600.
//   shared (UNICACHE_PERSISTENT_CACHE_SHARED=1, store_config::shared): the
//     users of the directory's group trust each other; any owner is
//     accepted, but nothing may be writable by others (share through a
//     group, never with everybody); the store creates directories 02770
//     (setgid: new ones keep the root's group) and files 0660.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <string>

namespace unicache::detail {

class store_permissions {
 public:
  explicit store_permissions(bool shared);

  bool shared() const { return shared_; }
  mode_t directory_mode() const { return shared_ ? 02770 : 0700; }
  mode_t file_mode() const { return shared_ ? 0660 : 0600; }

  // Why nothing may be loaded from a file or directory with this owner and
  // mode ("owned by uid 1001, not by this user or root"), or "" if it may.
  std::string distrust(const struct stat& status) const;
  // What to do about it, for the warning.
  std::string remedy() const;

 private:
  bool shared_;
  uid_t user_;
};

}  // namespace unicache::detail
