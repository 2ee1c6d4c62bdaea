// libFuzzer target for the capacity specification parser (the value of
// ONEDNN_GRAPH_CONSTANT_TENSOR_CACHE_CAPACITY and UNICACHE_KERNEL_CACHE_CAPACITY).
// Invariants: never crashes; an error names a token found in the input; an
// accepted value re-renders to a value that parses to the same settings.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "unicache/config.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const unicache::capacity_spec spec = unicache::parse_capacity_spec(text);
  if (!spec.ok()) {
    if (spec.error.empty() || text.find(spec.bad_token) == std::string_view::npos) std::abort();
    return 0;
  }
  std::string rendered;
  for (const auto& s : spec.settings) {
    if (!rendered.empty()) rendered += ';';
    rendered += std::string(unicache::to_string(s.kind)) + ":" + std::to_string(s.capacity_mb);
    if (s.policy) rendered += ":" + std::string(unicache::to_string(*s.policy));
  }
  const unicache::capacity_spec again = unicache::parse_capacity_spec(rendered);
  if (!again.ok() || again.settings.size() != spec.settings.size()) std::abort();
  for (std::size_t i = 0; i < spec.settings.size(); ++i) {
    if (again.settings[i].kind != spec.settings[i].kind ||
        again.settings[i].capacity_mb != spec.settings[i].capacity_mb ||
        again.settings[i].policy != spec.settings[i].policy) {
      std::abort();
    }
  }
  return 0;
}
