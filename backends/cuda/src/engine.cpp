// CUDA engines: availability, device selection, contexts, the device query,
// engine cache blobs, streams and buffers.
#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "cuda_internal.hpp"
#include "unicache/backend_support.hpp"
#include "unicache/cache_key.hpp"
#include "unicache/specialization.hpp"

namespace unicache::cuda {
namespace detail {
namespace {

constexpr const char* kEngineBlobKey = "cuda-engine-info/1";  // the payload's format

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

int attribute(CUdevice device, CUdevice_attribute what) {
  int value = 0;
  check(api().cuDeviceGetAttribute(&value, what, device), "cuDeviceGetAttribute");
  return value;
}

std::string device_name(CUdevice device) {
  char name[256] = {};
  check(api().cuDeviceGetName(name, sizeof name - 1, device), "cuDeviceGetName");
  return name;
}

CUdevice device_of(int ordinal) {
  CUdevice device = 0;
  check(api().cuDeviceGet(&device, ordinal), "cuDeviceGet(" + std::to_string(ordinal) + ")");
  return device;
}

device_info query_device(CUdevice device) {
  const driver_api& d = api();
  device_info i;
  i.device_name = device_name(device);
  i.compute_major = attribute(device, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
  i.compute_minor = attribute(device, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
  i.multiprocessors = attribute(device, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
  i.max_threads_per_block = attribute(device, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
  i.shared_memory_per_block = attribute(device, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK);
  std::size_t bytes = 0;
  check(d.cuDeviceTotalMem(&bytes, device), "cuDeviceTotalMem");
  i.global_memory_bytes = bytes;
  check(d.cuDriverGetVersion(&i.driver_version), "cuDriverGetVersion");
  i.driver_version = reported_driver_version(i.driver_version);
  i.nvrtc_version = nvrtc_version();
  char bus[64] = {};
  if (d.cuDeviceGetPCIBusId(bus, sizeof bus - 1, device) == CUDA_SUCCESS) i.pci_bus_id = lower(bus);
  i.target = compile_target(i.compute_major, i.compute_minor);
  return i;
}

// The PCI address in the form every backend uses for a physical device.
std::string physical_key(const device_info& i, int ordinal) {
  unsigned domain = 0, bus = 0, dev = 0, function = 0;
  if (std::sscanf(i.pci_bus_id.c_str(), "%x:%x:%x.%x", &domain, &bus, &dev, &function) == 4) {
    char key[48];
    std::snprintf(key, sizeof key, "pci:%04x:%02x:%02x.%x", domain, bus, dev, function);
    return key;
  }
  return "cuda:" + i.device_name + "#" + std::to_string(ordinal);
}

std::atomic<std::uint64_t> next_private_scope{1};

engine wrap(CUcontext context, CUdevice device, bool primary) {
  auto s = std::make_shared<engine_state>();
  s->context = context;
  s->device = device;
  s->primary = primary;
  s->info = query_device(device);
  s->facts.identity = code_identity(s->info);
  s->facts.compute_units = s->info.multiprocessors;
  s->facts.local_memory_bytes = static_cast<std::size_t>(std::max(s->info.shared_memory_per_block, 0));
  int ordinal = 0;
  const int n = device_count();
  for (int o = 0; o < n; ++o) {
    if (device_of(o) == device) ordinal = o;
  }
  const int device_id = physical_device_id(engine_kind::gpu, physical_key(s->info, ordinal));
  // A primary context's address names the scope: every cached kernel and
  // packed weight holds the engine state, which keeps the context retained,
  // so the address cannot name another context while any of them lives. A
  // caller's context cannot be retained: each engine over one gets a scope
  // of its own, never reused.
  const std::uint64_t context_id = primary ? reinterpret_cast<std::uintptr_t>(context)
                                           : (std::uint64_t{1} << 63) | next_private_scope.fetch_add(1);
  return engine(the_backend(), engine_kind::gpu, device_id, context_id, std::move(s));
}

std::string encode_info(const device_info& i) {
  cache_key k;
  k.add(i.device_name).add(i.compute_major).add(i.compute_minor).add(i.multiprocessors);
  k.add(i.global_memory_bytes).add(i.max_threads_per_block).add(i.shared_memory_per_block);
  k.add(i.driver_version).add(i.nvrtc_version).add(i.pci_bus_id).add(i.target);
  return std::string(k.bytes());
}

device_info decode_info(std::string_view bytes) {
  cache_key_reader in(bytes);
  device_info i;
  i.device_name = in.read_text();
  i.compute_major = in.read<int>();
  i.compute_minor = in.read<int>();
  i.multiprocessors = in.read<int>();
  i.global_memory_bytes = in.read<std::uint64_t>();
  i.max_threads_per_block = in.read<int>();
  i.shared_memory_per_block = in.read<int>();
  i.driver_version = in.read<int>();
  i.nvrtc_version = in.read<int>();
  i.pci_bus_id = in.read_text();
  i.target = in.read_text();
  if (!in.done()) throw invalid_argument("trailing bytes");
  return i;
}

// UNICACHE_CUDA_DEVICE: an ordinal or a name substring; else device 0.
int select_device() {
  api();  // without a driver, its reason
  const int n = device_count();
  if (n == 0) throw cuda_error("cuda: no CUDA device", CUDA_ERROR_NO_DEVICE);
  std::vector<gpu::listed_device> devices;
  for (int o = 0; o < n; ++o) devices.push_back({std::to_string(o), device_name(device_of(o))});
  return static_cast<int>(gpu::select_device("CUDA", "UNICACHE_CUDA_DEVICE", devices));
}

}  // namespace

const driver_api& api() {
  std::string why;
  const driver_api* d = driver(&why);
  if (!d) throw cuda_error("cuda: the backend is unavailable: " + why, CUDA_ERROR_NO_DEVICE);
  return *d;
}

void check(CUresult result, const std::string& what) {
  if (result != CUDA_SUCCESS) throw cuda_error("cuda: " + what + " failed: " + result_name(result), result);
}

context_guard::context_guard(CUcontext context) {
  CUcontext current = nullptr;
  const driver_api& d = api();
  if (d.cuCtxGetCurrent(&current) == CUDA_SUCCESS && current == context) return;
  check(d.cuCtxPushCurrent(context), "cuCtxPushCurrent");
  pushed_ = true;
}

context_guard::~context_guard() {
  if (!pushed_) return;
  CUcontext popped = nullptr;
  api().cuCtxPopCurrent(&popped);
}

void engine_state::release_events() const {
  {
    std::lock_guard lock(side_mu);
    if (side_stream) {
      try {
        context_guard guard(context);
        api().cuStreamDestroy(side_stream);
      } catch (...) {
        // The context is gone already, and the stream with it.
      }
      side_stream = nullptr;
    }
  }
  std::vector<CUevent> pooled;
  {
    std::lock_guard lock(events_mu);
    context_released = true;
    for (std::vector<CUevent>& pool : free_events) {
      pooled.insert(pooled.end(), pool.begin(), pool.end());
      pool.clear();
    }
  }
  try {
    context_guard guard(context);
    for (CUevent e : pooled) api().cuEventDestroy(e);
  } catch (...) {
    // The context is gone already, and its events with it.
  }
}

engine_state::~engine_state() {
  if (side_stream && !context_released) {
    try {
      context_guard guard(context);
      api().cuStreamDestroy(side_stream);
    } catch (...) {
      // The context (or the driver, at exit) is gone, and the stream with it.
    }
  }
  if (!context_released && (!free_events[0].empty() || !free_events[1].empty())) {
    try {
      context_guard guard(context);
      for (const std::vector<CUevent>& pool : free_events) {
        for (CUevent e : pool) api().cuEventDestroy(e);
      }
    } catch (...) {
      // The context (or the driver, at exit) is gone, and its events with it.
    }
  }
  if (primary) api().cuDevicePrimaryCtxRelease(device);
}

stream_state::~stream_state() {
  try {
    // The core frees the stream's workspace after the work queued so far
    // (without this event, after the stream's last execution).
    if (resources.holds_memory() && engine) resources.set_final_event(record_event(*this, false));
  } catch (...) {
    // No event: the core falls back to the last execution's.
  }
  if (!owned || !stream) return;
  try {
    context_guard guard(context);
    api().cuStreamDestroy(stream);
  } catch (...) {
    // The context (or the driver, at exit) is gone, and the stream with it.
  }
}

const engine_state& state_of(const engine& e) {
  if (e.get_backend() != the_backend()) throw cuda_error("not a CUDA engine", 0);
  return e.native<engine_state>();
}

const engine_state& device_state_of(const engine& e, const char* what) {
  const engine_state& s = state_of(e);
  if (s.offline) {
    throw cuda_error(std::string("cuda: ") + what + " on an offline engine (" + s.info.device_name +
                         "): it compiles kernels, it cannot run them",
                     0);
  }
  return s;
}

std::string compile_target(int major, int minor) {
  const std::optional<nvrtc_target> t = nvrtc_target_for(major, minor, nullptr);
  if (!t) return "";
  return t->ptx ? t->arch + " (PTX)" : t->arch;
}

}  // namespace detail

using namespace detail;

bool available() { return unavailable_reason().empty(); }

std::string unavailable_reason() {
  std::string why;
  const driver_api* d = driver(&why);
  if (!d) return why;
  int n = 0;
  if (d->cuDeviceGetCount(&n) != CUDA_SUCCESS || n == 0) return "the NVIDIA driver reports no CUDA device";
  if (!nvrtc(&why)) return "NVRTC cannot be loaded: " + why;
  return "";
}

int device_count() {
  const driver_api* d = driver(nullptr);
  int n = 0;
  if (!d || d->cuDeviceGetCount(&n) != CUDA_SUCCESS) return 0;
  return n;
}

engine make_engine(int ordinal) {
  const driver_api& d = api();
  if (std::string why; !nvrtc(&why)) throw cuda_error("cuda: NVRTC cannot be loaded: " + why, 0);
  const CUdevice device = device_of(ordinal);
  CUcontext context = nullptr;
  check(d.cuDevicePrimaryCtxRetain(&context, device), "cuDevicePrimaryCtxRetain");
  try {
    return wrap(context, device, true);
  } catch (...) {
    d.cuDevicePrimaryCtxRelease(device);
    throw;
  }
}

engine make_offline_engine(int compute_major, int compute_minor, int multiprocessors) {
  if (compute_major < 3 || compute_major > 20 || compute_minor < 0 || compute_minor > 9) {
    throw cuda_error("cuda: no such architecture: sm_" + std::to_string(compute_major) + std::to_string(compute_minor), 0);
  }
  if (multiprocessors < 1 || multiprocessors > 100000) {
    throw cuda_error("cuda: an offline engine needs its devices' multiprocessor count (1 to 100000), not " +
                         std::to_string(multiprocessors),
                     0);
  }
  if (std::string why; !nvrtc(&why)) throw cuda_error("cuda: NVRTC cannot be loaded: " + why, 0);
  const std::string arch = "sm_" + std::to_string(compute_major) + std::to_string(compute_minor);
  std::string why_not;
  if (!nvrtc_target_for(compute_major, compute_minor, &why_not)) {
    throw cuda_error("cuda: NVRTC " + std::to_string(nvrtc_version()) + " cannot compile for " + arch + ": " + why_not, 0);
  }
  auto s = std::make_shared<engine_state>();
  s->offline = true;
  device_info& i = s->info;
  i.device_name = "offline " + arch;
  i.compute_major = compute_major;
  i.compute_minor = compute_minor;
  i.multiprocessors = multiprocessors;
  i.nvrtc_version = nvrtc_version();
  i.target = compile_target(compute_major, compute_minor);
  s->facts.identity = code_identity(i);
  s->facts.compute_units = multiprocessors;
  const int device_id = physical_device_id(engine_kind::gpu, "cuda-offline:" + arch);
  const std::uint64_t context_id = (std::uint64_t{1} << 63) | next_private_scope.fetch_add(1);
  return engine(the_backend(), engine_kind::gpu, device_id, context_id, std::move(s));
}

engine make_engine(CUcontext context) {
  if (!context) throw cuda_error("cuda: make_engine needs a context", 0);
  if (std::string why; !nvrtc(&why)) throw cuda_error("cuda: NVRTC cannot be loaded: " + why, 0);
  CUdevice device = 0;
  {
    context_guard guard(context);
    check(api().cuCtxGetDevice(&device), "cuCtxGetDevice");
  }
  return wrap(context, device, false);
}

engine make_engine() {
  // One engine (the primary context) per device for the whole process.
  const int ordinal = select_device();
  return gpu::engine_per_device(ordinal, [&] { return make_engine(ordinal); });
}

void release_cached(const engine& e) {
  const engine_state& s = state_of(e);
  // A background build holds an engine and puts its kernel in the engine's
  // scope: none may do so after this.
  wait_for_specializations();
  kernel_cache().evict_scope(e.scope());
  constant_tensor_cache().evict_scope(e.scope());
  // What queued work still used is freed once that work is done: now, while
  // the context exists. Then the engine's pooled events go, and events still
  // held later are dropped without a driver call (the context frees them).
  gpu::finish_deferred_releases();
  s.release_events();
}

namespace {
stream caller_stream(const engine& e, CUstream s, bool versioned_constants) {
  const engine_state& es = device_state_of(e, "a stream");
  auto state = std::make_shared<stream_state>();
  state->stream = s;
  state->context = es.context;
  state->engine = e.native_shared<const engine_state>();
  state->owned = false;
  state->resources.set_versioned_constants(versioned_constants);
  return stream(e, std::move(state));
}
}  // namespace

stream make_stream(const engine& e, CUstream s) { return caller_stream(e, s, false); }

stream make_stream_with_versioned_constants(const engine& e, CUstream s) { return caller_stream(e, s, true); }

std::string get_engine_cache_blob_id(int ordinal) {
  return blob_id(machine_identity(query_device(device_of(ordinal))), kEngineBlobKey);
}

byte_vector get_engine_cache_blob(const engine& e) {
  const engine_state& s = state_of(e);
  return gpu::make_engine_blob(machine_identity(s.info), kEngineBlobKey, encode_info(s.info));
}

engine make_engine_from_cache_blob(int ordinal, byte_span blob) {
  const device_info queried = query_device(device_of(ordinal));
  try {
    const std::string payload = gpu::read_engine_blob(machine_identity(queried), kEngineBlobKey, blob);
    device_info stored;
    try {
      stored = decode_info(payload);
    } catch (const invalid_argument& err) {
      throw invalid_argument(std::string("malformed engine info (") + err.what() + ")");
    }
    if (stored != queried) {
      throw invalid_argument("it describes " + stored.device_name + " at " + support::quoted(stored.pci_bus_id) +
                             ", not this device");
    }
  } catch (const invalid_argument& err) {
    throw cuda_error(std::string("cuda: engine cache blob rejected: ") + err.what(), 0);
  }
  return make_engine(ordinal);
}

CUcontext native_context(const engine& e) { return state_of(e).context; }
int native_device(const engine& e) { return state_of(e).device; }
const device_info& info(const engine& e) { return state_of(e).info; }
CUstream native_stream(const stream& s) {
  state_of(s.get_engine());
  return s.native<stream_state>().stream;
}

CUdeviceptr make_buffer(const engine& e, std::size_t bytes, const void* host) {
  const engine_state& s = device_state_of(e, "a buffer");
  context_guard guard(s.context);
  const CUdeviceptr p = pointer_of(gpu::allocate(e, bytes, "buffer"));
  if (host && bytes) {
    const CUresult r = api().cuMemcpyHtoD(p, host, bytes);
    if (r != CUDA_SUCCESS) {
      api().cuMemFree(p);
      check(r, "cuMemcpyHtoD");
    }
  }
  return p;
}

void free_buffer(const engine& e, CUdeviceptr buffer) noexcept {
  try {
    context_guard guard(state_of(e).context);
    api().cuMemFree(buffer);
  } catch (...) {
    // Not a CUDA engine, or no driver: nothing was allocated through it.
  }
}

void read_buffer(const stream& s, CUdeviceptr buffer, void* host, std::size_t bytes) {
  const stream_state& st = s.native<stream_state>();
  state_of(s.get_engine());
  context_guard guard(st.context);
  check(api().cuMemcpyDtoHAsync(host, buffer, bytes, st.stream), "cuMemcpyDtoHAsync");
  check(api().cuStreamSynchronize(st.stream), "cuStreamSynchronize");
}

void write_buffer(const stream& s, CUdeviceptr buffer, const void* host, std::size_t bytes) {
  const stream_state& st = s.native<stream_state>();
  state_of(s.get_engine());
  context_guard guard(st.context);
  check(api().cuMemcpyHtoDAsync(buffer, host, bytes, st.stream), "cuMemcpyHtoDAsync");
  check(api().cuStreamSynchronize(st.stream), "cuStreamSynchronize");
}

std::vector<std::string> list_devices() {
  std::vector<std::string> out;
  const int n = device_count();
  for (int o = 0; o < n; ++o) {
    const device_info i = query_device(device_of(o));
    out.push_back(std::to_string(o) + " " + i.device_name + " (sm_" + std::to_string(i.compute_major) +
                  std::to_string(i.compute_minor) + ", PCI " + i.pci_bus_id + ")");
  }
  return out;
}

backend_stats stats() { return gpu::stats(cache_owner_id); }

}  // namespace unicache::cuda
