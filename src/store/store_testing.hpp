// Test hooks of the persistent store (used by tests only).
#pragma once

#include <string_view>

#include "store/entry_format.hpp"
#include "unicache/store.hpp"

namespace unicache::detail {

namespace store_testing {
using key_hasher = hash128 (*)(std::string_view key);
}

struct store_access {
  // Replaces how the store hashes keys, to force hash collisions.
  static void use_key_hasher(kernel_store& store, store_testing::key_hasher hasher);
};

}  // namespace unicache::detail
