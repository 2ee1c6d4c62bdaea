// unicache/device_identity.hpp — what a device binary was compiled for.
// For: backend authors (a backend reports its engines' identity), and users
// of the store's and blobs' API.
//
// The store keeps binaries under their device's identity, and a blob carries
// the identity it was made on: a binary is served only to an engine whose
// identity is equal in every field and whose unicache build (version and git
// hash, added by the store) is the same. A backend fills it with everything
// that decides whether a binary runs: platform, device, device version,
// driver version (and, where it matters, the compiler's), so that a driver
// upgrade never serves an old binary.
#pragma once

#include <string>

namespace unicache {

struct device_identity {
  std::string platform_name;
  std::string device_name;
  std::string device_version;
  std::string driver_version;
};

}  // namespace unicache
