// The library's only way to print: one whole line to stderr per call, written
// with a single write(2) so lines from concurrent threads do not interleave.
#pragma once

#include <string_view>

namespace unicache::detail {

// Writes "unicache: <message>\n" to stderr. Never throws.
void warn(std::string_view message) noexcept;

// Writes "<line>\n" to stderr as is (verbose traces carry their own prefix).
void write_line(std::string_view line) noexcept;

}  // namespace unicache::detail
