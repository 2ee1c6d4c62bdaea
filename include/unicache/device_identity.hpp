// unicache/device_identity.hpp — what a device binary was compiled for.
// For: backend authors (a backend reports its engines' identity), and users
// of the store's and blobs' API.
//
// The store keeps binaries under their device's identity, and a blob carries
// the identity it was made on: a binary is served only to an engine whose
// identity is equal in every field and whose unicache build (version and git
// hash, added by the store) is the same. A backend fills it with what decides
// the binary, and no more, so that every machine that can run a binary finds
// it: the CUDA backend with the architecture ("sm_90"), the compile target
// and NVRTC's version (not the device model or the driver, which it checks
// at load: kernel_builder::load_refusal); the OpenCL backend, whose binaries
// are whatever the driver made, with platform, device, device version and
// driver version, so that a driver upgrade never serves an old binary.
#pragma once

#include <string>

namespace unicache {

struct device_identity {
  std::string platform_name;
  std::string device_name;
  std::string device_version;
  std::string driver_version;

  friend bool operator==(const device_identity&, const device_identity&) = default;
};

}  // namespace unicache
