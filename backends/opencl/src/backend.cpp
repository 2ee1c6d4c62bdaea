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

std::int64_t elements(const shape_t& s) {
  std::int64_t n = 1;
  for (std::int64_t d : s) n *= d;
  return n;
}
std::size_t round_up(std::int64_t n, std::int64_t multiple) {
  return static_cast<std::size_t>((n + multiple - 1) / multiple * multiple);
}
cl_mem buffer_of(const tensor& t) { return static_cast<cl_mem>(t.data); }
// Row-major strides of `s`, 0 where a dim is 1 (a broadcast operand repeats).
std::vector<long> broadcast_strides(const shape_t& s) {
  std::vector<long> out(s.size());
  long stride = 1;
  for (std::size_t d = s.size(); d-- > 0;) {
    out[d] = s[d] == 1 ? 0 : stride;
    stride *= static_cast<long>(s[d]);
  }
  return out;
}

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
              const engine& e, const std::vector<kernel_binary>& preloaded) {
    const engine_state& s = e.native<engine_state>();
    const op& mm = p.ops().front();
    const shape_t& a = in[0].shape;
    const shape_t& b = in[1].shape;
    const shape_t& c = out[0].shape;
    rank_ = c.size();
    m_ = c[rank_ - 2];
    n_ = c[rank_ - 1];
    k_ = mm.transpose_a ? a[a.size() - 2] : a.back();
    batch_ = rank_ == 3 ? c[0] : 1;
    lda_ = a.back();
    ldb_ = b.back();
    sa_ = a.size() == 3 && a[0] != 1 ? m_ * k_ : 0;
    sb_ = b.size() == 3 && b[0] != 1 ? k_ * n_ : 0;
    transpose_b_ = mm.transpose_b;

    kernels::gemm_config config;
    config.transpose_a = mm.transpose_a;
    config.transpose_b = mm.transpose_b;
    config.packed_b = in[1].is_constant() && b.size() == 2;
    config.tiles = s.plan.gemm;
    if (current_kernel_shapes() == kernel_shapes::specialized) config.fixed_mnk = std::array<long, 3>{m_, n_, k_};
    tiles_ = config.tiles;
    std::size_t next_input = 2;
    for (std::size_t i = 1; i < p.ops().size(); ++i) {
      const op_kind k = p.ops()[i].kind;
      config.chain.push_back(k);
      if (!is_binary(k)) continue;
      const shape_t& operand = in[next_input].shape;
      if (operand.size() > rank_) {
        throw compile_error("opencl: post-op operand " + shape_to_string(operand) + " has a higher rank than the " +
                            "MatMul's output " + shape_to_string(c));
      }
      std::vector<long> st = broadcast_strides(to_rank(operand, 3));
      posts_.push_back({next_input++, rank_ == 3 ? st[0] : 0, st[1], st[2]});
    }
    gemm_ = get_program(e, kernels::gemm_source(kDialect, config), preloaded);
    if (config.packed_b) {
      packed_k_ = static_cast<long>(round_up(k_, tiles_.bk));
      packed_n_ = static_cast<long>(round_up(n_, tiles_.bn));
      pack_work_group_ = s.plan.vector_work_group;
      pack_ = get_program(e, kernels::pack_source(kDialect, mm.transpose_b, pack_work_group_), preloaded);
      slot_ = weights().make_slot();
    }
  }

  void execute(stream& s, const std::vector<tensor>& inputs, const std::vector<tensor>& outputs) const override {
    std::shared_ptr<packed_buffer> packed;
    cl_mem b = buffer_of(inputs[1]);
    long ldb = ldb_;
    if (pack_) {
      packed = packed_weight(s, inputs[1]);
      b = packed->mem;
      ldb = packed_n_;
    }
    const cl_mem a = buffer_of(inputs[0]), c = buffer_of(outputs[0]);
    const std::size_t local[3] = {static_cast<std::size_t>(tiles_.local_x()),
                                  static_cast<std::size_t>(tiles_.local_y()), 1};
    const std::size_t global[3] = {round_up(n_, tiles_.bn) / tiles_.rn, round_up(m_, tiles_.bm) / tiles_.rm,
                                   static_cast<std::size_t>(batch_)};
    launch(
        *gemm_, s,
        [&](cl_kernel k) {
          const cl_int m = static_cast<cl_int>(m_), n = static_cast<cl_int>(n_), kk = static_cast<cl_int>(k_);
          const cl_long lda = lda_, ldc = n_, sa = sa_, sb = pack_ ? 0 : sb_, sc = m_ * n_;
          cl_uint i = 0;
          set_arg(k, i++, a);
          set_arg(k, i++, b);
          set_arg(k, i++, c);
          set_arg(k, i++, m);
          set_arg(k, i++, n);
          set_arg(k, i++, kk);
          set_arg(k, i++, lda);
          set_arg(k, i++, static_cast<cl_long>(ldb));
          set_arg(k, i++, ldc);
          set_arg(k, i++, sa);
          set_arg(k, i++, sb);
          set_arg(k, i++, sc);
          for (const post& p : posts_) {
            set_arg(k, i++, buffer_of(inputs[p.input]));
            set_arg(k, i++, static_cast<cl_long>(p.batch_stride));
            set_arg(k, i++, static_cast<cl_long>(p.row_stride));
            set_arg(k, i++, static_cast<cl_long>(p.column_stride));
          }
        },
        3, global, local);
  }

  std::vector<kernel_binary> binaries() const override { return binaries_of({gemm_.get(), pack_.get()}); }

 private:
  struct post {
    std::size_t input;
    long batch_stride, row_stride, column_stride;
  };

  std::shared_ptr<packed_buffer> packed_weight(stream& s, const tensor& t) const {
    const engine& e = s.get_engine();
    const engine_state& es = e.native<engine_state>();
    cache_key layout;
    layout.add("packed-b").add(transpose_b_).add(k_).add(n_).add(ldb_).add(packed_k_).add(packed_n_);
    const std::size_t bytes = static_cast<std::size_t>(packed_k_ * packed_n_) * sizeof(float);
    const std::size_t source_bytes = static_cast<std::size_t>(elements(t.desc.shape)) * sizeof(float);
    return weights().get(slot_, e.scope(), {t.data, t.version, source_bytes}, layout, bytes, buffer_reader{s, t}, [&] {
      const auto start = std::chrono::steady_clock::now();
      const std::uint64_t launches_before = first_launch_ns_this_thread();
      auto packed = std::make_shared<packed_buffer>();
      cl_int err = CL_SUCCESS;
      packed->mem = clCreateBuffer(es.context, CL_MEM_READ_WRITE, bytes, nullptr, &err);
      check(err, "clCreateBuffer(packed weight, " + std::to_string(bytes) + " bytes)");
      const std::size_t local[2] = {static_cast<std::size_t>(pack_work_group_), 1};
      const std::size_t global[2] = {round_up(packed_n_, pack_work_group_), static_cast<std::size_t>(packed_k_)};
      launch(
          *pack_, s,
          [&](cl_kernel k) {
            set_arg(k, 0, buffer_of(t));
            set_arg(k, 1, packed->mem);
            set_arg(k, 2, static_cast<cl_int>(k_));
            set_arg(k, 3, static_cast<cl_int>(n_));
            set_arg(k, 4, static_cast<cl_long>(ldb_));
            set_arg(k, 5, static_cast<cl_int>(packed_k_));
            set_arg(k, 6, static_cast<cl_int>(packed_n_));
          },
          2, global, local);
      stats_counters().weights_packed.fetch_add(1, std::memory_order_relaxed);
      // The pack program's own first launch is counted as first_launch_ns.
      const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start);
      stats_counters().pack_ns.fetch_add(
          static_cast<std::uint64_t>(ns.count()) - (first_launch_ns_this_thread() - launches_before),
          std::memory_order_relaxed);
      return packed;
    });
  }

  std::size_t rank_ = 2;
  long m_ = 0, n_ = 0, k_ = 0, batch_ = 1, lda_ = 0, ldb_ = 0, sa_ = 0, sb_ = 0;
  bool transpose_b_ = false;
  kernels::gemm_tiles tiles_;
  std::vector<post> posts_;
  std::shared_ptr<const kernel> gemm_, pack_;
  long packed_k_ = 0, packed_n_ = 0;
  int pack_work_group_ = 1;
  std::shared_ptr<weight_registry::slot> slot_;
};

// Add / Multiply with numpy broadcasting, up to rank 4.
class binary_kernel final : public compiled_kernel {
 public:
  binary_kernel(const partition& p, const std::vector<logical_tensor>& in, const std::vector<logical_tensor>& out,
                const engine& e, const std::vector<kernel_binary>& preloaded) {
    const shape_t& c = out[0].shape;
    if (c.size() > 4) {
      throw compile_error("opencl: Add/Multiply of rank " + std::to_string(c.size()) + " (at most 4 is supported)");
    }
    out_ = to_rank(c, 4);
    a_strides_ = broadcast_strides(to_rank(in[0].shape, 4));
    b_strides_ = broadcast_strides(to_rank(in[1].shape, 4));
    work_group_ = e.native<engine_state>().plan.vector_work_group;
    program_ = get_program(e, kernels::binary_source(kDialect, p.ops().front().kind, work_group_), preloaded);
  }

  void execute(stream& s, const std::vector<tensor>& inputs, const std::vector<tensor>& outputs) const override {
    const std::int64_t n = elements(out_);
    const std::size_t local = static_cast<std::size_t>(work_group_), global = round_up(n, work_group_);
    launch(
        *program_, s,
        [&](cl_kernel k) {
          cl_uint i = 0;
          set_arg(k, i++, buffer_of(inputs[0]));
          set_arg(k, i++, buffer_of(inputs[1]));
          set_arg(k, i++, buffer_of(outputs[0]));
          set_arg(k, i++, static_cast<cl_long>(n));
          for (int d = 1; d < 4; ++d) set_arg(k, i++, static_cast<cl_int>(out_[d]));
          for (long st : a_strides_) set_arg(k, i++, static_cast<cl_long>(st));
          for (long st : b_strides_) set_arg(k, i++, static_cast<cl_long>(st));
        },
        1, &global, &local);
  }

  std::vector<kernel_binary> binaries() const override { return binaries_of({program_.get()}); }

 private:
  shape_t out_;
  std::vector<long> a_strides_, b_strides_;
  int work_group_ = 1;
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
