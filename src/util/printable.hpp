// Untrusted text (names found on disk, keys, files other writers made) as
// it is safe to print: unchanged when it is plain, else escaped and quoted.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace unicache::detail {

// `text` itself when it is at most `max_chars` bytes of printable ASCII
// (space included) without quotes or backslashes; otherwise quoted(text,
// max_chars) (util/env.hpp): in double quotes, escaped and shortened. Either
// way the result is printable ASCII and cannot rewrite a terminal or a log.
std::string printable(std::string_view text, std::size_t max_chars = 64);

}  // namespace unicache::detail
