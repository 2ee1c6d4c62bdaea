// unicache-store precompile: a graph's kernels compiled ahead of time for
// listed CUDA architectures, with NVRTC and no GPU, into the store or into a
// bundle.
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "store_tool.hpp"
#include "unicache/compiler.hpp"
#include "unicache/graph.hpp"
#ifdef UNICACHE_STORE_WITH_CUDA
#include "unicache/cuda.hpp"
#endif

namespace unicache_store {
namespace {

struct cuda_target {
  int major = 0, minor = 0;
  int multiprocessors = 0;
  std::string arch;  // "sm_90"
};

// The SMs of the usual device of an architecture, which decide where a
// generic GEMM splits K: an A100 (sm_80) and an H100 SXM or H200 (sm_90).
int usual_multiprocessors(int major, int minor) {
  if (major == 8 && minor == 0) return 108;
  if (major == 9 && minor == 0) return 132;
  return 0;
}

// "sm_80,sm_90" with the SM count given (0: the usual one).
std::optional<std::vector<cuda_target>> parse_targets(const std::string& list, int multiprocessors, std::string& why) {
  std::vector<cuda_target> out;
  std::size_t at = 0;
  while (at <= list.size()) {
    const std::size_t end = std::min(list.find(',', at), list.size());
    const std::string arch = list.substr(at, end - at);
    at = end + 1;
    if (arch.size() < 5 || arch.size() > 6 || !arch.starts_with("sm_") ||
        arch.find_first_not_of("0123456789", 3) != std::string::npos) {
      why = "bad architecture \"" + arch + "\" (expected sm_XY, such as sm_90)";
      return std::nullopt;
    }
    cuda_target t;
    t.arch = arch;
    t.major = std::stoi(arch.substr(3, arch.size() - 4));
    t.minor = arch.back() - '0';
    t.multiprocessors = multiprocessors ? multiprocessors : usual_multiprocessors(t.major, t.minor);
    if (t.multiprocessors == 0) {
      why = "give --sm-count for " + arch + " (the multiprocessors of the fleet's devices)";
      return std::nullopt;
    }
    out.push_back(t);
  }
  return out;
}

// The graph document at `path`: a regular file of at most the reader's
// bound, opened without blocking (a FIFO never hangs).
std::optional<std::string> read_graph(const std::string& path, std::string& why) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    why = path + " cannot be opened";
    return std::nullopt;
  }
  struct stat st {};
  std::string text;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    why = path + " is not a regular file";
  } else if (static_cast<std::uint64_t>(st.st_size) > unicache::kGraphJsonMaxBytes) {
    why = path + " is larger than a graph document may be (64 MiB)";
  } else {
    text.resize(static_cast<std::size_t>(st.st_size));
    std::size_t got = 0;
    while (got < text.size()) {
      const ssize_t n = ::read(fd, text.data() + got, text.size() - got);
      if (n <= 0) break;
      got += static_cast<std::size_t>(n);
    }
    text.resize(got);
  }
  ::close(fd);
  if (!why.empty()) return std::nullopt;
  return text;
}

// A private directory for the store a bundle is made from, removed at exit
// ("" when it could not be made).
struct scratch_store {
  std::string path;
  scratch_store() {
    std::error_code ec;
    const std::filesystem::path tmp = std::filesystem::temp_directory_path(ec);
    std::string pattern = ((ec ? std::filesystem::path("/tmp") : tmp) / "unicache-precompile-XXXXXX").string();
    if (::mkdtemp(pattern.data())) path = pattern;
  }
  ~scratch_store() {
    std::error_code ignored;
    if (!path.empty()) std::filesystem::remove_all(path, ignored);
  }
};

int fail(const std::string& message, int code) {
  std::fprintf(stderr, "unicache-store: %s\n", message.c_str());
  return code;
}

}  // namespace

int precompile_command(const std::vector<std::string_view>& args, const options& global, const char* help) {
  std::string graph_path, arch_list, out;
  std::string secret_file = global.secret_file;
  int multiprocessors = 0;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string_view a = args[i];
    const bool has_value = i + 1 < args.size();
    if (a == "--cuda-arch" && has_value) {
      arch_list = std::string(args[++i]);
    } else if (a == "--out" && has_value) {
      out = std::string(args[++i]);
    } else if (a == "--secret-file" && has_value) {
      secret_file = std::string(args[++i]);
    } else if (a == "--sm-count" && has_value) {
      const std::string value(args[++i]);
      if (value.empty() || value.size() > 6 || value.find_first_not_of("0123456789") != std::string::npos ||
          std::stoi(value) < 1) {
        return fail("bad --sm-count " + value + "\n\n" + help, kUsage);
      }
      multiprocessors = std::stoi(value);
    } else if (!a.starts_with("--") && graph_path.empty()) {
      graph_path = std::string(a);
    } else {
      return fail("unexpected argument " + std::string(a) + "\n\n" + help, kUsage);
    }
  }
  if (graph_path.empty() || arch_list.empty()) return fail("precompile needs a GRAPH file and --cuda-arch\n\n" + std::string(help), kUsage);
  if (global.remote) return fail("precompile writes the local store or a bundle, not --remote", kUsage);
  std::string why;
  const auto targets = parse_targets(arch_list, multiprocessors, why);
  if (!targets) return fail(why, kUsage);
  const auto text = read_graph(graph_path, why);
  if (!text) return fail(why, kFailure);
#ifndef UNICACHE_STORE_WITH_CUDA
  return fail("this unicache-store was built without the CUDA backend (UNICACHE_WITH_CUDA=OFF)", kFailure);
#else
  try {
    const unicache::graph_document doc = unicache::graph_from_json(*text);
    // The kernel path stores through the process's store: pointed at the
    // target directory, or at a scratch one the bundle is made from.
    std::optional<scratch_store> scratch;
    std::string directory;
    if (!out.empty()) {
      scratch.emplace();
      if (scratch->path.empty()) return fail("no scratch directory for the bundle could be made (TMPDIR)", kFailure);
      directory = scratch->path;
    } else {
      directory = global.dir.value_or(unicache::store_config::from_environment().directory);
      if (directory.empty()) return fail("no store directory (use --dir, UNICACHE_PERSISTENT_CACHE_DIR or --out)", kFailure);
    }
    unicache::kernel_store& store = unicache::kernel_store::instance();
    store.set_remote("");  // this store alone: nothing goes to, or comes from, a fleet's server
    store.set_directory(directory);
    store.set_enabled(true);
    if (!store.enabled()) return fail("the store at " + directory + " cannot be used", kFailure);
    for (const cuda_target& t : *targets) {
      const unicache::engine e = unicache::cuda::make_offline_engine(t.major, t.minor, t.multiprocessors);
      const unicache::precompile_report r = unicache::precompile(doc.g, doc.requests, e);
      std::printf("%s (%d SMs): %llu compiles, %llu kernels: %llu stored, %llu stored already\n", t.arch.c_str(),
                  t.multiprocessors, static_cast<unsigned long long>(r.compiles),
                  static_cast<unsigned long long>(r.kernels), static_cast<unsigned long long>(r.stored),
                  static_cast<unsigned long long>(r.already_stored));
    }
    store.finish_eviction();
    if (out.empty()) return kOk;
    const unicache::bundle_report b = store.export_bundle(out, {}, secret_file);
    for (const std::string& line : b.refused) std::printf("refused: %s\n", line.c_str());
    std::printf("exported %llu entr%s to %s (%llu bytes%s)\n", static_cast<unsigned long long>(b.records),
                b.records == 1 ? "y" : "ies", out.c_str(), static_cast<unsigned long long>(b.bytes),
                secret_file.empty() ? "" : ", signed");
    return b.refused.empty() ? kOk : kFailure;
  } catch (const unicache::invalid_argument& e) {  // the secret file
    return fail(e.what(), kUsage);
  } catch (const std::exception& e) {
    return fail(e.what(), kFailure);
  }
#endif
}

}  // namespace unicache_store
