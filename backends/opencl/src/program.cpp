// The kernel path: kernel cache -> preloaded binary -> persistent store ->
// clBuildProgram from source; binaries stored after their first launch.
#include <string>
#include <vector>

#include "opencl_internal.hpp"
#include "unicache/cache.hpp"
#include "unicache/cache_key.hpp"

namespace unicache::opencl::detail {
namespace {

// What a program entry counts against the kernel cache's capacity: about a
// program's binary and driver state.
constexpr std::size_t kProgramBytesEstimate = 128 * 1024;

std::string build_log(cl_program p, cl_device_id device) {
  std::size_t n = 0;
  if (clGetProgramBuildInfo(p, device, CL_PROGRAM_BUILD_LOG, 0, nullptr, &n) != CL_SUCCESS) return "";
  std::string log(n, '\0');
  if (clGetProgramBuildInfo(p, device, CL_PROGRAM_BUILD_LOG, n, log.data(), nullptr) != CL_SUCCESS) return "";
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
  return log;
}

// A program from a stored binary, or nullptr if the driver refuses it (at
// creation, build or kernel creation): the caller rebuilds from source.
struct built {
  cl_program program = nullptr;
  cl_kernel kernel = nullptr;
};
built from_binary(const engine_state& s, const byte_vector& binary, const std::string& kernel_name) {
  const unsigned char* data = binary.data();
  const std::size_t size = binary.size();
  cl_int binary_status = CL_SUCCESS, err = CL_SUCCESS;
  cl_program p = clCreateProgramWithBinary(s.context, 1, &s.device, &size, &data, &binary_status, &err);
  if (err != CL_SUCCESS || binary_status != CL_SUCCESS) {
    if (p) clReleaseProgram(p);
    return {};
  }
  if (clBuildProgram(p, 1, &s.device, nullptr, nullptr, nullptr) != CL_SUCCESS) {
    clReleaseProgram(p);
    return {};
  }
  cl_kernel k = clCreateKernel(p, kernel_name.c_str(), &err);
  if (err != CL_SUCCESS) {
    clReleaseProgram(p);
    return {};
  }
  return {p, k};
}

}  // namespace

std::string kernel_source::store_key() const {
  cache_key k;
  k.add("opencl-c").add(kernel_name).add(options).add(source);
  return std::string(k.bytes());
}

cl_program build_from_source(const engine_state& s, const std::string& source, const std::string& options) {
  const char* text = source.c_str();
  cl_int err = CL_SUCCESS;
  cl_program p = clCreateProgramWithSource(s.context, 1, &text, nullptr, &err);
  check(err, "clCreateProgramWithSource");
  err = clBuildProgram(p, 1, &s.device, options.c_str(), nullptr, nullptr);
  if (err != CL_SUCCESS) {
    const std::string log = build_log(p, s.device);
    clReleaseProgram(p);
    throw opencl_error("opencl: building a kernel for " + s.info.device_name + " failed: " + status_name(err) +
                           (log.empty() ? std::string() : "\nbuild log:\n" + log),
                       err);
  }
  return p;
}

program::program(cl_program p, cl_kernel k, std::string store_key, device_identity identity,
                 bool store_after_launch)
    : program_(p),
      kernel_(k),
      store_key_(std::move(store_key)),
      identity_(std::move(identity)),
      store_pending_(store_after_launch) {}

program::~program() {
  clReleaseKernel(kernel_);
  clReleaseProgram(program_);
}

void program::enqueue(const stream& s, cl_uint dims, const std::size_t* global, const std::size_t* local) const {
  check(clEnqueueNDRangeKernel(s.native<stream_state>().queue, kernel_, dims, nullptr, global, local, 0, nullptr,
                               nullptr),
        "clEnqueueNDRangeKernel");
}

void program::finish(const stream& s) const {
  check(clFinish(s.native<stream_state>().queue), "clFinish");
  if (store_pending_.load(std::memory_order_relaxed) && store_pending_.exchange(false)) {
    const byte_vector bin = binary();
    if (!bin.empty() && kernel_store::instance().put(identity_, store_key_, bin)) {
      stats_counters().binaries_stored.fetch_add(1, std::memory_order_relaxed);
    }
  }
}

byte_vector program::binary() const {
  std::size_t size = 0;
  if (clGetProgramInfo(program_, CL_PROGRAM_BINARY_SIZES, sizeof size, &size, nullptr) != CL_SUCCESS || size == 0) {
    return {};
  }
  byte_vector out(size);
  unsigned char* data = out.data();
  if (clGetProgramInfo(program_, CL_PROGRAM_BINARIES, sizeof data, &data, nullptr) != CL_SUCCESS) return {};
  return out;
}

std::shared_ptr<const program> get_program(const engine& e, const kernel_source& src,
                                           const std::vector<kernel_binary>& preloaded) {
  const engine_state& s = e.native<engine_state>();
  return kernel_cache()
      .get_or_build<const program>(
          e.scope(), backend_id_value, src.config, kProgramBytesEstimate,
          [&]() -> std::shared_ptr<const program> {
            const std::string key = src.store_key();
            counters& c = stats_counters();
            for (const kernel_binary& b : preloaded) {
              if (b.key != key) continue;
              const auto start = std::chrono::steady_clock::now();
              built got = from_binary(s, b.binary, src.kernel_name);
              counters::add_time(c.load_ns, start);
              if (got.program) {
                c.programs_from_binary.fetch_add(1, std::memory_order_relaxed);
                return std::make_shared<const program>(got.program, got.kernel, key, s.identity, true);
              }
              c.binaries_rejected.fetch_add(1, std::memory_order_relaxed);
            }
            kernel_store& store = kernel_store::instance();
            const auto load_start = std::chrono::steady_clock::now();
            if (std::optional<byte_vector> stored = store.get(s.identity, key)) {
              built got = from_binary(s, *stored, src.kernel_name);
              counters::add_time(c.load_ns, load_start);
              if (got.program) {
                c.programs_from_binary.fetch_add(1, std::memory_order_relaxed);
                return std::make_shared<const program>(got.program, got.kernel, key, s.identity, false);
              }
              // The driver refused it (another driver build behind the same
              // version string, a damaged file): it goes, and the rebuilt
              // binary takes its place.
              c.binaries_rejected.fetch_add(1, std::memory_order_relaxed);
              store.remove(s.identity, key);
            }
            const auto build_start = std::chrono::steady_clock::now();
            cl_program p = build_from_source(s, src.source, src.options);
            counters::add_time(c.build_ns, build_start);
            cl_int err = CL_SUCCESS;
            cl_kernel k = clCreateKernel(p, src.kernel_name.c_str(), &err);
            if (err != CL_SUCCESS) {
              clReleaseProgram(p);
              check(err, "clCreateKernel(" + src.kernel_name + ")");
            }
            c.programs_from_source.fetch_add(1, std::memory_order_relaxed);
            return std::make_shared<const program>(p, k, key, s.identity, true);
          })
      .value();
}

}  // namespace unicache::opencl::detail
