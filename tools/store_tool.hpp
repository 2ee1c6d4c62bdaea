// What the parts of unicache-store share: run(), its exit codes, the options of a
// command line, the output helpers, and the commands (each runs one
// subcommand on the local store, local_commands.cpp and bundle_commands.cpp,
// or on the remote tier, remote_commands.cpp); unicache_store.cpp
// dispatches to them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "unicache/storage_tier.hpp"
#include "unicache/store.hpp"

namespace unicache_store {

// The tool on a command line (argv[0] the program's name): what main
// returns. Remote tiers are those of the schemes registered before
// (unicache/storage_tier.hpp). Prints to stdout and stderr.
int run(int argc, const char* const* argv);

constexpr int kOk = 0;
constexpr int kFailure = 1;
constexpr int kUsage = 2;

// What the command line says: the options before the command (which store)
// and the command's own, all parsed before the store is touched.
struct options {
  std::optional<std::string> dir, remote;
  std::string secret_file;
  bool fix = false;
  bool json = false;
  bool recount = false;
  std::optional<std::uint64_t> max_mb, older_than_days;
  // export and import (bundle_commands.cpp): the bundle, export's filter.
  std::optional<std::string> bundle;
  unicache::bundle_filter filter;
  // explain: the recorded miss's id.
  std::optional<std::string> miss_id;
};

// A time as "2026-11-26T02:19:04Z".
std::string utc(std::int64_t unix_seconds);
// `text` as a JSON string. The library's strings are printable ASCII; the
// directory is the user's own and may be UTF-8: valid UTF-8 passes, any
// other byte becomes U+FFFD, so the output is always valid JSON.
std::string json_string(std::string_view text);
// The last line of verify, local or remote, and its exit code.
int verify_summary(std::size_t bad, bool fix);

// What an entry of the store or of the remote tier is, in words:
// "opencl-c gemm", or the key's preview.
template <typename Entry>
std::string what_it_is(const Entry& e) {
  if (e.kind.empty()) return e.key_preview;
  return e.name.empty() ? e.kind : e.kind + " " + e.name;
}

// The local store's commands (run_local opens the store).
int stats_local(unicache::kernel_store& store, const unicache::store_config& config, const options& o);
int list_local(unicache::kernel_store& store, const unicache::store_config& config, const options& o);
int verify_local(unicache::kernel_store& store, const unicache::store_config& config, const options& o);
int prune_local(unicache::kernel_store& store, const unicache::store_config& config, const options& o);
int clear_local(unicache::kernel_store& store, const unicache::store_config& config, const options& o);
int explain_local(unicache::kernel_store& store, const unicache::store_config& config, const options& o);

// The local store's bundles (bundle_commands.cpp).
int export_local(unicache::kernel_store& store, const unicache::store_config& config, const options& o);
int import_local(unicache::kernel_store& store, const unicache::store_config& config, const options& o);

// The remote tier's commands (run_remote makes the remote_maintenance).
int stats_remote(unicache::remote_maintenance& remote, const options& o);
int list_remote(unicache::remote_maintenance& remote, const options& o);
int verify_remote(unicache::remote_maintenance& remote, const options& o);
int clear_remote(unicache::remote_maintenance& remote, const options& o);

// `precompile` with the arguments after its name (precompile_command.cpp);
// it opens the store itself, through the process's kernel_store.
int precompile_command(const std::vector<std::string_view>& args, const options& global, const char* help);

}  // namespace unicache_store
