// Reading what a walk of the store found (store_walk.hpp) as the
// maintenance operations read it: an entry checked in full (trust, size,
// format, and that it lies in its own device's and key's directory), and a
// device's description. For list, verify and export_bundle.
#pragma once

#include <string>

#include "store/store_directory.hpp"
#include "store/store_walk.hpp"
#include "unicache/store.hpp"

namespace unicache::detail {

// Reads and checks the entry `f`. With `bytes`, a valid entry's whole file
// is left there. Every string of the result is printable.
store_entry_info inspect_entry(const store_directory& d, const store_config& config, const store_file& f,
                               byte_vector* bytes = nullptr);

// The description in the device directory `device_hex` (device.txt, as its
// first writer recorded it) without its trailing newlines, at most
// kMaxDeviceDescriptionBytes; "" when there is none. Untrusted bytes: print
// them through printable().
std::string read_device_description(const store_directory& d, const std::string& device_hex);

}  // namespace unicache::detail
