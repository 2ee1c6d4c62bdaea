// OpenCL engines: device selection, the device query and probe kernel,
// engine cache blobs, streams and buffers.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "opencl_internal.hpp"
#include "unicache/backend_support.hpp"
#include "unicache/cache_key.hpp"

namespace unicache::opencl {
namespace detail {
namespace {

constexpr const char* kEngineBlobKey = "opencl-engine-info/1";  // the payload's format

// Uses local memory and a barrier like the GEMM does, so that the limits the
// driver reports for it are the ones the generated kernels meet.
constexpr const char* kProbeSource = R"CLC(
__kernel void probe(__global float* out) {
  __local float scratch[256];
  const int l = get_local_id(0);
  scratch[l & 255] = (float)l;
  barrier(CLK_LOCAL_MEM_FENCE);
  out[get_global_id(0)] = scratch[(l + 1) & 255];
}
)CLC";

std::string device_string(cl_device_id d, cl_device_info what) {
  std::size_t n = 0;
  check(clGetDeviceInfo(d, what, 0, nullptr, &n), "clGetDeviceInfo");
  std::string s(n, '\0');
  check(clGetDeviceInfo(d, what, n, s.data(), nullptr), "clGetDeviceInfo");
  while (!s.empty() && s.back() == '\0') s.pop_back();
  return s;
}
template <typename T>
T device_value(cl_device_id d, cl_device_info what) {
  T v{};
  check(clGetDeviceInfo(d, what, sizeof v, &v, nullptr), "clGetDeviceInfo");
  return v;
}
std::string platform_name(cl_platform_id p) {
  std::size_t n = 0;
  check(clGetPlatformInfo(p, CL_PLATFORM_NAME, 0, nullptr, &n), "clGetPlatformInfo");
  std::string s(n, '\0');
  check(clGetPlatformInfo(p, CL_PLATFORM_NAME, n, s.data(), nullptr), "clGetPlatformInfo");
  while (!s.empty() && s.back() == '\0') s.pop_back();
  return s;
}

struct device_entry {
  int platform_index;
  int device_index;
  cl_device_id device;
  std::string description;  // "platform / device"
  bool is_gpu;
};

// Every device of every platform, platform-major. A platform that fails to
// list its devices is skipped (an ICD with no device reports an error).
std::vector<device_entry> all_devices() {
  cl_uint np = 0;
  if (clGetPlatformIDs(0, nullptr, &np) != CL_SUCCESS || np == 0) return {};
  std::vector<cl_platform_id> platforms(np);
  check(clGetPlatformIDs(np, platforms.data(), nullptr), "clGetPlatformIDs");
  std::vector<device_entry> out;
  for (cl_uint p = 0; p < np; ++p) {
    cl_uint nd = 0;
    if (clGetDeviceIDs(platforms[p], CL_DEVICE_TYPE_ALL, 0, nullptr, &nd) != CL_SUCCESS || nd == 0) continue;
    std::vector<cl_device_id> devices(nd);
    check(clGetDeviceIDs(platforms[p], CL_DEVICE_TYPE_ALL, nd, devices.data(), nullptr), "clGetDeviceIDs");
    for (cl_uint d = 0; d < nd; ++d) {
      const bool gpu = (device_value<cl_device_type>(devices[d], CL_DEVICE_TYPE) & CL_DEVICE_TYPE_GPU) != 0;
      out.push_back({static_cast<int>(p), static_cast<int>(d), devices[d],
                     platform_name(platforms[p]) + " / " + device_string(devices[d], CL_DEVICE_NAME), gpu});
    }
  }
  return out;
}

// UNICACHE_OPENCL_DEVICE ("P:D" or a name substring), else the first GPU,
// else the first device.
const device_entry& select_device(const std::vector<device_entry>& devices) {
  std::vector<gpu::listed_device> listed;
  for (const auto& d : devices) {
    listed.push_back({std::to_string(d.platform_index) + ":" + std::to_string(d.device_index), d.description, d.is_gpu});
  }
  return devices[gpu::select_device("OpenCL", "UNICACHE_OPENCL_DEVICE", listed)];
}

// cl_khr_pci_bus_info and NVIDIA's cl_nv_device_attribute_query.
constexpr cl_device_info kPciBusInfoKhr = 0x410F;
constexpr cl_device_info kPciBusIdNv = 0x4008, kPciSlotIdNv = 0x4009, kPciDomainIdNv = 0x400A;
struct pci_bus_info_khr {
  cl_uint domain, bus, device, function;
};

std::string pci_key(unsigned domain, unsigned bus, unsigned device, unsigned function) {
  char text[48];
  std::snprintf(text, sizeof text, "pci:%04x:%02x:%02x.%x", domain, bus, device, function);
  return text;
}

// What names the physical device behind `device`: its PCI address where the
// driver tells it (then the CUDA view of the same GPU has the same key),
// else the device itself.
std::string physical_key(cl_device_id device, const device_info& info) {
  pci_bus_info_khr pci{};
  if (clGetDeviceInfo(device, kPciBusInfoKhr, sizeof pci, &pci, nullptr) == CL_SUCCESS) {
    return pci_key(pci.domain, pci.bus, pci.device, pci.function);
  }
  cl_uint bus = 0, slot = 0, domain = 0;
  if (clGetDeviceInfo(device, kPciBusIdNv, sizeof bus, &bus, nullptr) == CL_SUCCESS &&
      clGetDeviceInfo(device, kPciSlotIdNv, sizeof slot, &slot, nullptr) == CL_SUCCESS) {
    if (clGetDeviceInfo(device, kPciDomainIdNv, sizeof domain, &domain, nullptr) != CL_SUCCESS) domain = 0;
    return pci_key(domain, bus, slot >> 3, slot & 7);  // the slot id is device << 3 | function
  }
  char address[32];
  std::snprintf(address, sizeof address, "%p", static_cast<void*>(device));
  return "opencl:" + info.platform_name + "/" + info.device_name + "@" + address;
}

void probe(cl_device_id device, cl_context context, device_info& info) {
  engine_state tmp;
  tmp.device = device;
  tmp.context = context;
  clRetainDevice(device);
  clRetainContext(context);
  cl_program prog = build_from_source(tmp, kProbeSource, "");
  cl_int err = CL_SUCCESS;
  cl_kernel k = clCreateKernel(prog, "probe", &err);
  if (err != CL_SUCCESS) {
    clReleaseProgram(prog);
    check(err, "clCreateKernel(probe)");
  }
  std::size_t wg = 0, multiple = 0;
  cl_ulong priv = 0;
  err = clGetKernelWorkGroupInfo(k, device, CL_KERNEL_WORK_GROUP_SIZE, sizeof wg, &wg, nullptr);
  if (err == CL_SUCCESS) {
    err = clGetKernelWorkGroupInfo(k, device, CL_KERNEL_PREFERRED_WORK_GROUP_SIZE_MULTIPLE, sizeof multiple,
                                   &multiple, nullptr);
  }
  if (err == CL_SUCCESS) {
    err = clGetKernelWorkGroupInfo(k, device, CL_KERNEL_PRIVATE_MEM_SIZE, sizeof priv, &priv, nullptr);
  }
  clReleaseKernel(k);
  clReleaseProgram(prog);
  check(err, "clGetKernelWorkGroupInfo(probe)");
  info.kernel_work_group_size = static_cast<std::uint32_t>(wg);
  info.preferred_work_group_multiple = static_cast<std::uint32_t>(multiple);
  info.kernel_private_memory_bytes = priv;
  gpu::count_probe_build(cache_owner_id);
}

std::string encode_info(const device_info& i) {
  cache_key k;
  k.add(i.platform_name).add(i.device_name).add(i.device_version).add(i.driver_version).add(i.is_gpu);
  k.add(i.compute_units).add(i.global_memory_bytes).add(i.local_memory_bytes).add(i.max_allocation_bytes);
  k.add(i.max_work_group_size).add(i.kernel_work_group_size).add(i.preferred_work_group_multiple);
  k.add(i.kernel_private_memory_bytes);
  return std::string(k.bytes());
}

device_info decode_info(std::string_view bytes) {
  cache_key_reader in(bytes);
  device_info i;
  i.platform_name = in.read_text();
  i.device_name = in.read_text();
  i.device_version = in.read_text();
  i.driver_version = in.read_text();
  i.is_gpu = in.read_bool();
  i.compute_units = in.read<std::uint32_t>();
  i.global_memory_bytes = in.read<std::uint64_t>();
  i.local_memory_bytes = in.read<std::uint64_t>();
  i.max_allocation_bytes = in.read<std::uint64_t>();
  i.max_work_group_size = in.read<std::uint32_t>();
  i.kernel_work_group_size = in.read<std::uint32_t>();
  i.preferred_work_group_multiple = in.read<std::uint32_t>();
  i.kernel_private_memory_bytes = in.read<std::uint64_t>();
  if (!in.done()) throw invalid_argument("trailing bytes");
  return i;
}

// `queried` completed with the probe's results from an encoded device_info
// (a blob's or the store's). Throws invalid_argument if the bytes are
// malformed or describe another device.
device_info with_probe_results(const device_info& queried, const byte_vector& encoded) {
  const device_info stored =
      decode_info(std::string_view(reinterpret_cast<const char*>(encoded.data()), encoded.size()));
  if (stored.device_name != queried.device_name || stored.platform_name != queried.platform_name) {
    throw invalid_argument("it describes " + stored.platform_name + " / " + stored.device_name);
  }
  device_info merged = queried;  // the queried facts are the device's own
  merged.kernel_work_group_size = stored.kernel_work_group_size;
  merged.preferred_work_group_multiple = stored.preferred_work_group_multiple;
  merged.kernel_private_memory_bytes = stored.kernel_private_memory_bytes;
  return merged;
}

engine wrap(cl_device_id device, cl_context context, device_info info) {
  auto s = std::make_shared<engine_state>();
  check(clRetainContext(context), "clRetainContext");
  s->context = context;
  clRetainDevice(device);
  s->device = device;
  s->facts.identity = identity_of(info);
  plan_for(info, s->facts);
  s->info = std::move(info);
  // The context's address names the scope: every cached kernel and packed
  // weight retains its context, so while any entry of this scope lives the
  // address cannot be reused by another context.
  // A CPU device (PoCL) is the host's CPU: a cpu engine, in the CPU's budget.
  const engine_kind kind = s->info.is_gpu ? engine_kind::gpu : engine_kind::cpu;
  const int device_id = physical_device_id(kind, physical_key(device, s->info));
  return engine(the_backend(), kind, device_id, reinterpret_cast<std::uintptr_t>(context), std::move(s));
}

}  // namespace

const engine_state& state_of(const engine& e) {
  if (e.get_backend() != the_backend()) throw opencl_error("not an OpenCL engine", CL_SUCCESS);
  return e.native<engine_state>();
}

std::string status_name(cl_int status) {
  const char* name = nullptr;
  switch (status) {
#define UNICACHE_CL_STATUS(s) \
  case s: name = #s; break;
    UNICACHE_CL_STATUS(CL_SUCCESS)
    UNICACHE_CL_STATUS(CL_DEVICE_NOT_FOUND)
    UNICACHE_CL_STATUS(CL_DEVICE_NOT_AVAILABLE)
    UNICACHE_CL_STATUS(CL_COMPILER_NOT_AVAILABLE)
    UNICACHE_CL_STATUS(CL_MEM_OBJECT_ALLOCATION_FAILURE)
    UNICACHE_CL_STATUS(CL_OUT_OF_RESOURCES)
    UNICACHE_CL_STATUS(CL_OUT_OF_HOST_MEMORY)
    UNICACHE_CL_STATUS(CL_BUILD_PROGRAM_FAILURE)
    UNICACHE_CL_STATUS(CL_INVALID_VALUE)
    UNICACHE_CL_STATUS(CL_INVALID_DEVICE)
    UNICACHE_CL_STATUS(CL_INVALID_CONTEXT)
    UNICACHE_CL_STATUS(CL_INVALID_COMMAND_QUEUE)
    UNICACHE_CL_STATUS(CL_INVALID_MEM_OBJECT)
    UNICACHE_CL_STATUS(CL_INVALID_BINARY)
    UNICACHE_CL_STATUS(CL_INVALID_BUILD_OPTIONS)
    UNICACHE_CL_STATUS(CL_INVALID_PROGRAM)
    UNICACHE_CL_STATUS(CL_INVALID_PROGRAM_EXECUTABLE)
    UNICACHE_CL_STATUS(CL_INVALID_KERNEL_NAME)
    UNICACHE_CL_STATUS(CL_INVALID_KERNEL)
    UNICACHE_CL_STATUS(CL_INVALID_ARG_INDEX)
    UNICACHE_CL_STATUS(CL_INVALID_ARG_VALUE)
    UNICACHE_CL_STATUS(CL_INVALID_ARG_SIZE)
    UNICACHE_CL_STATUS(CL_INVALID_KERNEL_ARGS)
    UNICACHE_CL_STATUS(CL_INVALID_WORK_DIMENSION)
    UNICACHE_CL_STATUS(CL_INVALID_WORK_GROUP_SIZE)
    UNICACHE_CL_STATUS(CL_INVALID_WORK_ITEM_SIZE)
    UNICACHE_CL_STATUS(CL_INVALID_GLOBAL_WORK_SIZE)
    UNICACHE_CL_STATUS(CL_INVALID_BUFFER_SIZE)
    UNICACHE_CL_STATUS(CL_INVALID_PLATFORM)
    case -1001: name = "CL_PLATFORM_NOT_FOUND_KHR"; break;  // cl_khr_icd: no platform
#undef UNICACHE_CL_STATUS
    default: break;
  }
  return std::string(name ? name : "OpenCL status") + " (" + std::to_string(status) + ")";
}

void check(cl_int status, const std::string& what) {
  if (status != CL_SUCCESS) throw opencl_error("opencl: " + what + " failed: " + status_name(status), status);
}

void plan_for(const device_info& info, gpu::engine_facts& facts) {
  const std::uint32_t wg = std::min(info.kernel_work_group_size, info.max_work_group_size);
  if (info.is_gpu && wg >= 256 && info.local_memory_bytes >= 32 * 1024) {
    facts.gemm = {64, 128, 16, 8, 8};  // 16x8 work-items, 8x8 each: 64 FMAs per 4 vector loads; 25 KB of tiles
  } else if (wg >= 256) {
    facts.gemm = {64, 64, 16, 4, 4};  // 16x16 work-items
  } else if (wg >= 64) {
    facts.gemm = {32, 32, 8, 4, 4};  // 8x8
  } else {
    facts.gemm = {16, 16, 8, 4, 4};  // 4x4
  }
  int v = 1;
  while (v * 2 <= static_cast<int>(std::min<std::uint32_t>(wg, 256))) v *= 2;
  facts.vector_work_group = v;
  // Split-K's rule is an SM count's (measured on NVIDIA GPUs); a CPU device
  // (its cores) gets none.
  facts.compute_units = info.is_gpu ? static_cast<int>(std::min<std::uint32_t>(info.compute_units, 1U << 16)) : 0;
  facts.local_memory_bytes = static_cast<std::size_t>(info.local_memory_bytes);
}

engine_state::~engine_state() {
  if (side_queue) clReleaseCommandQueue(side_queue);
  if (context) clReleaseContext(context);
  if (device) clReleaseDevice(device);
}
stream_state::~stream_state() {
  if (!queue) return;
  try {
    // The core frees the stream's workspace after the work queued so far.
    if (resources.holds_memory()) resources.set_final_event(record_marker(queue, false));
  } catch (const opencl_error&) {
    // No marker: the workspace is freed now (OpenCL keeps a released buffer
    // until the commands that use it are done).
  }
  clReleaseCommandQueue(queue);
}

device_info query_device(cl_device_id device) {
  device_info i;
  cl_platform_id platform = device_value<cl_platform_id>(device, CL_DEVICE_PLATFORM);
  i.platform_name = platform_name(platform);
  i.device_name = device_string(device, CL_DEVICE_NAME);
  i.device_version = device_string(device, CL_DEVICE_VERSION);
  i.driver_version = device_string(device, CL_DRIVER_VERSION);
  i.is_gpu = (device_value<cl_device_type>(device, CL_DEVICE_TYPE) & CL_DEVICE_TYPE_GPU) != 0;
  i.compute_units = device_value<cl_uint>(device, CL_DEVICE_MAX_COMPUTE_UNITS);
  i.global_memory_bytes = device_value<cl_ulong>(device, CL_DEVICE_GLOBAL_MEM_SIZE);
  i.local_memory_bytes = device_value<cl_ulong>(device, CL_DEVICE_LOCAL_MEM_SIZE);
  i.max_allocation_bytes = device_value<cl_ulong>(device, CL_DEVICE_MAX_MEM_ALLOC_SIZE);
  i.max_work_group_size = static_cast<std::uint32_t>(device_value<std::size_t>(device, CL_DEVICE_MAX_WORK_GROUP_SIZE));
  return i;
}

device_identity identity_of(const device_info& info) {
  return {info.platform_name, info.device_name, info.device_version, info.driver_version};
}

}  // namespace detail

using namespace detail;

engine make_engine(cl_device_id device, cl_context context) {
  device_info info = query_device(device);
  // The probe's results live in the persistent store like a kernel binary:
  // a warm process creates its engines without building anything.
  kernel_store& store = kernel_store::instance();
  const device_identity identity = identity_of(info);
  if (std::optional<byte_vector> stored = store.get(identity, kEngineBlobKey)) {
    try {
      return wrap(device, context, with_probe_results(info, *stored));
    } catch (const invalid_argument&) {
      store.remove(identity, kEngineBlobKey);  // another layout of the same key: probe again
    }
  }
  probe(device, context, info);
  const std::string payload = encode_info(info);
  store.put(identity, kEngineBlobKey, byte_span(reinterpret_cast<const unsigned char*>(payload.data()), payload.size()));
  return wrap(device, context, std::move(info));
}

cl_device_id default_device() {
  const std::vector<device_entry> devices = all_devices();
  if (devices.empty()) {
    throw opencl_error("opencl: no OpenCL device (install an ICD, e.g. pocl-opencl-icd, or a GPU driver)",
                       CL_DEVICE_NOT_FOUND);
  }
  return select_device(devices).device;
}

engine make_engine() {
  // One engine (one context) per device for the whole process: context
  // creation costs seconds on some drivers, and cached kernels belong to
  // the context that built them.
  const cl_device_id chosen = default_device();
  return gpu::engine_per_device(chosen, [&] {
    cl_int err = CL_SUCCESS;
    cl_context context = clCreateContext(nullptr, 1, &chosen, nullptr, nullptr, &err);
    check(err, "clCreateContext(" + device_string(chosen, CL_DEVICE_NAME) + ")");
    try {
      engine e = make_engine(chosen, context);
      clReleaseContext(context);  // the engine holds its own reference
      return e;
    } catch (...) {
      clReleaseContext(context);
      throw;
    }
  });
}

std::string get_engine_cache_blob_id(cl_device_id device) {
  return blob_id(identity_of(query_device(device)), kEngineBlobKey);
}

byte_vector get_engine_cache_blob(const engine& e) {
  const engine_state& s = state_of(e);
  return gpu::make_engine_blob(s.facts.identity, kEngineBlobKey, encode_info(s.info));
}

engine make_engine_from_cache_blob(cl_device_id device, cl_context context, byte_span blob) {
  const device_info queried = query_device(device);
  device_info merged;
  try {
    const std::string payload = gpu::read_engine_blob(identity_of(queried), kEngineBlobKey, blob);
    try {
      merged = with_probe_results(queried, byte_vector(payload.begin(), payload.end()));
    } catch (const invalid_argument& err) {
      throw invalid_argument(std::string("malformed engine info (") + err.what() + ")");
    }
  } catch (const invalid_argument& err) {
    throw opencl_error(std::string("opencl: engine cache blob rejected: ") + err.what(), CL_INVALID_VALUE);
  }
  return wrap(device, context, merged);
}

cl_command_queue native_queue(const stream& s) {
  state_of(s.get_engine());
  return s.native<stream_state>().queue;
}
const device_info& info(const engine& e) { return state_of(e).info; }
cl_device_id native_device(const engine& e) { return state_of(e).device; }
cl_context native_context(const engine& e) { return state_of(e).context; }

cl_mem make_buffer(const engine& e, std::size_t bytes, const void* host) {
  const engine_state& s = state_of(e);
  cl_int err = CL_SUCCESS;
  cl_mem m = clCreateBuffer(s.context, CL_MEM_READ_WRITE | (host ? CL_MEM_COPY_HOST_PTR : 0), bytes == 0 ? 1 : bytes,
                            const_cast<void*>(host), &err);
  check(err, "clCreateBuffer(" + std::to_string(bytes) + " bytes)");
  return m;
}

void read_buffer(const stream& s, cl_mem buffer, void* host, std::size_t bytes) {
  check(clEnqueueReadBuffer(native_queue(s), buffer, CL_TRUE, 0, bytes, host, 0, nullptr, nullptr),
        "clEnqueueReadBuffer");
}
void write_buffer(const stream& s, cl_mem buffer, const void* host, std::size_t bytes) {
  check(clEnqueueWriteBuffer(native_queue(s), buffer, CL_TRUE, 0, bytes, host, 0, nullptr, nullptr),
        "clEnqueueWriteBuffer");
}

std::vector<std::string> list_devices() {
  std::vector<std::string> out;
  for (const auto& d : all_devices()) {
    out.push_back(std::to_string(d.platform_index) + ":" + std::to_string(d.device_index) + " " + d.description +
                  (d.is_gpu ? " (GPU)" : " (CPU)"));
  }
  return out;
}

backend_stats stats() { return gpu::stats(cache_owner_id); }

}  // namespace unicache::opencl
