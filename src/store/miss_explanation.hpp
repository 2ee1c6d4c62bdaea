// Misses that explain themselves, inside the store: the comparison
// (miss_explanation.cpp) and the records the kernel path leaves of the
// misses it explained, for `unicache-store explain` (miss_records.cpp).
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "unicache/store.hpp"
#include "store/store_directory.hpp"

namespace unicache::detail {

// The explanation of a miss of `key` by a device that describe() gives as
// `description`, against the entries of the store `d`; blob_id is left empty.
// nullopt when `key` is not a kernel's or no entry of its kernel is stored.
// Throws only std::bad_alloc.
// The entry `missed` (its blob id) is skipped: it may have been stored
// since the miss.
std::optional<miss_explanation> explain_against(const store_directory& d, const std::string& description,
                                                std::string_view key, const std::string& missed);

}  // namespace unicache::detail
