// Environment access and the warning for a setting the library ignores.
#include "util/env.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "unicache/config.hpp"
#include "util/log.hpp"

namespace unicache::detail {

std::optional<std::string> environment_variable(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr) return std::nullopt;
  return std::string(value);
}

std::string quoted(std::string_view text, std::size_t max_chars) {
  std::string out = "\"";
  const std::size_t shown = std::min(text.size(), max_chars);
  for (std::size_t i = 0; i < shown; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    switch (c) {
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      default:
        if (c < 0x20 || c >= 0x7f) {
          char hex[5];
          std::snprintf(hex, sizeof hex, "\\x%02x", c);
          out += hex;
        } else {
          out.push_back(static_cast<char>(c));
        }
    }
  }
  out += "\"";
  if (shown < text.size()) out += "... (" + std::to_string(text.size()) + " bytes)";
  return out;
}

void apply_switch_variable(const char* name, bool& target) {
  const std::optional<std::string> value = environment_variable(name);
  if (!value) return;
  if (const std::optional<bool> on = parse_switch(*value)) {
    target = *on;
  } else {
    warn_ignored_setting(name, *value, *value, "expected 0 or 1", target ? "1" : "0");
  }
}

bool verbose_lines() {
  static const bool on = [] {
    bool v = false;
    apply_switch_variable("UNICACHE_VERBOSE", v);
    return v;
  }();
  return on;
}

void warn_ignored_setting(std::string_view name, std::string_view value, std::string_view bad_token,
                          std::string_view reason, std::string_view keeping) noexcept {
  try {
    std::string line = "ignoring ";
    line.append(name).append("=").append(quoted(value));
    line.append(": bad token ").append(quoted(bad_token)).append(": ").append(reason);
    line.append("; keeping ").append(keeping);
    warn(line);
  } catch (...) {
    // Out of memory while formatting a diagnostic: drop it.
  }
}

}  // namespace unicache::detail
