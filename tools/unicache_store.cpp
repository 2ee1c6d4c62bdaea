// unicache-store: inspect and maintain a store (the local one, or a remote
// tier with --remote, of any registered scheme). This file: the table of
// commands, the command line and run(); the commands are in
// local_commands.cpp, bundle_commands.cpp and remote_commands.cpp, and main
// (main.cpp) registers the schemes this build has.
//
// Exit codes: 0 success; 1 the store is unusable, an operation failed,
// `verify` found bad entries (without --fix), or `export` or `import`
// refused some; 2 usage error.
//
// Each command is a row of kCommands: its name, its line in the usage, its
// own help, the options it takes, and the functions that run it on the
// local store and on the remote tier. main parses the options, then
// dispatches through the table; the usage is printed from it.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "store_tool.hpp"
#include "unicache/error.hpp"

namespace {

using namespace unicache_store;

// The options a command takes beside --help, as bits.
enum accepted_options : unsigned {
  accepts_nothing = 0,
  accepts_fix = 1u << 0,      // verify --fix
  accepts_json = 1u << 1,     // list --json
  accepts_recount = 1u << 2,  // stats --recount (the local store only)
  accepts_limits = 1u << 3,   // prune --max-size MB, --older-than DAYS: at least one
  accepts_export = 1u << 4,   // export --out FILE [--kind K] [--device TEXT] [--newer-than DAYS] [--secret-file F]
  accepts_import = 1u << 5,   // import FILE [--secret-file F]
  accepts_id = 1u << 6,       // explain ID
};

using local_command = int (*)(unicache::kernel_store&, const unicache::store_config&, const options&);
using remote_command = int (*)(unicache::remote_maintenance&, const options&);

struct command {
  const char* name;
  const char* synopsis;   // the command with its options, in the usage
  const char* summary;    // beside it in the usage; a '\n' goes on under itself
  const char* help;       // `help NAME`, `NAME --help`
  unsigned accepts;       // accepted_options
  local_command local;    // null for help alone, which needs no store (main runs show_help)
  remote_command remote;  // null: not a command of the remote tier
};

const command kCommands[] = {
    {"stats", "stats [--recount]", "entries, bytes and devices (--recount: walk the store)",
     "usage: unicache-store [--dir DIR] stats [--recount]\n\n"
     "Prints the number of entries and their bytes as the shards' size records\n"
     "say (a shard without a valid record is walked), and the number of\n"
     "devices. With --recount, walks the whole store and prints the entries and\n"
     "bytes found on disk beside the recorded bytes, and the temporary files\n"
     "left by writers that died. Exit 0, or 1 if the store is unusable.\n",
     accepts_recount, stats_local, stats_remote},
    {"list", "list [--json]", "every entry: what it is, its device, size, last use",
     "usage: unicache-store [--dir DIR] list [--json]\n\n"
     "Prints every entry, grouped by device: a line per device (its hash and\n"
     "description), then a line per entry: last use (UTC), binary bytes, and\n"
     "what it is (the kind and kernel name its key gives, else a quoted preview\n"
     "of the key), or BAD and why. With --json, one JSON object:\n"
     "{\"directory\": ..., \"entries\": [{\"device_hash\", \"device\", \"kind\", \"name\",\n"
     "\"key_preview\", \"key_bytes\", \"binary_bytes\", \"file_bytes\", \"last_use_unix\",\n"
     "\"last_use\", \"valid\", \"problem\", \"path\"}, ...]}.\n"
     "Exit 0, or 1 if the store is unusable.\n",
     accepts_json, list_local, list_remote},
    {"verify", "verify [--fix]", "check every entry; --fix removes bad ones",
     "usage: unicache-store [--dir DIR] verify [--fix]\n\n"
     "Reads every entry and checks its magic, format version, sizes, checksum,\n"
     "owner and mode, and that it lies in its device's and key's directory;\n"
     "reports anything else that does not belong (a directory, FIFO, link or\n"
     "stray file where the store keeps entries or its directories). Prints\n"
     "each bad thing and why. With --fix, removes them (a link, never what it\n"
     "points to) and temporary files, and recounts the shards' records. Exit 0 if\n"
     "every entry is valid (or --fix removed the bad ones), 1 if bad entries\n"
     "remain or the store is unusable.\n",
     accepts_fix, verify_local, verify_remote},
    {"prune", "prune [--max-size MB] [--older-than DAYS]",
     "remove least recently used entries down to MB,\nand entries unused for more than DAYS",
     "usage: unicache-store [--dir DIR] prune [--max-size MB] [--older-than DAYS]\n\n"
     "Removes entries unused for more than DAYS, then least recently used\n"
     "entries until at most MB remain. At least one option is required.\n"
     "Exit 0, 1 if the store is unusable or not writable, 2 on bad options.\n",
     accepts_limits, prune_local, nullptr},
    {"clear", "clear", "remove every entry",
     "usage: unicache-store [--dir DIR] clear\n\n"
     "Removes every entry of every device. Exit 0, or 1 if the store is\n"
     "unusable or not writable.\n",
     accepts_nothing, clear_local, clear_remote},
    {"export", "export --out FILE [--kind K] [--device TEXT]\n         [--newer-than DAYS] [--secret-file F]",
     "write entries to a bundle FILE, to import elsewhere",
     "usage: unicache-store [--dir DIR] export --out FILE [--kind K] [--device TEXT]\n"
     "                      [--newer-than DAYS] [--secret-file F]\n\n"
     "Writes the store's entries to the bundle FILE (one file, for another\n"
     "machine's `import`): those whose key is of kind K as `list` shows it\n"
     "(opencl-c, cuda-c), of devices whose description contains TEXT, used\n"
     "within DAYS days; without options, every entry. FILE is written beside\n"
     "itself under a temporary name and renamed when complete. With\n"
     "--secret-file (default: UNICACHE_REMOTE_CACHE_SECRET_FILE), every record is\n"
     "signed. Prints a line per damaged entry left out, then a summary.\n"
     "Exit 0, 1 if an entry was left out or FILE or the store is unusable,\n"
     "2 on bad options or an unusable secret file.\n",
     accepts_export, export_local, nullptr},
    {"import", "import FILE [--secret-file F]", "store the entries of a bundle FILE",
     "usage: unicache-store [--dir DIR] import FILE [--secret-file F]\n\n"
     "Stores the entries of the bundle FILE (made by `export`), each checked as\n"
     "the store checks what it reads and stored as the library stores one;\n"
     "entries the store holds already are left as they are. A truncated or\n"
     "damaged FILE, or one that is not a bundle, is refused whole: nothing is\n"
     "imported. A record that is corrupt, too large for this store or, with\n"
     "--secret-file (default: UNICACHE_REMOTE_CACHE_SECRET_FILE), not signed\n"
     "with that secret, is refused and the others imported; without a\n"
     "secret, signatures are not checked. Prints a\n"
     "line per refused record, then a summary. Exit 0, 1 if a record was\n"
     "refused or FILE or the store is unusable, 2 on bad options or an\n"
     "unusable secret file.\n",
     accepts_import, import_local, nullptr},
    {"explain", "explain ID", "why a kernel the library built missed in the store,\nagainst the store as it is now",
     "usage: unicache-store [--dir DIR] explain ID\n\n"
     "Explains again a miss that a process explained with\n"
     "UNICACHE_EXPLAIN_MISSES=1 (it records each in the store, the newest 64):\n"
     "ID is the id that process's line shows (16 hex digits; 8 or more are\n"
     "enough), and the line printed is the one the process would print now:\n"
     "the fields in which the nearest stored entry of the same kernel differs,\n"
     "or that none is stored. Exit 0, 1 if no miss has that id or the store is\n"
     "unusable, 2 on a malformed id.\n",
     accepts_id, explain_local, nullptr},
    {"precompile", "precompile GRAPH --cuda-arch sm_XY[,sm_XY...] [--sm-count N]\n         [--out FILE] [--secret-file F]",
     "compile a graph's CUDA kernels ahead of time, no GPU needed,\ninto the store or a bundle FILE",
     "usage: unicache-store [--dir DIR] precompile GRAPH --cuda-arch sm_XY[,sm_XY...]\n"
     "                      [--sm-count N] [--out FILE] [--secret-file F]\n\n"
     "Compiles every partition of the graph document GRAPH (docs/graph-json.md)\n"
     "for each of its requests (none: each unknown dim as 1 and as 4096, which\n"
     "covers both split-K variants of a generic GEMM) with NVRTC for each\n"
     "architecture, without a GPU, and stores the kernels under the identity a\n"
     "GPU of that architecture has with this NVRTC and unicache build: such a\n"
     "machine loads them instead of building. Kernels are generic, or\n"
     "specialized per shape as UNICACHE_KERNEL_SHAPES says. --sm-count is the\n"
     "fleet's multiprocessors (where a GEMM splits K; default 108 for sm_80,\n"
     "132 for sm_90, required for others). Into the store (--dir, else\n"
     "UNICACHE_PERSISTENT_CACHE_DIR), or with --out into the bundle FILE alone\n"
     "(signed with --secret-file), for `import` on the fleet. Prints a line per\n"
     "architecture. Exit 0, 1 if the graph does not compile or the store or\n"
     "FILE is unusable, 2 on bad options.\n",
     accepts_nothing, nullptr, nullptr},
    {"help", "help [COMMAND]", "this text, or a command's", "usage: unicache-store help [COMMAND]\n", accepts_nothing,
     nullptr, nullptr},
};

const command* find_command(std::string_view name) {
  for (const command& c : kCommands) {
    if (name == c.name) return &c;
  }
  return nullptr;
}

const char* const kUsageHead =
    "usage: unicache-store [--dir DIR | --remote URL [--secret-file FILE]] COMMAND [OPTIONS]\n"
    "\n"
    "Inspects and maintains the persistent kernel store of unicache.\n"
    "\n"
    "commands:\n";

const char* const kUsageTail =
    "\n"
    "The store is UNICACHE_PERSISTENT_CACHE_DIR (default $XDG_CACHE_HOME/unicache,\n"
    "else $HOME/.cache/unicache); --dir overrides it. The tool works on the\n"
    "directory even when UNICACHE_PERSISTENT_CACHE=0 turns the library's use off.\n"
    "\n"
    "--remote URL works on a remote tier instead (a redis:// URL as\n"
    "UNICACHE_REMOTE_CACHE; --remote=env reads that variable, which keeps a\n"
    "password out of the process list, and works on each tier it names, in\n"
    "order): stats, list, verify and clear, for the values under the URL's\n"
    "prefix; --secret-file checks signatures as UNICACHE_REMOTE_CACHE_SECRET_FILE\n"
    "does. Passwords are never printed.\n"
    "\n"
    "exit codes: 0 success; 1 the store is unusable, an operation failed,\n"
    "verify found bad entries (without --fix), or export or import refused\n"
    "some; 2 usage error.\n";

// The tool's usage, its commands listed from kCommands.
void print_usage(std::FILE* out) {
  constexpr int kSummaryColumn = 30;
  std::fputs(kUsageHead, out);
  for (const command& c : kCommands) {
    const int indent = 2 + static_cast<int>(std::string_view(c.synopsis).size());
    if (indent < kSummaryColumn) {
      std::fprintf(out, "  %s%*s", c.synopsis, kSummaryColumn - indent, "");
    } else {
      std::fprintf(out, "  %s\n%*s", c.synopsis, kSummaryColumn, "");
    }
    for (const char* s = c.summary; *s; ++s) {
      std::fputc(*s, out);
      if (*s == '\n') std::fprintf(out, "%*s", kSummaryColumn, "");
    }
    std::fputc('\n', out);
  }
  std::fputs(kUsageTail, out);
}

// A usage error: the message, then the command's help (or, without one, the
// tool's usage), on stderr.
int usage_error(const std::string& message, const command* c = nullptr) {
  std::fprintf(stderr, "unicache-store: %s\n\n", message.c_str());
  if (c) {
    std::fputs(c->help, stderr);
  } else {
    print_usage(stderr);
  }
  return kUsage;
}

// `help`, `help COMMAND`.
int show_help(const std::vector<std::string_view>& args) {
  if (args.empty()) {
    print_usage(stdout);
    return kOk;
  }
  const command* c = find_command(args.front());
  if (!c) return usage_error("unknown command " + std::string(args.front()));
  std::fputs(c->help, stdout);
  return kOk;
}

// The options before the command, taken off the front of `args`; an exit
// code when they end the run (--help, a usage error).
std::optional<int> parse_global_options(std::vector<std::string_view>& args, options& o) {
  while (!args.empty() && (args.front().starts_with("--") || args.front() == "-h")) {
    const std::string_view a = args.front();
    const bool has_value = args.size() >= 2;
    if (a == "--help" || a == "-h") {
      print_usage(stdout);
      return kOk;
    }
    if (a == "--dir" && has_value) {
      o.dir = std::string(args[1]);
    } else if (a == "--remote" && has_value) {
      o.remote = std::string(args[1]);
    } else if (a == "--secret-file" && has_value) {
      o.secret_file = std::string(args[1]);
    } else if (a.starts_with("--remote=")) {
      o.remote = std::string(a.substr(9));
    } else if (a.starts_with("--dir=")) {
      o.dir = std::string(a.substr(6));
    } else {
      return usage_error("unknown option " + std::string(a));
    }
    const bool value_apart = a.find('=') == std::string_view::npos;  // --dir DIR, not --dir=DIR
    args.erase(args.begin(), args.begin() + (value_apart ? 2 : 1));
  }
  return std::nullopt;
}

std::optional<std::uint64_t> number(std::string_view text) {
  if (text.empty() || text.find_first_not_of("0123456789") != std::string_view::npos || text.size() > 18) {
    return std::nullopt;
  }
  return std::stoull(std::string(text));
}

// Takes the option of export or import at args[i], and its value (moving i
// past it); false when it is none of theirs. A bad value sets `exit_code`.
bool take_bundle_option(const command& c, const std::vector<std::string_view>& args, std::size_t& i, options& o,
                        std::optional<int>& exit_code) {
  const std::string_view a = args[i];
  if ((c.accepts & accepts_import) && !a.starts_with("--") && !o.bundle) {
    o.bundle = std::string(a);
    return true;
  }
  if (!(c.accepts & (accepts_export | accepts_import)) || i + 1 >= args.size()) return false;
  const std::string value(args[i + 1]);
  const bool exporting = c.accepts & accepts_export;
  if (a == "--secret-file") {
    o.secret_file = value;
  } else if (exporting && a == "--out") {
    o.bundle = value;
  } else if (exporting && a == "--kind") {
    o.filter.kind = value;
  } else if (exporting && a == "--device") {
    o.filter.device = value;
  } else if (exporting && a == "--newer-than") {
    const auto days = number(value);
    if (!days || *days == 0 || *days > UINT32_MAX) {
      exit_code = usage_error("bad number of days " + value + " for --newer-than", &c);
    } else {
      o.filter.max_age_days = static_cast<std::uint32_t>(*days);
    }
  } else {
    return false;
  }
  ++i;
  return true;
}

// The options after the command: those it takes, else a usage error.
std::optional<int> parse_command_options(const command& c, const std::vector<std::string_view>& args, options& o) {
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string_view a = args[i];
    if ((c.accepts & accepts_fix) && a == "--fix") {
      o.fix = true;
    } else if ((c.accepts & accepts_json) && a == "--json") {
      o.json = true;
    } else if ((c.accepts & accepts_recount) && a == "--recount" && !o.remote) {
      o.recount = true;
    } else if ((c.accepts & accepts_limits) && (a == "--max-size" || a == "--older-than") && i + 1 < args.size()) {
      const auto value = number(args[i + 1]);
      if (!value) return usage_error("bad number " + std::string(args[i + 1]) + " for " + std::string(a), &c);
      (a == "--max-size" ? o.max_mb : o.older_than_days) = value;
      ++i;
    } else if ((c.accepts & accepts_id) && !a.starts_with("--") && !o.miss_id) {
      o.miss_id = std::string(a);
    } else if (std::optional<int> exit_code; take_bundle_option(c, args, i, o, exit_code)) {
      if (exit_code) return exit_code;
    } else {
      return usage_error("unexpected argument " + std::string(a), &c);
    }
  }
  if ((c.accepts & accepts_limits) && !o.max_mb && !o.older_than_days) {
    return usage_error("prune needs --max-size or --older-than", &c);
  }
  if ((c.accepts & (accepts_export | accepts_import)) && o.remote) {
    return usage_error(std::string(c.name) + " works on the local store (--dir), not on --remote", &c);
  }
  if ((c.accepts & accepts_export) && !o.bundle) return usage_error("export needs --out FILE", &c);
  if ((c.accepts & accepts_import) && !o.bundle) return usage_error("import needs the bundle FILE", &c);
  if ((c.accepts & accepts_id) && !o.miss_id) return usage_error("explain needs the miss's ID", &c);
  if ((c.accepts & accepts_id) && o.remote) return usage_error("explain works on the local store (--dir)", &c);
  return std::nullopt;
}

// The command on each remote tier `o.remote` names (one URL, or the
// several of UNICACHE_REMOTE_CACHE, in order, each under a heading).
int run_remote(const command& c, options& o) {
  if (o.dir) return usage_error("--dir and --remote name different stores: give one");
  if (!c.remote) {
    std::fprintf(stderr, "unicache-store: %s is not a remote command (the server's maxmemory bounds its size)\n",
                 c.name);
    return kUsage;
  }
  if (*o.remote == "env") {
    const char* value = std::getenv("UNICACHE_REMOTE_CACHE");
    if (!value || !*value) {
      std::fprintf(stderr, "unicache-store: --remote=env, but UNICACHE_REMOTE_CACHE is not set\n");
      return kUsage;
    }
    o.remote = value;
    if (o.secret_file.empty()) {
      const char* file = std::getenv("UNICACHE_REMOTE_CACHE_SECRET_FILE");
      if (file) o.secret_file = file;
    }
  }
  std::vector<std::string> urls;
  std::istringstream words(*o.remote);
  for (std::string url; words >> url;) urls.push_back(url);
  if (urls.empty()) return usage_error("--remote needs a URL");
  int status = kOk;
  for (std::size_t i = 0; i < urls.size(); ++i) {
    if (urls.size() > 1) std::printf("%stier %zu of %zu\n", i == 0 ? "" : "\n", i + 1, urls.size());
    std::fflush(stdout);
    try {
      unicache::remote_maintenance remote(urls[i], o.secret_file);
      status = std::max(status, c.remote(remote, o));
    } catch (const unicache::invalid_argument& e) {
      std::fprintf(stderr, "unicache-store: %s\n", e.what());
      return kUsage;
    } catch (const unicache::error& e) {
      std::fprintf(stderr, "%s\n", e.what());
      status = std::max(status, kFailure);
    }
  }
  return status;
}

int run_local(const command& c, const options& o) {
  unicache::store_config config = unicache::store_config::from_environment();
  config.enabled = true;  // the tool manages the directory whatever the switch says
  if (o.dir) config.directory = *o.dir;
  if (config.directory.empty()) {
    std::fprintf(stderr, "unicache-store: no store directory (use --dir or UNICACHE_PERSISTENT_CACHE_DIR)\n");
    return kFailure;
  }
  unicache::kernel_store store(config);
  if (!store.enabled()) {
    std::fprintf(stderr, "unicache-store: the store at %s cannot be used\n", config.directory.c_str());
    return kFailure;
  }
  try {
    return c.local(store, config, o);
  } catch (const unicache::store_error& e) {
    std::fprintf(stderr, "unicache-store: %s\n", e.what());
    return kFailure;
  }
}

}  // namespace

namespace unicache_store {

int run(int argc, const char* const* argv) {
  std::vector<std::string_view> args(argv + 1, argv + argc);
  options o;
  if (const auto exit_code = parse_global_options(args, o)) return *exit_code;
  if (args.empty()) return usage_error("no command");
  const command* c = find_command(args.front());
  if (!c) return usage_error("unknown command " + std::string(args.front()));
  args.erase(args.begin());
  for (std::string_view a : args) {
    if (a == "--help" || a == "-h") {
      std::fputs(c->help, stdout);
      return kOk;
    }
  }
  if (std::string_view(c->name) == "help") return show_help(args);
  if (std::string_view(c->name) == "precompile") return precompile_command(args, o, c->help);
  if (const auto exit_code = parse_command_options(*c, args, o)) return *exit_code;
  return o.remote ? run_remote(*c, o) : run_local(*c, o);
}

}  // namespace unicache_store
