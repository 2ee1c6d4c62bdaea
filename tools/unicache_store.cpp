// unicache-store: inspect and maintain a persistent kernel store.
//
// Exit codes: 0 success; 1 the store is unusable, an operation failed, or
// `verify` found bad entries (without --fix); 2 usage error.
#include <time.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "unicache/remote.hpp"
#include "unicache/store.hpp"

namespace {

constexpr int kOk = 0;
constexpr int kFailure = 1;
constexpr int kUsage = 2;

const char* const kMainHelp =
    "usage: unicache-store [--dir DIR | --remote URL [--secret-file FILE]] COMMAND [OPTIONS]\n"
    "\n"
    "Inspects and maintains the persistent kernel store of unicache.\n"
    "\n"
    "commands:\n"
    "  stats [--recount]           entries, bytes and devices (--recount: walk the store)\n"
    "  list [--json]               every entry: what it is, its device, size, last use\n"
    "  verify [--fix]              check every entry; --fix removes bad ones\n"
    "  prune [--max-size MB] [--older-than DAYS]\n"
    "                              remove least recently used entries down to MB,\n"
    "                              and entries unused for more than DAYS\n"
    "  clear                       remove every entry\n"
    "  help [COMMAND]              this text, or a command's\n"
    "\n"
    "The store is UNICACHE_PERSISTENT_CACHE_DIR (default $XDG_CACHE_HOME/unicache,\n"
    "else $HOME/.cache/unicache); --dir overrides it. The tool works on the\n"
    "directory even when UNICACHE_PERSISTENT_CACHE=0 turns the library's use off.\n"
    "\n"
    "--remote URL works on the remote tier instead (a redis:// URL as\n"
    "UNICACHE_REMOTE_CACHE; --remote=env reads that variable, which keeps a\n"
    "password out of the process list): stats, list, verify and clear, for\n"
    "the values under the URL's prefix; --secret-file checks signatures as\n"
    "UNICACHE_REMOTE_CACHE_SECRET_FILE does. Passwords are never printed.\n"
    "\n"
    "exit codes: 0 success; 1 the store is unusable, an operation failed, or\n"
    "verify found bad entries (without --fix); 2 usage error.\n";

struct command_help {
  const char* name;
  const char* text;
};
const command_help kCommandHelp[] = {
    {"stats",
     "usage: unicache-store [--dir DIR] stats [--recount]\n\n"
     "Prints the number of entries and their bytes as the shards' size records\n"
     "say (a shard without a valid record is walked), and the number of\n"
     "devices. With --recount, walks the whole store and prints the entries and\n"
     "bytes found on disk beside the recorded bytes, and the temporary files\n"
     "left by writers that died. Exit 0, or 1 if the store is unusable.\n"},
    {"list",
     "usage: unicache-store [--dir DIR] list [--json]\n\n"
     "Prints every entry, grouped by device: a line per device (its hash and\n"
     "description), then a line per entry: last use (UTC), binary bytes, and\n"
     "what it is (the kind and kernel name its key gives, else a quoted preview\n"
     "of the key), or BAD and why. With --json, one JSON object:\n"
     "{\"directory\": ..., \"entries\": [{\"device_hash\", \"device\", \"kind\", \"name\",\n"
     "\"key_preview\", \"key_bytes\", \"binary_bytes\", \"file_bytes\", \"last_use_unix\",\n"
     "\"last_use\", \"valid\", \"problem\", \"path\"}, ...]}.\n"
     "Exit 0, or 1 if the store is unusable.\n"},
    {"verify",
     "usage: unicache-store [--dir DIR] verify [--fix]\n\n"
     "Reads every entry and checks its magic, format version, sizes, checksum,\n"
     "owner and mode, and that it lies in its device's and key's directory;\n"
     "reports anything else that does not belong (a directory, FIFO, link or\n"
     "stray file where the store keeps entries or its directories). Prints\n"
     "each bad thing and why. With --fix, removes them (a link, never what it\n"
     "points to) and temporary files, and recounts the shards' records. Exit 0 if\n"
     "every entry is valid (or --fix removed the bad ones), 1 if bad entries\n"
     "remain or the store is unusable.\n"},
    {"prune",
     "usage: unicache-store [--dir DIR] prune [--max-size MB] [--older-than DAYS]\n\n"
     "Removes entries unused for more than DAYS, then least recently used\n"
     "entries until at most MB remain. At least one option is required.\n"
     "Exit 0, 1 if the store is unusable or not writable, 2 on bad options.\n"},
    {"clear",
     "usage: unicache-store [--dir DIR] clear\n\n"
     "Removes every entry of every device. Exit 0, or 1 if the store is\n"
     "unusable or not writable.\n"},
    {"help", "usage: unicache-store help [COMMAND]\n"},
};

const char* help_of(std::string_view command) {
  for (const auto& h : kCommandHelp) {
    if (command == h.name) return h.text;
  }
  return nullptr;
}

std::string utc(std::int64_t unix_seconds) {
  const time_t t = static_cast<time_t>(unix_seconds);
  struct tm tm {};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// `text` as a JSON string. The library's strings are printable ASCII; the
// directory is the user's own and may be UTF-8: valid UTF-8 passes, any
// other byte becomes U+FFFD, so the output is always valid JSON.
std::string json_string(std::string_view text) {
  std::string out = "\"";
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7f) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\u%04x", c);
      out += escaped;
    } else if (c < 0x80) {
      out += static_cast<char>(c);
    } else {
      // A UTF-8 sequence: a lead byte, then 1-3 continuation bytes.
      const std::size_t length = c >= 0xf0 && c < 0xf5 ? 4 : c >= 0xe0 ? 3 : c >= 0xc2 ? 2 : 0;
      bool valid = length > 0 && length <= 4 && i + length <= text.size();
      for (std::size_t k = 1; valid && k < length; ++k) valid = (static_cast<unsigned char>(text[i + k]) & 0xc0) == 0x80;
      if (valid) {
        out.append(text.substr(i, length));
        i += length - 1;
      } else {
        out += "\\ufffd";
      }
    }
  }
  return out + "\"";
}

// What an entry is, in words: "opencl-c gemm", or the key's preview.
std::string what_it_is(const unicache::store_entry_info& e) {
  if (e.kind.empty()) return e.key_preview;
  return e.name.empty() ? e.kind : e.kind + " " + e.name;
}

void print_list(const std::vector<unicache::store_entry_info>& entries) {
  std::string device;
  for (const auto& e : entries) {
    if (device != e.device_hash || &e == &entries.front()) {
      device = e.device_hash;
      std::printf("device %.12s  %s\n", e.device_hash.c_str(),
                  e.device_description.empty() ? "(no description)" : e.device_description.c_str());
    }
    if (e.valid) {
      std::printf("  %s  %10llu B  %s\n", utc(e.last_use_unix).c_str(), static_cast<unsigned long long>(e.binary_bytes),
                  what_it_is(e).c_str());
    } else {
      std::printf("  %s  BAD: %s: %s\n", utc(e.last_use_unix).c_str(), e.problem.c_str(), e.path.c_str());
    }
  }
}

void print_list_json(const std::string& directory, const std::vector<unicache::store_entry_info>& entries) {
  std::printf("{\"directory\": %s, \"entries\": [", json_string(directory).c_str());
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const auto& e = entries[i];
    std::printf(
        "%s\n  {\"device_hash\": %s, \"device\": %s, \"kind\": %s, \"name\": %s, \"key_preview\": %s, "
        "\"key_bytes\": %llu, \"binary_bytes\": %llu, \"file_bytes\": %llu, \"last_use_unix\": %lld, "
        "\"last_use\": %s, \"valid\": %s, \"problem\": %s, \"path\": %s}",
        i == 0 ? "" : ",", json_string(e.device_hash).c_str(), json_string(e.device_description).c_str(),
        json_string(e.kind).c_str(), json_string(e.name).c_str(), json_string(e.key_preview).c_str(),
        static_cast<unsigned long long>(e.key_bytes), static_cast<unsigned long long>(e.binary_bytes),
        static_cast<unsigned long long>(e.file_bytes), static_cast<long long>(e.last_use_unix),
        json_string(utc(e.last_use_unix)).c_str(), e.valid ? "true" : "false", json_string(e.problem).c_str(),
        json_string(e.path).c_str());
  }
  std::printf("\n]}\n");
}

std::optional<std::uint64_t> number(std::string_view text) {
  if (text.empty() || text.find_first_not_of("0123456789") != std::string_view::npos || text.size() > 18) {
    return std::nullopt;
  }
  return std::stoull(std::string(text));
}

// The remote tier's commands (--remote).
int run_remote(std::string_view command, bool fix, bool json, const std::string& url, const std::string& secret_file) {
  try {
    unicache::remote_maintenance remote(url, secret_file);
    if (command == "stats") {
      const unicache::remote_summary s = remote.stats();
      std::printf("remote:           %s\n", s.url.c_str());
      std::printf("entries:          %llu\n", static_cast<unsigned long long>(s.entries));
      std::printf("bytes:            %llu\n", static_cast<unsigned long long>(s.bytes));
      std::printf("server:           redis %s, used memory %llu, maxmemory %llu (%s)\n", s.server_version.c_str(),
                  static_cast<unsigned long long>(s.used_memory), static_cast<unsigned long long>(s.maxmemory),
                  s.maxmemory_policy.c_str());
      const unicache::remote_stats& f = s.fleet;
      std::printf("fleet counters:   (added up by the processes that write to this prefix)\n");
      std::printf("  hits:           %llu\n", static_cast<unsigned long long>(f.hits));
      std::printf("  misses:         %llu\n", static_cast<unsigned long long>(f.misses));
      std::printf("  rejected:       %llu (values that failed a check: never loaded)\n",
                  static_cast<unsigned long long>(f.rejected));
      std::printf("  errors:         %llu\n", static_cast<unsigned long long>(f.errors));
      std::printf("  timeouts:       %llu\n", static_cast<unsigned long long>(f.timeouts));
      std::printf("  skipped:        %llu (the breaker was open)\n", static_cast<unsigned long long>(f.skipped));
      std::printf("  writes:         %llu, dropped %llu\n", static_cast<unsigned long long>(f.puts),
                  static_cast<unsigned long long>(f.dropped));
      std::printf("  bytes:          %llu read, %llu written\n", static_cast<unsigned long long>(f.bytes_read),
                  static_cast<unsigned long long>(f.bytes_written));
      std::printf("server hits:      %llu (every client and prefix)\n", static_cast<unsigned long long>(s.keyspace_hits));
      std::printf("server misses:    %llu\n", static_cast<unsigned long long>(s.keyspace_misses));
      return kOk;
    }
    if (command == "list") {
      const auto entries = remote.list();
      if (json) std::printf("{\"entries\": [");
      for (std::size_t i = 0; i < entries.size(); ++i) {
        const auto& e = entries[i];
        const std::string what = e.kind.empty() ? e.key_preview : e.name.empty() ? e.kind : e.kind + " " + e.name;
        if (json) {
          std::printf("%s\n  {\"key\": %s, \"device_hash\": %s, \"kind\": %s, \"name\": %s, \"key_preview\": %s, "
                      "\"value_bytes\": %llu, \"binary_bytes\": %llu, \"created_unix\": %lld, \"valid\": %s, "
                      "\"signature_unchecked\": %s, \"problem\": %s}",
                      i == 0 ? "" : ",", json_string(e.redis_key).c_str(), json_string(e.device_hash).c_str(),
                      json_string(e.kind).c_str(), json_string(e.name).c_str(), json_string(e.key_preview).c_str(),
                      static_cast<unsigned long long>(e.value_bytes), static_cast<unsigned long long>(e.binary_bytes),
                      static_cast<long long>(e.created_unix), e.valid ? "true" : "false",
                      e.signature_unchecked ? "true" : "false", json_string(e.problem).c_str());
        } else if (e.valid) {
          std::printf("%s  device %.12s  %10llu B  %s%s\n", utc(e.created_unix).c_str(), e.device_hash.c_str(),
                      static_cast<unsigned long long>(e.binary_bytes), what.c_str(),
                      e.signature_unchecked ? "  (signed; give --secret-file to check it)" : "");
        } else {
          std::printf("BAD: %s: %s\n", e.problem.c_str(), e.redis_key.c_str());
        }
      }
      if (json) std::printf("\n]}\n");
      return kOk;
    }
    if (command == "verify") {
      const auto bad = remote.verify(fix);
      for (const auto& e : bad) std::printf("%s %s: %s\n", fix ? "removed" : "bad", e.redis_key.c_str(), e.problem.c_str());
      std::printf("%zu bad entr%s%s\n", bad.size(), bad.size() == 1 ? "y" : "ies", fix && !bad.empty() ? " removed" : "");
      return bad.empty() || fix ? kOk : kFailure;
    }
    if (command == "clear") {
      const std::uint64_t removed = remote.clear();
      std::printf("%llu remote entries removed\n", static_cast<unsigned long long>(removed));
      return kOk;
    }
    std::fprintf(stderr, "unicache-store: %.*s is not a remote command (the server's maxmemory bounds its size)\n",
                 static_cast<int>(command.size()), command.data());
    return kUsage;
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "unicache-store: %s\n", e.what());
    return kUsage;
  } catch (const unicache::error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return kFailure;
  }
}

int usage_error(const std::string& message, const char* help) {
  std::fprintf(stderr, "unicache-store: %s\n\n%s", message.c_str(), help);
  return kUsage;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string_view> args(argv + 1, argv + argc);
  std::optional<std::string> dir, remote;
  std::string secret_file;
  // Global options come before the command.
  while (!args.empty() && args.front().starts_with("--")) {
    if (args.front() == "--help" || args.front() == "-h") {
      std::fputs(kMainHelp, stdout);
      return kOk;
    }
    if (args.front() == "--dir" && args.size() >= 2) {
      dir = std::string(args[1]);
      args.erase(args.begin(), args.begin() + 2);
      continue;
    }
    if (args.front() == "--remote" && args.size() >= 2) {
      remote = std::string(args[1]);
      args.erase(args.begin(), args.begin() + 2);
      continue;
    }
    if (args.front() == "--secret-file" && args.size() >= 2) {
      secret_file = std::string(args[1]);
      args.erase(args.begin(), args.begin() + 2);
      continue;
    }
    if (args.front().starts_with("--remote=")) {
      remote = std::string(args.front().substr(9));
      args.erase(args.begin());
      continue;
    }
    if (args.front().starts_with("--dir=")) {
      dir = std::string(args.front().substr(6));
      args.erase(args.begin());
      continue;
    }
    return usage_error("unknown option " + std::string(args.front()), kMainHelp);
  }
  if (args.empty()) return usage_error("no command", kMainHelp);
  const std::string_view command = args.front();
  args.erase(args.begin());
  const char* help = help_of(command);
  if (!help) return usage_error("unknown command " + std::string(command), kMainHelp);
  for (std::string_view a : args) {
    if (a == "--help" || a == "-h") {
      std::fputs(help, stdout);
      return kOk;
    }
  }
  if (command == "help") {
    if (args.empty()) {
      std::fputs(kMainHelp, stdout);
      return kOk;
    }
    const char* h = help_of(args.front());
    if (!h) return usage_error("unknown command " + std::string(args.front()), kMainHelp);
    std::fputs(h, stdout);
    return kOk;
  }

  // Parse the command's options before touching the store.
  bool fix = false;
  bool json = false;
  bool recount = false;
  std::optional<std::uint64_t> max_mb, older_than_days;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string_view a = args[i];
    if (command == "verify" && a == "--fix") {
      fix = true;
    } else if (command == "list" && a == "--json") {
      json = true;
    } else if (command == "stats" && a == "--recount" && !remote) {
      recount = true;
    } else if (command == "prune" && (a == "--max-size" || a == "--older-than") && i + 1 < args.size()) {
      const auto value = number(args[i + 1]);
      if (!value) return usage_error("bad number " + std::string(args[i + 1]) + " for " + std::string(a), help);
      (a == "--max-size" ? max_mb : older_than_days) = value;
      ++i;
    } else {
      return usage_error("unexpected argument " + std::string(a), help);
    }
  }
  if (command == "prune" && !max_mb && !older_than_days) {
    return usage_error("prune needs --max-size or --older-than", help);
  }
  if (remote) {
    if (dir) return usage_error("--dir and --remote name different stores: give one", kMainHelp);
    if (*remote == "env") {
      const char* value = std::getenv("UNICACHE_REMOTE_CACHE");
      if (!value || !*value) {
        std::fprintf(stderr, "unicache-store: --remote=env, but UNICACHE_REMOTE_CACHE is not set\n");
        return kUsage;
      }
      *remote = value;
      if (secret_file.empty()) {
        const char* file = std::getenv("UNICACHE_REMOTE_CACHE_SECRET_FILE");
        if (file) secret_file = file;
      }
    }
    return run_remote(command, fix, json, *remote, secret_file);
  }

  unicache::store_config config = unicache::store_config::from_environment();
  config.enabled = true;  // the tool manages the directory whatever the switch says
  if (dir) config.directory = *dir;
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
    if (command == "stats") {
      const unicache::store_stats s = store.stats(recount);
      std::printf("directory:        %s\n", config.directory.c_str());
      std::printf("entries:          %llu%s\n", static_cast<unsigned long long>(s.entries),
                  recount ? "" : " (recorded)");
      if (recount) std::printf("bytes on disk:    %llu\n", static_cast<unsigned long long>(s.bytes));
      std::printf("bytes recorded:   %llu\n", static_cast<unsigned long long>(s.recorded_bytes));
      if (config.max_size_bytes == 0 || !config.size_eviction) {
        std::printf("maximum:          none (%s)\n", config.max_size_bytes == 0 ? "no size limit" : "size eviction off");
      } else {
        std::printf("maximum:          %llu\n", static_cast<unsigned long long>(config.max_size_bytes));
      }
      std::printf("devices:          %llu\n", static_cast<unsigned long long>(s.devices));
      if (recount) std::printf("temporary files:  %llu\n", static_cast<unsigned long long>(s.temporary_files));
      return kOk;
    }
    if (command == "list") {
      const auto entries = store.list();
      if (json) {
        print_list_json(config.directory, entries);
      } else {
        print_list(entries);
      }
      return kOk;
    }
    if (command == "verify") {
      const auto bad = store.verify(fix);
      for (const auto& e : bad) {
        std::printf("%s %s: %s\n", fix ? "removed" : "bad", e.path.c_str(), e.problem.c_str());
      }
      std::printf("%zu bad entr%s%s\n", bad.size(), bad.size() == 1 ? "y" : "ies", fix && !bad.empty() ? " removed" : "");
      return bad.empty() || fix ? kOk : kFailure;
    }
    if (command == "prune") {
      const std::uint64_t max_bytes =
          max_mb && *max_mb <= (UINT64_MAX >> 20) ? *max_mb << 20 : UINT64_MAX;
      const std::uint64_t removed = store.prune(max_bytes, older_than_days ? static_cast<std::uint32_t>(*older_than_days) : 0);
      std::printf("%llu entries removed\n", static_cast<unsigned long long>(removed));
      return kOk;
    }
    if (command == "clear") {
      store.clear();
      std::printf("cleared %s\n", config.directory.c_str());
      return kOk;
    }
  } catch (const unicache::store_error& e) {
    std::fprintf(stderr, "unicache-store: %s\n", e.what());
    return kFailure;
  }
  return kUsage;
}
