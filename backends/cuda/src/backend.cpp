// The CUDA backend: compiled kernels for each partition kind, constant
// weights packed on the device, and the backend object itself. Its side of
// the kernel path (NVRTC, module loads, launches) is in program.cpp.
#include <algorithm>
#include <chrono>
#include <limits>
#include <mutex>
#include <string>
#include <vector>

#include "cuda_internal.hpp"
#include "unicache/backend_support.hpp"
#include "unicache/cache_key.hpp"
#include "unicache/constant_registry.hpp"

namespace unicache::cuda::detail {
namespace {

using shape_t = std::vector<std::int64_t>;
constexpr kernels::dialect kDialect = kernels::dialect::cuda_c;

// --- Constant weights -----------------------------------------------------------

// A packed weight on the device; freed when the cache and every kernel let
// go of it. It holds its engine's state: a primary context stays retained
// while the weight is cached.
struct packed_buffer {
  std::shared_ptr<const engine_state> engine;
  CUdeviceptr memory = 0;
  packed_buffer() = default;
  packed_buffer(const packed_buffer&) = delete;
  packed_buffer& operator=(const packed_buffer&) = delete;
  ~packed_buffer() {
    if (!memory) return;
    try {
      context_guard guard(engine->context);
      api().cuMemFree(memory);
    } catch (...) {
      return;  // the context is gone: so is its memory
    }
    stats_counters().weights_released.fetch_add(1, std::memory_order_relaxed);
  }
};
using weight_registry = constant_registry<packed_buffer>;

weight_registry& weights() {
  static weight_registry* const r = new weight_registry(constant_tensor_cache(), cache_owner_id);
  return *r;
}

// Reads a constant's sampled blocks from device memory for the contents
// check: one strided copy on the stream.
struct device_reader {
  const stream& s;
  const tensor& t;
  void operator()(std::size_t first, std::size_t block, std::size_t stride, std::size_t count,
                  unsigned char* out) const {
    const stream_state& st = s.native<stream_state>();
    CUDA_MEMCPY2D copy{};
    copy.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    copy.srcDevice = pointer_of(t.data) + first;
    copy.srcPitch = count == 1 ? block : stride;
    copy.dstMemoryType = CU_MEMORYTYPE_HOST;
    copy.dstHost = out;
    copy.dstPitch = block;
    copy.WidthInBytes = block;
    copy.Height = count;
    check(api().cuMemcpy2DAsync(&copy, st.stream), "cuMemcpy2DAsync(constant check)");
    check(api().cuStreamSynchronize(st.stream), "cuStreamSynchronize(constant check)");
  }
};


// --- Kernels -----------------------------------------------------------------------

// MatMul -> (Add|Multiply)* -> eltwise*: one tiled GEMM with the chain in
// its epilogue; a constant rank-2 B packed once per contents and context.
// A specialized kernel of a shape class (adaptive mode) has its own tiles and runs
// every M of the class: it reads M from the tensors.
class gemm_kernel final : public compiled_kernel {
 public:
  gemm_kernel(const partition& p, const std::vector<logical_tensor>& in, const std::vector<logical_tensor>& out,
              const engine& e, const std::vector<kernel_binary>& preloaded)
      : gemm_kernel(p, in, out, e, preloaded, state_of(e).plan.gemm, false) {}
  gemm_kernel(const partition& p, const std::vector<logical_tensor>& in, const std::vector<logical_tensor>& out,
              const engine& e, const std::vector<kernel_binary>& preloaded, const kernels::gemm_tiles& tiles,
              bool any_rows)
      // A class's kernel (any_rows) takes its sizes as arguments whatever the
      // mode is when it is built in the background.
      : problem_(p, in, out, tiles, any_rows ? kernel_shapes::adaptive : current_kernel_shapes()),
        any_rows_(any_rows),
        launch_(shape_of(problem_.global(), problem_.local(), "the GEMM")) {
    gemm_ = get_program(e, kernels::gemm_source(kDialect, problem_.config), preloaded);
    if (problem_.config.packed_b) {
      const int wg = state_of(e).plan.vector_work_group;
      pack_launch_ = shape_of(problem_.pack_global(wg), {static_cast<std::size_t>(wg), 1, 1}, "packing the weight");
      pack_ = get_program(e, kernels::pack_source(kDialect, problem_.config.transpose_b, wg), preloaded);
      slot_ = weights().make_slot();
    }
    if (problem_.config.tiles.split_k > 1) {
      reduce_work_group_ = state_of(e).plan.vector_work_group;
      reduce_ = get_program(e, kernels::gemm_reduce_source(kDialect, problem_.config, reduce_work_group_), preloaded);
      engine_ = e.native_shared<const engine_state>();
    }
  }
  ~gemm_kernel() override {
    if (!workspace_) return;
    try {
      context_guard guard(engine_->context);
      api().cuMemFree(workspace_);
    } catch (...) {
      return;  // the context is gone: so is its memory
    }
  }
  gemm_kernel(const gemm_kernel&) = delete;
  gemm_kernel& operator=(const gemm_kernel&) = delete;

  void execute(stream& s, const std::vector<tensor>& inputs, const std::vector<tensor>& outputs) const override {
    context_guard guard(s.native<stream_state>().context);
    std::shared_ptr<packed_buffer> packed;
    CUdeviceptr b = pointer_of(inputs[1].data);
    if (pack_) {
      packed = packed_weight(s, inputs[1]);
      b = packed->memory;
    }
    std::vector<CUdeviceptr> posts;
    for (const kernels::gemm_problem::post& post : problem_.posts) posts.push_back(pointer_of(inputs[post.input].data));
    // M is C's rows (A's are K when A is transposed).
    const std::vector<std::int64_t>& c = outputs[0].desc.shape;
    run_gemm(s, pointer_of(inputs[0].data), b, pointer_of(outputs[0].data), posts, any_rows_ ? c[c.size() - 2] : 0);
  }

  // Launches the GEMM on `b` as the kernel reads it (packed, if it packs),
  // for `rows` rows (0: the rows it was compiled for).
  void run_gemm(const stream& s, CUdeviceptr a, CUdeviceptr b, CUdeviceptr c, const std::vector<CUdeviceptr>& posts,
                long rows) const {
    const kernels::gemm_problem g = rows ? problem_.with_rows(rows) : problem_;
    const launch_shape shape = rows ? shape_of(g.global(), g.local(), "the GEMM") : launch_;
    // Split-K: the parts go to the workspace (one per kernel: its executions
    // take turns), then gemm_reduce writes C.
    std::unique_lock<std::mutex> split_lock;
    CUdeviceptr out = c;
    if (reduce_) {
      split_lock = std::unique_lock<std::mutex>(workspace_mu_);
      out = workspace(s, static_cast<std::size_t>(g.config.tiles.split_k * g.m * g.n) * sizeof(float));
    }
    kernel_args args;
    args.add(a).add(b).add(out);
    args.add(static_cast<int>(g.m)).add(static_cast<int>(g.n)).add(static_cast<int>(g.k));
    args.add(g.lda).add(pack_ ? g.packed_n : g.ldb).add(g.n).add(g.sa).add(pack_ ? 0L : g.sb).add(g.m * g.n);
    for (std::size_t i = 0; i < g.posts.size(); ++i) {
      const kernels::gemm_problem::post& post = g.posts[i];
      args.add(posts[i]).add(post.batch_stride).add(post.row_stride).add(post.column_stride);
    }
    launch(*gemm_, s, args, shape);
    if (!reduce_) return;
    kernel_args reduce_args;
    reduce_args.add(out).add(c).add(static_cast<int>(g.m)).add(static_cast<int>(g.n)).add(g.n);
    for (std::size_t i = 0; i < g.posts.size(); ++i) {
      const kernels::gemm_problem::post& post = g.posts[i];
      reduce_args.add(posts[i]).add(post.batch_stride).add(post.row_stride).add(post.column_stride);
    }
    const auto wg = static_cast<std::size_t>(reduce_work_group_);
    launch(*reduce_, s, reduce_args,
           shape_of({kernels::round_up(g.m * g.n, reduce_work_group_), 1, 1}, {wg, 1, 1}, "the split-K sum"));
  }

  std::vector<kernel_binary> binaries() const override {
    return binaries_of({gemm_.get(), pack_.get(), reduce_.get()});
  }

 private:
  // The split-K workspace, at least `bytes` (grown as needed); the caller
  // holds workspace_mu_ and the context.
  CUdeviceptr workspace(const stream& s, std::size_t bytes) const {
    if (workspace_bytes_ < bytes) {
      if (workspace_) api().cuMemFree(workspace_);
      workspace_ = 0;
      workspace_bytes_ = 0;
      workspace_ = allocate(s.get_engine(), bytes, "split-K workspace");
      workspace_bytes_ = bytes;
    }
    return workspace_;
  }

  std::shared_ptr<packed_buffer> packed_weight(stream& s, const tensor& t) const {
    const kernels::gemm_problem& g = problem_;
    const engine& e = s.get_engine();
    const std::size_t bytes = g.packed_bytes();
    const std::size_t source_bytes = static_cast<std::size_t>(kernels::elements(t.desc.shape)) * sizeof(float);
    return weights().get(slot_, e.scope(), {t.data, t.version, source_bytes}, g.packed_layout(), bytes,
                         device_reader{s, t}, [&] {
      const time_without_first_launches timer;  // the pack kernel's first launch counts as first_launch_ns
      auto packed = std::make_shared<packed_buffer>();
      packed->engine = e.native_shared<const engine_state>();
      packed->memory = allocate(e, bytes, "packed weight");
      kernel_args args;
      args.add(pointer_of(t.data)).add(packed->memory).add(static_cast<int>(g.k)).add(static_cast<int>(g.n));
      args.add(g.ldb).add(static_cast<int>(g.packed_k)).add(static_cast<int>(g.packed_n));
      launch(*pack_, s, args, pack_launch_);
      stats_counters().weights_packed.fetch_add(1, std::memory_order_relaxed);
      stats_counters().pack_ns.fetch_add(timer.ns(), std::memory_order_relaxed);
      return packed;
    });
  }

  kernels::gemm_problem problem_;
  bool any_rows_ = false;
  launch_shape launch_, pack_launch_{};
  std::shared_ptr<const kernel> reduce_;
  int reduce_work_group_ = 1;
  std::shared_ptr<const engine_state> engine_;  // split-K: the workspace's context
  mutable std::mutex workspace_mu_;
  mutable CUdeviceptr workspace_ = 0;
  mutable std::size_t workspace_bytes_ = 0;
  std::shared_ptr<const kernel> gemm_, pack_;
  std::shared_ptr<weight_registry::slot> slot_;
};

// Add / Multiply with numpy broadcasting, up to rank 4.
class binary_kernel final : public compiled_kernel {
 public:
  binary_kernel(const partition& p, const std::vector<logical_tensor>& in, const std::vector<logical_tensor>& out,
                const engine& e, const std::vector<kernel_binary>& preloaded)
      : problem_(in, out), work_group_(state_of(e).plan.vector_work_group) {
    const std::int64_t n = kernels::elements(problem_.out);
    launch_ = shape_of({kernels::round_up(n, work_group_), 1, 1}, {static_cast<std::size_t>(work_group_), 1, 1},
                       "Add/Multiply");
    program_ = get_program(e, kernels::binary_source(kDialect, p.ops().front().kind, work_group_), preloaded);
  }

  void execute(stream& s, const std::vector<tensor>& inputs, const std::vector<tensor>& outputs) const override {
    context_guard guard(s.native<stream_state>().context);
    const std::int64_t n = kernels::elements(problem_.out);
    kernel_args args;
    args.add(pointer_of(inputs[0].data)).add(pointer_of(inputs[1].data)).add(pointer_of(outputs[0].data));
    args.add(static_cast<long>(n));
    for (int d = 1; d < 4; ++d) args.add(static_cast<int>(problem_.out[d]));
    for (long st : problem_.a_strides) args.add(st);
    for (long st : problem_.b_strides) args.add(st);
    launch(*program_, s, args, launch_);
  }

  std::vector<kernel_binary> binaries() const override { return binaries_of({program_.get()}); }

 private:
  kernels::binary_problem problem_;
  int work_group_;
  launch_shape launch_{};
  std::shared_ptr<const kernel> program_;
};

// ReLU, GELU, Sigmoid, Tanh, and Softmax over the last axis.
class unary_kernel final : public compiled_kernel {
 public:
  unary_kernel(const partition& p, const std::vector<logical_tensor>& in, const engine& e,
               const std::vector<kernel_binary>& preloaded)
      : shape_(in[0].shape),
        softmax_(p.ops().front().kind == op_kind::softmax),
        work_group_(state_of(e).plan.vector_work_group) {
    const std::int64_t n = kernels::elements(shape_);
    const std::int64_t cols = shape_.empty() ? 1 : shape_.back();
    const std::size_t local = static_cast<std::size_t>(work_group_);
    if (softmax_ && cols > std::numeric_limits<int>::max()) {
      throw compile_error("cuda: Softmax over " + std::to_string(cols) + " columns (at most 2147483647)");
    }
    launch_ = softmax_ && cols > 0 ? shape_of({static_cast<std::size_t>(n / cols) * local, 1, 1}, {local, 1, 1}, "Softmax")
                                   : shape_of({kernels::round_up(n, work_group_), 1, 1}, {local, 1, 1}, "the eltwise op");
    program_ = get_program(e,
                           softmax_ ? kernels::softmax_source(kDialect, work_group_)
                                    : kernels::eltwise_source(kDialect, p.ops().front().kind, work_group_),
                           preloaded);
  }

  void execute(stream& s, const std::vector<tensor>& inputs, const std::vector<tensor>& outputs) const override {
    context_guard guard(s.native<stream_state>().context);
    const std::int64_t n = kernels::elements(shape_);
    kernel_args args;
    args.add(pointer_of(inputs[0].data)).add(pointer_of(outputs[0].data));
    if (softmax_) {
      args.add(static_cast<int>(shape_.empty() ? 1 : shape_.back()));
    } else {
      args.add(static_cast<long>(n));
    }
    launch(*program_, s, args, launch_);  // nothing for an empty tensor
  }

  std::vector<kernel_binary> binaries() const override { return binaries_of({program_.get()}); }

 private:
  shape_t shape_;
  bool softmax_;
  int work_group_;
  launch_shape launch_{};
  std::shared_ptr<const kernel> program_;
};

class cuda_backend final : public backend {
 public:
  const char* name() const override { return "cuda"; }
  engine_kind kind() const override { return engine_kind::gpu; }
  owner_id cache_owner() const override { return cache_owner_id; }

  std::shared_ptr<const compiled_kernel> compile(const partition& p, const std::vector<logical_tensor>& in,
                                                 const std::vector<logical_tensor>& out, const engine& e,
                                                 const std::vector<kernel_binary>& preloaded) override {
    context_guard guard(state_of(e).context);
    switch (p.pattern()) {
      case partition::kind::fused_matmul: return std::make_shared<gemm_kernel>(p, in, out, e, preloaded);
      case partition::kind::binary: return std::make_shared<binary_kernel>(p, in, out, e, preloaded);
      case partition::kind::eltwise:
      case partition::kind::softmax: return std::make_shared<unary_kernel>(p, in, e, preloaded);
    }
    throw compile_error("cuda: unknown partition kind");
  }

  stream make_stream(const engine& e) override {
    const engine_state& es = state_of(e);
    context_guard guard(es.context);
    auto s = std::make_shared<stream_state>();
    s->context = es.context;
    check(api().cuStreamCreate(&s->stream, 0), "cuStreamCreate");
    s->owned = true;
    return stream(e, std::move(s));
  }

  device_identity identity(const engine& e) const override { return state_of(e).identity; }

  // A GEMM's class (kernels::gemm_shape_class).
  shape_class specialization_class(const partition& p, const std::vector<logical_tensor>& in,
                                   const std::vector<logical_tensor>& out, const engine& e) const override {
    return kernels::gemm_specialization_class(p, in, out, state_of(e).plan.gemm);
  }
  // Its kernel is cheap to make, a load and some timing, when the store has
  // its tiles or every candidate is compiled already (another class of the
  // configuration was tuned).
  bool specialization_ready(const partition& p, const std::vector<logical_tensor>& in,
                            const std::vector<logical_tensor>& out, const engine& e) const override {
    const engine_state& es = state_of(e);
    return kernels::gemm_specialization_ready(p, in, out, es.plan.gemm, kDialect, e, cache_owner_id, es.identity);
  }

  // The class's GEMM: the stored choice of tiles if the store has one, else
  // the fastest candidate, timed on a stream of the backend's own with
  // zeroed scratch buffers, and stored for the next process.
  std::shared_ptr<const compiled_kernel> specialize(const partition& p, const std::vector<logical_tensor>& in,
                                                    const std::vector<logical_tensor>& out, const engine& e) override {
    const engine_state& es = state_of(e);
    context_guard guard(es.context);
    const kernels::gemm_problem g(p, in, out, es.plan.gemm, kernel_shapes::adaptive);
    const std::vector<kernels::gemm_tiles> candidates = kernels::gemm_candidates(g, es.plan.gemm);
    auto kernel_with = [&](const kernels::gemm_tiles& t) {
      return std::make_shared<const gemm_kernel>(p, in, out, e, std::vector<kernel_binary>{}, t, true);
    };
    if (const auto tiles = kernels::stored_tiles(name(), es.identity, g, candidates)) return kernel_with(*tiles);
    struct scratch {
      CUdeviceptr memory = 0;
      // Not through allocate(): tuning never evicts a workload's packed
      // weights to make room; out of memory, the class stays generic.
      explicit scratch(std::int64_t floats) {
        const std::size_t bytes = static_cast<std::size_t>(std::max<std::int64_t>(floats, 1)) * sizeof(float);
        check(api().cuMemAlloc(&memory, bytes), "cuMemAlloc(tuning scratch, " + std::to_string(bytes) + " bytes)");
        if (const CUresult r = api().cuMemsetD8(memory, 0, bytes); r != CUDA_SUCCESS) {
          api().cuMemFree(memory);
          check(r, "cuMemsetD8(tuning scratch)");
        }
      }
      scratch(const scratch&) = delete;
      scratch& operator=(const scratch&) = delete;
      ~scratch() {
        if (memory) api().cuMemFree(memory);
      }
    };
    const auto b_floats = static_cast<std::int64_t>(kernels::gemm_scratch_b_floats(g, candidates));
    const scratch a(kernels::elements(in[0].shape)), b(b_floats), c(kernels::elements(out[0].shape));
    std::vector<std::unique_ptr<scratch>> post_buffers;
    std::vector<CUdeviceptr> posts;
    for (const kernels::gemm_problem::post& post : g.posts) {
      post_buffers.push_back(std::make_unique<scratch>(kernels::elements(in[post.input].shape)));
      posts.push_back(post_buffers.back()->memory);
    }
    const stream own = make_stream(e);
    return kernel_with(kernels::tune_gemm(name(), es.identity, g, candidates, [&](const kernels::gemm_tiles& t) {
      return [k = kernel_with(t), &own, &a, &b, &c, &posts, &g] { k->run_gemm(own, a.memory, b.memory, c.memory, posts, g.m); };
    }));
  }

  // Shape-agnostic kernels depend on the ranks only; specialized ones on every size.
  std::string kernel_configuration(const partition& /*p*/, const std::vector<std::vector<std::int64_t>>& input_shapes,
                                   const engine& /*e*/) const override {
    return shape_mode_configuration(current_kernel_shapes(), input_shapes);
  }
};

}  // namespace

backend* the_backend() {
  static cuda_backend* const b = [] {
    auto* created = new cuda_backend();
    register_backend(created);
    return created;
  }();
  return b;
}

}  // namespace unicache::cuda::detail
