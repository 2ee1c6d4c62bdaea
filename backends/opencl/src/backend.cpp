// The OpenCL backend: compiled kernels for each partition kind, constant
// weights packed on the device, and the backend object itself.
#include <algorithm>
#include <string>
#include <vector>

#include "opencl_internal.hpp"
#include "unicache/cache_key.hpp"
#include "unicache/constant_registry.hpp"

namespace unicache::opencl::detail {
namespace {

using shape_t = std::vector<std::int64_t>;

using kernels::elements;
using kernels::round_up;
cl_mem buffer_of(const tensor& t) { return static_cast<cl_mem>(t.data); }

// --- Constant weights -----------------------------------------------------------

// A packed weight on the device; released when the cache and every kernel
// let go of it.
struct packed_buffer {
  cl_mem mem = nullptr;
  packed_buffer() = default;
  packed_buffer(const packed_buffer&) = delete;
  packed_buffer& operator=(const packed_buffer&) = delete;
  ~packed_buffer() {
    if (mem) {
      clReleaseMemObject(mem);
      stats_counters().weights_released.fetch_add(1, std::memory_order_relaxed);
    }
  }
};
using weight_registry = constant_registry<packed_buffer>;

weight_registry& weights() {
  static weight_registry* const r = new weight_registry(constant_tensor_cache(), backend_id_value);
  return *r;
}

// Reads a constant's blocks from its cl_mem for the contents check: one
// blocking read on the stream's queue (the sampled blocks are one rectangle).
struct buffer_reader {
  stream& s;
  const tensor& t;
  void operator()(std::size_t first, std::size_t block, std::size_t stride, std::size_t count,
                  unsigned char* out) const {
    cl_command_queue queue = s.native<stream_state>().queue;
    if (count == 1) {
      check(clEnqueueReadBuffer(queue, buffer_of(t), CL_TRUE, first, block, out, 0, nullptr, nullptr),
            "clEnqueueReadBuffer(constant check)");
      return;
    }
    const std::size_t buffer_origin[3] = {first, 0, 0}, host_origin[3] = {0, 0, 0}, region[3] = {block, count, 1};
    check(clEnqueueReadBufferRect(queue, buffer_of(t), CL_TRUE, buffer_origin, host_origin, region, stride, 0, block,
                                  0, out, 0, nullptr, nullptr),
          "clEnqueueReadBufferRect(constant check)");
  }
};

constexpr kernels::dialect kDialect = kernels::dialect::opencl_c;

// --- Kernels -----------------------------------------------------------------------

// MatMul -> (Add|Multiply)* -> eltwise*: one tiled GEMM with the chain in
// its epilogue. A constant rank-2 B is packed once (transposes resolved,
// zero-padded to the tile) so that the GEMM reads it without bounds checks.
class gemm_kernel final : public compiled_kernel {
 public:
  gemm_kernel(const partition& p, const std::vector<logical_tensor>& in, const std::vector<logical_tensor>& out,
              const engine& e, const std::vector<kernel_binary>& preloaded)
      : problem_(p, in, out, e.native<engine_state>().plan.gemm, current_kernel_shapes()) {
    gemm_ = get_program(e, kernels::gemm_source(kDialect, problem_.config), preloaded);
    if (problem_.config.packed_b) {
      pack_work_group_ = e.native<engine_state>().plan.vector_work_group;
      pack_ = get_program(e, kernels::pack_source(kDialect, problem_.config.transpose_b, pack_work_group_), preloaded);
      slot_ = weights().make_slot();
    }
  }

  void execute(stream& s, const std::vector<tensor>& inputs, const std::vector<tensor>& outputs) const override {
    const kernels::gemm_problem& g = problem_;
    std::shared_ptr<packed_buffer> packed;
    cl_mem b = buffer_of(inputs[1]);
    long ldb = g.ldb;
    if (pack_) {
      packed = packed_weight(s, inputs[1]);
      b = packed->mem;
      ldb = g.packed_n;
    }
    const cl_mem a = buffer_of(inputs[0]), c = buffer_of(outputs[0]);
    const std::array<std::size_t, 3> global = g.global(), local = g.local();
    launch(
        *gemm_, s,
        [&](cl_kernel k) {
          cl_uint i = 0;
          set_arg(k, i++, a);
          set_arg(k, i++, b);
          set_arg(k, i++, c);
          set_arg(k, i++, static_cast<cl_int>(g.m));
          set_arg(k, i++, static_cast<cl_int>(g.n));
          set_arg(k, i++, static_cast<cl_int>(g.k));
          set_arg(k, i++, static_cast<cl_long>(g.lda));
          set_arg(k, i++, static_cast<cl_long>(ldb));
          set_arg(k, i++, static_cast<cl_long>(g.n));
          set_arg(k, i++, static_cast<cl_long>(g.sa));
          set_arg(k, i++, static_cast<cl_long>(pack_ ? 0 : g.sb));
          set_arg(k, i++, static_cast<cl_long>(g.m * g.n));
          for (const kernels::gemm_problem::post& p : g.posts) {
            set_arg(k, i++, buffer_of(inputs[p.input]));
            set_arg(k, i++, static_cast<cl_long>(p.batch_stride));
            set_arg(k, i++, static_cast<cl_long>(p.row_stride));
            set_arg(k, i++, static_cast<cl_long>(p.column_stride));
          }
        },
        3, global.data(), local.data());
  }

  std::vector<kernel_binary> binaries() const override { return binaries_of({gemm_.get(), pack_.get()}); }

 private:
  std::shared_ptr<packed_buffer> packed_weight(stream& s, const tensor& t) const {
    const kernels::gemm_problem& g = problem_;
    const engine& e = s.get_engine();
    const engine_state& es = e.native<engine_state>();
    const std::size_t bytes = g.packed_bytes();
    const std::size_t source_bytes = static_cast<std::size_t>(elements(t.desc.shape)) * sizeof(float);
    return weights().get(slot_, e.scope(), {t.data, t.version, source_bytes}, g.packed_layout(), bytes,
                         buffer_reader{s, t}, [&] {
      const time_without_first_launches timer;  // the pack program's first launch counts as first_launch_ns
      auto packed = std::make_shared<packed_buffer>();
      cl_int err = CL_SUCCESS;
      packed->mem = clCreateBuffer(es.context, CL_MEM_READ_WRITE, bytes, nullptr, &err);
      check(err, "clCreateBuffer(packed weight, " + std::to_string(bytes) + " bytes)");
      const std::size_t local[2] = {static_cast<std::size_t>(pack_work_group_), 1};
      const std::array<std::size_t, 3> global = g.pack_global(pack_work_group_);
      launch(
          *pack_, s,
          [&](cl_kernel k) {
            set_arg(k, 0, buffer_of(t));
            set_arg(k, 1, packed->mem);
            set_arg(k, 2, static_cast<cl_int>(g.k));
            set_arg(k, 3, static_cast<cl_int>(g.n));
            set_arg(k, 4, static_cast<cl_long>(g.ldb));
            set_arg(k, 5, static_cast<cl_int>(g.packed_k));
            set_arg(k, 6, static_cast<cl_int>(g.packed_n));
          },
          2, global.data(), local);
      stats_counters().weights_packed.fetch_add(1, std::memory_order_relaxed);
      stats_counters().pack_ns.fetch_add(timer.ns(), std::memory_order_relaxed);
      return packed;
    });
  }

  kernels::gemm_problem problem_;
  std::shared_ptr<const kernel> gemm_, pack_;
  int pack_work_group_ = 1;
  std::shared_ptr<weight_registry::slot> slot_;
};

// Add / Multiply with numpy broadcasting, up to rank 4.
class binary_kernel final : public compiled_kernel {
 public:
  binary_kernel(const partition& p, const std::vector<logical_tensor>& in, const std::vector<logical_tensor>& out,
                const engine& e, const std::vector<kernel_binary>& preloaded)
      : problem_(in, out), work_group_(e.native<engine_state>().plan.vector_work_group) {
    program_ = get_program(e, kernels::binary_source(kDialect, p.ops().front().kind, work_group_), preloaded);
  }

  void execute(stream& s, const std::vector<tensor>& inputs, const std::vector<tensor>& outputs) const override {
    const std::int64_t n = elements(problem_.out);
    const std::size_t local = static_cast<std::size_t>(work_group_), global = round_up(n, work_group_);
    launch(
        *program_, s,
        [&](cl_kernel k) {
          cl_uint i = 0;
          set_arg(k, i++, buffer_of(inputs[0]));
          set_arg(k, i++, buffer_of(inputs[1]));
          set_arg(k, i++, buffer_of(outputs[0]));
          set_arg(k, i++, static_cast<cl_long>(n));
          for (int d = 1; d < 4; ++d) set_arg(k, i++, static_cast<cl_int>(problem_.out[d]));
          for (long st : problem_.a_strides) set_arg(k, i++, static_cast<cl_long>(st));
          for (long st : problem_.b_strides) set_arg(k, i++, static_cast<cl_long>(st));
        },
        1, &global, &local);
  }

  std::vector<kernel_binary> binaries() const override { return binaries_of({program_.get()}); }

 private:
  kernels::binary_problem problem_;
  int work_group_;
  std::shared_ptr<const kernel> program_;
};

// ReLU, GELU, Sigmoid, Tanh, and Softmax over the last axis.
class unary_kernel final : public compiled_kernel {
 public:
  unary_kernel(const partition& p, const std::vector<logical_tensor>& in, const engine& e,
               const std::vector<kernel_binary>& preloaded)
      : shape_(in[0].shape), softmax_(p.ops().front().kind == op_kind::softmax) {
    work_group_ = e.native<engine_state>().plan.vector_work_group;
    program_ = get_program(e,
                           softmax_ ? kernels::softmax_source(kDialect, work_group_)
                                    : kernels::eltwise_source(kDialect, p.ops().front().kind, work_group_),
                           preloaded);
  }

  void execute(stream& s, const std::vector<tensor>& inputs, const std::vector<tensor>& outputs) const override {
    const std::int64_t n = elements(shape_);
    const std::int64_t cols = shape_.empty() ? 1 : shape_.back();
    const std::size_t local = static_cast<std::size_t>(work_group_);
    const std::size_t global = softmax_ ? static_cast<std::size_t>(n / cols) * local : round_up(n, work_group_);
    launch(
        *program_, s,
        [&](cl_kernel k) {
          set_arg(k, 0, buffer_of(inputs[0]));
          set_arg(k, 1, buffer_of(outputs[0]));
          if (softmax_) {
            set_arg(k, 2, static_cast<cl_int>(cols));
          } else {
            set_arg(k, 2, static_cast<cl_long>(n));
          }
        },
        1, &global, &local);
  }

  std::vector<kernel_binary> binaries() const override { return binaries_of({program_.get()}); }

 private:
  shape_t shape_;
  bool softmax_;
  int work_group_ = 1;
  std::shared_ptr<const kernel> program_;
};

class opencl_backend final : public backend {
 public:
  const char* name() const override { return "opencl"; }
  // A GPU's engines are gpu engines; a CPU device's (PoCL) are cpu engines
  // of the host (see make_engine): this is the kind of the former.
  engine_kind kind() const override { return engine_kind::gpu; }

  std::shared_ptr<const compiled_kernel> compile(const partition& p, const std::vector<logical_tensor>& in,
                                                 const std::vector<logical_tensor>& out, const engine& e,
                                                 const std::vector<kernel_binary>& preloaded) override {
    switch (p.pattern()) {
      case partition::kind::fused_matmul: return std::make_shared<gemm_kernel>(p, in, out, e, preloaded);
      case partition::kind::binary: return std::make_shared<binary_kernel>(p, in, out, e, preloaded);
      case partition::kind::eltwise:
      case partition::kind::softmax: return std::make_shared<unary_kernel>(p, in, e, preloaded);
    }
    throw compile_error("opencl: unknown partition kind");
  }

  stream make_stream(const engine& e) override {
    const engine_state& es = e.native<engine_state>();
    auto s = std::make_shared<stream_state>();
    cl_int err = CL_SUCCESS;
    s->queue = clCreateCommandQueue(es.context, es.device, 0, &err);
    check(err, "clCreateCommandQueue");
    return stream(e, std::move(s));
  }

  device_identity identity(const engine& e) const override { return e.native<engine_state>().identity; }

  // Shape-agnostic kernels depend on the ranks only (sizes and strides are
  // arguments); specialized ones on every size.
  std::string kernel_configuration(const partition& /*p*/, const std::vector<std::vector<std::int64_t>>& input_shapes,
                                   const engine& /*e*/) const override {
    return shape_mode_configuration(current_kernel_shapes(), input_shapes);
  }
};

}  // namespace

backend* the_backend() {
  static opencl_backend* const b = [] {
    auto* created = new opencl_backend();
    register_backend(created);
    register_backend_id(backend_id_value, created->name());
    weights();  // registers the eviction callback
    return created;
  }();
  return b;
}

}  // namespace unicache::opencl::detail
