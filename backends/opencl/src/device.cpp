// The OpenCL implementation of the GPU core's device interface: buffers,
// command queues, markers and kernel launches.
#include <optional>
#include <string>

#include "opencl_internal.hpp"

namespace unicache::opencl::detail {
namespace {

cl_mem mem_of(gpu::buffer b) { return static_cast<cl_mem>(b); }
cl_command_queue queue_of(const stream& s) { return s.native<stream_state>().queue; }

class marker final : public gpu::event {
 public:
  marker(cl_event e, bool timed) : event_(e), timed_(timed) {}
  ~marker() override { clReleaseEvent(event_); }
  marker(const marker&) = delete;
  marker& operator=(const marker&) = delete;

  state query() const override {
    cl_int status = CL_COMPLETE;
    if (clGetEventInfo(event_, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status, &status, nullptr) != CL_SUCCESS) {
      return state::failed;
    }
    if (status < 0) return state::failed;
    return status == CL_COMPLETE ? state::complete : state::pending;
  }
  void synchronize() const override { clWaitForEvents(1, &event_); }
  // The queue's profiling clock at both markers.
  std::optional<std::uint64_t> ns_since(const gpu::event& start) const override {
    const auto& from = static_cast<const marker&>(start);
    cl_ulong begin = 0, end = 0;
    if (!timed_ || !from.timed_ ||
        clGetEventProfilingInfo(from.event_, CL_PROFILING_COMMAND_END, sizeof begin, &begin, nullptr) != CL_SUCCESS ||
        clGetEventProfilingInfo(event_, CL_PROFILING_COMMAND_END, sizeof end, &end, nullptr) != CL_SUCCESS ||
        end < begin) {
      return std::nullopt;
    }
    return end - begin;
  }
  cl_event get() const { return event_; }

 private:
  cl_event event_;
  bool timed_;
};

void read_rect(cl_command_queue queue, cl_mem src, std::size_t first, std::size_t block, std::size_t stride,
               std::size_t count, void* out) {
  if (count == 1) {
    check(clEnqueueReadBuffer(queue, src, CL_TRUE, first, block, out, 0, nullptr, nullptr),
          "clEnqueueReadBuffer(constant check)");
    return;
  }
  const std::size_t buffer_origin[3] = {first, 0, 0}, host_origin[3] = {0, 0, 0}, region[3] = {block, count, 1};
  check(clEnqueueReadBufferRect(queue, src, CL_TRUE, buffer_origin, host_origin, region, stride, 0, block, 0, out, 0,
                                nullptr, nullptr),
        "clEnqueueReadBufferRect(constant check)");
}

bool out_of_memory(cl_int err) {
  return err == CL_MEM_OBJECT_ALLOCATION_FAILURE || err == CL_OUT_OF_RESOURCES || err == CL_OUT_OF_HOST_MEMORY;
}

class opencl_device final : public gpu::device {
 public:
  opencl_device() : device("opencl", cache_owner_id, gpu::kernels::dialect::opencl_c) {}

  stream make_stream(const engine& e) const override {
    const engine_state& es = state_of(e);
    auto s = std::make_shared<stream_state>();
    cl_int err = CL_SUCCESS;
    // Profiling: adaptive mode times executions on the queue's clock.
    s->queue = clCreateCommandQueue(es.context, es.device, CL_QUEUE_PROFILING_ENABLE, &err);
    if (err == CL_INVALID_QUEUE_PROPERTIES || err == CL_INVALID_VALUE) {
      s->queue = clCreateCommandQueue(es.context, es.device, 0, &err);
    } else {
      s->profiling = err == CL_SUCCESS;
    }
    check(err, "clCreateCommandQueue");
    s->resources.set_only_unicache_work(true);  // no caller's queue is ever wrapped
    return stream(e, std::move(s));
  }

  gpu::stream_resources& resources(const stream& s) const override { return s.native<stream_state>().resources; }

  void launch(const kernel& k, const stream& s, const gpu::kernel_args& args,
              const gpu::launch_dims& dims) const override {
    const cl_command_queue queue = queue_of(s);
    k.launch([&] { k.program<program>().enqueue(queue, args, dims); });
  }

  std::shared_ptr<const gpu::event> record(const stream& s) const override { return record_marker(queue_of(s), false); }
  // Without profiling (a queue that refused it) the markers tell no time:
  // executions go untimed rather than timed by the enqueue.
  std::shared_ptr<const gpu::event> record_timed(const stream& s) const override {
    return record_marker(queue_of(s), s.native<stream_state>().profiling);
  }

  void wait_for(const stream& s, const gpu::event& e) const override {
    const cl_event waited = static_cast<const marker&>(e).get();
    check(clEnqueueBarrierWithWaitList(queue_of(s), 1, &waited, nullptr), "clEnqueueBarrierWithWaitList");
  }

  void wait(const stream& s) const override {
    state_of(s.get_engine());
    check(clFinish(queue_of(s)), "clFinish");
  }

  gpu::buffer allocate(const engine& e, std::size_t bytes, const char* what, bool last_try) const override {
    cl_int err = CL_SUCCESS;
    cl_mem m = clCreateBuffer(state_of(e).context, CL_MEM_READ_WRITE, bytes, nullptr, &err);
    if (err != CL_SUCCESS && out_of_memory(err) && !last_try) return nullptr;
    check(err, std::string("clCreateBuffer(") + what + ", " + std::to_string(bytes) + " bytes)");
    return m;
  }

  void free(const engine& /*e*/, gpu::buffer b) const noexcept override { clReleaseMemObject(mem_of(b)); }

  void fill_zero(const stream& s, gpu::buffer b, std::size_t bytes) const override {
    const cl_uchar zero = 0;
    check(clEnqueueFillBuffer(queue_of(s), mem_of(b), &zero, sizeof zero, 0, bytes, 0, nullptr, nullptr),
          "clEnqueueFillBuffer");
  }

  // One blocking read (the sampled blocks are one rectangle): the
  // documented wait, on the stream's queue (after its queued work) or on the
  // engine's side queue, which waits for nothing.
  void read_blocks(const stream& s, gpu::buffer src, std::size_t first, std::size_t block, std::size_t stride,
                   std::size_t count, void* out, bool in_stream_order) const override {
    if (in_stream_order) {
      read_rect(queue_of(s), mem_of(src), first, block, stride, count, out);
      return;
    }
    const engine_state& es = state_of(s.get_engine());
    std::lock_guard lock(es.side_mu);
    if (!es.side_queue) {
      cl_int err = CL_SUCCESS;
      es.side_queue = clCreateCommandQueue(es.context, es.device, 0, &err);
      check(err, "clCreateCommandQueue(side)");
    }
    read_rect(es.side_queue, mem_of(src), first, block, stride, count, out);
  }

  // The kernel path.
  const gpu::engine_facts& facts(const engine& e) const override { return state_of(e).facts; }
  std::unique_ptr<device_program> build(const engine& e, const kernel_source& src) const override {
    return build_program(e, src);
  }
  std::unique_ptr<device_program> load(const engine& e, const kernel_source& src, byte_span binary) const override {
    return load_program(e, src, binary);
  }
};

}  // namespace

std::shared_ptr<const gpu::event> record_marker(cl_command_queue queue, bool timed) {
  cl_event e = nullptr;
  check(clEnqueueMarkerWithWaitList(queue, 0, nullptr, &e), "clEnqueueMarkerWithWaitList");
  auto recorded = std::make_shared<const marker>(e, timed);
  check(clFlush(queue), "clFlush");
  return recorded;
}

std::unique_ptr<gpu::device> make_device() { return std::make_unique<opencl_device>(); }

backend* the_backend() {
  static backend* const b = gpu::register_device(make_device());
  return b;
}

}  // namespace unicache::opencl::detail
