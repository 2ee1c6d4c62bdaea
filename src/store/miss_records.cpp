// The misses the kernel path explained, recorded in the store so that
// `unicache-store explain ID` explains them again, offline, against the
// store as it is then: one file per miss under <root>/misses/, named by the
// miss's blob id, in the entry format (the device's hash and the kernel's
// key, with the device's description where a binary goes). At most
// kMaxMissRecords are kept; the oldest go.
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "store/entry_format.hpp"
#include "store/kernel_store_impl.hpp"
#include "store/miss_explanation.hpp"
#include "store/store_layout.hpp"
#include "unicache/cache_key.hpp"
#include "util/env.hpp"
#include "util/file_io.hpp"
#include "util/printable.hpp"

namespace unicache {

using namespace detail;

namespace {

constexpr std::size_t kMaxMissRecords = 64;
constexpr char kRecordSuffix[] = ".miss";

bool is_record_name(std::string_view name) {
  return name.size() == kHashDigits + 5 && name.ends_with(kRecordSuffix) && is_hex_name(name.substr(0, kHashDigits), kHashDigits);
}

// Removes the oldest records beyond the bound.
void keep_newest(const directory_handle& dir) {
  std::vector<std::pair<std::int64_t, std::string>> records;
  for (const std::string& name : directory_names(dir)) {
    struct stat st {};
    if (!is_record_name(name) || ::fstatat(dir.fd(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    records.emplace_back(st.st_mtim.tv_sec, name);
  }
  if (records.size() <= kMaxMissRecords) return;
  std::sort(records.begin(), records.end());
  for (std::size_t i = 0; i + kMaxMissRecords < records.size(); ++i) ::unlinkat(dir.fd(), records[i].second.c_str(), 0);
}

}  // namespace

void kernel_store::record_miss(const device_identity& device, std::string_view key) noexcept {
  try {
    const std::shared_ptr<const store_state> s = impl_->state();
    if (!s || !s->directory || !writable() || key.size() > kMaxKeyBytes) return;
    const store_directory& d = *s->directory;
    const directory_handle dir = d.root().make_subdirectory(kMissesDirectory, d.permissions().directory_mode());
    if (!dir.ok()) return;
    const std::string description = describe(device);
    const byte_vector bytes = encode_entry(
        device_hash(device), key,
        byte_span(reinterpret_cast<const unsigned char*>(description.data()), description.size()), ::time(nullptr));
    std::string temp;
    if (write_temp_file(dir, bytes, d.permissions().file_mode(), temp) != 0) return;
    if (publish_replace(dir, temp, blob_id(device, key) + kRecordSuffix) != 0) {
      ::unlinkat(dir.fd(), temp.c_str(), 0);
      return;
    }
    keep_newest(dir);
  } catch (...) {
    // A diagnostic is never worth a failure.
  }
}

std::optional<miss_explanation> kernel_store::explain_recorded_miss(std::string_view id) const {
  const std::shared_ptr<const store_state> s = impl_->require_enabled();
  if (id.size() < 8 || id.size() > kHashDigits || !is_hex_name(id, id.size())) {
    throw store_error("not a miss's id: " + quoted(id, 40) + " (8 to 32 lowercase hex digits, as the explanation line shows)");
  }
  const store_directory& d = *s->directory;
  const directory_handle dir = d.root().open_subdirectory(kMissesDirectory);
  if (!dir.ok()) return std::nullopt;
  std::string found;
  for (const std::string& name : directory_names(dir)) {
    if (!is_record_name(name) || !name.starts_with(id)) continue;
    if (!found.empty()) throw store_error("the id " + std::string(id) + " names several recorded misses: give more digits");
    found = name;
  }
  if (found.empty()) return std::nullopt;
  const std::string where = "the record of miss " + found.substr(0, kHashDigits);
  opened_file file;
  if (const int err = open_regular_file(dir, found, file); err != 0) {
    throw store_error(where + " cannot be read: " + std::strerror(err));
  }
  if (const std::string why = d.permissions().distrust(file.status); !why.empty()) {
    throw store_error(where + " is not trusted: " + why);
  }
  byte_vector bytes;
  if (const int err = read_contents(file, max_entry_file_bytes(kMaxKeyBytes, kMaxDeviceDescriptionBytes), bytes);
      err != 0) {
    throw store_error(where + " cannot be read: " + std::strerror(err));
  }
  const parsed_entry e = parse_entry(bytes, nullptr);
  if (!e.ok()) throw store_error(where + " is damaged: " + describe(e.problem));
  const std::string description(e.binary.begin(), e.binary.end());
  const std::string missed = blob_id_of(e.device, e.key);
  std::optional<miss_explanation> out = explain_against(d, description, e.key, missed);
  if (!out) {
    // Nothing of its kernel is stored now: the line says so.
    out.emplace();
    cache_key_reader fields(e.key);
    try {
      out->what = printable(fields.read_text(), 48);
      out->what += " " + printable(fields.read_text(), 48);
    } catch (const invalid_argument&) {
      out->what = quoted(e.key, 40);
    }
  }
  out->blob_id = missed;
  return out;
}

}  // namespace unicache
