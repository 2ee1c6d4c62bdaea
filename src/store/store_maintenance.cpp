// kernel_store's maintenance, what unicache-store runs: stats, list, verify,
// prune and clear, all over a walk that never follows a link.
#include <time.h>

#include <cstring>
#include <map>

#include "store/entry_format.hpp"
#include "store/entry_inspection.hpp"
#include "store/eviction.hpp"
#include "store/key_description.hpp"
#include "store/kernel_store_impl.hpp"
#include "store/store_layout.hpp"
#include "store/store_walk.hpp"
#include "unicache/store.hpp"
#include "util/file_io.hpp"
#include "util/printable.hpp"

namespace unicache {

using namespace detail;

namespace {

store_entry_info stray_info(const store_directory& d, const store_file& f) {
  store_entry_info info;
  info.path = shown_path(d.path(), f);
  info.device_hash = f.device_hex;
  info.file_bytes = f.bytes;
  info.last_use_unix = f.mtime;
  info.problem = f.problem;
  return info;
}

}  // namespace

store_stats kernel_store::stats(bool recount) const {
  const std::shared_ptr<const store_state> s = impl_->require_enabled();
  store_directory& d = *s->directory;
  store_stats out;
  if (recount) {
    const walk_result w = walk_store(d.root());
    out.entries = w.entries.size();
    out.bytes = total_bytes(w.entries);
    out.devices = w.devices;
    out.temporary_files = w.temporaries.size();
    out.recounted = true;
  }
  for (int shard = 0; shard < kShards; ++shard) {
    const std::optional<shard_totals> t = d.has_records() ? d.record(shard).read() : std::nullopt;
    if (t && t->pending_removal == 0) {
      out.recorded_bytes += t->bytes;
      if (!recount) out.entries += t->entries;
      continue;
    }
    // No valid record (damaged, or a read-only store without them): that
    // shard is walked. stats never writes.
    if (recount) continue;
    const walk_result w = walk_shard(d.root(), shard);
    out.entries += w.entries.size();
    out.recorded_bytes += total_bytes(w.entries);
    out.recounted = true;
  }
  if (!recount) {
    out.bytes = out.recorded_bytes;
    for (const std::string& name : directory_names(d.root())) {
      if (is_hex_name(name, kHashDigits)) ++out.devices;
    }
  }
  return out;
}

std::vector<store_entry_info> kernel_store::list() const {
  const std::shared_ptr<const store_state> s = impl_->require_enabled();
  const store_directory& d = *s->directory;
  const walk_result w = walk_store(d.root());
  std::map<std::string, std::string> descriptions;  // read once per device
  std::vector<store_entry_info> out;
  for (const store_file& f : w.entries) {
    out.push_back(inspect_entry(d, s->config, f));
    const auto [it, first] = descriptions.try_emplace(f.device_hex);
    if (first) it->second = printable(read_device_description(d, f.device_hex), kMaxDeviceDescriptionBytes);
    out.back().device_description = it->second;
  }
  return out;
}

std::vector<store_entry_info> kernel_store::verify(bool fix) const {
  const std::shared_ptr<const store_state> s = impl_->require_enabled();
  store_directory& d = *s->directory;
  if (fix && !d.writable()) throw store_error("the store at " + s->config.directory + " is not writable");
  std::vector<store_entry_info> bad;
  const walk_result w = walk_store(d.root());
  for (const store_file& f : w.entries) {
    store_entry_info info = inspect_entry(d, s->config, f);
    if (info.valid) continue;
    if (fix) remove_beneath(d.root(), f);
    bad.push_back(std::move(info));
  }
  for (const store_file& f : w.strays) {
    if (fix) remove_beneath(d.root(), f);
    bad.push_back(stray_info(d, f));
  }
  if (fix) {
    // A running writer's temporary file is about to be renamed: only
    // those of writers that are gone.
    const std::int64_t now = ::time(nullptr);
    for (const store_file& t : w.temporaries) {
      if (temporary_is_abandoned(t, now)) remove_beneath(d.root(), t);
    }
    recount_store(d);
  }
  return bad;
}

std::uint64_t kernel_store::prune(std::uint64_t max_bytes, std::uint32_t max_age_days) const {
  const std::shared_ptr<const store_state> s = impl_->require_enabled();
  store_directory& d = *s->directory;
  if (!d.writable()) throw store_error("the store at " + s->config.directory + " is not writable");
  return prune_store(d, max_bytes, max_age_days);
}

void kernel_store::clear() const { prune(0, 0); }

}  // namespace unicache
