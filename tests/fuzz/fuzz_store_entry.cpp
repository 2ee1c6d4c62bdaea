// libFuzzer target for the store's entry parser and the blob deserializer:
// the same format, reached from files on disk and from an application's blobs;
// and for how `list` describes a key read from disk.
// Invariants: never crashes or reads out of bounds; whatever is accepted
// re-encodes to the same bytes (nothing unchecked slips through); a key's
// description is printable ASCII whatever the key's bytes.
#include <cstdint>
#include <cstdlib>

#include "store/entry_format.hpp"
#include "store/key_description.hpp"
#include "unicache/store.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace unicache;
  const byte_span input(data, size);
  static const device_identity device{"fuzz platform", "fuzz device", "1.0", "1.0"};
  static const detail::hash128 device_h = detail::device_hash(device);

  const detail::parsed_entry e = detail::parse_entry(input, nullptr);
  if (e.ok()) {
    const byte_vector again = detail::encode_entry(e.device, e.key, e.binary, e.created_unix);
    if (again.size() != size || !std::equal(again.begin(), again.end(), data)) std::abort();
  }
  try {
    const blob_contents b = deserialize_blob(device, input);
    if (!detail::parse_entry(input, &device_h).ok() || b.binary.size() > size) std::abort();
  } catch (const store_error&) {
  }
  const detail::key_description d =
      detail::describe_key(std::string_view(reinterpret_cast<const char*>(data), size));
  for (const std::string* text : {&d.kind, &d.name, &d.preview}) {
    for (const char c : *text) {
      if (c < 0x20 || c >= 0x7f) std::abort();
    }
  }
  return 0;
}
