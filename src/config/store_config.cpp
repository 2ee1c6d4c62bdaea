// The persistent store's settings from the UNICACHE_PERSISTENT_CACHE* variables.
#include <limits>
#include <string>

#include "unicache/config.hpp"
#include "unicache/store.hpp"
#include "util/env.hpp"
#include "util/log.hpp"
#include "util/parse.hpp"

namespace unicache {
namespace {

// Reads an unsigned setting; a malformed value gets one warning and leaves
// `target` as it was.
template <typename T>
void apply_number(const char* name, std::uint64_t max, const char* unit, T& target) {
  const std::optional<std::string> value = detail::environment_variable(name);
  if (!value) return;
  const std::optional<std::uint64_t> parsed = detail::parse_decimal(detail::trim(*value), max);
  if (!parsed) {
    detail::warn_ignored_setting(name, *value, *value,
                                 std::string("expected a non-negative whole number of ") + unit + " up to " +
                                     std::to_string(max),
                                 std::to_string(target));
    return;
  }
  target = static_cast<T>(*parsed);
}

}  // namespace

store_config store_config::from_environment() {
  store_config c;
  detail::apply_switch_variable("UNICACHE_PERSISTENT_CACHE", c.enabled);
  if (const auto dir = detail::environment_variable("UNICACHE_PERSISTENT_CACHE_DIR");
      dir && !dir->empty()) {
    c.directory = *dir;
  } else if (const auto xdg = detail::environment_variable("XDG_CACHE_HOME"); xdg && !xdg->empty()) {
    c.directory = *xdg + "/unicache";
  } else if (const auto home = detail::environment_variable("HOME"); home && !home->empty()) {
    c.directory = *home + "/.cache/unicache";
  }
  std::uint64_t max_mb = c.max_size_bytes >> 20;
  apply_number("UNICACHE_PERSISTENT_CACHE_MAX_SIZE", std::numeric_limits<std::uint64_t>::max() >> 20,
               "MB", max_mb);
  c.max_size_bytes = max_mb << 20;  // 0: no size limit
  detail::apply_switch_variable("UNICACHE_PERSISTENT_CACHE_EVICTION", c.size_eviction);
  apply_number("UNICACHE_PERSISTENT_CACHE_THRESHOLD", 36500, "days", c.threshold_days);
  apply_number("UNICACHE_PERSISTENT_CACHE_MIN_ENTRY_SIZE", std::numeric_limits<std::uint64_t>::max(),
               "bytes", c.min_entry_bytes);
  apply_number("UNICACHE_PERSISTENT_CACHE_MAX_ENTRY_SIZE", std::numeric_limits<std::uint64_t>::max(),
               "bytes", c.max_entry_bytes);
  detail::apply_switch_variable("UNICACHE_PERSISTENT_CACHE_SHARED", c.shared);
  return c;
}

}  // namespace unicache
