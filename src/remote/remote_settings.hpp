// The remote tier's configuration: from the environment (UNICACHE_REMOTE_CACHE,
// UNICACHE_REMOTE_CACHE_SECRET_FILE) or from kernel_store::set_remote.
#pragma once

#include <memory>
#include <string>

#include "remote/redis_backend.hpp"
#include "store/remote_tier.hpp"

namespace unicache::detail {

// A remote tier on the Redis server of `config`.
std::unique_ptr<remote_tier> make_redis_tier(redis_config config, std::string secret);

// A tier for `url` signed with the secret in `secret_file` ("" for none).
// Throws invalid_argument naming what is wrong (a malformed URL, a
// secret file that is missing, not a regular file, writable by others,
// shorter than 16 or longer than 4096 bytes), never quoting a password or
// the secret.
std::shared_ptr<remote_tier> make_remote_tier(const std::string& url, const std::string& secret_file);


}  // namespace unicache::detail
