// The public face of the library's environment and logging helpers, for
// backends (which include public headers only).
#include "unicache/backend_support.hpp"

#include <string>

#include "absl/container/flat_hash_set.h"
#include "util/env.hpp"
#include "util/log.hpp"
#include "util/mutex.hpp"

namespace unicache::support {

std::optional<std::string> environment_variable(const char* name) { return detail::environment_variable(name); }

std::string quoted(std::string_view text, std::size_t max_chars) { return detail::quoted(text, max_chars); }

void warn(std::string_view message) noexcept { detail::warn(message); }

void warn_once(std::string_view topic, std::string_view message) noexcept {
  static auto* const mu = new detail::mutex();  // never destroyed: usable from static destructors
  static auto* const reported = new absl::flat_hash_set<std::string>();
  try {
    detail::mutex_lock lock(mu);
    if (!reported->insert(std::string(topic)).second) return;
  } catch (...) {
    return;  // out of memory while deduplicating a diagnostic: drop it
  }
  detail::warn(message);
}

bool verbose() { return detail::verbose_lines(); }

void verbose_line(std::string_view line) noexcept { detail::write_line(line); }

void warn_ignored_setting(std::string_view name, std::string_view value, std::string_view bad_token,
                          std::string_view reason, std::string_view keeping) noexcept {
  detail::warn_ignored_setting(name, value, bad_token, reason, keeping);
}

}  // namespace unicache::support
