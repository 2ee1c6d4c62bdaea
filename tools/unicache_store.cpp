// unicache-store: inspect and maintain a persistent kernel store.
//
// Exit codes: 0 success; 1 the store is unusable, an operation failed, or
// `verify` found bad entries (without --fix); 2 usage error.
#include <time.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "unicache/store.hpp"

namespace {

constexpr int kOk = 0;
constexpr int kFailure = 1;
constexpr int kUsage = 2;

const char* const kMainHelp =
    "usage: unicache-store [--dir DIR] COMMAND [OPTIONS]\n"
    "\n"
    "Inspects and maintains the persistent kernel store of unicache.\n"
    "\n"
    "commands:\n"
    "  stats                       entries, bytes (on disk and recorded), devices\n"
    "  list                        one line per entry\n"
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
    "exit codes: 0 success; 1 the store is unusable, an operation failed, or\n"
    "verify found bad entries (without --fix); 2 usage error.\n";

struct command_help {
  const char* name;
  const char* text;
};
const command_help kCommandHelp[] = {
    {"stats",
     "usage: unicache-store [--dir DIR] stats\n\n"
     "Prints the number of entries, their bytes as found on disk and as the\n"
     "store's size file records them, the number of devices and of temporary\n"
     "files left by writers that died. Exit 0, or 1 if the store is unusable.\n"},
    {"list",
     "usage: unicache-store [--dir DIR] list\n\n"
     "Prints one line per entry: device hash (first 12 digits), binary bytes,\n"
     "last use (UTC), status, path. Exit 0, or 1 if the store is unusable.\n"},
    {"verify",
     "usage: unicache-store [--dir DIR] verify [--fix]\n\n"
     "Reads every entry and checks its magic, format version, sizes, checksum\n"
     "and that it lies in its device's and key's directory. Prints each bad\n"
     "entry and why. With --fix, removes them and temporary files, and\n"
     "recounts the size file. Exit 0 if every entry is valid (or --fix removed\n"
     "the bad ones), 1 if bad entries remain or the store is unusable.\n"},
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

std::optional<std::uint64_t> number(std::string_view text) {
  if (text.empty() || text.find_first_not_of("0123456789") != std::string_view::npos || text.size() > 18) {
    return std::nullopt;
  }
  return std::stoull(std::string(text));
}

int usage_error(const std::string& message, const char* help) {
  std::fprintf(stderr, "unicache-store: %s\n\n%s", message.c_str(), help);
  return kUsage;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string_view> args(argv + 1, argv + argc);
  std::optional<std::string> dir;
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
  std::optional<std::uint64_t> max_mb, older_than_days;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string_view a = args[i];
    if (command == "verify" && a == "--fix") {
      fix = true;
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
      const unicache::store_stats s = store.stats();
      std::printf("directory:        %s\n", config.directory.c_str());
      std::printf("entries:          %llu\n", static_cast<unsigned long long>(s.entries));
      std::printf("bytes on disk:    %llu\n", static_cast<unsigned long long>(s.bytes));
      std::printf("bytes recorded:   %llu\n", static_cast<unsigned long long>(s.recorded_bytes));
      std::printf("maximum:          %llu\n", static_cast<unsigned long long>(config.max_size_bytes));
      std::printf("devices:          %llu\n", static_cast<unsigned long long>(s.devices));
      std::printf("temporary files:  %llu\n", static_cast<unsigned long long>(s.temporary_files));
      return kOk;
    }
    if (command == "list") {
      for (const auto& e : store.list()) {
        std::printf("%.12s  %10llu  %s  %-8s  %s\n", e.device_hash.c_str(),
                    static_cast<unsigned long long>(e.binary_bytes), utc(e.last_use_unix).c_str(),
                    e.valid ? "ok" : "BAD", e.path.c_str());
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
