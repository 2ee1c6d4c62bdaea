// The registry of tier schemes (unicache/storage_tier.hpp): making the
// tiers of the URLs a store is given, and a URL's maintenance.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "unicache/storage_tier.hpp"

namespace unicache::detail {

// The tier `url` names. Throws invalid_argument for a URL without a
// registered scheme (naming the known ones) and what the factory throws.
std::shared_ptr<storage_tier> make_tier(std::string_view url, const std::string& secret_file);

// The maintenance of `url`'s tier. Throws invalid_argument as make_tier
// does, and for a scheme registered without maintenance.
std::unique_ptr<tier_maintenance> make_tier_maintenance(std::string_view url, const std::string& secret_file);

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
