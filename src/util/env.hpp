// Reading the process environment, and reporting a value the library could
// not use, in one place.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace unicache::detail {

// The value of `name`, or nullopt when it is not set. A variable set to the
// empty string is returned as "" (callers report it as malformed).
std::optional<std::string> environment_variable(const char* name);

// `text` as it is safe to echo on a terminal: in double quotes, with
// backslash, quote, control and non-ASCII bytes escaped (\n, \t, \", \\,
// \xNN), and cut after `max_chars` input bytes with a note of the full length
// ("..." (100000 bytes)). An untrusted value never floods or rewrites a log.
std::string quoted(std::string_view text, std::size_t max_chars = 64);

// Sets `target` from the 0/1 variable `name` when it is set; a malformed
// value gets one warning (warn_ignored_setting) and leaves `target` as it was.
void apply_switch_variable(const char* name, bool& target);

// Whether UNICACHE_VERBOSE=1 asked for the library's verbose lines (read
// once): what the kernel path and adaptive dispatch print by.
bool verbose_lines();

// The one warning for an unusable setting, e.g.
//   unicache: ignoring UNICACHE_X="abc": bad token "abc": expected 0 or 1; keeping 1
// `value` and `bad_token` are quoted (escaped and shortened); `reason` and
// `keeping` are the library's own text.
void warn_ignored_setting(std::string_view name, std::string_view value, std::string_view bad_token,
                          std::string_view reason, std::string_view keeping) noexcept;

}  // namespace unicache::detail
