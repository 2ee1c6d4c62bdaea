// Parsing of the numbers that configuration values carry, in one place.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace unicache::detail {

// A non-negative decimal integer (digits only, no sign, no spaces) not
// larger than `max`; nullopt otherwise.
std::optional<std::uint64_t> parse_decimal(std::string_view text, std::uint64_t max);

// `text` without leading and trailing whitespace.
std::string_view trim(std::string_view text);

}  // namespace unicache::detail
