// The store's trust rule (owner and mode of what it loads) and its modes.
#include "store/store_permissions.hpp"

#include <unistd.h>

#include <cstdio>

namespace unicache::detail {

store_permissions::store_permissions(bool shared) : shared_(shared), user_(::geteuid()) {}

std::string store_permissions::distrust(const struct stat& status) const {
  char mode[8];
  std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(status.st_mode & 07777));
  if (shared_) {
    if (status.st_mode & S_IWOTH) return std::string("writable by every user (mode ") + mode + ")";
    return "";
  }
  if (status.st_uid != user_ && status.st_uid != 0) {
    return "owned by uid " + std::to_string(status.st_uid) + ", not by this user or root";
  }
  if (status.st_mode & (S_IWGRP | S_IWOTH)) return std::string("writable by its group or others (mode ") + mode + ")";
  return "";
}

std::string store_permissions::remedy() const {
  return shared_ ? "a shared store is shared through its group: chmod o-w"
                 : "if the store is shared on purpose, set UNICACHE_PERSISTENT_CACHE_SHARED=1";
}

}  // namespace unicache::detail
