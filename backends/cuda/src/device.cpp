// The CUDA implementation of the GPU core's device interface: memory,
// streams, events and launches through the driver API.
#include <mutex>
#include <optional>
#include <string>

#include "cuda_internal.hpp"

namespace unicache::cuda::detail {
namespace {

// A recorded CUevent, returned to its engine's pool when the last holder
// lets go (no driver call on that path).
class cuda_event final : public gpu::event {
 public:
  cuda_event(std::shared_ptr<const engine_state> engine, CUevent e, bool timed)
      : engine_(std::move(engine)), event_(e), timed_(timed) {}
  ~cuda_event() override { engine_->give_back_event(event_, timed_); }
  cuda_event(const cuda_event&) = delete;
  cuda_event& operator=(const cuda_event&) = delete;

  state query() const override {
    const CUresult r = api().cuEventQuery(event_);
    if (r == CUDA_SUCCESS) return state::complete;
    return r == CUDA_ERROR_NOT_READY ? state::pending : state::failed;
  }
  void synchronize() const override { api().cuEventSynchronize(event_); }
  std::optional<std::uint64_t> ns_since(const gpu::event& start) const override {
    float ms = 0;
    if (!timed_ || api().cuEventElapsedTime(&ms, static_cast<const cuda_event&>(start).get(), event_) != CUDA_SUCCESS) {
      return std::nullopt;
    }
    return static_cast<std::uint64_t>(static_cast<double>(ms) * 1e6);
  }
  CUevent get() const { return event_; }

 private:
  std::shared_ptr<const engine_state> engine_;
  CUevent event_;
  bool timed_;
};

class cuda_device final : public gpu::device {
 public:
  cuda_device() : device("cuda", cache_owner_id, gpu::kernels::dialect::cuda_c) {}
  const gpu::engine_facts& facts(const engine& e) const override { return state_of(e).facts; }
  std::unique_ptr<device_program> build(const engine& e, const kernel_source& src) const override {
    return build_program(e, src);
  }
  std::unique_ptr<device_program> load(const engine& e, const kernel_source& src, byte_span binary) const override {
    return load_program(e, src, binary);
  }
  // An offline engine builds everything: what precompile stores is NVRTC's.
  bool reads_stored_binaries(const engine& e) const override { return !state_of(e).offline; }
  std::string load_refusal(const engine& e) const override {
    const device_info& i = state_of(e).info;
    return driver_refusal(i.driver_version, i.nvrtc_version, i.target);
  }

  // CUDA's grid: 2^31 - 1 blocks in x, 65535 in y and z.
  void check_launch(const gpu::launch_dims& dims, const char* what) const override {
    static constexpr std::size_t kLimit[3] = {2147483647u, 65535u, 65535u};
    for (int d = 0; d < 3; ++d) {
      const std::size_t blocks = dims.global[d] / dims.local[d];
      if (blocks > kLimit[d]) {
        throw cuda_error("cuda: " + std::string(what) + " needs " + std::to_string(blocks) +
                             " blocks in grid dimension " + "xyz"[d] + ", beyond CUDA's " + std::to_string(kLimit[d]),
                         CUDA_ERROR_INVALID_VALUE);
      }
    }
  }

  gpu::buffer allocate(const engine& e, std::size_t bytes, const char* what, bool last_try) const override {
    context_guard guard(device_state_of(e, what).context);
    CUdeviceptr p = 0;
    const CUresult r = api().cuMemAlloc(&p, bytes);
    if (r == CUDA_ERROR_OUT_OF_MEMORY && !last_try) return nullptr;
    check(r, std::string("cuMemAlloc(") + what + ", " + std::to_string(bytes) + " bytes)");
    return reinterpret_cast<gpu::buffer>(p);
  }

  void free(const engine& e, gpu::buffer b) const noexcept override {
    try {
      context_guard guard(state_of(e).context);
      api().cuMemFree(pointer_of(b));
    } catch (...) {
      // The context is gone: so is its memory.
    }
  }

  void fill_zero(const stream& s, gpu::buffer b, std::size_t bytes) const override {
    const stream_state& st = s.native<stream_state>();
    context_guard guard(st.context);
    check(api().cuMemsetD8Async(pointer_of(b), 0, bytes, st.stream), "cuMemsetD8Async");
  }

  // One strided copy, then the documented wait: on the stream (after its
  // queued work), or on the engine's side stream, which waits for nothing.
  void read_blocks(const stream& s, gpu::buffer src, std::size_t first, std::size_t block, std::size_t stride,
                   std::size_t count, void* out, bool in_stream_order) const override {
    const stream_state& st = s.native<stream_state>();
    context_guard guard(st.context);
    CUDA_MEMCPY2D copy{};
    copy.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    copy.srcDevice = pointer_of(src) + first;
    copy.srcPitch = count == 1 ? block : stride;
    copy.dstMemoryType = CU_MEMORYTYPE_HOST;
    copy.dstHost = out;
    copy.dstPitch = block;
    copy.WidthInBytes = block;
    copy.Height = count;
    if (in_stream_order) {
      check(api().cuMemcpy2DAsync(&copy, st.stream), "cuMemcpy2DAsync(constant check)");
      check(api().cuStreamSynchronize(st.stream), "cuStreamSynchronize(constant check)");
      return;
    }
    const engine_state& es = *st.engine;
    std::lock_guard lock(es.side_mu);
    if (!es.side_stream) check(api().cuStreamCreate(&es.side_stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate(side)");
    check(api().cuMemcpy2DAsync(&copy, es.side_stream), "cuMemcpy2DAsync(constant check)");
    check(api().cuStreamSynchronize(es.side_stream), "cuStreamSynchronize(constant check)");
  }

  stream make_stream(const engine& e) const override {
    const engine_state& es = device_state_of(e, "a stream");
    context_guard guard(es.context);
    auto s = std::make_shared<stream_state>();
    s->context = es.context;
    s->engine = e.native_shared<const engine_state>();
    check(api().cuStreamCreate(&s->stream, 0), "cuStreamCreate");
    s->owned = true;
    s->resources.set_only_unicache_work(true);
    return stream(e, std::move(s));
  }

  gpu::stream_resources& resources(const stream& s) const override { return s.native<stream_state>().resources; }

  void launch(const kernel& k, const stream& s, const gpu::kernel_args& args,
              const gpu::launch_dims& dims) const override {
    const stream_state& st = s.native<stream_state>();
    context_guard guard(st.context);
    unsigned grid[3], block[3];
    for (int d = 0; d < 3; ++d) {
      block[d] = static_cast<unsigned>(dims.local[d]);
      grid[d] = static_cast<unsigned>(dims.global[d] / dims.local[d]);
    }
    k.launch([&] {
      const CUresult r = api().cuLaunchKernel(k.program<program>().function(), grid[0], grid[1], grid[2], block[0],
                                              block[1], block[2], 0, st.stream, args.pointers(), nullptr);
      if (r != CUDA_SUCCESS) check(r, "cuLaunchKernel(" + k.name() + ")");
    });
  }

  std::shared_ptr<const gpu::event> record(const stream& s) const override {
    return record_event(s.native<stream_state>(), false);
  }
  std::shared_ptr<const gpu::event> record_timed(const stream& s) const override {
    return record_event(s.native<stream_state>(), true);
  }

  void wait_for(const stream& s, const gpu::event& e) const override {
    const stream_state& st = s.native<stream_state>();
    context_guard guard(st.context);
    check(api().cuStreamWaitEvent(st.stream, static_cast<const cuda_event&>(e).get(), 0), "cuStreamWaitEvent");
  }

  void wait(const stream& s) const override {
    const stream_state& st = s.native<stream_state>();
    state_of(s.get_engine());
    context_guard guard(st.context);
    check(api().cuStreamSynchronize(st.stream), "cuStreamSynchronize");
  }
};

}  // namespace

std::shared_ptr<const gpu::event> record_event(const stream_state& st, bool timed) {
  context_guard guard(st.context);
  CUevent e = st.engine->take_event(timed);
  std::shared_ptr<const cuda_event> recorded;
  try {
    recorded = std::make_shared<const cuda_event>(st.engine, e, timed);
  } catch (...) {
    st.engine->give_back_event(e, timed);
    throw;
  }
  check(api().cuEventRecord(e, st.stream), "cuEventRecord");
  return recorded;
}

namespace {
// Room for one more pooled event without throwing (a destructor gives events back).
bool try_reserve(std::vector<CUevent>& pool) noexcept {
  try {
    pool.reserve(engine_state::kPooledEvents);
    return true;
  } catch (...) {
    return false;
  }
}
}  // namespace

CUevent engine_state::take_event(bool timed) const {
  {
    std::lock_guard lock(events_mu);
    std::vector<CUevent>& pool = free_events[timed];
    if (!pool.empty()) {
      CUevent e = pool.back();
      pool.pop_back();
      return e;
    }
  }
  CUevent e = nullptr;
  check(api().cuEventCreate(&e, timed ? CU_EVENT_DEFAULT : CU_EVENT_DISABLE_TIMING), "cuEventCreate");
  return e;
}

void engine_state::give_back_event(CUevent e, bool timed) const {
  {
    std::lock_guard lock(events_mu);
    if (context_released) return;  // the caller destroys the context, and the event with it
    std::vector<CUevent>& pool = free_events[timed];
    if (pool.size() < pool.capacity() || (pool.size() < kPooledEvents && try_reserve(pool))) {
      pool.push_back(e);
      return;
    }
  }
  try {
    context_guard guard(context);
    api().cuEventDestroy(e);
  } catch (...) {
    // The context is gone, and the event with it.
  }
}

std::unique_ptr<gpu::device> make_device() { return std::make_unique<cuda_device>(); }

backend* the_backend() {
  static backend* const b = gpu::register_device(make_device());
  return b;
}

}  // namespace unicache::cuda::detail
