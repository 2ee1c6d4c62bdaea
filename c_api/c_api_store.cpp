// The C interface of the persistent kernel store: its runtime settings,
// statistics, bundles and the blob API (unicache.h, "Persistent kernel store").
#include "unicache/unicache.h"

#include "c_api_internal.hpp"
#if UNICACHE_C_WITH_REMOTE
#include "unicache/remote.hpp"
#endif

using namespace unicache;
using namespace unicache::c_api;

#if UNICACHE_C_WITH_REMOTE
namespace {
// The remote component's redis:// scheme, registered as the shared library
// is loaded: before any C call can open the store, which reads
// UNICACHE_REMOTE_CACHE. A static registrar is safe here, unlike in a
// static library: this object file is the shared library's own, never an
// archive member the linker could leave out.
const bool remote_tiers_registered = [] {
  try {
    register_redis_tiers();
    return true;
  } catch (...) {
    return false;  // no redis:// tiers: the store says so when a URL names one
  }
}();
}  // namespace
#endif

extern "C" {

// --- Store ------------------------------------------------------------------------

unicache_status_t unicache_store_set_enabled(int enabled) {
  return guarded([&] { kernel_store::instance().set_enabled(enabled != 0); });
}

unicache_status_t unicache_store_set_size_eviction(int enabled) {
  return guarded([&] { kernel_store::instance().set_size_eviction(enabled != 0); });
}

unicache_status_t unicache_store_set_remote(const char* url, const char* secret_file) {
  return guarded([&] { kernel_store::instance().set_remote(url ? url : "", secret_file ? secret_file : ""); });
}

unicache_status_t unicache_store_set_directory(const char* directory) {
  return guarded([&] { kernel_store::instance().set_directory(need(directory, "directory")); });
}

unicache_status_t unicache_store_set_capacity_mb(uint64_t capacity_mb) {
  return guarded([&] { kernel_store::instance().set_capacity_mb(capacity_mb); });
}

unicache_status_t unicache_store_get_directory(char* directory, size_t* size) {
  return guarded([&] { copy_out(kernel_store::instance().config().directory, directory, size); });
}

unicache_status_t unicache_set_explain_misses(int enabled) {
  return guarded([&] { set_explain_misses(enabled != 0); });
}

unicache_status_t unicache_store_explain_miss(const char* id, char* line, size_t* size) {
  return guarded([&] {
    const std::string which = need(id, "id");
    const std::optional<miss_explanation> e = kernel_store::instance().explain_recorded_miss(which);
    if (!e) throw store_error("no recorded miss has that id (misses are recorded while explaining: UNICACHE_EXPLAIN_MISSES=1)");
    copy_out(e->line(), line, size);
  });
}

unicache_status_t unicache_store_get_stats(unicache_store_stats_t* stats) {
  return guarded([&] {
    need(stats, "stats");
    const store_stats s = kernel_store::instance().stats();
    *stats = {s.entries, s.bytes, s.devices, s.temporary_files};
  });
}

namespace {

// The report as C sees it, and as many whole refusal lines as fit.
void report_out(const bundle_report& r, unicache_bundle_report_t* report, char* refusals, size_t refusals_size) {
  *report = {r.records, r.imported, r.already_present, r.refused.size(), r.bytes};
  if (!refusals || refusals_size == 0) return;
  std::size_t used = 0;
  for (const std::string& line : r.refused) {
    if (used + line.size() + 2 > refusals_size) break;  // the line, its newline and the NUL
    std::memcpy(refusals + used, line.data(), line.size());
    used += line.size();
    refusals[used++] = '\n';
  }
  refusals[used] = '\0';
}

}  // namespace

unicache_status_t unicache_store_export_bundle(const char* path, const unicache_bundle_filter_t* filter,
                                               const char* secret_file, unicache_bundle_report_t* report,
                                               char* refusals, size_t refusals_size) {
  return guarded([&] {
    need(path, "path");
    need(report, "report");
    bundle_filter f;
    if (filter) {
      f.kind = filter->kind ? filter->kind : "";
      f.device = filter->device ? filter->device : "";
      f.max_age_days = filter->max_age_days;
    }
    const bundle_report r = kernel_store::instance().export_bundle(path, f, secret_file ? secret_file : "");
    report_out(r, report, refusals, refusals_size);
  });
}

unicache_status_t unicache_store_import_bundle(const char* path, const char* secret_file,
                                               unicache_bundle_report_t* report, char* refusals,
                                               size_t refusals_size) {
  return guarded([&] {
    need(path, "path");
    need(report, "report");
    const bundle_report r = kernel_store::instance().import_bundle(path, secret_file ? secret_file : "");
    report_out(r, report, refusals, refusals_size);
  });
}

namespace {
device_identity identity_of(const unicache_device_identity_t* d) {
  need(d, "device");
  auto text = [](const char* s, const char* what) { return std::string(need(s, what)); };
  return {text(d->platform_name, "device->platform_name"), text(d->device_name, "device->device_name"),
          text(d->device_version, "device->device_version"), text(d->driver_version, "device->driver_version")};
}
std::string_view key_of(const void* key, size_t key_size) {
  if (key_size) need(key, "key");
  return {static_cast<const char*>(key), key_size};
}
}  // namespace

unicache_status_t unicache_blob_id(const unicache_device_identity_t* device, const void* key, size_t key_size,
                                   char* id, size_t* size) {
  return guarded([&] { copy_out(blob_id(identity_of(device), key_of(key, key_size)), id, size); });
}

unicache_status_t unicache_blob_serialize(const unicache_device_identity_t* device, const void* key, size_t key_size,
                                          const uint8_t* binary, size_t binary_size, uint8_t* blob, size_t* size) {
  return guarded([&] {
    if (binary_size) need(binary, "binary");
    const byte_vector b = serialize_blob(identity_of(device), key_of(key, key_size), byte_span(binary, binary_size));
    copy_out(b.data(), b.size(), blob, size);
  });
}

unicache_status_t unicache_blob_deserialize(const unicache_device_identity_t* device, const uint8_t* blob,
                                            size_t blob_size, void* key, size_t* key_size, uint8_t* binary,
                                            size_t* binary_size) {
  return guarded([&] {
    need(key_size, "key_size");
    need(binary_size, "binary_size");
    if (blob_size) need(blob, "blob");
    blob_contents c;
    try {
      c = deserialize_blob(identity_of(device), byte_span(blob, blob_size));
    } catch (const store_error& e) {
      raise(UNICACHE_INVALID_ARGUMENT, e.what());
    }
    // A NULL buffer for an empty part is no question: only a NULL buffer
    // for a part with bytes asks the sizes.
    const bool asked = (!key && !c.key.empty()) || (!binary && !c.binary.empty());
    const bool fits = *key_size >= c.key.size() && *binary_size >= c.binary.size();
    *key_size = c.key.size();
    *binary_size = c.binary.size();
    if (asked) return;
    if (!fits) raise(UNICACHE_BUFFER_TOO_SMALL, "a buffer is too small: see *key_size and *binary_size");
    if (!c.key.empty()) std::memcpy(key, c.key.data(), c.key.size());
    if (!c.binary.empty()) std::memcpy(binary, c.binary.data(), c.binary.size());
  });
}

}  // extern "C"
