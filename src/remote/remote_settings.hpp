// The redis:// scheme's factories: its tier and its maintenance, from a URL
// (UNICACHE_REMOTE_CACHE, kernel_store::set_remote, unicache-store
// --remote) or from a parsed configuration. register_redis_tiers
// (unicache/remote.hpp) registers the URL ones.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "remote/redis_backend.hpp"
#include "store/remote_tier.hpp"
#include "unicache/storage_tier.hpp"

namespace unicache::redis {

// A remote tier on the Redis server (or cluster) of `config`, signed with
// `secret` ("" for none).
std::unique_ptr<detail::remote_tier> make_redis_tier(redis_config config, std::string secret);

// The tier_factory and maintenance_factory of redis://: `url` parsed, its
// secret read from `secret_file` ("" for none). Throw invalid_argument
// naming what is wrong (a malformed URL, a secret file that is missing,
// not a regular file, writable by others, shorter than 16 or longer than
// 4096 bytes), never quoting a password or the secret.
std::shared_ptr<storage_tier> make_redis_tier_of_url(std::string_view url, const std::string& secret_file);
std::unique_ptr<tier_maintenance> make_redis_maintenance(std::string_view url, const std::string& secret_file);

// The secret in `secret_file` ("": none), as the factories read it.
std::string tier_secret(const std::string& secret_file);

}  // namespace unicache::redis
