// The OpenCL side of the kernel path: building generated OpenCL C, creating
// programs from binaries, reading binaries back, enqueueing.
#include <string>
#include <vector>

#include "opencl_internal.hpp"

namespace unicache::opencl::detail {
namespace {

std::string build_log(cl_program p, cl_device_id device) {
  std::size_t n = 0;
  if (clGetProgramBuildInfo(p, device, CL_PROGRAM_BUILD_LOG, 0, nullptr, &n) != CL_SUCCESS) return "";
  std::string log(n, '\0');
  if (clGetProgramBuildInfo(p, device, CL_PROGRAM_BUILD_LOG, n, log.data(), nullptr) != CL_SUCCESS) return "";
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
  return log;
}

}  // namespace

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

program::program(cl_program p, cl_kernel k, byte_vector binary) : program_(p), kernel_(k), binary_(std::move(binary)) {}

program::~program() {
  if (last_launch_) clReleaseEvent(last_launch_);
  clReleaseKernel(kernel_);
  clReleaseProgram(program_);
}

void program::enqueue(cl_command_queue queue, const gpu::kernel_args& args, const gpu::launch_dims& dims) const {
  std::lock_guard lock(launch_mu_);
  for (int i = 0; i < args.count(); ++i) {
    const cl_int r = clSetKernelArg(kernel_, static_cast<cl_uint>(i), args.size(i), args.value(i));
    if (r != CL_SUCCESS) check(r, "clSetKernelArg " + std::to_string(i));
  }
  // Until the binary is read back, the last launch is kept: the read waits for it.
  cl_event launched = nullptr;
  check(clEnqueueNDRangeKernel(queue, kernel_, 3, nullptr, dims.global.data(), dims.local.data(), 0, nullptr,
                               binary_.empty() ? &launched : nullptr),
        "clEnqueueNDRangeKernel");
  if (launched) {
    if (last_launch_) clReleaseEvent(last_launch_);
    last_launch_ = launched;
  }
}

byte_vector program::binary() const {
  std::lock_guard lock(launch_mu_);
  if (!binary_.empty()) return binary_;
  if (last_launch_) {
    clWaitForEvents(1, &last_launch_);
    clReleaseEvent(last_launch_);
    last_launch_ = nullptr;
  }
  std::size_t size = 0;
  if (clGetProgramInfo(program_, CL_PROGRAM_BINARY_SIZES, sizeof size, &size, nullptr) != CL_SUCCESS || size == 0) {
    return {};
  }
  byte_vector out(size);
  unsigned char* data = out.data();
  if (clGetProgramInfo(program_, CL_PROGRAM_BINARIES, sizeof data, &data, nullptr) != CL_SUCCESS) return {};
  binary_ = out;
  return out;
}

std::size_t program::binary_size() const {
  std::lock_guard lock(launch_mu_);
  if (!binary_.empty()) return binary_.size();
  std::size_t size = 0;
  if (clGetProgramInfo(program_, CL_PROGRAM_BINARY_SIZES, sizeof size, &size, nullptr) != CL_SUCCESS) return 0;
  return size;
}

std::unique_ptr<device_program> build_program(const engine& e, const kernel_source& src) {
  cl_program p = build_from_source(state_of(e), src.source, src.options);
  cl_int err = CL_SUCCESS;
  cl_kernel k = clCreateKernel(p, src.kernel_name.c_str(), &err);
  if (err != CL_SUCCESS) {
    clReleaseProgram(p);
    check(err, "clCreateKernel(" + src.kernel_name + ")");
  }
  return std::make_unique<program>(p, k);
}

namespace {

// The device or host is out of resources: not the binary's fault, and a
// rebuild would fail too.
void throw_if_out_of_resources(cl_int err, const std::string& what) {
  if (err == CL_OUT_OF_RESOURCES || err == CL_OUT_OF_HOST_MEMORY || err == CL_MEM_OBJECT_ALLOCATION_FAILURE) {
    check(err, what);
  }
}

}  // namespace

// Refused at creation, build or kernel creation: nullptr, and the core
// rebuilds from source. Out of resources: opencl_error.
std::unique_ptr<device_program> load_program(const engine& e, const kernel_source& src, byte_span binary) {
  const engine_state& state = state_of(e);
  const unsigned char* data = binary.data();
  const std::size_t size = binary.size();
  cl_int binary_status = CL_SUCCESS, err = CL_SUCCESS;
  cl_program p = clCreateProgramWithBinary(state.context, 1, &state.device, &size, &data, &binary_status, &err);
  if (err != CL_SUCCESS || binary_status != CL_SUCCESS) {
    if (p) clReleaseProgram(p);
    throw_if_out_of_resources(err, "clCreateProgramWithBinary(" + src.kernel_name + ")");
    return nullptr;
  }
  err = clBuildProgram(p, 1, &state.device, nullptr, nullptr, nullptr);
  if (err != CL_SUCCESS) {
    clReleaseProgram(p);
    throw_if_out_of_resources(err, "clBuildProgram(" + src.kernel_name + ", a stored binary)");
    return nullptr;
  }
  cl_kernel k = clCreateKernel(p, src.kernel_name.c_str(), &err);
  if (err != CL_SUCCESS) {
    clReleaseProgram(p);
    throw_if_out_of_resources(err, "clCreateKernel(" + src.kernel_name + ")");
    return nullptr;
  }
  return std::make_unique<program>(p, k, byte_vector(binary.begin(), binary.end()));
}

}  // namespace unicache::opencl::detail
