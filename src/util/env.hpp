// Reading the process environment, in one place.
#pragma once

#include <optional>
#include <string>

namespace unicache::detail {

// The value of `name`, or nullopt when it is not set. A variable set to the
// empty string is returned as "" (callers report it as malformed).
std::optional<std::string> environment_variable(const char* name);

}  // namespace unicache::detail
