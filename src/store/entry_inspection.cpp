// Reading an entry or a device's description that a walk of the store found.
#include "store/entry_inspection.hpp"

#include <cstring>

#include "store/entry_format.hpp"
#include "store/key_description.hpp"
#include "store/store_layout.hpp"
#include "util/file_io.hpp"

namespace unicache::detail {

store_entry_info inspect_entry(const store_directory& d, const store_config& config, const store_file& f,
                               byte_vector* bytes_out) {
  store_entry_info info;
  info.path = shown_path(d.path(), f);
  info.device_hash = f.device_hex;
  info.file_bytes = f.bytes;
  info.last_use_unix = f.mtime;
  const directory_handle dir = open_beneath(d.root(), f.directory);
  opened_file file;
  int err = dir.ok() ? open_regular_file(dir, f.name, file) : dir.error();
  if (err == 0) {
    if (const std::string why = d.permissions().distrust(file.status); !why.empty()) {
      info.problem = "not trusted: " + why;
      return info;
    }
  }
  byte_vector bytes;
  if (err == 0) err = read_contents(file, max_entry_file_bytes(kMaxKeyBytes, config.max_entry_bytes), bytes);
  if (err == EFBIG) {
    info.problem = "larger than any entry this store keeps";
    return info;
  }
  if (err != 0) {
    info.problem = std::string("unreadable: ") + std::strerror(err);
    return info;
  }
  const parsed_entry e = parse_entry(bytes, nullptr);
  if (!e.ok()) {
    info.problem = describe(e.problem);
    return info;
  }
  info.key_bytes = e.key.size();
  info.binary_bytes = e.binary.size();
  key_description key = describe_key(e.key);
  info.kind = std::move(key.kind);
  info.name = std::move(key.name);
  info.key_preview = std::move(key.preview);
  if (to_hex(e.device) != f.device_hex) {
    info.problem = "in the directory of another device";
    return info;
  }
  // The entry must sit under its own key's hash (the layout is the index).
  if (f.directory.substr(f.directory.rfind('/') + 1) != to_hex(key_hash(e.key))) {
    info.problem = "in the directory of another key";
    return info;
  }
  info.valid = true;
  if (bytes_out) *bytes_out = std::move(bytes);
  return info;
}

std::string read_device_description(const store_directory& d, const std::string& device_hex) {
  const directory_handle dir = open_beneath(d.root(), device_hex);
  byte_vector bytes;
  if (!dir.ok() || read_regular_file(dir, kDeviceDescriptionName, kMaxDeviceDescriptionBytes, bytes) != 0) return "";
  std::string text(bytes.begin(), bytes.end());
  while (!text.empty() && text.back() == '\n') text.pop_back();
  return text;
}

}  // namespace unicache::detail
