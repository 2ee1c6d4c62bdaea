// Remote tiers by URL scheme: the kernel store builds the tier a URL names
// (UNICACHE_REMOTE_CACHE, kernel_store::set_remote) through a table of
// scheme -> factory, and knows no tier by name. A new kind of tier is a
// file that implements storage_tier and one registration:
//
//   std::shared_ptr<storage_tier> make_my_tier(std::string_view url, const std::string& secret_file);
//   register_tier_scheme("mine", &make_my_tier);   // before the first URL of that scheme
//
// The core registers none: the remote component registers redis://
// (unicache::register_redis_tiers, unicache/remote.hpp).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "store/storage_tier.hpp"

namespace unicache::detail {

// Makes the tier of `url` (its scheme the one registered), signed with the
// secret in `secret_file` ("" for none). Throws invalid_argument naming
// what is wrong, never quoting a password or the secret.
using tier_factory = std::shared_ptr<storage_tier> (*)(std::string_view url, const std::string& secret_file);

// Registers `factory` for URLs "<scheme>://...". Throws invalid_argument
// for a scheme already taken by another factory, or one that is empty or
// not [a-z][a-z0-9+.-]*. Thread-safe.
void register_tier_scheme(const std::string& scheme, tier_factory factory);

// The registered schemes, sorted.
std::vector<std::string> tier_schemes();

// The tier `url` names. Throws invalid_argument for a URL without a
// registered scheme (naming the known ones) and what the factory throws.
std::shared_ptr<storage_tier> make_tier(std::string_view url, const std::string& secret_file);

// The tiers behind the local store, nearest first.
using tier_list = std::vector<std::shared_ptr<storage_tier>>;

// The tiers of `urls`: one URL, or several separated by spaces (as ccache's
// remote_storage), asked in that order; at most kMaxRemoteTiers. All or
// nothing: throws as make_tier does for any of them.
inline constexpr std::size_t kMaxRemoteTiers = 4;
tier_list make_tiers(std::string_view urls, const std::string& secret_file);

// The tiers UNICACHE_REMOTE_CACHE names (UNICACHE_REMOTE_CACHE_SECRET_FILE:
// their secret), or none: not set, or unusable (one warning, not quoting
// the value, and the process runs with the local store only).
tier_list tiers_from_environment() noexcept;

}  // namespace unicache::detail
