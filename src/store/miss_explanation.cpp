// Misses that explain themselves: a missed (device, key) against the nearest
// stored entry of the same kernel, field by field; and the switch
// (UNICACHE_EXPLAIN_MISSES) that makes the kernel path print them.
#include <algorithm>
#include <cstring>
#include <array>
#include <atomic>
#include <map>

#include "store/entry_format.hpp"
#include "store/entry_inspection.hpp"
#include "store/miss_explanation.hpp"
#include "store/kernel_store_impl.hpp"
#include "store/store_layout.hpp"
#include "store/store_walk.hpp"
#include "unicache/cache_key.hpp"
#include "unicache/store.hpp"
#include "util/env.hpp"
#include "util/file_io.hpp"
#include "util/little_endian.hpp"
#include "util/log.hpp"
#include "util/printable.hpp"

namespace unicache {

using namespace detail;

namespace {

// An explanation reads at most this many entries' keys.
constexpr std::size_t kMaxEntriesRead = 100000;
constexpr std::size_t kShownValueBytes = 48;

// What an identity's description ("platform / device / version / driver /
// unicache x.y.z (git)") says, field by field. Parsed from the right: a
// device name may hold " / ".
struct identity_fields {
  std::string platform, device, version, driver, unicache;
};

identity_fields parse_description(const std::string& text) {
  std::vector<std::string> parts;
  std::size_t at = 0;
  for (std::size_t next; (next = text.find(" / ", at)) != std::string::npos; at = next + 3) {
    parts.push_back(text.substr(at, next - at));
  }
  parts.push_back(text.substr(at));
  identity_fields f;
  if (parts.size() < 5) {
    f.platform = text;  // not a description this build writes: every field differs
    return f;
  }
  const std::size_t n = parts.size();
  f.platform = parts[0];
  for (std::size_t i = 1; i + 3 < n; ++i) f.device += (i > 1 ? " / " : "") + parts[i];
  f.version = parts[n - 3];
  f.driver = parts[n - 2];
  f.unicache = parts[n - 1];
  if (f.unicache.starts_with("unicache ")) f.unicache.erase(0, 9);
  return f;
}

// What a key written by kernel_source::store_key says: language, kernel
// name, options, shape class, source. `ok` is false for any other key (one
// an older unicache wrote, or not a kernel's).
struct key_fields {
  bool ok = false;
  std::string language, name, options, shape_class;
  hash128 source{};
};

key_fields parse_key(std::string_view key) {
  key_fields f;
  try {
    cache_key_reader in(key);
    f.language = std::string(in.read_text());
    f.name = std::string(in.read_text());
    f.options = std::string(in.read_text());
    f.shape_class = std::string(in.read_text());
    f.source = stable_hash128(in.read_text());
    f.ok = in.done();
  } catch (const invalid_argument&) {
    f.ok = false;
  }
  return f;
}

// How a backend's identity fields are called: CUDA keys its binaries by
// architecture, target and compiler; the others by device and driver.
std::array<const char*, 3> identity_labels(const std::string& platform) {
  if (platform == "CUDA") return {"architecture", "target", "compiler"};
  return {"device", "device version", "driver"};
}

std::string shown(const std::string& value) { return value.empty() ? "none" : printable(value, kShownValueBytes); }

void differ(std::vector<std::string>& out, const char* field, const std::string& stored, const std::string& here) {
  if (stored != here) out.push_back(std::string(field) + " (stored " + shown(stored) + ", here " + shown(here) + ")");
}

// `stored_language`: the stored key's first field (read even from a key
// of another format).
std::vector<std::string> differences(const identity_fields& si, const key_fields& sk, const std::string& stored_language,
                                     const identity_fields& hi, const key_fields& hk) {
  std::vector<std::string> out;
  const auto labels = identity_labels(hi.platform);
  differ(out, "backend", si.platform + " " + stored_language, hi.platform + " " + hk.language);
  differ(out, labels[0], si.device, hi.device);
  differ(out, labels[1], si.version, hi.version);
  differ(out, labels[2], si.driver, hi.driver);
  differ(out, "unicache version", si.unicache, hi.unicache);
  if (!sk.ok) {
    out.push_back("key format (stored by another unicache version)");
    return out;
  }
  differ(out, "options", sk.options, hk.options);
  differ(out, "shape class", sk.shape_class, hk.shape_class);
  if (sk.source != hk.source) out.push_back("generated source");
  return out;
}

// The key of the entry `f` and its device hash, read from its header
// without its binary; "" when it cannot be read or is not an entry.
std::string read_key(const directory_handle& root, const store_file& f, hash128& device) {
  const directory_handle dir = open_beneath(root, f.directory);
  opened_file file;
  if (!dir.ok() || open_regular_file(dir, f.name, file) != 0) return "";
  unsigned char head[kEntryHeaderBytes];
  if (read_exactly(file, head, sizeof head, 0) != 0 || std::memcmp(head, "UCKSTORE", 8) != 0) return "";
  const std::uint64_t key_bytes = get_le64(head + 32);
  const auto file_bytes = static_cast<std::uint64_t>(file.status.st_size);
  if (key_bytes == 0 || key_bytes > kMaxKeyBytes || key_bytes > file_bytes - kEntryHeaderBytes) return "";
  std::memcpy(device.data(), head + 16, device.size());
  std::string key(key_bytes, '\0');
  if (read_exactly(file, reinterpret_cast<unsigned char*>(key.data()), key.size(), kEntryHeaderBytes) != 0) return "";
  return key;
}


std::atomic<int>& explain_switch() {
  static std::atomic<int> on{[] {
    bool value = false;
    apply_switch_variable("UNICACHE_EXPLAIN_MISSES", value);
    return value ? 1 : 0;
  }()};
  return on;
}

}  // namespace

std::string miss_explanation::line() const {
  std::string out = "unicache: miss explained: " + what + " (" + blob_id.substr(0, 16) + "): ";
  if (!refusal.empty()) return out + "the stored binary was refused: " + refusal + "; rebuilt";
  if (nearest_blob_id.empty()) return out + "no entry of this kernel is stored";
  out += "the nearest stored entry (" + nearest_blob_id.substr(0, 16) + ") differs in ";
  for (std::size_t i = 0; i < differences.size(); ++i) out += (i ? ", " : "") + differences[i];
  if (differences.empty()) out += "nothing its key and identity say (another device hash)";
  return out;
}

namespace detail {

std::optional<miss_explanation> explain_against(const store_directory& d, const std::string& description,
                                                std::string_view key, const std::string& missed) {
  const key_fields here_key = parse_key(key);
  if (!here_key.ok) return std::nullopt;  // not a kernel's key
  const identity_fields here = parse_description(description);
  miss_explanation out;
  out.what = printable(here_key.language, kShownValueBytes) + " " + printable(here_key.name, kShownValueBytes);
  const directory_handle& root = d.root();
  const walk_result w = walk_store(root);
  std::map<std::string, identity_fields> devices;
  std::size_t best = SIZE_MAX;
  std::int64_t best_mtime = 0;
  std::size_t read = 0;
  for (const store_file& f : w.entries) {
    if (++read > kMaxEntriesRead) break;
    hash128 stored_device{};
    const std::string stored_key = read_key(root, f, stored_device);
    if (stored_key.empty()) continue;
    const key_fields k = parse_key(stored_key);
    // The same kernel: its name, on any backend (the key's second field,
    // in every format kernel_source has written).
    cache_key_reader head(stored_key);
    std::string stored_language;
    try {
      stored_language = std::string(head.read_text());
      if (head.read_text() != here_key.name) continue;
    } catch (const invalid_argument&) {
      continue;
    }
    const std::string stored_id = blob_id_of(stored_device, stored_key);
    if (stored_id == missed) continue;
    auto known = devices.find(f.device_hex);
    if (known == devices.end()) {
      known = devices.emplace(f.device_hex, parse_description(read_device_description(d, f.device_hex))).first;
    }
    std::vector<std::string> diff = differences(known->second, k, stored_language, here, here_key);
    if (diff.size() < best || (diff.size() == best && f.mtime > best_mtime)) {
      best = diff.size();
      best_mtime = f.mtime;
      out.differences = std::move(diff);
      out.nearest_blob_id = stored_id;
    }
  }
  if (out.nearest_blob_id.empty()) return std::nullopt;
  return out;
}

}  // namespace detail

std::optional<miss_explanation> kernel_store::explain_miss(const device_identity& device,
                                                           std::string_view key) const noexcept {
  try {
    const std::shared_ptr<const store_state> s = impl_->state();
    if (!s || !s->directory) return std::nullopt;
    const std::string id = blob_id(device, key);
    std::optional<miss_explanation> out = explain_against(*s->directory, describe(device), key, id);
    if (out) out->blob_id = id;
    return out;
  } catch (...) {
    return std::nullopt;  // out of memory: a diagnostic is never worth a failure
  }
}

void set_explain_misses(bool on) noexcept { explain_switch().store(on ? 1 : 0); }

bool explain_misses() noexcept { return explain_switch().load(std::memory_order_relaxed) != 0; }

}  // namespace unicache
