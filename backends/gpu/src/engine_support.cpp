// What every GPU API's engine shares: selecting a device by an
// environment variable, and the engine cache blob (gpu.hpp).
#include <algorithm>
#include <cctype>
#include <string>
#include <vector>

#include "unicache/backend_support.hpp"
#include "unicache/gpu.hpp"
#include "unicache/store.hpp"

namespace unicache::gpu {
namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

// A value made of digits and colons names a device by its label only: "2"
// must not pick "NVIDIA H200" by its name.
bool looks_like_label(const std::string& v) {
  return !v.empty() && v.size() < 12 &&
         std::all_of(v.begin(), v.end(), [](unsigned char c) { return std::isdigit(c) || c == ':'; });
}

std::size_t fallback(const std::vector<listed_device>& devices) {
  const auto preferred = std::find_if(devices.begin(), devices.end(), [](const auto& d) { return d.preferred; });
  return preferred == devices.end() ? 0 : static_cast<std::size_t>(preferred - devices.begin());
}

}  // namespace

std::size_t select_device(const char* api, const char* variable, const std::vector<listed_device>& devices) {
  const auto value = support::environment_variable(variable);
  if (!value) return fallback(devices);
  const std::string& v = *value;
  const bool label = looks_like_label(v);
  for (std::size_t i = 0; i < devices.size(); ++i) {
    if (label ? devices[i].label == v
              : !v.empty() && lower(devices[i].description).find(lower(v)) != std::string::npos) {
      return i;
    }
  }
  std::string names;
  for (const auto& d : devices) names += (names.empty() ? "" : "; ") + d.label + " " + d.description;
  const std::size_t chosen = fallback(devices);
  support::warn_once(variable, std::string(variable) + "=" + support::quoted(v) + " names no " + api + " device (devices: " +
                                   names + "); using " + devices[chosen].label + " " + devices[chosen].description);
  return chosen;
}

byte_vector make_engine_blob(const device_identity& identity, const char* format, std::string_view payload) {
  return serialize_blob(identity, format,
                        byte_span(reinterpret_cast<const unsigned char*>(payload.data()), payload.size()));
}

std::string read_engine_blob(const device_identity& identity, const char* format, byte_span blob) {
  blob_contents contents;
  try {
    contents = deserialize_blob(identity, blob);
  } catch (const store_error& err) {
    throw invalid_argument(err.what());
  }
  if (contents.key != format) {
    throw invalid_argument("it holds " + support::quoted(contents.key, 40) + ", not this unicache's engine info (" +
                           format + ")");
  }
  return std::string(reinterpret_cast<const char*>(contents.binary.data()), contents.binary.size());
}

}  // namespace unicache::gpu
