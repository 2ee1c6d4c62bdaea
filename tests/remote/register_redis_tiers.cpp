// Registers the remote component's redis:// scheme in a test program that
// uses it (the library's own programs call unicache::register_redis_tiers()
// themselves; a test executable's own object file is always linked, so a
// static registrar is enough here).
#include "unicache/remote.hpp"

namespace {
const bool registered = (unicache::register_redis_tiers(), true);
}  // namespace
