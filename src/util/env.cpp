#include "util/env.hpp"

#include <cstdlib>

namespace unicache::detail {

std::optional<std::string> environment_variable(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr) return std::nullopt;
  return std::string(value);
}

}  // namespace unicache::detail
