// unicache-store's export and import: the local store's entries to and
// from a bundle, one line per refused record, then a summary line.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "store_tool.hpp"

namespace unicache_store {

namespace {

// --secret-file, else UNICACHE_REMOTE_CACHE_SECRET_FILE (a fleet that signs
// its remote values signs and checks its bundles too), else none.
std::string secret_of(const options& o) {
  if (!o.secret_file.empty()) return o.secret_file;
  const char* file = std::getenv("UNICACHE_REMOTE_CACHE_SECRET_FILE");
  return file ? file : "";
}

// The refusals, one line each; the exit code they make.
int print_refusals(const unicache::bundle_report& r) {
  for (const std::string& line : r.refused) std::printf("refused: %s\n", line.c_str());
  return r.refused.empty() ? kOk : kFailure;
}

}  // namespace

int export_local(unicache::kernel_store& store, const unicache::store_config&, const options& o) {
  try {
    const std::string secret = secret_of(o);
    const unicache::bundle_report r = store.export_bundle(*o.bundle, o.filter, secret);
    const int status = print_refusals(r);
    std::printf("exported %llu entr%s to %s (%llu bytes%s), %zu refused\n", static_cast<unsigned long long>(r.records),
                r.records == 1 ? "y" : "ies", o.bundle->c_str(), static_cast<unsigned long long>(r.bytes),
                secret.empty() ? "" : ", signed", r.refused.size());
    return status;
  } catch (const unicache::invalid_argument& e) {  // the secret file
    std::fprintf(stderr, "unicache-store: %s\n", e.what());
    return kUsage;
  }
}

int import_local(unicache::kernel_store& store, const unicache::store_config&, const options& o) {
  try {
    const unicache::bundle_report r = store.import_bundle(*o.bundle, secret_of(o));
    const int status = print_refusals(r);
    std::printf("imported %llu of %llu records from %s: %llu already present, %zu refused\n",
                static_cast<unsigned long long>(r.imported), static_cast<unsigned long long>(r.records),
                o.bundle->c_str(), static_cast<unsigned long long>(r.already_present), r.refused.size());
    return status;
  } catch (const unicache::invalid_argument& e) {  // the secret file
    std::fprintf(stderr, "unicache-store: %s\n", e.what());
    return kUsage;
  }
}

}  // namespace unicache_store
