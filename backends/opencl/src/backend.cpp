// The OpenCL backend: compiled kernels for each partition kind, constant
// weights packed on the device, and the backend object itself.
#include <algorithm>
#include <mutex>
#include <string>
#include <vector>

#include "opencl_internal.hpp"
#include "unicache/backend_support.hpp"
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
  static weight_registry* const r = new weight_registry(constant_tensor_cache(), cache_owner_id);
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
// A specialized kernel of a shape class (adaptive mode) has its own tiles and runs
// every M of the class: it reads M from the tensors.
class gemm_kernel final : public compiled_kernel {
 public:
  gemm_kernel(const partition& p, const std::vector<logical_tensor>& in, const std::vector<logical_tensor>& out,
              const engine& e, const std::vector<kernel_binary>& preloaded)
      : gemm_kernel(p, in, out, e, preloaded, e.native<engine_state>().plan.gemm, false) {}
  gemm_kernel(const partition& p, const std::vector<logical_tensor>& in, const std::vector<logical_tensor>& out,
              const engine& e, const std::vector<kernel_binary>& preloaded, const kernels::gemm_tiles& tiles,
              bool any_rows)
      // A class's kernel (any_rows) takes its sizes as arguments whatever the
      // mode is when it is built in the background.
      : problem_(p, in, out, tiles, any_rows ? kernel_shapes::adaptive : current_kernel_shapes()), any_rows_(any_rows) {
    gemm_ = get_program(e, kernels::gemm_source(kDialect, problem_.config), preloaded);
    if (problem_.config.packed_b) {
      pack_work_group_ = e.native<engine_state>().plan.vector_work_group;
      pack_ = get_program(e, kernels::pack_source(kDialect, problem_.config.transpose_b, pack_work_group_), preloaded);
      slot_ = weights().make_slot();
    }
    if (problem_.config.tiles.split_k > 1) {
      reduce_work_group_ = e.native<engine_state>().plan.vector_work_group;
      reduce_ = get_program(e, kernels::gemm_reduce_source(kDialect, problem_.config, reduce_work_group_), preloaded);
      context_ = e.native<engine_state>().context;
    }
  }
  ~gemm_kernel() override {
    if (workspace_) clReleaseMemObject(workspace_);
  }
  gemm_kernel(const gemm_kernel&) = delete;
  gemm_kernel& operator=(const gemm_kernel&) = delete;

  void execute(stream& s, const std::vector<tensor>& inputs, const std::vector<tensor>& outputs) const override {
    std::shared_ptr<packed_buffer> packed;
    cl_mem b = buffer_of(inputs[1]);
    if (pack_) {
      packed = packed_weight(s, inputs[1]);
      b = packed->mem;
    }
    std::vector<cl_mem> posts;
    for (const kernels::gemm_problem::post& p : problem_.posts) posts.push_back(buffer_of(inputs[p.input]));
    // M is C's rows (A's are K when A is transposed).
    const std::vector<std::int64_t>& c = outputs[0].desc.shape;
    run_gemm(s, buffer_of(inputs[0]), b, buffer_of(outputs[0]), posts, any_rows_ ? c[c.size() - 2] : 0);
  }

  // Launches the GEMM on `b` as the kernel reads it (packed, if it packs),
  // for `rows` rows (0: the rows it was compiled for), and waits.
  void run_gemm(const stream& s, cl_mem a, cl_mem b, cl_mem c, const std::vector<cl_mem>& posts, long rows) const {
    const kernels::gemm_problem g = rows ? problem_.with_rows(rows) : problem_;
    const std::array<std::size_t, 3> global = g.global(), local = g.local();
    // Split-K: the parts go to the workspace (one per kernel: its executions
    // take turns), then gemm_reduce writes C.
    std::unique_lock<std::mutex> split_lock;
    cl_mem out = c;
    if (reduce_) {
      split_lock = std::unique_lock<std::mutex>(workspace_mu_);
      out = workspace(static_cast<std::size_t>(g.config.tiles.split_k * g.m * g.n) * sizeof(float));
    }
    launch(
        *gemm_, s,
        [&](cl_kernel k) {
          cl_uint i = 0;
          set_arg(k, i++, a);
          set_arg(k, i++, b);
          set_arg(k, i++, out);
          set_arg(k, i++, static_cast<cl_int>(g.m));
          set_arg(k, i++, static_cast<cl_int>(g.n));
          set_arg(k, i++, static_cast<cl_int>(g.k));
          set_arg(k, i++, static_cast<cl_long>(g.lda));
          set_arg(k, i++, static_cast<cl_long>(pack_ ? g.packed_n : g.ldb));
          set_arg(k, i++, static_cast<cl_long>(g.n));
          set_arg(k, i++, static_cast<cl_long>(g.sa));
          set_arg(k, i++, static_cast<cl_long>(pack_ ? 0 : g.sb));
          set_arg(k, i++, static_cast<cl_long>(g.m * g.n));
          for (std::size_t j = 0; j < g.posts.size(); ++j) {
            set_arg(k, i++, posts[j]);
            set_arg(k, i++, static_cast<cl_long>(g.posts[j].batch_stride));
            set_arg(k, i++, static_cast<cl_long>(g.posts[j].row_stride));
            set_arg(k, i++, static_cast<cl_long>(g.posts[j].column_stride));
          }
        },
        3, global.data(), local.data());
    if (!reduce_) return;
    const std::size_t reduce_local = static_cast<std::size_t>(reduce_work_group_);
    const std::size_t reduce_global = kernels::round_up(g.m * g.n, reduce_work_group_);
    if (reduce_global == 0) return;
    launch(
        *reduce_, s,
        [&](cl_kernel k) {
          cl_uint i = 0;
          set_arg(k, i++, out);
          set_arg(k, i++, c);
          set_arg(k, i++, static_cast<cl_int>(g.m));
          set_arg(k, i++, static_cast<cl_int>(g.n));
          set_arg(k, i++, static_cast<cl_long>(g.n));
          for (std::size_t j = 0; j < g.posts.size(); ++j) {
            set_arg(k, i++, posts[j]);
            set_arg(k, i++, static_cast<cl_long>(g.posts[j].batch_stride));
            set_arg(k, i++, static_cast<cl_long>(g.posts[j].row_stride));
            set_arg(k, i++, static_cast<cl_long>(g.posts[j].column_stride));
          }
        },
        1, &reduce_global, &reduce_local);
  }

  std::vector<kernel_binary> binaries() const override {
    return binaries_of({gemm_.get(), pack_.get(), reduce_.get()});
  }

 private:
  // The split-K workspace, at least `bytes` (grown as needed); the caller
  // holds workspace_mu_.
  cl_mem workspace(std::size_t bytes) const {
    if (workspace_bytes_ < bytes) {
      if (workspace_) clReleaseMemObject(workspace_);
      workspace_ = nullptr;
      workspace_bytes_ = 0;
      cl_int err = CL_SUCCESS;
      workspace_ = clCreateBuffer(context_, CL_MEM_READ_WRITE, std::max<std::size_t>(bytes, 4), nullptr, &err);
      check(err, "clCreateBuffer(split-K workspace, " + std::to_string(bytes) + " bytes)");
      workspace_bytes_ = bytes;
    }
    return workspace_;
  }

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
  bool any_rows_ = false;
  std::shared_ptr<const kernel> gemm_, pack_, reduce_;
  int reduce_work_group_ = 1;
  cl_context context_ = nullptr;  // the engine's; cached kernels keep it alive
  mutable std::mutex workspace_mu_;
  mutable cl_mem workspace_ = nullptr;
  mutable std::size_t workspace_bytes_ = 0;
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
  owner_id cache_owner() const override { return cache_owner_id; }

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

  // A GEMM's class (kernels::gemm_shape_class).
  shape_class specialization_class(const partition& p, const std::vector<logical_tensor>& in,
                                   const std::vector<logical_tensor>& out, const engine& e) const override {
    return kernels::gemm_specialization_class(p, in, out, e.native<engine_state>().plan.gemm);
  }
  // Its kernel is cheap to make, a load and some timing, when the store has
  // its tiles or every candidate is built already (another class of the
  // configuration was tuned).
  bool specialization_ready(const partition& p, const std::vector<logical_tensor>& in,
                            const std::vector<logical_tensor>& out, const engine& e) const override {
    const engine_state& es = e.native<engine_state>();
    return kernels::gemm_specialization_ready(p, in, out, es.plan.gemm, kDialect, e, cache_owner_id, es.identity);
  }

  // The class's GEMM: the stored choice of tiles if the store has one, else
  // the fastest candidate, timed on a queue of the backend's own with zeroed
  // scratch buffers, and stored for the next process.
  std::shared_ptr<const compiled_kernel> specialize(const partition& p, const std::vector<logical_tensor>& in,
                                                    const std::vector<logical_tensor>& out, const engine& e) override {
    const engine_state& es = e.native<engine_state>();
    const kernels::gemm_problem g(p, in, out, es.plan.gemm, kernel_shapes::adaptive);
    const std::vector<kernels::gemm_tiles> candidates = kernels::gemm_candidates(g, es.plan.gemm);
    auto kernel_with = [&](const kernels::gemm_tiles& t) {
      return std::make_shared<const gemm_kernel>(p, in, out, e, std::vector<kernel_binary>{}, t, true);
    };
    if (const auto tiles = kernels::stored_tiles(name(), es.identity, g, candidates)) return kernel_with(*tiles);
    const stream own = make_stream(e);
    struct scratch {
      cl_mem mem = nullptr;
      scratch(const engine_state& es, const stream& s, std::int64_t floats) {
        const std::size_t bytes = static_cast<std::size_t>(std::max<std::int64_t>(floats, 1)) * sizeof(float);
        cl_int err = CL_SUCCESS;
        mem = clCreateBuffer(es.context, CL_MEM_READ_WRITE, bytes, nullptr, &err);
        check(err, "clCreateBuffer(tuning scratch, " + std::to_string(bytes) + " bytes)");
        const cl_float zero = 0;
        const cl_command_queue q = s.native<stream_state>().queue;
        cl_int r = clEnqueueFillBuffer(q, mem, &zero, sizeof zero, 0, bytes, 0, nullptr, nullptr);
        if (r == CL_SUCCESS) r = clFinish(q);
        if (r != CL_SUCCESS) {
          clReleaseMemObject(mem);
          check(r, "clEnqueueFillBuffer(tuning scratch)");
        }
      }
      scratch(const scratch&) = delete;
      scratch& operator=(const scratch&) = delete;
      ~scratch() { clReleaseMemObject(mem); }
    };
    const auto b_floats = static_cast<std::int64_t>(kernels::gemm_scratch_b_floats(g, candidates));
    const scratch a(es, own, elements(in[0].shape)), b(es, own, b_floats), c(es, own, elements(out[0].shape));
    std::vector<std::unique_ptr<scratch>> post_buffers;
    std::vector<cl_mem> posts;
    for (const kernels::gemm_problem::post& post : g.posts) {
      post_buffers.push_back(std::make_unique<scratch>(es, own, elements(in[post.input].shape)));
      posts.push_back(post_buffers.back()->mem);
    }
    return kernel_with(kernels::tune_gemm(name(), es.identity, g, candidates, [&](const kernels::gemm_tiles& t) {
      return [k = kernel_with(t), &own, &a, &b, &c, &posts, &g] { k->run_gemm(own, a.mem, b.mem, c.mem, posts, g.m); };
    }));
  }

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
    return created;
  }();
  return b;
}

}  // namespace unicache::opencl::detail
