// unicache/backend_support.hpp — what the library shares with its backends
// beyond the backend interface: reading settings from the environment and
// reporting on stderr the way the rest of the library does. A backend
// includes public headers only; this is the one for these chores.
// For: backend authors.
//
// Thread safety: every function may be called from any thread.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace unicache::support {

// The value of environment variable `name`, or nullopt when it is not set
// ("" when it is set to the empty string: callers report that as malformed).
std::optional<std::string> environment_variable(const char* name);

// `text` as it is safe to echo: quoted, control and non-ASCII bytes escaped,
// cut after `max_chars` bytes with a note of the full length. An untrusted
// value (an environment variable, a driver's string) never floods a log.
std::string quoted(std::string_view text, std::size_t max_chars = 64);

// Writes "unicache: <message>" to stderr as one line. Never throws.
void warn(std::string_view message) noexcept;

// warn(message) the first time `topic` is reported in this process; later
// calls with the same topic print nothing. For a condition that holds for
// the whole process (a missing driver, a compiler older than the GPU).
void warn_once(std::string_view topic, std::string_view message) noexcept;

// Whether UNICACHE_VERBOSE=1 asked for verbose lines, and one such line
// (the caller formats it: "unicache_verbose,<topic>,..."), written whole.
bool verbose();
void verbose_line(std::string_view line) noexcept;

// The one warning for an environment setting the backend cannot use, in the
// library's format:
//   unicache: ignoring NAME="value": bad token "token": <reason>; keeping <what>
void warn_ignored_setting(std::string_view name, std::string_view value, std::string_view bad_token,
                          std::string_view reason, std::string_view keeping) noexcept;

}  // namespace unicache::support
