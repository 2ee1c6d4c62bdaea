// host_c_backend: a whole backend in one file, the one docs/writing-a-backend.md
// walks through. It runs element-wise partitions (ReLU, Sigmoid, Tanh) on the
// host with kernels it generates in C and compiles with the system's C
// compiler into shared objects, through the kernel path: the first process
// compiles each kernel once, later ones load it from the store.
//
//   host_c_backend [--store DIR]   runs ReLU and Sigmoid on a few shapes twice:
//                                  built, then loaded from the store (DIR, else
//                                  a temporary directory)
#include <dlfcn.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "unicache/backend.hpp"
#include "unicache/compiler.hpp"
#include "unicache/graph.hpp"
#include "unicache/kernel_path.hpp"
#include "unicache/store.hpp"

extern char** environ;

namespace host_c {

using namespace unicache;

// The owner id of this backend's cache entries: a constant no other backend
// uses (the core refuses a second claimant).
inline constexpr owner_id kOwner = 0x4C0C0001;

// What the engine carries: the compiler that builds the kernels, and the
// identity of what it builds (a binary from another compiler never loads).
struct engine_state {
  std::string compiler = "cc";
  device_identity identity;
};

// --- The kernel path: build from source, load a binary --------------------------

// A built kernel: a shared object loaded into the process, its entry point,
// and the image it was loaded from (what the store keeps).
using entry_point = void (*)(const float* x, float* y, long n);

class shared_object final : public device_program {
 public:
  shared_object(int fd, void* handle, entry_point entry, byte_vector image)
      : fd_(fd), handle_(handle), entry_(entry), image_(std::move(image)) {}
  ~shared_object() override {
    ::dlclose(handle_);
    ::close(fd_);
  }
  byte_vector binary() const override { return image_; }
  std::size_t binary_size() const override { return image_.size(); }
  entry_point entry() const { return entry_; }

 private:
  int fd_;  // the loaded file: open while loaded, so that its name stays this object's
  void* handle_;
  entry_point entry_;
  byte_vector image_;
};

// Loads a shared object from memory (an anonymous file, never a path another
// process could swap); nullptr when the loader refuses it. The file stays
// open while the object is loaded: the loader knows objects by name, and a
// closed descriptor's number (its name, /proc/self/fd/N) is soon another's.
// Loading runs the object's initializers: it is code, as a GPU binary is,
// trusted as far as the store that holds it (docs/writing-a-backend.md).
std::unique_ptr<shared_object> load_image(const kernel_source& src, byte_vector image) {
  const int fd = ::memfd_create(src.kernel_name.c_str(), MFD_CLOEXEC);
  if (fd < 0) throw compile_error("host_c: memfd_create: " + std::string(std::strerror(errno)));
  const bool written = ::write(fd, image.data(), image.size()) == static_cast<ssize_t>(image.size());
  void* handle = written ? ::dlopen(("/proc/self/fd/" + std::to_string(fd)).c_str(), RTLD_NOW | RTLD_LOCAL) : nullptr;
  auto entry = handle ? reinterpret_cast<entry_point>(::dlsym(handle, src.kernel_name.c_str())) : nullptr;
  if (!entry) {  // refused, or an image of something else
    if (handle) ::dlclose(handle);
    ::close(fd);
    return nullptr;
  }
  return std::make_unique<shared_object>(fd, handle, entry, std::move(image));
}

// Runs `argv` and waits; true when it exited with 0. With `output`, its
// standard output is read into it (its first 4 KB).
bool run(std::vector<std::string> argv, std::string* output = nullptr) {
  std::vector<char*> args;
  for (std::string& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  int out[2] = {-1, -1};
  posix_spawn_file_actions_t actions;
  ::posix_spawn_file_actions_init(&actions);
  if (output && ::pipe2(out, O_CLOEXEC) == 0) ::posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  pid_t pid = 0;
  const bool spawned = ::posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ) == 0;
  ::posix_spawn_file_actions_destroy(&actions);
  if (out[1] >= 0) ::close(out[1]);
  if (out[0] >= 0) {
    char buffer[4096];
    const ssize_t n = spawned ? ::read(out[0], buffer, sizeof buffer) : 0;
    output->assign(buffer, n > 0 ? static_cast<std::size_t>(n) : 0);
    ::close(out[0]);
  }
  int status = 0;
  return spawned && ::waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

class builder final : public kernel_builder {
 public:
  explicit builder(const engine_state& state) : state_(state) {}
  const char* backend_name() const override { return "host_c"; }
  device_identity identity() const override { return state_.identity; }

  // C source -> a shared object, with the system's compiler.
  std::unique_ptr<device_program> build(const kernel_source& src) const override {
    const std::filesystem::path dir = make_temp_dir();
    const std::string c = (dir / "kernel.c").string(), so = (dir / "kernel.so").string();
    std::ofstream(c) << src.source;
    const bool built = run({state_.compiler, src.options, "-shared", "-fPIC", "-o", so, c});
    std::ifstream in(so, std::ios::binary);
    byte_vector image((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
    if (!built || image.empty()) throw compile_error("host_c: " + state_.compiler + " could not build " + src.kernel_name);
    std::unique_ptr<shared_object> loaded = load_image(src, std::move(image));
    if (!loaded) throw compile_error("host_c: the kernel " + src.kernel_name + " just built does not load");
    return loaded;
  }

  // A binary from the store or a blob; nullptr (rebuilt from source) when
  // the loader refuses it.
  std::unique_ptr<device_program> load(const kernel_source& src, byte_span binary) const override {
    return load_image(src, byte_vector(binary.begin(), binary.end()));
  }

 private:
  static std::filesystem::path make_temp_dir() {
    std::error_code error;
    std::string pattern = (std::filesystem::temp_directory_path(error) / "host-c-XXXXXX").string();
    if (error || !::mkdtemp(pattern.data())) throw compile_error("host_c: no temporary directory to build in");
    return pattern;
  }
  const engine_state& state_;
};

// --- Kernels and the backend ----------------------------------------------------

// The generated source of one element-wise op: sizes are arguments, so one
// kernel serves every shape.
kernel_source eltwise_source(op_kind kind) {
  kernel_source src;
  const char* body = nullptr;
  switch (kind) {
    case op_kind::relu: src.kernel_name = "relu", body = "x[i] > 0.0f ? x[i] : 0.0f"; break;
    case op_kind::sigmoid: src.kernel_name = "sigmoid", body = "1.0f / (1.0f + expf(-x[i]))"; break;
    case op_kind::tanh: src.kernel_name = "tanh_", body = "tanhf(x[i])"; break;
    default: throw compile_error(std::string("host_c: no kernel for ") + to_string(kind));
  }
  src.language = "c";
  src.options = "-O2";
  src.source = "#include <math.h>\nvoid " + src.kernel_name +
               "(const float* x, float* y, long n) {\n  for (long i = 0; i < n; ++i) y[i] = " + body + ";\n}\n";
  src.config = "host_c/eltwise/" + src.kernel_name;  // the kernel cache key: one kernel per op kind
  return src;
}

class eltwise_kernel final : public compiled_kernel {
 public:
  explicit eltwise_kernel(std::shared_ptr<const kernel> k) : kernel_(std::move(k)) {}
  void execute(stream&, const std::vector<tensor>& inputs, const std::vector<tensor>& outputs) const override {
    long n = 1;
    for (std::int64_t d : inputs[0].desc.shape) n *= d;
    const entry_point f = kernel_->program<shared_object>().entry();
    // launch() times the first run and then puts a kernel built from source
    // in the store.
    kernel_->launch([&] { f(static_cast<const float*>(inputs[0].data), static_cast<float*>(outputs[0].data), n); });
  }
  std::vector<kernel_binary> binaries() const override { return binaries_of({kernel_.get()}); }

 private:
  std::shared_ptr<const kernel> kernel_;
};

class host_c_backend final : public backend {
 public:
  const char* name() const override { return "host_c"; }
  engine_kind kind() const override { return engine_kind::cpu; }
  owner_id cache_owner() const override { return kOwner; }

  std::shared_ptr<const compiled_kernel> compile(const partition& p, const std::vector<logical_tensor>& /*in*/,
                                                 const std::vector<logical_tensor>& /*out*/, const engine& e,
                                                 const std::vector<kernel_binary>& preloaded) override {
    if (p.pattern() != partition::kind::eltwise) {
      throw compile_error(std::string("host_c: no kernel for a ") + to_string(p.ops().front().kind) + " partition");
    }
    const engine_state& state = e.native<engine_state>();  // checked: throws for another backend's engine
    return std::make_shared<eltwise_kernel>(
        get_or_build_kernel(kOwner, e.scope(), builder(state), eltwise_source(p.ops().front().kind), preloaded));
  }
  // The kernels take their sizes as arguments: every shape of a partition
  // shares one compiled partition and one blob.
  std::string kernel_configuration(const partition& /*p*/, const std::vector<std::vector<std::int64_t>>& shapes,
                                   const engine& /*e*/) const override {
    return shape_mode_configuration(kernel_shapes::agnostic, shapes);
  }
  stream make_stream(const engine& e) override { return stream(e, nullptr); }
  device_identity identity(const engine& e) const override { return e.native<engine_state>().identity; }
};

// What decides whether a binary loads and runs the same: the machine it is
// for and the compiler that built it ("x86_64-linux-gnu", "cc 12.2.0"). A
// binary from another machine type or compiler is never served.
device_identity compiler_identity(const std::string& compiler) {
  std::string machine, version;
  if (!run({compiler, "-dumpmachine"}, &machine) || !run({compiler, "-dumpfullversion"}, &version)) {
    throw compile_error("host_c: no C compiler (" + compiler + ") to build kernels with");
  }
  const auto line = [](std::string s) { return s.substr(0, s.find('\n')); };
  return {"host_c", line(machine), "c", compiler + " " + line(version)};
}

// The one call that registers the backend, on its first engine.
engine make_engine() {
  static host_c_backend* const backend = [] {
    auto* b = new host_c_backend();  // lives as long as the process
    register_backend(b);             // its name, and its owner id's name
    return b;
  }();
  auto state = std::make_shared<engine_state>();
  state->identity = compiler_identity(state->compiler);
  return engine(backend, host_cpu_device_id, /*context_id=*/0, state);
}

}  // namespace host_c


// --- The demo ---------------------------------------------------------------------

namespace {

using namespace unicache;

// ReLU then Sigmoid (two kernels, loaded side by side) on a few shapes;
// false when a result is wrong.
bool run_model(const engine& e) {
  graph g;
  auto x = g.tensor({-1, 16}), h = g.tensor({-1, 16}), y = g.tensor({-1, 16});
  g.add_op(op_kind::relu, {x}, {h});
  g.add_op(op_kind::sigmoid, {h}, {y});
  g.finalize();
  stream s = make_stream(e);
  for (std::int64_t rows : {1, 7, 64}) {
    std::vector<float> in(static_cast<std::size_t>(rows * 16)), mid(in.size()), out(in.size());
    for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i % 7) - 3.0f;
    compiled_partition relu = compile(g.partitions()[0], {{rows, 16}}, e);
    compiled_partition sigmoid = compile(g.partitions()[1], {{rows, 16}}, e);
    relu.execute(s, {{relu.inputs()[0], in.data()}}, {{relu.outputs()[0], mid.data()}});
    sigmoid.execute(s, {{sigmoid.inputs()[0], mid.data()}}, {{sigmoid.outputs()[0], out.data()}});
    for (std::size_t i = 0; i < in.size(); ++i) {
      const float want = 1.0f / (1.0f + std::exp(-std::max(in[i], 0.0f)));
      if (std::fabs(out[i] - want) > 1e-6f) return false;
    }
  }
  return true;
}

void usage(std::FILE* to) {
  std::fprintf(to, "usage: host_c_backend [--store DIR]\n"
                   "A whole backend in one file (docs/writing-a-backend.md): ReLU and Sigmoid compiled from generated C\n"
                   "by the system's C compiler, through the kernel path. Runs a few shapes, then clears the kernel\n"
                   "cache and runs them again: each kernel is built once, then loaded from the store in DIR (default: a\n"
                   "temporary directory, removed at exit).\n");
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      usage(stdout);
      return 0;
    } else if (a == "--store" && i + 1 < argc) {
      dir = argv[++i];
    } else {
      std::fprintf(stderr, "host_c_backend: unknown argument %s\n", a.c_str());
      usage(stderr);
      return 2;
    }
  }
  std::filesystem::path temporary;
  if (dir.empty()) {
    std::error_code error;
    std::string pattern = (std::filesystem::temp_directory_path(error) / "host-c-store-XXXXXX").string();
    if (error || !::mkdtemp(pattern.data())) return 1;
    dir = temporary = pattern;
  }
  kernel_store::instance().set_directory(dir);
  int status = 0;
  try {
    const engine e = host_c::make_engine();
    const bool first = run_model(e);
    kernel_cache().clear();  // the next compile finds the kernel in the store, not in memory
    const bool second = run_model(e);
    const kernel_path_stats k = kernel_path::stats(host_c::kOwner);
    std::printf("host_c: results %s; kernels built from source %llu, loaded from the store %llu, stored %llu\n",
                first && second ? "correct" : "WRONG", static_cast<unsigned long long>(k.from_source),
                static_cast<unsigned long long>(k.from_binary), static_cast<unsigned long long>(k.stored));
    status = first && second && k.from_source == 2 && k.from_binary == 2 && k.stored == 2 ? 0 : 1;
  } catch (const unicache::error& err) {
    std::fprintf(stderr, "host_c: %s\n", err.what());
    status = 1;
  }
  std::error_code ignored;
  if (!temporary.empty()) std::filesystem::remove_all(temporary, ignored);
  return status;
}
